"""``--rope-lowering ort``: the model's rotate-half arithmetic replaced by onnxruntime's fused
``com.microsoft.RotaryEmbedding`` in every attention layer (issue 29), after the RoPE tables are in.

Per layer, for q and for k, transformers' ``apply_rotary_pos_emb`` exports as ``Add(Mul(x,
Unsqueeze(cos)), Mul(Concat(Neg(Slice(x, R/2..R)), Slice(x, 0..R/2)), Unsqueeze(sin)))`` on
``x [B, H, S, R]``. That becomes one ``RotaryEmbedding(x, position_ids [B, S], cos_table
[L, R/2], sin_table [L, R/2])`` (``interleaved=0``): the graft's own tables are exactly the caches
the op reads, and its positions the squeezed ``positions[..., None]``. The op exists on
onnxruntime (contrib domain ``com.microsoft``, 4-D input ``[batch, heads, seq, head]``); the
result is proven like any graft.
"""

from __future__ import annotations

from edgepe.contract.errors import BadParameterError

DOMAIN = "com.microsoft"


def lower_rope(model, prefix: str, cos: str, sin: str) -> tuple[int, int]:
    """Rewrite ``model`` in place (see the module doc); returns how many rotations it fused and
    how many nodes it removed in all.
    ``prefix``: the graft's names (its tables ``{prefix}cos_table``/``sin_table`` and positions
    ``{prefix}positions_squeezed``); ``cos``/``sin``: the tensors the model reads."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    table = consts.get(f"{prefix}{cos}_table")
    positions = f"{prefix}positions_squeezed"
    if table is None:
        raise BadParameterError("--rope-lowering needs the float32 RoPE tables (not with "
                                "--quantize int8)")
    half = table.shape[1]
    makers = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def unsqueezed(name: str, source: str) -> bool:
        node = makers.get(name)
        return node is not None and node.op_type == "Unsqueeze" and node.input[0] == source

    def const(name: str):
        return np.asarray(consts[name]).ravel().tolist() if name in consts else None

    fused, drop = 0, []
    for add in [n for n in graph.node if n.op_type == "Add"]:
        muls = [makers.get(i) for i in add.input]
        if any(m is None or m.op_type != "Mul" for m in muls):
            continue
        direct = next((m for m in muls if any(unsqueezed(i, cos) for i in m.input)), None)
        rotated = next((m for m in muls if any(unsqueezed(i, sin) for i in m.input)), None)
        if direct is None or rotated is None or direct is rotated:
            continue
        x = next(i for i in direct.input if not unsqueezed(i, cos))
        concat = makers.get(next(i for i in rotated.input if not unsqueezed(i, sin)))
        if concat is None or concat.op_type != "Concat" or len(concat.input) != 2:
            continue
        neg, first = makers.get(concat.input[0]), makers.get(concat.input[1])
        second = makers.get(neg.input[0]) if neg is not None and neg.op_type == "Neg" else None
        if first is None or second is None or first.op_type != "Slice" or \
                second.op_type != "Slice" or first.input[0] != x or second.input[0] != x:
            continue
        if const(first.input[1]) != [0] or const(first.input[2]) != [half] or \
                const(second.input[1]) != [half] or const(second.input[3]) not in ([3], [-1]):
            continue
        node = helper.make_node("RotaryEmbedding", [x, positions, f"{prefix}{cos}_table",
                                                    f"{prefix}{sin}_table"], [add.output[0]],
                                name=f"{prefix}rotary{fused}", domain=DOMAIN, interleaved=0)
        graph.node.insert(list(graph.node).index(add), node)
        drop.append(add)
        fused += 1
    if not fused:
        raise BadParameterError("--rope-lowering: no rotate-half arithmetic (Add(Mul(x, cos), "
                                "Mul(Concat(Neg(x2), x1), sin))) found on the RoPE's tensors")
    before = len(graph.node)
    for add in drop:
        graph.node.remove(add)
    _prune(graph)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return fused, before - len(graph.node) + fused


def _prune(graph) -> None:
    """Drop nodes whose outputs nothing reads (and graph outputs do not name), repeatedly."""
    outputs = {o.name for o in graph.output}
    while True:
        reads = {name for n in graph.node for name in n.input} | outputs
        dead = [n for n in graph.node if not reads.intersection(n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    reads = {name for n in graph.node for name in n.input} | outputs
    for t in [t for t in graph.initializer if t.name not in reads]:
        graph.initializer.remove(t)
