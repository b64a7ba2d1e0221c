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

from edgepe.errors import ArtifactError

# Ops that keep integers integers (shape plumbing, bit ops, integer arithmetic, comparisons).
INTEGER_OPS = frozenset({
    "Cast", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Unsqueeze",
    "Squeeze", "Reshape", "Flatten", "Expand", "Concat", "Gather", "Slice", "Split", "Transpose",
    "Identity", "Constant", "Shape", "Size", "Clip", "Max", "Min", "Abs", "Neg", "Add", "Sub",
    "Mul", "Div", "Mod", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not",
    "And", "Or", "Xor", "Where", "Tile", "Range", "MatMulInteger",
})
# Ops that may take position-derived integers to floats: the cast, a select of constants, or
# the int8 projection's one dequantise (edgepe.quant.graphs).
FLOAT_BOUNDARY_OPS = frozenset({"Cast", "Where", "DequantizeLinear"})
TRANSCENDENTAL_OPS = frozenset({
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh",
    "Atanh", "Exp", "Log", "Pow", "Sigmoid", "Softmax", "LogSoftmax", "Erf",
})
BITWISE_OPS = frozenset({"BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"})
# Every op edgepe's graph builders emit (edgepe/export/graphs, edgepe/quant/graphs), by domain.
# tests/test_trust.py exports every scheme x mode x quantisation x lowering x dtype and checks
# that this list covers what they emit. A graph using anything else is not edgepe's: no control
# flow (Loop, If, Scan: a 2^40-iteration Loop hangs a session), no functions (issue 23).
EMITTED_OPS = {
    "": frozenset({
        "Abs", "Add", "BitShift", "BitwiseAnd", "BitwiseXor", "Cast", "Clip", "Concat", "Cos",
        "DequantizeLinear", "Div", "Equal", "Expand", "Gather", "Gemm", "Greater", "Less",
        "MatMul", "MatMulInteger", "Mod", "Mul", "Neg", "QuantizeLinear", "Reshape", "Shape",
        "Sin", "Slice", "Sub", "Transpose", "Unsqueeze", "Where",
        "Floor",  # --lowering float (export/graphs/lowerings.py)
        "Max",  # int8 bias graphs: the bias at the table's last distance (quant/graphs.py)
        "Range", "Size",  # rope's apply-4d graph, --rope-lowering ort (export/graphs/trig.py)
        "RotaryEmbedding",  # rope's apply graph, --rope-lowering rotary23 (opset 23)
    }),
    "com.microsoft": frozenset({"RotaryEmbedding"}),  # rope's apply graph, --rope-lowering ort
}


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


def check_untrusted(model, where: str) -> None:
    """Refuse (``ArtifactError``, one line) a graph that edgepe's builders could not have
    written, before anything parses its tensors or runs it: external data (a path the graph
    names; edgepe never writes it), sparse initializers, model functions, subgraphs, ops
    outside ``EMITTED_OPS``, and a tensor over ``TENSOR_BUDGET`` (``check_tensor_bound``)."""
    from onnx import TensorProto

    graph = model.graph

    def external(tensor) -> bool:
        return tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data) > 0

    bad = next((t.name for t in graph.initializer if external(t)), None)
    if bad is None:
        bad = next((n.name for n in graph.node for a in n.attribute
                    if a.HasField("t") and external(a.t)), None)
    if bad is not None:
        raise ArtifactError(f"{where!r} keeps tensor {bad!r} in external data: edgepe never "
                            "writes external data, and opens no path a graph names: refused")
    if graph.sparse_initializer or model.functions:
        raise ArtifactError(f"{where!r} has sparse initializers or model functions: edgepe "
                            "never writes them: refused")
    for node in graph.node:
        if node.op_type not in EMITTED_OPS.get(node.domain or "", ()) or any(
                a.HasField("g") or len(a.graphs) for a in node.attribute):
            domain = f"{node.domain}." if node.domain else ""
            raise ArtifactError(f"{where!r} uses op {domain}{node.op_type}, which edgepe's "
                                "builders never emit (no control flow or subgraphs): refused")
    check_tensor_bound(model, where)


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
    from edgepe.checkpoint import sha256_file
    from edgepe.manifest import read

    path = Path(path)
    manifest = read(path)
    info: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size,
                            "manifest": manifest, "sha256": sha256_file(path)}
    if manifest["format"] == "onnx":
        model = load_onnx(path)
        info["graph"] = graph_summary(model)
        info["audit"] = audit(model)
        from edgepe.export.graphs._common import onnx_section, read_manifest_prop

        if manifest.get("quant"):  # int8 graphs embed a slimmer copy
            from edgepe.quant.graphs import embedded as expected
        else:
            from edgepe.export.graphs._common import embedded_manifest as expected
        # The graph's copy, and the sidecar's account of the graph's header, both agree.
        info["embedded_ok"] = (read_manifest_prop(model) == expected(manifest)
                               and manifest.get("onnx") == onnx_section(model))
    elif manifest["format"] == "pte":
        from edgepe.formats.pte import describe_program

        info["program"] = describe_program(path.read_bytes())
    info["sha256_ok"] = manifest.get("sha256") == info["sha256"]
    return info


