"""``--rope-lowering ort|rotary23``: the model's rotate-half arithmetic replaced by a fused
``RotaryEmbedding`` in every attention layer (issue 29), after the RoPE tables are in: onnxruntime's
``com.microsoft.RotaryEmbedding`` (``ort``), or the standard ``RotaryEmbedding`` of ONNX opset 23
(``rotary23``, domain ``""``).

Per layer, for q and for k, transformers' ``apply_rotary_pos_emb`` exports as ``Add(Mul(x,
Unsqueeze(cos)), Mul(Concat(Neg(Slice(x, R/2..R)), Slice(x, 0..R/2)), Unsqueeze(sin)))`` on
``x [B, H, S, R]``. That becomes one ``RotaryEmbedding(x, position_ids [B, S], cos_table
[L, R/2], sin_table [L, R/2])`` (``interleaved=0``): the graft's own tables are exactly the caches
the op reads, and its positions the squeezed ``positions[..., None]``, expanded to ``[B, S]``
(``_batch_positions``: a model called without position_ids makes them ``[1, S]``, which both
ops refuse at a batch of 2). Optimum's exports (the
TorchScript exporter) read cos/sin through a float32 ``Cast`` and slice at ``x.shape[-1] // 2``
traced (one tensor unsqueezed twice) instead of constants: both forms are matched, and the
proof checks what was fused. The op exists on
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
GPT-J's interleaved rotation: ``lower_interleaved`` (Optimum's too: its rows cast, repeated by
``Tile``, the table read by ``position_ids`` itself); a model whose rotations are ONNX's op
already (torch's opset-23 export): ``feed_tables``.
"""

from __future__ import annotations

from edgepe.contract.errors import BadParameterError
from edgepe.graft.find import _constants, graph_index, op

DOMAIN = "com.microsoft"
# The rotations lower puts in, as ``find.op`` names them: ONNX's (rotary23) or onnxruntime's (ort).
ROTATIONS = ("RotaryEmbedding", f"{DOMAIN}.RotaryEmbedding")
LOWERINGS = {"ort": "com.microsoft.RotaryEmbedding", "rotary23": "RotaryEmbedding (ONNX opset 23)"}
OPSET_23 = 23
TABLES_NEEDED = ("--rope-lowering needs the float32 RoPE tables (--mode table, not with "
                 "--quantize int8 or --mode sliced)")


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
    from onnx import TensorProto, helper

    graph = model.graph
    consts = _constants(graph)  # initializers and Constant nodes (the TorchScript exporter's)
    table = consts.get(f"{prefix}{cos}_table")
    positions = f"{prefix}positions_squeezed"
    if table is None:
        raise BadParameterError(TABLES_NEEDED)
    half = table.shape[1]
    makers, readers = graph_index(graph)

    def unsqueezed(name: str, source: str) -> bool:
        """``Unsqueeze(source)``, or of a float32-to-float32 ``Cast`` of it (Optimum's
        exports cast cos/sin to the query's dtype first)."""
        node = makers.get(name)
        if node is None or op(node) != "Unsqueeze":
            return False
        cast = makers.get(node.input[0])
        return node.input[0] == source or (
            cast is not None and op(cast) == "Cast" and cast.input[0] == source
            and cast.attribute[0].i == TensorProto.FLOAT)

    def const(name: str):
        return np.asarray(consts[name]).ravel().tolist() if name in consts else None

    def same_half(end: str, start: str) -> bool:
        """The first slice's end and the second's start are ``half``: constants, or (Optimum's
        exports, ``x.shape[-1] // 2`` traced) one tensor, each through its own ``Unsqueeze``;
        the proof checks the value."""
        if const(end) == [half] and const(start) == [half]:
            return True
        a, b = makers.get(end), makers.get(start)
        return (a is not None and b is not None and op(a) == op(b) == "Unsqueeze"
                and a.input[0] == b.input[0] and const(a.input[1]) == const(b.input[1]))

    tables, chosen = _caches(graph, consts, makers, prefix, cos, sin)
    fused, drop = 0, []
    for add in [n for n in graph.node if op(n) == "Add"]:
        muls = [makers.get(i) for i in add.input]
        if any(m is None or op(m) != "Mul" for m in muls):
            continue
        direct = next((m for m in muls if any(unsqueezed(i, cos) for i in m.input)), None)
        rotated = next((m for m in muls if any(unsqueezed(i, sin) for i in m.input)), None)
        if direct is None or rotated is None or direct is rotated:
            continue
        x = next(i for i in direct.input if not unsqueezed(i, cos))
        concat = makers.get(next(i for i in rotated.input if not unsqueezed(i, sin)))
        if concat is None or op(concat) != "Concat" or len(concat.input) != 2:
            continue
        neg, first = makers.get(concat.input[0]), makers.get(concat.input[1])
        second = makers.get(neg.input[0]) if neg is not None and op(neg) == "Neg" else None
        if first is None or second is None or op(first) != "Slice" or \
                op(second) != "Slice" or first.input[0] != x or second.input[0] != x:
            continue
        steps = [const(n.input[4]) for n in (first, second) if len(n.input) > 4]
        if const(first.input[1]) != [0] or not same_half(first.input[2], second.input[1]) or \
                const(second.input[3]) not in ([3], [-1]) or any(v != [1] for v in steps):
            continue
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
    if chosen:  # before the first rotation that reads them
        first = min(list(graph.node).index(n) for n in graph.node
                    if op(n) in ROTATIONS and tables[0] in n.input)
        for k, node in enumerate(chosen):
            graph.node.insert(first + k, node)
    _batch_positions(graph, prefix, positions, (0, 2))  # x [B, H, S, R]
    return fused, _drop(model, drop, lowering) + fused - len(chosen)


