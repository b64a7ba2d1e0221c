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
    names; edgepe never writes it), sparse initializers, model functions, subgraphs, and ops
    outside ``EMITTED_OPS``."""
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
