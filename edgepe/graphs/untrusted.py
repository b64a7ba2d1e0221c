"""The ops edgepe's graph builders emit, and the refusal of any graph they could not have written.

``check_untrusted(model, where)`` runs on every ONNX file edgepe reads (``edgepe.load``, verify,
inspect, graft's PE) before anything parses its tensors or runs it.
"""

from __future__ import annotations

from edgepe.contract.errors import ArtifactError

# Every op edgepe's graph builders emit (every module of edgepe/graphs), by domain.
# tests/test_trust.py exports every scheme x mode x quantisation x lowering x dtype and checks
# that this list covers what they emit. A graph using anything else is not edgepe's: no control
# flow (Loop, If, Scan: a 2^40-iteration Loop hangs a session), no functions (issue 23).
EMITTED_OPS = {
    "": frozenset({
        "Abs", "Add", "BitShift", "BitwiseAnd", "BitwiseXor", "Cast", "Clip", "Concat", "Cos",
        "DequantizeLinear", "Div", "Equal", "Expand", "Gather", "Gemm", "Greater", "Less",
        "MatMul", "MatMulInteger", "Mod", "Mul", "Neg", "QuantizeLinear", "Reshape", "Shape",
        "Sin", "Slice", "Sub", "Transpose", "Unsqueeze", "Where",
        "Floor",  # --lowering float (graphs/lowerings.py)
        "Max",  # int8 bias graphs: the bias at the table's last distance (graphs/int8.py)
        "Range", "Size",  # rope's apply-4d graph, --rope-lowering ort (graphs/trig.py)
        "RotaryEmbedding",  # rope's apply graph, --rope-lowering rotary23 (opset 23)
    }),
    "com.microsoft": frozenset({"RotaryEmbedding"}),  # rope's apply graph, --rope-lowering ort
}


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
    ``budget`` elements at one position, or one that grows faster than its inputs, before
    anything runs it. An input without a declared shape, or with a dimension that is neither a
    size nor a named parameter, or of a negative dimension, is refused first (its rank and size
    are free: hbound). ONNX shape inference over a
    copy whose free input dimensions are 1 bounds every tensor (without data propagation, which
    would materialise a constant ``Range(0, 2^31)`` itself: 16 GiB); one over
    ``budget``, or a data-shaped op (``DATA_SHAPED``: Expand, Range, Tile, ConstantOfShape,
    Resize, Pad, loops...) whose output size it cannot bound, is refused naming the node. The
    same counts at every free dimension ``SIZE_PROBE`` and twice it bound growth: a tensor that
    grows more than ``max(4, the fastest input's growth)`` times is refused
    (``_allowed_growth``)."""
    for value in model.graph.input:
        t = value.type.tensor_type
        if not t.HasField("shape"):
            # onnxruntime runs an input of no declared shape at any rank and size: Shape(x)
            # concatenated 3 times sized an Expand to 46,656 elements from 36 floats, past the
            # probes' 1 and 16 (hmut4); edgepe declares every input's shape
            raise ArtifactError(f"{where!r}: input {value.name!r} declares no shape (any rank "
                                "and size would run): refused")
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                for d in t.shape.dim]
        if any(isinstance(d, int) and d < 0 for d in dims):
            # onnxruntime runs an input of dimension -1 at any size (a free dimension); shape
            # inference keeps -1, counted as 0 elements: [-1, 2^30] passed (hmut4)
            raise ArtifactError(f"{where!r}: input {value.name!r} of {dims} has a negative "
                                "dimension (onnxruntime takes it as free): refused")
        if "?" in dims:
            raise ArtifactError(f"{where!r}: input {value.name!r} of {dims} has a dimension "
                                "that is neither a size nor a named parameter: refused")
    allowed = _allowed_growth(model)
    inferred, shapes = _infer(model, 1, where)
    _, low = _infer(model, SIZE_PROBE, where)
    _, high = _infer(model, 2 * SIZE_PROBE, where)
    at = {1: shapes, SIZE_PROBE: low, 2 * SIZE_PROBE: high}
    # Tensors whose VALUES depend on the graph's input values (Shape and Size cut that: they
    # depend on sizes only); initializers and constants do not.
    by_values = {value.name for value in model.graph.input}
    for node in model.graph.node:
        if node.op_type not in ("Shape", "Size") and by_values.intersection(node.input):
            by_values.update(node.output)
    unknown = []
    total = 0  # every bounded tensor together (issue 41: two Range tensors made 4.4 GB)
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
            elements = _elements(dims)
            if elements > budget:
                raise ArtifactError(
                    f"{where!r}: node {node.name or node.op_type!r} ({node.op_type}) makes a "
                    f"tensor of {elements} elements {dims} at one position, over the budget of "
                    f"{budget}: refused before running it")
            total += elements
            if None not in (*low.get(name, [None]), *high.get(name, [None])):
                _check_growth(where, node, _elements(low[name]), _elements(high[name]), allowed)
    if unknown:
        total += _check_sized_by_shapes(model, unknown, where, budget, allowed, at)
    if total > budget:
        raise ArtifactError(
            f"{where!r}: its nodes make {total} tensor elements in all at one position, over "
            f"the budget of {budget} (the sum of every tensor shape inference bounds): refused "
            "before running it")


def _infer(model, free: int, where: str):
    """ONNX shape inference over a copy of ``model`` with every free input dimension set to
    ``free``: the inferred model and each tensor's dims (None where unknown)."""
    import onnx
    from onnx import shape_inference

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]  # shapes are inferred afresh, never believed
    defaults = {t.name: list(t.dims) for t in probe.graph.initializer}
    for value in probe.graph.input:
        dims = value.type.tensor_type.shape.dim
        # an input with an initializer (its default) has the default's size unless fed: its
        # declared free dims are not probed (at 16 they contradicted the default's [1])
        given = defaults.get(value.name)
        for k, dim in enumerate(dims):
            if not dim.HasField("dim_value"):
                dim.Clear()
                dim.dim_value = given[k] if given is not None and len(given) == len(dims) \
                    else free
    try:
        inferred = shape_inference.infer_shapes(probe, strict_mode=False, data_prop=False)
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
    return inferred, shapes