def _batch_positions(graph, prefix: str, positions: str, axes: tuple[int, int]) -> None:
    """The rotations read ``positions`` expanded to ``[B, S]``: both ``RotaryEmbedding`` ops
    require ``position_ids`` of the input's batch, and a model called without position_ids
    makes them ``[1, S]`` (transformers' ``cache_position[None]``; onnxruntime refused every
    such lowered graft: "dimension 0 should be of size batch_size, got 1"). ``B, S`` are the
    first rotation's input's ``axes`` (every rotation's batch and length are the model's);
    ``Expand`` to them broadcasts ``[1, S]`` and keeps ``[B, S]``."""
    import numpy as np
    from onnx import helper, numpy_helper

    nodes = list(graph.node)
    rotations = [n for n in nodes if op(n) in ROTATIONS and positions in n.input
                 and n.name.startswith(prefix)]
    if not rotations:
        return
    name = f"{prefix}batched_positions"
    made = [helper.make_node("Shape", [rotations[0].input[0]], [f"{name}/input_shape"],
                             name=f"{name}/input_shape"),
            helper.make_node("Gather", [f"{name}/input_shape", f"{name}/axes"],
                             [f"{name}/shape"], axis=0, name=f"{name}/shape"),
            helper.make_node("Expand", [positions, f"{name}/shape"], [name], name=name)]
    graph.initializer.append(numpy_helper.from_array(np.asarray(axes, np.int64), f"{name}/axes"))
    at = nodes.index(rotations[0])
    for k, node in enumerate(made):
        graph.node.insert(at + k, node)
    for node in rotations:
        node.input[:] = [name if i == positions else i for i in node.input]


def _caches(graph, consts, makers, prefix: str, cos: str, sin: str):
    """``([cos_cache, sin_cache], nodes)``: the graft's tables the rotations read. A RoPE whose
    frequencies the model picks at run time (Phi-3's longrope: the long ``inv_freq`` past
    ``original_max_position_embeddings``) was grafted as two tables and a ``Where`` on the
    model's own condition per tensor (``{cos}_if_true_table``); the caches are then that choice,
    made once on the whole tables (``Where(condition, if_true, table)``: Phi-3's condition is a
    scalar, ``seq_len > original``) instead of on the gathered rows. Issue 40: the fused graft
    read the short table only and failed its proof (q off by 0.47 at position 4199)."""
    from onnx import helper

    tables = [f"{prefix}{cos}_table", f"{prefix}{sin}_table"]
    picked = [f"{prefix}{t}_if_true_table" for t in (cos, sin)]
    if not all(t in consts for t in picked):
        return tables, []
    where = makers.get(cos)
    if where is None or op(where) != "Where" or where.input[1:] != [
            f"{prefix}{cos}_if_true_rows_out", f"{prefix}{cos}_rows_out"]:
        raise BadParameterError("--rope-lowering: this RoPE's tables are chosen at run time "
                                f"and no Where on the model's condition makes {cos!r}")
    condition = where.input[0]  # the proof checks a condition that does not broadcast so
    caches = [f"{prefix}{t}_cache_chosen" for t in (cos, sin)]
    nodes = [helper.make_node("Where", [condition, p, t], [c], name=f"{c}/where")
             for p, t, c in zip(picked, tables, caches, strict=True)]
    return caches, nodes