# -- resource bound (issue 30) -------------------------------------------------------------------

# The most elements one tensor of an untrusted graph may hold when every free input dimension is
# 1 (a single position): 2^28 (1 GiB of float32). Constants drive what is bigger (an Expand to
# 32768 x 32768, a Range(0, 2^31)); edgepe's graphs make at most max_len x d_model from a
# single position (rope's cache), far below it for every model that fits a device.
TENSOR_BUDGET = 1 << 28
# Ops whose output size comes from a tensor's VALUES rather than its inputs' sizes: unknown
# after shape inference means unbounded, so refused.
DATA_SHAPED = frozenset({"Expand", "Range", "ConstantOfShape", "Tile", "Resize", "Pad",
                         "Upsample", "OneHot", "NonZero", "Compress", "Loop", "Scan", "If",
                         "TopK", "Unique", "CenterCropPad", "Col2Im"})


def check_tensor_bound(model, where: str, budget: int = TENSOR_BUDGET) -> None:
    """Refuse (``ArtifactError``, one line, exit 2) a graph that can make a tensor of more than
    ``budget`` elements at one position, before anything runs it: ONNX shape inference over a
    copy whose free input dimensions are 1 bounds every tensor (without data propagation, which
    would materialise a constant ``Range(0, 2^31)`` itself: 16 GiB); one over
    ``budget``, or a data-shaped op (``DATA_SHAPED``: Expand, Range, Tile, ConstantOfShape,
    Resize, Pad, loops...) whose output size it cannot bound, is refused naming the node."""
    import onnx
    from onnx import shape_inference

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
                dim.dim_value = 1
    del copy.graph.value_info[:]
    try:
        inferred = shape_inference.infer_shapes(copy, strict_mode=False, data_prop=False)
    except Exception as exc:  # noqa: BLE001 - a graph inference rejects is not edgepe's
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ArtifactError(f"{where!r}: ONNX shape inference fails on its graph ({first}): "
                            "its tensors cannot be bounded: refused") from None
    shapes = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
        t = value.type.tensor_type
        if t.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None
                                  for d in t.shape.dim]
    # Tensors whose VALUES depend on the graph's input values (Shape and Size cut that: they
    # depend on sizes only); initializers and constants do not.
    by_values = {value.name for value in model.graph.input}
    for node in model.graph.node:
        if node.op_type not in ("Shape", "Size") and by_values.intersection(node.input):
            by_values.update(node.output)
    unknown = []
    for node in inferred.graph.node:
        for name in node.output:
            if not name:
                continue
            dims = shapes.get(name)
            if dims is None or any(d is None for d in dims):
                if node.op_type in DATA_SHAPED:
                    if node.op_type in ("Range", "Expand") and not by_values.intersection(
                            node.input[1:] if node.op_type == "Expand" else node.input):
                        unknown.append(node)  # sized by constants and input sizes: evaluated
                        continue
                    raise ArtifactError(
                        f"{where!r}: node {node.name or node.op_type!r} ({node.op_type}) makes a "
                        f"tensor whose size depends on values shape inference cannot bound: "
                        f"refused (edgepe's graphs bound every tensor)")
                continue
            elements = 1
            for d in dims:
                elements *= max(int(d), 0)
            if elements > budget:
                raise ArtifactError(
                    f"{where!r}: node {node.name or node.op_type!r} ({node.op_type}) makes a "
                    f"tensor of {elements} elements {dims} at one position, over the budget of "
                    f"{budget}: refused before running it")
    if unknown:
        _check_sized_by_shapes(model, unknown, where, budget)


