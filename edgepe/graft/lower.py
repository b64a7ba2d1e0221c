"""``--rope-lowering ort|rotary23``: the model's rotate-half arithmetic replaced by a fused
``RotaryEmbedding`` in every attention layer (issue 29), after the RoPE tables are in: onnxruntime's
``com.microsoft.RotaryEmbedding`` (``ort``), or the standard ``RotaryEmbedding`` of ONNX opset 23
(``rotary23``, domain ``""``).

Per layer, for q and for k, transformers' ``apply_rotary_pos_emb`` exports as ``Add(Mul(x,
Unsqueeze(cos)), Mul(Concat(Neg(Slice(x, R/2..R)), Slice(x, 0..R/2)), Unsqueeze(sin)))`` on
``x [B, H, S, R]``. That becomes one ``RotaryEmbedding(x, position_ids [B, S], cos_table
[L, R/2], sin_table [L, R/2])`` (``interleaved=0``): the graft's own tables are exactly the caches
the op reads, and its positions the squeezed ``positions[..., None]``. The op exists on
onnxruntime (contrib domain ``com.microsoft``, 4-D input ``[batch, heads, seq, head]``); the
result is proven like any graft.

``rotary23`` is the same rewrite with ONNX's op (inputs ``X, cos_cache, sin_cache,
position_ids``, the same ``[B, H, S, R]`` 4-D layout), which needs the model at opset >= 23: a
model exported below it is converted first by ``onnx.version_converter`` (``to_opset``; the
proof then compares the converted, lowered model with the original), and refused in one line
where the converter cannot take it there. Partial rotary (GPT-NeoX, Phi) slices ``x[..., :R]``
before rotating and concatenates the pass-through dimensions after: with ``rotary23`` that
``Concat(rotated, Slice(x, R..))`` is fused too, one op on all of ``x`` with
``rotary_embedding_dim=R`` (the ONNX op's partial rotation); ``ort`` rotates the slice.
"""

from __future__ import annotations

from edgepe.contract.errors import BadParameterError

DOMAIN = "com.microsoft"
LOWERINGS = {"ort": "com.microsoft.RotaryEmbedding", "rotary23": "RotaryEmbedding (ONNX opset 23)"}
OPSET_23 = 23


def to_opset(model, version: int = OPSET_23):
    """``model`` with its default-domain opset raised to ``version`` by ``onnx.version_converter``
    (``model`` itself when it is there already), its IR version raised to what the opsets need
    and its nodes' ``metadata_props`` kept;
    one line (``BadParameterError``) where the converter fails or the result fails the checker."""
    import onnx
    from onnx import helper, version_converter

    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if current is None or current >= version:
        return model
    try:
        converted = version_converter.convert_version(model, version)
        converted.ir_version = max(converted.ir_version, helper.find_min_ir_version_for(
            list(converted.opset_import), ignore_unknown=True))
        onnx.checker.check_model(converted)
    except Exception as exc:  # noqa: BLE001 - the converter raises bare RuntimeErrors
        reason = " ".join(str(exc).split())[:200]
        raise BadParameterError(f"--rope-lowering rotary23 needs opset {version} and this model "
                                f"is opset {current}: onnx's version converter cannot take it "
                                f"there ({type(exc).__name__}: {reason}); use --rope-lowering "
                                "ort, or export the model at opset 23") from None
    # the converter drops the nodes' metadata_props (the dynamo exporter's stack traces and
    # module names): kept, by node name, for every node it did not replace
    kept = {n.name: n.metadata_props for n in model.graph.node if n.name and n.metadata_props}
    for node in converted.graph.node:
        if node.name in kept and not node.metadata_props:
            node.metadata_props.extend(kept[node.name])
    return converted


