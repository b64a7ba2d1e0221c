"""What an artifact holds and what its graph computes with: the logic behind ``edgepe inspect``.

``audit(model)`` follows every tensor derived from the graph inputs (the positions) and checks
the claims DESIGN.md makes for compute graphs:

- *integer-only up to the float boundary*: every node on position-derived integers is an integer
  op (``INTEGER_OPS``), and integers turn into floats only through a ``Cast`` (or a ``Where``
  selecting between float constants); no float is ever turned back into an integer;
- *trig-free*: no Sin/Cos/Tan/Exp/Log/Sigmoid-like op anywhere;
- *position-indexed tables*: initializers read by a ``Gather`` whose indices depend on the
  positions (listed with their shape).

``describe(path)`` reads an artifact (a file with its manifest at ``PATH.json``; for ONNX also
the graph) into plain data the CLI renders; anything else is an ``ArtifactError``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgepe.contract.checkpoint import sha256_file
from edgepe.contract.errors import ArtifactError
from edgepe.contract.manifest import artifact_for
from edgepe.graphs.untrusted import check_untrusted
from edgepe.rebuild import read_manifest as read

# Ops that keep integers integers (shape plumbing, bit ops, integer arithmetic, comparisons).
INTEGER_OPS = frozenset({
    "Cast", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Unsqueeze",
    "Squeeze", "Reshape", "Flatten", "Expand", "Concat", "Gather", "Slice", "Split", "Transpose",
    "Identity", "Constant", "Shape", "Size", "Clip", "Max", "Min", "Abs", "Neg", "Add", "Sub",
    "Mul", "Div", "Mod", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not",
    "And", "Or", "Xor", "Where", "Tile", "Range", "MatMulInteger",
})
# Ops that may take position-derived integers to floats: the cast, a select of constants, or
# the int8 projection's one dequantise (edgepe.graphs.int8).
FLOAT_BOUNDARY_OPS = frozenset({"Cast", "Where", "DequantizeLinear"})
TRANSCENDENTAL_OPS = frozenset({
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh",
    "Atanh", "Exp", "Log", "Pow", "Sigmoid", "Softmax", "LogSoftmax", "Erf",
})
BITWISE_OPS = frozenset({"BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"})


@dataclass
class Audit:
    """The audit of one graph. ``violations`` says why ``integer_only`` is False."""

    integer_only: bool
    float_boundaries: list[str]  # ops where position-derived integers become floats
    trig_free: bool
    transcendental: list[str]
    tables: list[tuple[str, list[int]]]  # position-indexed initializers: (name, shape)
    bitwise: bool
    integer_ops: list[str] = field(default_factory=list)  # ops on position-derived integers
    violations: list[str] = field(default_factory=list)


def _elem_types(model) -> dict[str, int]:
    """The element type of every tensor, with shape inference filling in intermediates."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - unknown (custom-domain) ops: use what is declared
        inferred = model
    graph = inferred.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
    return types


def _is_float(elem_type: int | None) -> bool | None:
    from onnx import TensorProto

    if elem_type is None or elem_type == TensorProto.UNDEFINED:
        return None
    return elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
                         TensorProto.BFLOAT16)


