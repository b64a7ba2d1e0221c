"""Shared pieces of every graph builder: names, the model wrapper, opset checks.

Builders are pure functions ``(ExportConfig, module, manifest) -> onnx.ModelProto`` with the shape
contract in the first docstring line (STYLE 4). Each builds nodes with ``onnx.helper`` (or the
small ``Graph`` recorder below) and hands them to ``make_model``, which checks the opset against
the ops used, pins the IR version, stores the manifest and runs the full checker.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, defs, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.contract.version import __version__

POSITIONS = "positions"
KEY_POSITIONS = "key_positions"
PE = "pe"
BIAS = "bias"
MANIFEST_KEY = "edgepe.manifest"
# Manifest fields the sidecar JSON keeps and the graph's copy leaves out, as the graph already
# says them: ``onnx`` (opset, IR version, inputs, outputs) is the graph's own header, and
# ``inputs`` is the export record (the command's options, read back only to make a repeated
# export a no-op), whose every value that describes the graph is a top-level field too. In the
# demo's graph the two would be ~470 bytes repeated (14% of its 3.3 KB).
SIDECAR_ONLY = ("inputs", "onnx")

# Output dtypes an ONNX artifact can have (--dtype); "bit" exists for tables only.
ELEM_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "uint8": TensorProto.UINT8}
# Schemes whose every output value is exactly 0 or 1: the only ones that may emit uint8.
BIT_OUTPUT_SCHEMES = ("binary-bits", "gray", "binary-multilevel", "binary-2d", "hierarchical")

# The lowest opset of every op, where the form edgepe writes is newer than the op itself:
# Unsqueeze/Squeeze/ReduceSum take axes as an input from 13 on, Clip takes integer tensors from
# 12 on. Every other op needs the opset that introduced it (onnx.defs).
FORM_OPSET = {"Unsqueeze": 13, "Squeeze": 13, "ReduceSum": 13, "Clip": 13, "Split": 13}
# onnxruntime 1.31 loads IR version <= 13 (DESIGN.md), i.e. opsets up to 25.
MAX_OPSET = 25


def require_opset(opset: int, needed: int, op: str) -> None:
    """Refuse ``--opset`` lower than what ``op`` needs, naming the op."""
    if opset < needed:
        raise BadParameterError(f"--opset {opset} is too low: {op} needs opset {needed} or later")


@functools.cache
def op_min_opset(op_type: str, domain: str = "") -> int:
    """The first opset of the default domain in which ``op_type`` exists in the form we write."""
    if domain not in ("", "ai.onnx"):
        return 1
    since = [s.since_version for s in defs.get_all_schemas_with_history()
             if s.name == op_type and s.domain == ""]
    if not since:
        raise BadParameterError(f"op {op_type!r} is not an ONNX operator")  # a builder bug
    return max(min(since), FORM_OPSET.get(op_type, 1))


def check_opset(nodes: Iterable[onnx.NodeProto], opset: int) -> None:
    """Refuse an opset outside what the nodes need and what onnxruntime loads, naming the op."""
    if opset > MAX_OPSET:
        raise BadParameterError(
            f"--opset {opset} is too high: the installed onnxruntime loads opsets up to "
            f"{MAX_OPSET} (IR version 13)"
        )
    needs = {node.op_type: op_min_opset(node.op_type, node.domain) for node in nodes}
    if needs:
        op = max(sorted(needs), key=needs.get)
        require_opset(opset, needs[op], op)


def const(name: str, value: Any, dtype: Any) -> onnx.TensorProto:
    """An initializer holding ``value`` as ``dtype`` (a numpy dtype)."""
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def positions_input(arity: int | None, name: str = POSITIONS) -> onnx.ValueInfoProto:
    """int64 ``positions [N]`` (``[N, arity]``), or ``key_positions [M]`` (its own length)."""
    dim = "M" if name == KEY_POSITIONS else "N"
    shape: list[Any] = [dim] if arity is None else [dim, arity]
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def output(name: str, dtype: str, shape: Sequence[Any]) -> onnx.ValueInfoProto:
    """The graph output ``name`` of ``--dtype`` ``dtype`` (float32, float16 or uint8)."""
    return helper.make_tensor_value_info(name, ELEM_TYPES[dtype], list(shape))


class Graph:
    """Nodes and initializers under construction, with deterministic names.

    ``g.op("Add", a, b)`` appends a node and returns its output name; ``g.const(value, dtype)``
    adds an initializer. Names are numbered in order of creation, so the same builder calls give
    the same bytes.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, value: Any, dtype: Any, name: str | None = None) -> str:
        name = name or self._fresh("c")
        self.initializers.append(const(name, value, dtype))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        out = out or self._fresh(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [out], name=f"n{len(self.nodes)}_{op_type}",
                             **attrs)
        )
        return out

    def cast(self, x: str, dtype: str, out: str | None = None) -> str:
        """``Cast`` to ``dtype`` (``ELEM_TYPES``, or ``uint64``/``int64``/``int32``/``bool``)."""
        to = {**ELEM_TYPES, "uint64": TensorProto.UINT64, "int64": TensorProto.INT64,
              "int32": TensorProto.INT32,
              "bool": TensorProto.BOOL}[dtype]
        return self.op("Cast", x, out=out, to=to)

    def finish(self, x: str, dtype: str, name: str = PE) -> None:
        """Make ``x`` (float32, or already ``dtype``) the graph output ``name`` in ``dtype``.

        float16 adds one final ``Cast``; otherwise the node producing ``x`` is renamed.
        """
        if dtype == "float16":
            self.cast(x, "float16", out=name)
        else:
            self.rename(x, name)

    def rename(self, x: str, name: str) -> None:
        """Give the output ``x`` of a node the name ``name`` (a graph output's name)."""
        producer = next(n for n in self.nodes if x in n.output)
        producer.output[list(producer.output).index(x)] = name
        for node in self.nodes:
            node.input[:] = [name if i == x else i for i in node.input]

    def model(self, inputs: Sequence[onnx.ValueInfoProto],
              outputs: Sequence[onnx.ValueInfoProto], opset: int,
              manifest: Mapping[str, Any]) -> onnx.ModelProto:
        return make_model(self.nodes, inputs, outputs, self.initializers, opset, manifest,
                          self.name)