def lower_rope(model, prefix: str, cos: str, sin: str, lowering: str = "ort") -> tuple[int, int]:
    """Rewrite ``model`` in place (see the module doc); returns how many rotations it fused and
    how many nodes it removed in all.
    ``prefix``: the graft's names (its tables ``{prefix}cos_table``/``sin_table`` and positions
    ``{prefix}positions_squeezed``); ``cos``/``sin``: the tensors the model reads; ``lowering``:
    ``ort`` or ``rotary23`` (the model already at opset >= 23: ``to_opset``)."""
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
        tables = [f"{prefix}{cos}_table", f"{prefix}{sin}_table"]
        if lowering == "ort":
            node = helper.make_node("RotaryEmbedding", [x, positions, *tables], [add.output[0]],
                                    name=f"{prefix}rotary{fused}", domain=DOMAIN, interleaved=0)
            replaced = add
        else:
            node, replaced = _standard(add, x, [*tables, positions], half, makers, readers, const,
                                       f"{prefix}rotary{fused}")
        graph.node.insert(list(graph.node).index(replaced), node)
        drop.append(replaced)
        fused += 1
    if not fused:
        raise BadParameterError("--rope-lowering: no rotate-half arithmetic (Add(Mul(x, cos), "
                                "Mul(Concat(Neg(x2), x1), sin))) found on the RoPE's tensors")
    before = len(graph.node)
    for add in drop:
        graph.node.remove(add)
    _prune(graph)
    if lowering == "ort" and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return fused, before - len(graph.node) + fused


def feed_tables(model, prefix: str, cos: str, sin: str) -> tuple[int, int]:
    """``--rope-lowering rotary23`` on a model whose rotations are ONNX's ``RotaryEmbedding``
    already (torch's opset-23 export): each op reading the grafted caches ``cos``/``sin``
    ``[B, S, R/2]`` reads graft's tables and positions instead (its ``position_ids`` input),
    and the gathers go; returns ``lower_rope``'s figures."""
    graph = model.graph
    tables = [f"{prefix}{cos}_table", f"{prefix}{sin}_table"]
    if not {t.name for t in graph.initializer} >= set(tables):
        raise BadParameterError("--rope-lowering needs the float32 RoPE tables (not with "
                                "--quantize int8)")
    fed = 0
    for node in graph.node:
        if node.op_type == "RotaryEmbedding" and node.domain in ("", "ai.onnx") and \
                list(node.input[1:]) == [cos, sin]:
            node.input[1:] = [*tables, f"{prefix}positions_squeezed"]
            fed += 1
    before = len(graph.node)
    _prune(graph)
    return fed, before - len(graph.node)


def _standard(add, x: str, rest: list[str], half: int, makers, readers, const, name: str):
    """``(node, replaced)``: ONNX's ``RotaryEmbedding`` for the rotation ``add`` of ``x``;
    for partial rotary (``x = Slice(v, 0..2 half)`` on the last axis, read only here, and the one
    reader of ``add`` a ``Concat(add, Slice(v, 2 half..))`` on the last axis) the op takes all of
    ``v`` with ``rotary_embedding_dim`` and replaces that ``Concat``."""
    from onnx import helper

    rot = 2 * half
    sliced = makers.get(x)
    users = readers.get(add.output[0], [])
    concat = users[0] if len(users) == 1 else None

    def last_axis(node) -> bool:
        return len(node.input) > 3 and const(node.input[3]) in ([3], [-1])

    if sliced is not None and sliced.op_type == "Slice" and last_axis(sliced) and \
            const(sliced.input[1]) == [0] and const(sliced.input[2]) == [rot] and \
            concat is not None and concat.op_type == "Concat" and len(concat.input) == 2 and \
            concat.input[0] == add.output[0] and \
            any(a.name == "axis" and a.i in (3, -1) for a in concat.attribute):
        passing = makers.get(concat.input[1])
        source = sliced.input[0]
        if passing is not None and passing.op_type == "Slice" and passing.input[0] == source \
                and last_axis(passing) and const(passing.input[1]) == [rot] and \
                len(readers.get(x, [])) == 3:  # the Mul by cos and the two halves' Slices
            return helper.make_node("RotaryEmbedding", [source, *rest], [concat.output[0]],
                                    name=name, interleaved=0, rotary_embedding_dim=rot), concat
    return helper.make_node("RotaryEmbedding", [x, *rest], [add.output[0]], name=name,
                            interleaved=0), add


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