# The free input dimension at which a Range or Expand sized by input sizes is evaluated besides 1
# (every free dimension at once: apply-4d's x [B, H, S, d] is then 16^3 x d).
SIZE_PROBE = 16


def _check_sized_by_shapes(model, nodes, where: str, budget: int) -> None:
    """Evaluate the size inputs of each Range/Expand in ``nodes`` (they depend on constants and
    input SIZES only, never input values) with ONNX's reference evaluator, on inputs of free
    dimension 1 and ``SIZE_PROBE``, restricted to the nodes those inputs need; refuse a size
    over ``budget``."""
    import numpy as np
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    wanted = {n for node in nodes for n in (node.input[1:] if node.op_type == "Expand"
                                            else node.input)}
    producers = {out: node for node in graph.node for out in node.output}
    needed, stack = [], list(wanted)
    seen = set()
    while stack:
        name = stack.pop()
        node = producers.get(name)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        needed.append(node)
        if node.op_type not in ("Shape", "Size"):
            stack.extend(node.input)
    order = [node for node in graph.node if id(node) in seen]
    outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in wanted]
    sub = helper.make_model(
        helper.make_graph(order, "sizes", list(graph.input), outputs, list(graph.initializer)),
        opset_imports=list(model.opset_import), ir_version=model.ir_version)
    for free in (1, SIZE_PROBE):
        feeds = {}
        for value in graph.input:
            t = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else free for d in t.shape.dim]
            if np.prod(dims, dtype=np.float64) * 8 > budget:
                raise ArtifactError(f"{where!r}: input {value.name!r} of {dims} is over the "
                                    f"budget of {budget} elements: refused")
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[value.name] = np.zeros(dims, dtype=dtype)
        try:
            values = dict(zip(wanted, ReferenceEvaluator(sub).run(list(wanted), feeds),
                              strict=True))
        except Exception as exc:  # noqa: BLE001 - a size the evaluator cannot compute
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            raise ArtifactError(f"{where!r}: the sizes of its Range/Expand nodes cannot be "
                                f"evaluated ({first}): refused") from None
        for node in nodes:
            if node.op_type == "Range":
                start, limit, delta = (float(np.asarray(values[n]).reshape(-1)[0])
                                       for n in node.input)
                count = 0 if delta == 0 else max(0.0, np.ceil((limit - start) / delta))
                if delta == 0 or count > budget:
                    raise ArtifactError(
                        f"{where!r}: node {node.name or 'Range'!r} (Range) makes "
                        f"{'an endless range' if delta == 0 else f'{int(count)} elements'}, "
                        f"over the budget of {budget}: refused before running it")
            else:
                shape = np.asarray(values[node.input[1]]).reshape(-1)
                count = float(np.prod(np.maximum(shape.astype(np.float64), 1)))
                if count > budget:
                    raise ArtifactError(
                        f"{where!r}: node {node.name or 'Expand'!r} (Expand) makes a tensor of "
                        f"up to {int(count)} elements, over the budget of {budget}: refused "
                        "before running it")