def lower_interleaved(model, prefix: str, replaced: str, lowering: str) -> tuple[int, int]:
    """GPT-J's interleaved rotation (``rotate_every_two``) fused, as ``lower_rope`` does for the
    half layout. GPT-J rotates ``q``/``k`` as ``[B, S, H, D]`` (before its permute), reading the
    graft's ``[sin | cos]`` rows ``replaced`` through a ``Split`` and a ``repeat_interleave``:
    ``Add(Mul(x, rep(cos)), Mul(Reshape(Concat(Unsqueeze(Neg(x[..., 1::2])), Unsqueeze(x[...,
    ::2]))), rep(sin)))``, ``x = v[..., :R]`` and ``Concat(that, v[..., R:])`` when partial. That
    becomes ``Reshape(RotaryEmbedding(Reshape(v, [B, S, H D]), ..., interleaved=1,
    num_heads=H, rotary_embedding_dim=R), Shape(v))``: the op's 3-D form (its 4-D form is
    ``[B, H, S, D]``), with ``H`` from the model's shapes (a rotation whose ``H`` is not static
    stays as it is). The ``[L, R]`` table is stored as the op's two ``[L, R/2]`` caches."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    graph = model.graph
    consts = _constants(graph)  # initializers and Constant nodes (the TorchScript exporter's)
    table = consts.get(f"{prefix}{replaced}_table")
    if table is None:
        raise BadParameterError(TABLES_NEEDED)
    half = table.shape[1] // 2
    makers, readers = graph_index(graph)
    # the rows, or a float32 Cast of them (Optimum's export casts them to the query's dtype)
    rows = [replaced, *(n.output[0] for n in readers.get(replaced, []) if op(n) == "Cast"
                        and n.attribute[0].i == TensorProto.FLOAT)]
    split = next((n for r in rows for n in readers.get(r, []) if op(n) == "Split"
                  and len(n.output) == 2), None)
    if split is None:
        raise BadParameterError(f"--rope-lowering: no Split of GPT-J's [sin | cos] rows "
                                f"{replaced!r} into sin and cos found")
    sin_rows, cos_rows = split.output
    try:
        shapes = {v.name: v.type.tensor_type.shape for v in
                  shape_inference.infer_shapes(model, data_prop=True).graph.value_info}
    except Exception:  # noqa: BLE001 - no shapes: no rotation is fused (refused below)
        shapes = {}

    def const(name: str):
        return np.asarray(consts[name]).ravel().tolist() if name in consts else None

    def repeated(name: str) -> str:  # through repeat_interleave's Unsqueeze/Expand/Reshape
        for _ in range(6):  # (Tile where the TorchScript exporter wrote it: Optimum's)
            node = makers.get(name)
            if node is None or op(node) not in ("Unsqueeze", "Expand", "Reshape", "Tile"):
                break
            name = node.input[0]
        return name

    def every_two(node, x: str, start: int) -> bool:
        return node is not None and op(node) == "Slice" and node.input[0] == x and \
            const(node.input[1]) == [start] and const(node.input[3]) in ([3], [-1]) and \
            len(node.input) > 4 and const(node.input[4]) == [2]

    def unsqueezed(name: str):
        node = makers.get(name)
        return makers.get(node.input[0]) if node is not None and op(node) == "Unsqueeze" \
            else None

    caches = [f"{prefix}cos_cache", f"{prefix}sin_cache"]
    positions = f"{prefix}positions_squeezed"
    if positions not in makers:  # the table read by the model's own [B, S] ids (Optimum's)
        positions = next(n.input[1] for n in graph.node if op(n) == "Gather"
                         and n.input[0] == f"{prefix}{replaced}_table")
    fused, drop, new = 0, [], []
    for add in [n for n in graph.node if op(n) == "Add"]:
        muls = [makers.get(i) for i in add.input]
        if any(m is None or op(m) != "Mul" for m in muls):
            continue
        direct = next((m for m in muls if any(repeated(i) == cos_rows for i in m.input)), None)
        rotated = next((m for m in muls if any(repeated(i) == sin_rows for i in m.input)), None)
        if direct is None or rotated is None or direct is rotated:
            continue
        x = next(i for i in direct.input if repeated(i) != cos_rows)
        flat = makers.get(next(i for i in rotated.input if repeated(i) != sin_rows))
        stack = makers.get(flat.input[0]) if flat is not None and op(flat) == "Reshape" \
            else None
        if stack is None or op(stack) != "Concat" or len(stack.input) != 2:
            continue
        neg, even = unsqueezed(stack.input[0]), unsqueezed(stack.input[1])
        odd = makers.get(neg.input[0]) if neg is not None and op(neg) == "Neg" else None
        if not (every_two(odd, x, 1) and every_two(even, x, 0)):
            continue
        replaced_node, source = add, x
        sliced, users = makers.get(x), readers.get(add.output[0], [])
        if sliced is not None and op(sliced) == "Slice" and const(sliced.input[1]) == [0] \
                and const(sliced.input[2]) == [2 * half] and len(users) == 1 and \
                op(users[0]) == "Concat" and users[0].input[0] == add.output[0]:
            rest = makers.get(users[0].input[1])
            if rest is not None and op(rest) == "Slice" and \
                    rest.input[0] == sliced.input[0] and const(rest.input[1]) == [2 * half]:
                replaced_node, source = users[0], sliced.input[0]
        dims = shapes.get(source)
        heads = dims.dim[2].dim_value if dims is not None and len(dims.dim) == 4 else 0
        if not heads:
            continue
        name = f"{prefix}rotary{fused}"
        ins = [f"{name}/flat", *([positions, *caches] if lowering == "ort" else
                                 [*caches, positions])]
        new.append((replaced_node, [
            helper.make_node("Reshape", [source, f"{prefix}flat_shape"], [f"{name}/flat"],
                             name=f"{name}/flatten"),
            helper.make_node("RotaryEmbedding", ins, [f"{name}/out"], name=name,
                             domain=DOMAIN if lowering == "ort" else "", interleaved=1,
                             num_heads=heads, rotary_embedding_dim=2 * half),
            helper.make_node("Shape", [source], [f"{name}/shape"], name=f"{name}/shape"),
            helper.make_node("Reshape", [f"{name}/out", f"{name}/shape"],
                             [replaced_node.output[0]], name=f"{name}/unflatten")]))
        drop.append(replaced_node)
        fused += 1
    if not fused:
        raise BadParameterError("--rope-lowering: no GPT-J rotation (Add(Mul(x, cos), "
                                "Mul(rotate_every_two(x), sin)) on [B, S, H, D] with static H) "
                                "found on the [sin | cos] rows")
    for node, nodes in new:
        at = list(graph.node).index(node)
        for k, made in enumerate(nodes):
            graph.node.insert(at + k, made)
    graph.initializer.extend([
        numpy_helper.from_array(np.ascontiguousarray(table[:, half:]), caches[0]),
        numpy_helper.from_array(np.ascontiguousarray(table[:, :half]), caches[1]),
        numpy_helper.from_array(np.asarray([0, 0, -1], np.int64), f"{prefix}flat_shape")])
    _batch_positions(graph, prefix, positions, (0, 1))  # flat [B, S, H D]
    return fused, _drop(model, drop, lowering) + 3 * fused


def feed_tables(model, prefix: str, cos: str, sin: str) -> tuple[int, int]:
    """``--rope-lowering rotary23`` on a model whose rotations are ONNX's ``RotaryEmbedding``
    already (torch's opset-23 export): each op reading the grafted caches ``cos``/``sin``
    ``[B, S, R/2]`` reads graft's tables and positions instead (its ``position_ids`` input),
    and the gathers go; returns ``lower_rope``'s figures."""
    graph = model.graph
    tables = [f"{prefix}{cos}_table", f"{prefix}{sin}_table"]
    if not {t.name for t in graph.initializer} >= set(tables):
        raise BadParameterError(TABLES_NEEDED)
    fed = 0
    for node in graph.node:
        if op(node) == "RotaryEmbedding" and \
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

    if sliced is not None and op(sliced) == "Slice" and last_axis(sliced) and \
            const(sliced.input[1]) == [0] and const(sliced.input[2]) == [rot] and \
            concat is not None and op(concat) == "Concat" and len(concat.input) == 2 and \
            concat.input[0] == add.output[0] and \
            any(a.name == "axis" and a.i in (3, -1) for a in concat.attribute):
        passing = makers.get(concat.input[1])
        source = sliced.input[0]
        if passing is not None and op(passing) == "Slice" and passing.input[0] == source \
                and last_axis(passing) and const(passing.input[1]) == [rot] and \
                len(readers.get(x, [])) == 3:  # the Mul by cos and the two halves' Slices
            return helper.make_node("RotaryEmbedding", [source, *rest], [concat.output[0]],
                                    name=name, interleaved=0, rotary_embedding_dim=rot), concat
    return helper.make_node("RotaryEmbedding", [x, *rest], [add.output[0]], name=name,
                            interleaved=0), add


def check_lowered(model) -> None:
    """The lowered model must pass ``onnx.checker`` in full, as every graft does (one line if
    it does not)."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    # the full check's shape inference raises its own error (a type clash in the user's graph)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise BadParameterError(f"the lowered model does not pass onnx.checker: {first}") \
            from None


def _drop(model, nodes, lowering: str) -> int:
    """Remove the replaced ``nodes`` and what only they read (``_prune``), and declare the
    ``com.microsoft`` domain for ``ort``; returns how many nodes left the graph."""
    from onnx import helper

    graph = model.graph
    before = len(graph.node)
    for node in nodes:
        graph.node.remove(node)
    _prune(graph)
    if lowering == "ort" and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return before - len(graph.node)


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