def audit(model) -> Audit:
    """Audit ``model`` (an ``onnx.ModelProto``); see the module docstring."""
    graph = model.graph
    types = _elem_types(model)
    initializers = {t.name: list(t.dims) for t in graph.initializer}
    derived = {v.name for v in graph.input if v.name not in initializers}
    violations: list[str] = []
    boundaries: list[str] = []
    integer_ops: list[str] = []
    tables: list[tuple[str, list[int]]] = []
    for node in graph.node:  # topologically sorted (the checker requires it)
        live = [i for i in node.input if i in derived]
        if not live:
            continue
        derived.update(node.output)
        live_float = [_is_float(types.get(i)) for i in live]
        out_float = [_is_float(types.get(o)) for o in node.output]
        if node.op_type == "Gather" and node.input[0] in initializers and node.input[1] in live:
            tables.append((node.input[0], initializers[node.input[0]]))
        if any(live_float):
            if any(f is False for f in out_float):
                violations.append(f"{node.op_type} turns floats back into integers")
            continue
        if all(f is False for f in out_float):
            integer_ops.append(node.op_type)
            if node.op_type not in INTEGER_OPS:
                violations.append(f"{node.op_type} is not an integer op")
        elif node.op_type in FLOAT_BOUNDARY_OPS:
            boundaries.append(node.op_type)
        else:
            violations.append(f"{node.op_type} makes floats from position-derived integers")
    ops = {n.op_type for n in graph.node}
    transcendental = sorted(ops & TRANSCENDENTAL_OPS)
    return Audit(
        integer_only=not violations,
        float_boundaries=boundaries,
        trig_free=not transcendental,
        transcendental=transcendental,
        tables=tables,
        bitwise=bool(ops & BITWISE_OPS),
        integer_ops=integer_ops,
        violations=violations,
    )


def graph_summary(model) -> dict[str, Any]:
    """Op histogram, initializer bytes, I/O, opset and IR of ``model``."""
    from onnx import helper

    def io(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_param or d.dim_value for d in t.shape.dim]
            out.append((v.name, helper.tensor_dtype_to_np_dtype(t.elem_type).name, dims))
        return out

    init_bytes = sum(len(t.raw_data) or _proto_bytes(t) for t in model.graph.initializer)
    return {
        "ops": dict(sorted(Counter(n.op_type for n in model.graph.node).items())),
        "nodes": len(model.graph.node),
        "initializers": [(t.name, list(t.dims), helper.tensor_dtype_to_np_dtype(t.data_type).name)
                         for t in model.graph.initializer],
        "initializer_bytes": init_bytes,
        "inputs": io(model.graph.input),
        "outputs": io(model.graph.output),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
    }


def _proto_bytes(tensor) -> int:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor).nbytes


def load_onnx(path: Path):
    """The model at ``path``; anything that is not a well-formed ONNX model is an ArtifactError."""
    import onnx

    try:
        model = onnx.load_model_from_string(path.read_bytes())
        if not model.graph.node or not model.opset_import:
            raise ValueError("no graph")
    except Exception as exc:  # noqa: BLE001 - any parse failure: not an ONNX artifact
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(
            f"{str(path)!r} is not an ONNX model edgepe can read ({first})"
        ) from None
    check_untrusted(model, str(path))  # before the checker, which would follow external data
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - any check failure: not an ONNX artifact
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(
            f"{str(path)!r} is not an ONNX model edgepe can read ({first})"
        ) from None
    return model


def describe(path: str | Path) -> dict[str, Any]:
    """Everything ``edgepe inspect`` shows about ``path``, as plain data."""
    path = artifact_for(path)  # X.onnx.json names X.onnx
    manifest = read(path)
    info: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size,
                            "manifest": manifest, "sha256": sha256_file(path)}
    if manifest["format"] == "onnx":
        model = load_onnx(path)
        info["graph"] = graph_summary(model)
        info["audit"] = audit(model)
        from edgepe.graphs._common import onnx_section, read_manifest_prop

        if manifest.get("quant"):  # int8 graphs embed a slimmer copy
            from edgepe.graphs.int8 import embedded as expected
        else:
            from edgepe.graphs._common import embedded_manifest as expected
        # The graph's copy, and the sidecar's account of the graph's header, both agree.
        info["embedded_ok"] = (read_manifest_prop(model) == expected(manifest)
                               and manifest.get("onnx") == onnx_section(model))
    elif manifest["format"] == "pte":
        from edgepe.formats.pte import describe_program

        info["program"] = describe_program(path.read_bytes())
    elif manifest["format"] == "tflite":
        from edgepe.formats.tflite import describe_model, read_file

        info["tflite"] = describe_model(read_file(path))
    info["sha256_ok"] = manifest.get("sha256") == info["sha256"]
    return info