def clamp_int64(g: Graph, x: str, low: int, high: int, stem: str) -> str:
    """int64 ``x`` clamped to ``[low, high]`` with ``Less``/``Greater`` and ``Where``.

    Not ``Clip``/``Max``/``Min``: onnxruntime's CPU kernels for int64 get some values wrong
    (Eigen's SSE2 path, e.g. ``Max(2^31, 0) = 0``; onnxruntime PR #25280, ndonnx PR #154);
    measured here on onnxruntime 1.31: 784 of 100,000 random int64 wrong.
    """
    lo = g.const(low, np.int64, f"{stem}_low")
    hi = g.const(high, np.int64, f"{stem}_high")
    x = g.op("Where", g.op("Less", x, lo), lo, x)
    return g.op("Where", g.op("Greater", x, hi), hi, x)


def _io(values: Sequence[onnx.ValueInfoProto]) -> list[dict[str, Any]]:
    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        out.append({"name": v.name, "dtype": helper.tensor_dtype_to_np_dtype(t.elem_type).name,
                    "shape": dims})
    return out


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

    Refuses an ``opset`` lower than an op needs (naming it). onnx >= 1.23 writes an IR version
    newer than onnxruntime 1.31 accepts (DESIGN.md), so the IR version is pinned to the lowest
    one that supports the opsets used. The manifest (``embedded_manifest``: all but its sha256,
    which is of this very file, and the ``SIDECAR_ONLY`` fields) is stored in ``metadata_props``
    under ``edgepe.manifest``; ``read_manifest_prop`` reads it back, ``onnx_section`` gives the
    sidecar's ``onnx`` section.
    """
    check_opset(nodes, opset)
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in sorted((extra_opsets or {}).items())]
    model = helper.make_model(
        graph, opset_imports=opsets, producer_name="edgepe", producer_version=__version__
    )
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    helper.set_model_props(
        model, {MANIFEST_KEY: json.dumps(embedded_manifest(manifest), sort_keys=True,
                                         separators=(",", ":"))}
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def embedded_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``manifest`` a graph stores in its ``metadata_props``: all but the
    ``SIDECAR_ONLY`` fields and ``sha256`` (of the file itself)."""
    return {k: v for k, v in manifest.items() if k not in (*SIDECAR_ONLY, "sha256")}


def onnx_section(model: onnx.ModelProto) -> dict[str, Any]:
    """The manifest's ``onnx`` section, read from the graph: opset, extra_opsets, ir_version,
    inputs, outputs (name, dtype, shape)."""
    opsets = {o.domain: o.version for o in model.opset_import}
    return {
        "opset": opsets.pop("", opsets.pop("ai.onnx", None)),
        "extra_opsets": dict(sorted(opsets.items())),
        "ir_version": model.ir_version,
        "inputs": _io(model.graph.input),
        "outputs": _io(model.graph.output),
    }


def read_manifest_prop(model: onnx.ModelProto) -> dict[str, Any] | None:
    for prop in model.metadata_props:
        if prop.key == MANIFEST_KEY:
            return json.loads(prop.value)
    return None
