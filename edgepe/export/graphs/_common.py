"""Shared pieces of every graph builder: names, the model wrapper, opset checks.

Builders are pure functions ``(ExportConfig, module) -> onnx.ModelProto`` with the shape contract
in the first docstring line (STYLE 4). Each builds nodes with ``onnx.helper`` and hands them to
``make_model``, which pins the IR version, stores the manifest and runs the full checker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgepe import __version__
from edgepe.errors import BadParameterError

POSITIONS = "positions"
KEY_POSITIONS = "key_positions"
PE = "pe"
BIAS = "bias"
MANIFEST_KEY = "edgepe.manifest"


def require_opset(opset: int, needed: int, op: str) -> None:
    """Refuse ``--opset`` lower than what ``op`` needs, naming the op."""
    if opset < needed:
        raise BadParameterError(f"--opset {opset} is too low: {op} needs opset {needed} or later")


def const(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
    """An initializer holding ``value`` as ``dtype`` (a numpy dtype)."""
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def positions_input(arity: int | None, name: str = POSITIONS) -> onnx.ValueInfoProto:
    shape: list[Any] = ["N"] if arity is None else ["N", arity]
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Iterable[onnx.TensorProto],
    opset: int,
    manifest: Mapping[str, Any],
    name: str,
    extra_opsets: Mapping[str, int] | None = None,
) -> onnx.ModelProto:
    """Wrap nodes into a checked model that the installed onnxruntime loads.

    onnx >= 1.23 writes an IR version newer than onnxruntime 1.31 accepts (DESIGN.md), so the IR
    version is pinned to the lowest one that supports the opsets used. The manifest (all but its
    sha256, which is of this very file) is stored in ``metadata_props`` under ``edgepe.manifest``.
    """
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(
        graph, opset_imports=opsets, producer_name="edgepe", producer_version=__version__
    )
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    helper.set_model_props(model, {MANIFEST_KEY: json.dumps(manifest, sort_keys=True)})
    onnx.checker.check_model(model, full_check=True)
    return model


def read_manifest_prop(model: onnx.ModelProto) -> dict[str, Any] | None:
    for prop in model.metadata_props:
        if prop.key == MANIFEST_KEY:
            return json.loads(prop.value)
    return None