def _elements(dims) -> int:
    elements = 1
    for d in dims:
        elements *= max(int(d), 0)
    return elements


MOST_FREE = 3  # free dimensions of edgepe's widest input (rope apply-4d's x [B, H, S, d])


def _allowed_growth(model) -> int:
    """The most a tensor may grow when every free input dimension doubles: 4 (degree 2 in the
    free dimensions), or the fastest-growing input's growth where that is more (2^k for an input
    of k free dimensions, k at most ``MOST_FREE``)."""
    # Degree 2 is the line: edgepe's tensors are at most linear in each free dimension, and a
    # bias [h, N, M] (or [h, N, N]) pairs two of them: 4x. An input of k free dimensions
    # (rope apply-4d's x [B, H, S, d]: 8x) is data the caller feeds: a tensor as big as it, at
    # the same order, grows no faster than what the caller already holds. Anything faster is a
    # power of an input's size: Shape(x) four times made N^4 elements, 6.9e10 at N = 512 (hmut4).
    # Capped at 8: no input edgepe writes has more than 3 free dimensions, and a hostile one
    # declaring 10 would otherwise allow a growth of N^10.
    free = [sum(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
            for v in model.graph.input]
    return 1 << min(MOST_FREE, max([2, *free]))


def _check_growth(where: str, node, low, high, allowed: int) -> None:
    """Refuse a tensor of ``low`` elements at every free dimension ``SIZE_PROBE`` and ``high``
    at twice it when it grows more than ``allowed`` times (from 0 to anything counts as more)."""
    if high > allowed * low:
        grown = f"{high / low:.4g}x, " if low else ""
        raise ArtifactError(
            f"{where!r}: node {node.name or node.op_type!r} ({node.op_type}) grows {grown}from "
            f"{int(low)} to {int(high)} elements when every free input dimension doubles from "
            f"{SIZE_PROBE} to {2 * SIZE_PROBE}, faster than the {allowed}x its inputs allow: "
            "refused before running it")


# The free input dimension at which a Range or Expand sized by input sizes is evaluated besides 1
# and twice it (every free dimension at once: apply-4d's x [B, H, S, d] is then 16^3 x d); from
# it to twice it every tensor's growth is bounded (_allowed_growth).
SIZE_PROBE = 16


def _check_sized_by_shapes(model, nodes, where: str, budget: int, allowed: int,
                           at: dict) -> int:
    """Evaluate the size inputs of each Range/Expand in ``nodes`` (they depend on constants and
    input SIZES only, never input values) with ONNX's reference evaluator, on inputs of free
    dimension 1, ``SIZE_PROBE`` and twice it, restricted to the nodes those inputs need; refuse
    a size over ``budget``, one that grows more than ``allowed`` times from ``SIZE_PROBE`` to
    twice it, a Range with an infinite or NaN bound, and an input of no ONNX element
    type (its zeros cannot be made). An Expand's count broadcasts its shape with its data's
    inferred dims at that free dimension (``at``) where known. Returns the elements they make
    together at free dimension 1 (one position: what the total bound counts)."""
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
    made = 0
    counts = {}  # id(node) -> its count at each free dimension
    for free in (1, SIZE_PROBE, 2 * SIZE_PROBE):
        feeds = {}
        for value in graph.input:
            t = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else free for d in t.shape.dim]
            if np.prod(dims, dtype=np.float64) * 8 > budget:
                raise ArtifactError(f"{where!r}: input {value.name!r} of {dims} is over the "
                                    f"budget of {budget} elements: refused")
            try:
                dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            except KeyError:  # UNDEFINED or no ONNX type at all (hmut4: was an internal error)
                raise ArtifactError(f"{where!r}: input {value.name!r} has element type "
                                    f"{t.elem_type}, which no ONNX tensor has: refused") from None
            feeds[value.name] = np.zeros(dims, dtype=dtype)
        try:
            # a size computed by dividing by zero is refused below (non-finite), not warned
            with np.errstate(all="ignore"):
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
                # An infinite or NaN bound has no count a runtime agrees on (C++'s cast of it
                # to int64 is undefined): refused like a step of 0 (hmut4: int(inf) raised).
                endless = delta == 0 or not np.isfinite((start, limit, delta)).all()
                count = 0 if endless else max(0.0, np.ceil((limit - start) / delta))
                if endless or count > budget:
                    raise ArtifactError(
                        f"{where!r}: node {node.name or 'Range'!r} (Range) makes "
                        f"{'an endless range' if endless else f'{int(count)} elements'}, "
                        f"over the budget of {budget}: refused before running it")
                counts.setdefault(id(node), []).append(count)
                if free == 1:
                    made += int(count)
            else:
                shape = np.maximum(np.asarray(values[node.input[1]]).reshape(-1)
                                   .astype(np.float64), 1)
                data = at[free].get(node.input[0])
                if data is not None and None not in data:
                    # the output broadcasts both: x [N, 1, 1] expanded to [1, N, N] is N^3,
                    # not the shape's N^2 (hbound)
                    data = np.maximum(np.asarray(data, np.float64), 1)
                    rank = max(len(shape), len(data))
                    shape = np.maximum(np.pad(shape, (rank - len(shape), 0), constant_values=1),
                                       np.pad(data, (rank - len(data), 0), constant_values=1))
                count = float(np.prod(shape))
                if count > budget:
                    raise ArtifactError(
                        f"{where!r}: node {node.name or 'Expand'!r} (Expand) makes a tensor of "
                        f"up to {int(count)} elements, over the budget of {budget}: refused "
                        "before running it")
                counts.setdefault(id(node), []).append(count)
                if free == 1:
                    made += int(count)
    for node in nodes:  # a power of input sizes (Shape(x) x 4 sizing an Expand: N^4) is refused
        _, low, high = counts[id(node)]
        _check_growth(where, node, low, high, allowed)
    return made
