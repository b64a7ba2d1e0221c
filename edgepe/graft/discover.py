"""Finding a PE by what it computes, whatever exporter wrote the graph (issue 40).

``find_hf.find_pe`` matches the node patterns of one exporter (torch 2.13's dynamo, Optimum's
TorchScript); an export it does not know (positions built inside the graph from ``input_ids``'
shape, a ``Slice`` of BERT's ``position_ids`` buffer, RoBERTa's ``CumSum`` of the non-pad mask
plus ``padding_idx``, Cohere's ``repeat_interleave``, two RoPEs of different bases) was "no PE
found". ``discover(model)`` finds the same ``Found`` records another way:

1. Candidates, in one pass over the nodes (linear in their number; a bounded walk up from each):
   the angle read by each ``Cos`` that a ``Sin`` reads too (RoPE), with the integer tensors cast
   to float in its cone (the positions it may be made of); each constant float ``[L, D]`` table
   gathered on its rows (``Gather`` axis 0, ``GatherND`` of ``index[..., None]``) and its
   index; each ``Mul`` of a constant ``[H, 1]``/``[H, 1, 1]`` float by a float cast of an integer
   tensor (ALiBi's slopes times positions).
2. Their values, from onnxruntime: the cone of all candidate tensors (the PE and the shape
   arithmetic of the inputs, no attention) run once per crafted input: a prefill of
   ``PROBE_SEQ`` tokens, the same with other token ids, and a later step (after a KV cache of
   ``PROBE_PAST`` when the model takes one, else ``position_ids`` shifted, else a shorter prefill).
3. Confirmation against each family's reference:
   - a table index is positions when it does not change with the token ids and is, on every row,
     ``offset + p`` for the step's positions ``p`` (the ``offset`` read off, OPT's and RoBERTa's
     2); the table's family by its values (``find_hf``'s GPT-J, fairseq and Marian sinusoid
     checks; else learned);
   - a RoPE angle is ``float32(P) * w`` bit for bit, ``P`` one of its cone's integer tensors and
     ``w`` read off the angle at position 1 (its columns, whatever their order: ``[w, w]`` is the
     half layout, ``[w0, w0, w1, w1, ..]`` interleaved; any rotary_dim, any base, any scaling
     that keeps one product); the artifact is the model's ``cos(angle)``/``sin(angle)`` columns as
     tables gathered by ``P``;
   - ALiBi: the other operand is positions as above; the slopes are required equal to the
     paper's rule when the artifact is built (``find_hf.build_found``);
   - T5's relative bias: a table gathered by a square ``[.., S, S]`` index that is not
     positions goes to ``t5.find_t5`` (issue 40 point 3): the index is required to be, at every
     relative position up to 2^20, edgepe's t5-bias bucket of the relative positions ``k - q``
     found above it, for a direction, num_buckets and max_distance fitted by those values;
   - a RoPE angle over positions ``[3, ..., 1]`` (Qwen2-VL's three streams) is multimodal RoPE:
     ``graft.mrope.find`` reads which stream and slot each column of its cos/sin takes.

``whole_sinusoids(model)`` finds the tables no positions gather: a constant ``[L, D]`` added
whole (Whisper's encoder, by its values; graft replaces it, issue 40 point 2).

What it saw but could not confirm goes into ``seen`` (words for graft's refusal line): RoPE
angles that are no single product of positions, tables gathered by indices that are not
positions (BERT's token types; a square index whose values are not T5's buckets).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from edgepe.graft.find import _constants, graph_index, op
from edgepe.graft.find_hf import (
    WHISPER_PARAMS,
    Found,
    _attr,
    _half_sinusoidal_distance,
    _is_fairseq_sinusoidal,
    _is_sincos,
    _origin,
    _scalar_factor,
    _sincos_by_use,
    _sinusoid_within,
)
from edgepe.graft.mrope import find as find_mrope
from edgepe.graft.prove import _session, cone_model, hf_feeds
from edgepe.graft.t5 import find_t5, square

# The probing runs: a prefill of PROBE_SEQ tokens (positions 0 .. PROBE_SEQ - 1, so position 1,
# where RoPE's angle is w itself, is always there) and a later step.
PROBE_SEQ = 6
PROBE_PAST = 5
PROBE_BATCH = 2
# How far up from a candidate the walk for its integer positions goes (nodes): bounded, so the
# whole search stays linear in the model's nodes (issue 41: 15,000 Gathers).
CONE_LIMIT = 48
# Token ids of the two prefills: not 0 or 1, the pad ids of most tokenizers (RoBERTa's 1: its
# positions count the non-pad tokens), below any vocabulary's size.
PROBE_IDS = (3, 4)
ID_INPUTS = ("input_ids", "decoder_input_ids")


def _cast_sources(name: str, makers, consts, limit: int = CONE_LIMIT) -> list[str]:
    """The inputs of ``Cast`` nodes in ``name``'s cone (up to ``limit`` nodes): the integer
    tensors a float angle may be made of (in the order met, nearest first)."""
    out, seen, todo, count = [], set(), [name], 0
    while todo and count < limit:
        current = todo.pop(0)
        if current in seen or current in consts:
            continue
        seen.add(current)
        node = makers.get(current)
        if node is None:
            continue
        count += 1
        if op(node) == "Cast" and node.input[0] not in consts:
            out.append(node.input[0])
        todo += [i for i in node.input if i]
    return out


def candidates(model) -> dict[str, Any]:
    """Step 1 of the module doc: ``{"rope": [...], "tables": [...], "alibi": [...]}``, each an
    entry with the tensors to evaluate (``needs``)."""
    import numpy as np

    graph = model.graph
    consts = _constants(graph)
    makers, readers = graph_index(graph)
    rope, tables, alibi, notes = [], [], [], []
    seen_angles = set()
    for node in graph.node:
        if op(node) == "Cos" and node.input[0] not in seen_angles:
            angle = node.input[0]
            sin = next((n for n in readers.get(angle, []) if op(n) == "Sin"), None)
            if sin is None or angle in consts:
                continue
            seen_angles.add(angle)
            outs, factors = [], []
            for trig in (node, sin):
                users = readers.get(trig.output[0], [])
                scaled = _scalar_factor(users[0], consts) if len(users) == 1 else None
                factors.append(1.0 if scaled is None else scaled[0])
                outs.append(trig.output[0] if scaled is None else users[0].output[0])
            if factors[0] != factors[1]:
                outs, factors = [node.output[0], sin.output[0]], [1.0, 1.0]
            rope.append({"angle": angle, "replaces": outs, "factor": factors[0],
                         "cos": node.output[0], "sin": sin.output[0],
                         "sources": _cast_sources(angle, makers, consts)})
        elif op(node) in ("Gather", "GatherND"):
            table = consts.get(node.input[0])
            if table is None or table.ndim != 2 or table.dtype != np.float32 or \
                    node.input[1] in consts:
                continue
            nd = op(node) == "GatherND"
            if (_attr(node, "batch_dims", 0) if nd else _attr(node, "axis", 0)) != 0:
                continue
            tables.append({"node": node, "index": node.input[1], "nd": nd, "table": table})
        elif op(node) == "Mul":
            for i in (0, 1):
                slopes = consts.get(node.input[i])
                cast = makers.get(node.input[1 - i])
                if slopes is None or slopes.ndim not in (2, 3) or slopes.shape[0] < 2 or \
                        any(d != 1 for d in slopes.shape[1:]) or cast is None or \
                        op(cast) != "Cast" or cast.input[0] in consts:
                    continue
                if slopes.dtype != np.float32:  # Falcon's ALiBi: slopes times positions in bf16
                    notes.append(f"ALiBi-like slopes {node.input[i]!r} {list(slopes.shape)} "
                                 f"in {slopes.dtype} at Mul {node.output[0]!r} (graft builds "
                                 "float32 ALiBi only)")
                    continue
                alibi.append({"node": node, "slopes": slopes, "slopes_name": node.input[i],
                              "positions": cast.input[0]})
    return {"rope": rope, "tables": tables, "alibi": alibi, "makers": makers, "readers": readers,
            "notes": notes}


def _is_whisper_sinusoidal(table) -> bool:
    """Whether ``table [L, D]`` is Whisper's ``sinusoids(L, D)``: ``[sin(p w) | cos(p w)]``,
    ``w_i = exp(-i ln(10000) / (D/2 - 1))`` (fairseq's frequencies, no padding row)."""
    import numpy as np

    length, width = table.shape
    half = width // 2
    if width % 2 or half < 2 or length < 2:
        return False
    return _sinusoid_within(table, np.exp(-np.arange(half) * (np.log(10000.0) / (half - 1))))


# A constant added whole with a value this large (or not finite) is an additive mask (-1e4, -1e9,
# float32's minimum), not a position table: neither found nor said.
MASK_MAGNITUDE = 1e4


def _rows_whole(name: str, makers, consts):
    """``(rows [n, D], table name, how)`` when tensor ``name`` is a constant float32 ``[L, D]``
    table's first ``n`` rows whatever the input: the constant itself, its ``Gather`` (axis 0) by
    a constant ``0 .. n - 1`` (Whisper's ``embed_positions(arange(L))`` when the exporter did not
    fold it: a large table), or its ``Slice`` from row 0 (step 1, axis 0) to a constant end;
    else None."""
    import numpy as np

    def table_of(t):
        value = consts.get(t)
        ok = value is not None and value.ndim == 2 and value.dtype == np.float32
        return value if ok else None

    table = table_of(name)
    if table is not None:
        return table, name, "a constant"
    node = makers.get(name)
    if node is None or op(node) not in ("Gather", "Slice") or not node.input:
        return None
    table = table_of(node.input[0])
    if table is None:
        return None
    if op(node) == "Gather":
        index, how = consts.get(node.input[1]), "the constant"
        if index is None:  # torch.arange(L) unfolded: a Range of constants (hgr)
            index, how = _constant_range(node.input[1], makers, consts, table.shape[0]), "Range"
        if _attr(node, "axis", 0) != 0 or index is None or index.ndim != 1 or \
                not 2 <= index.size <= table.shape[0] or \
                not np.array_equal(index, np.arange(index.size)):
            return None
        return (table[: index.size], node.input[0],
                f"gathered by {how} 0..{index.size - 1} {node.input[1]!r}")
    args = [*node.input, "", "", ""][:5]
    starts, ends, axes, steps = (np.asarray(consts[a]).ravel() if a in consts else None
                                 for a in args[1:5])
    if starts is None or ends is None or list(starts) != [0] or ends.size != 1 or \
            (axes is not None and list(axes) != [0]) or \
            (steps is not None and list(steps) != [1]) or (not args[3]) != (axes is None) or \
            (not args[4]) != (steps is None):
        return None
    end = min(int(ends[0]), table.shape[0])
    if end < 2:
        return None
    return table[:end], node.input[0], f"sliced to its rows 0..{end - 1} by {name!r}"


def _constant_range(name: str, makers, consts, most: int):
    """The values of ``name`` (int64) when an ONNX ``Range`` of constant integer scalars makes
    it, 1 to ``most`` of them (counted before any is made: a hostile limit costs nothing); else
    None."""
    import numpy as np

    node = makers.get(name)
    if node is None or op(node) != "Range" or len(node.input) != 3:
        return None
    ends = [consts.get(i) for i in node.input]
    if any(v is None or v.size != 1 or v.dtype.kind not in "iu" for v in ends):
        return None
    start, limit, delta = (int(v.ravel()[0]) for v in ends)
    if delta == 0 or not 1 <= -(-(limit - start) // delta) <= most:
        return None
    return np.arange(start, limit, delta, dtype=np.int64)


def whole_sinusoids(model) -> tuple[list[Found], list[str]]:
    """``(found, seen)``: constant float32 ``[L, D]`` tables added whole to a computed tensor
    (``Add``, the other operand not constant), no positions gathering them: the constant, or its
    first rows taken by a constant ``Gather``/``Slice`` (``_rows_whole``). Whisper's encoder adds
    ``sinusoids(L, D)`` so (``embed_positions(arange(L))``): recognised by its values
    (``_is_whisper_sinusoidal``), it is a ``sinusoidal`` ``Found`` (``params["whole"]``: its
    positions are the rows ``0 .. n - 1``, made by a ``Range`` inside the PE, so ``positions``
    is empty); any other such table (both axes at least 2, every value below
    ``MASK_MAGNITUDE``: no mask) is said in ``seen`` and kept. One record per added tensor,
    however many ``Add`` read it. No onnxruntime run: the values are the model's constants."""
    import numpy as np

    graph = model.graph
    makers, _ = graph_index(graph)
    # the constants an Add may read, and the inputs of the Gather/Slice/Identity making its
    # operands: only those converted to numpy (graft runs this on every model: a 7B model's
    # initializers are not copied for it)
    wanted = {i for n in graph.node if op(n) == "Add" for i in n.input}
    for _ in range(2):
        wanted |= {i for name in list(wanted) if name in makers and op(makers[name]) in
                   ("Gather", "Slice", "Identity", "Range") for i in makers[name].input}
    consts = _constants(SimpleNamespace(
        initializer=[t for t in graph.initializer if t.name in wanted],
        node=[n for n in graph.node if op(n) in ("Constant", "Identity") and
              n.output[0] in wanted]))
    found: dict[str, Found] = {}
    seen: dict[str, str] = {}
    for node in graph.node:
        if op(node) != "Add":
            continue
        for i in (0, 1):
            name, other = node.input[i], node.input[1 - i]
            if name in found or name in seen or other in consts:
                continue
            rows = _rows_whole(name, makers, consts)
            if rows is None:
                continue
            table, table_name, how = rows
            # (an additive mask is no table of positions: its -1e4, -1e9 or float32 minimum)
            if min(table.shape) < 2 or not np.all(np.abs(table) < MASK_MAGNITUDE):
                continue
            length, width = table.shape
            shape = list(consts[table_name].shape)
            if not _is_whisper_sinusoidal(table):
                if how.startswith("gathered by Range"):  # positions by their values: a learned
                    continue                              # table find_pe or discover may graft
                seen[name] = (f"a constant table {table_name!r} {shape} added whole"
                              + ("" if table_name == name else f" ({how})")
                              + f" at Add {node.output[0]!r}, not Whisper's sinusoids (kept)")
                continue
            where = (f"(Whisper's encoder sinusoidal table {table_name!r} {shape}, "
                     + ("a constant" if table_name == name else how)
                     + " added whole: base 10000, frequencies fairseq, layout half) at Add "
                     f"{node.output[0]!r}, positions 0..{length - 1} (its rows)")
            found[name] = Found("sinusoidal", [name], "", where,
                                {"whole": True, "table": table, "table_name": table_name,
                                 "add": node.output[0], "offset": 0, "discovered": True,
                                 **WHISPER_PARAMS})
    return list(found.values()), list(seen.values())


def _runs(model, names: list[str]) -> list[tuple[dict, dict, Any]]:
    """``[(values by name, feeds, expected positions [B, S])]``: the probing runs (module doc,
    step 2) of ``names``; the expected positions are those transformers gives the new tokens
    (``position_ids`` where the model takes them, else ``past + arange(seq)``)."""
    import numpy as np

    session = _session(cone_model(model, names))  # the cone alone: no attention
    inputs = {i.name for i in session.get_inputs()}
    has_past = any("past" in n for n in inputs)
    rng = np.random.default_rng(0)
    plans = [(PROBE_SEQ, 0, 0, PROBE_IDS[0]), (PROBE_SEQ, 0, 0, PROBE_IDS[1]),
             (3, PROBE_PAST, 0, PROBE_IDS[0]) if has_past else
             (4, 0, PROBE_PAST, PROBE_IDS[0]) if "position_ids" in inputs else
             (PROBE_SEQ - 2, 0, 0, PROBE_IDS[0])]
    runs = []
    for seq, past, shift, token in plans:
        feeds = hf_feeds(session, seq, past, 0, PROBE_SEQ + PROBE_PAST + 8, rng, shift)
        for name in ID_INPUTS:
            if name in feeds:
                feeds[name] = np.full_like(feeds[name], token)
        for name, value in feeds.items():  # other position inputs (a decoder's): positions too
            if "position" in name and name != "position_ids" and value.dtype.kind in "iu" \
                    and value.ndim:
                start = shift + (past if value.shape[-1] == seq else 0)
                feeds[name] = np.broadcast_to(np.arange(start, start + value.shape[-1]),
                                              value.shape).astype(value.dtype)
        if "position_ids" in feeds:
            expected = np.asarray(feeds["position_ids"]).reshape(PROBE_BATCH, -1)
        else:
            expected = np.broadcast_to(np.arange(past, past + seq), (PROBE_BATCH, seq))
        outs = session.run(names, {k: v for k, v in feeds.items() if k in inputs})
        runs.append((dict(zip(names, outs, strict=True)), feeds, expected))
    return runs


def _start(values, seq: int) -> int | None:
    """The first position when ``values`` holds runs of consecutive integers (step 1) on every
    row: rows of its last axis (a trailing axis of 1 dropped: GatherND's index), or rows of the
    run's ``seq`` new tokens (XGLM flattens ``[B, S]``); else None. Each stack's own length: an
    encoder's positions span the whole input while a decoder's cover the new tokens only."""
    import numpy as np

    values = np.asarray(values)
    if values.dtype.kind not in "iu" or values.size < 2:
        return None
    while values.ndim > 1 and values.shape[-1] == 1:
        values = values[..., 0]
    for n in dict.fromkeys((values.shape[-1] if values.ndim else 1, seq)):
        if n < 2 or values.size % n:
            continue
        rows = values.reshape(-1, n).astype(np.int64)
        if np.all(np.diff(rows, axis=1) == 1):
            return int(rows[0, 0])
    return None


def _positions_offset(name: str, runs) -> int | None:
    """The offset ``k`` of ``name`` as positions: unchanged by the token ids (runs 0 and 1),
    consecutive positions in every run (``_start``), ``k`` the first one in the first prefill
    less the first position the model was given (0, or ``position_ids``'); else None."""
    import numpy as np

    first = np.asarray(runs[0][0][name])
    if not np.array_equal(first, np.asarray(runs[1][0][name])):
        return None  # token ids (word embeddings), not positions
    starts = [_start(values[name], expected.shape[-1]) for values, _, expected in runs]
    if None in starts:
        return None
    return starts[0] - int(runs[0][2][0, 0])


def _fit_angle(angle_runs, positions_runs):
    """``w [K]`` float32 when every run's angle is ``float32(P) * w`` bit for bit (``P`` with a
    trailing axis of 1, or given one, broadcast to the angle's shape exactly), else None."""
    import numpy as np

    w = None
    for angle, positions in zip(angle_runs, positions_runs, strict=True):
        angle, positions = np.asarray(angle), np.asarray(positions)
        if angle.dtype != np.float32 or positions.dtype.kind not in "iu" or angle.ndim < 1:
            return None
        column = positions if positions.ndim and positions.shape[-1] == 1 and \
            positions.shape[:-1] == angle.shape[:-1] else positions[..., None]
        if column.shape[:-1] != angle.shape[:-1]:
            return None
        if w is None:
            at = np.argwhere(column[..., 0] == 1)
            if not len(at):
                return None
            w = angle[tuple(at[0])].astype(np.float32)
            if not np.any(w):
                return None
        if not np.array_equal(column.astype(np.float32) * w, angle):
            return None
    return w


def _layout(w) -> tuple[str, int]:
    """``(layout, rotary_dim)`` of an angle's columns ``w [K]``: ``[h, h]`` half (R = K),
    ``[h0, h0, h1, h1, ..]`` interleaved (R = K), anything else one cache column per frequency
    (``R = 2K``: the rotation duplicates them itself)."""
    import numpy as np

    k = w.size
    if k % 2 == 0 and np.array_equal(w[: k // 2], w[k // 2:]):
        return "half", k
    if k % 2 == 0 and np.array_equal(w[0::2], w[1::2]):
        return "interleaved", k
    return "caches", 2 * k


def discover(model) -> tuple[list[Found], list[str]]:
    """``(found, seen)``: every PE ``model`` computes (module doc), and what was looked at but is
    none, in words."""
    import numpy as np

    graph = model.graph
    found_c = candidates(model)
    makers, readers = found_c["makers"], found_c["readers"]
    inputs = {v.name for v in graph.input}
    needs: list[str] = []
    for r in found_c["rope"]:
        needs += [r["angle"], *r["sources"]]
    needs += [t["index"] for t in found_c["tables"]]
    needs += [a["positions"] for a in found_c["alibi"]]
    needs = list(dict.fromkeys(needs))
    if not needs:
        return [], found_c["notes"]
    runs = _runs(model, needs)
    found, seen = [], list(found_c["notes"])
    for r in found_c["rope"]:
        angles = [values[r["angle"]] for values, _, _ in runs]
        fitted = None
        for source in r["sources"]:
            w = _fit_angle(angles, [values[source] for values, _, _ in runs])
            if w is not None:
                fitted = (source, w)
                break
        if fitted is None:
            shape = list(np.asarray(angles[0]).shape)
            streams = [s for s in r["sources"] if np.asarray(runs[0][0][s]).ndim >= 3
                       and np.asarray(runs[0][0][s]).shape[0] == 3]
            seen.append(
                f"a Cos/Sin of {r['angle']!r} {shape} that is no single product float32(p) * w "
                "of a positions tensor" + (
                    f" (positions {streams[0]!r} hold three streams: multimodal RoPE, mrope, "
                    "which graft splices where its angle is float32(p) * w of them)"
                    if streams else ""))
            continue
        source, w = fitted
        layout, rotary = _layout(w)
        positions = np.asarray(runs[0][0][source])
        if positions.ndim >= 3 and positions.shape[0] == 3:  # (the probe's batch is 2)
            one, said = find_mrope(model, r, source, w, runs, makers, readers, inputs)
            found.extend([one] if one is not None else [])
            seen.extend([said] if one is None else [])
            continue
        flat = not (positions.ndim and positions.shape[-1] == 1 and
                    positions.shape[:-1] == np.asarray(angles[0]).shape[:-1])
        half = w[: w.size // 2] if layout == "half" else w[0::2] if layout == "interleaved" \
            else w
        base = _base(half.astype(np.float64), rotary)
        where = (f"({layout} layout, R={rotary}, angle {r['angle']!r} = float32(p) * w, w read "
                 f"off the model's values [{w.size}]" + (f", base {base:.6g}" if base else "")
                 + (f", attention factor {r['factor']:.6g}" if r["factor"] != 1.0 else "")
                 + f") at Cos {r['cos']!r} / Sin {r['sin']!r}, positions "
                 f"{_origin(source, makers, inputs)}")
        # the half layout's columns are [w, w]: its tables store w once, each row doubled (as
        # find_hf's); any other order is stored column for column
        columns = {} if layout == "half" else {"columns": int(w.size)}
        found.append(Found("rope", r["replaces"], source, where,
                           {"inv_freq": (half if layout == "half" else w).astype(np.float32),
                            "inv_freq_name": r["angle"],
                            "attention_factor": np.float32(r["factor"]), "layout": layout,
                            "rotary_dim": rotary, "choice": None, **columns,
                            "flat_positions": flat, "discovered": True}))
    offsets: dict[str, int | None] = {}
    t5_tables = []  # gathered by a square index: T5's relative-position buckets? (find_t5)
    for t in found_c["tables"]:
        node, table = t["node"], t["table"]
        index = runs[0][0][t["index"]]
        nd = t["nd"]
        if nd and (np.asarray(index).ndim < 1 or np.asarray(index).shape[-1] != 1):
            continue
        if t["index"] not in offsets:  # one index read by many tables: checked once
            offsets[t["index"]] = _positions_offset(t["index"], runs)
        offset = offsets[t["index"]]
        if offset is None:
            if not np.array_equal(runs[0][0][t["index"]], runs[1][0][t["index"]]):
                continue  # token embeddings: gathered by the ids
            if square(np.asarray(index)):
                t5_tables.append(t)
                continue
            seen.append(f"a constant table {node.input[0]!r} {list(table.shape)} gathered by "
                        f"{t['index']!r} {list(np.asarray(index).shape)}, not positions (" +
                        _what_index(np.asarray(index)) + ")")
            continue
        length, width = table.shape
        sincos = _is_sincos(table)
        fairseq = not sincos and _is_fairseq_sinusoidal(table)
        half = None if sincos or fairseq else _half_sinusoidal_distance(table)
        sincos, half = _sincos_by_use(table, sincos, half, node.output[0], readers)
        kind = ("GPT-J [sin | cos] table " if sincos else
                "fairseq/XGLM sinusoidal [sin | cos] table " if fairseq else
                "Marian sinusoidal [sin | cos] table " if half is not None else "table ")
        where = (f"({kind}{node.input[0]!r} [{length}, {width}]"
                 + (f", positions + offset {offset}" if offset else "")
                 + f") at {op(node)} {node.output[0]!r}, positions "
                 f"{_origin(t['index'], makers, inputs)}")
        family = "rope" if sincos else "sinusoidal" if fairseq or half is not None else "learned"
        found.append(Found(family, [node.output[0]], t["index"], where,
                           {"table": table, "table_name": node.input[0], "offset": offset,
                            "squeeze": nd, "sincos": sincos, "discovered": True,
                            **({"layout": "half", "definition_distance": half}
                               if half is not None else {})}))
    for a in found_c["alibi"]:
        node = a["node"]
        offset = _positions_offset(a["positions"], runs)
        if offset is None:
            continue
        slopes = a["slopes"]
        where = (f"(slopes {a['slopes_name']!r} {list(slopes.shape)}) at Mul {node.output[0]!r}"
                 f", positions {_origin(a['positions'], makers, inputs)}")
        found.append(Found("alibi", [node.output[0]], a["positions"], where,
                           {"slopes": slopes.reshape(slopes.shape[0], 1),
                            "slopes_shape": list(slopes.shape), "slopes_name": a["slopes_name"],
                            "discovered": True}))
    if t5_tables:  # issue 40 point 3: T5's bias, fitted by its values (edgepe/graft/t5.py)
        more, said = find_t5(model, t5_tables, lambda names: _runs(model, names), makers,
                             _constants(graph), inputs)
        found += more
        seen += said
    return found, seen


def _base(half, rotary: int) -> float | None:
    """The base ``b`` when ``half`` is ``b^(-2i/R)`` (within float32's rounding), else None."""
    import numpy as np

    if half.size < 2 or half[0] != 1.0 or np.any(half <= 0):
        return None
    i = np.arange(half.size, dtype=np.float64)
    base = float(half[1] ** (-rotary / 2.0))
    if not np.allclose(base ** (-2.0 * i / rotary), half, rtol=2.0**-20, atol=0):
        return None
    return base


def _what_index(index) -> str:
    """An index that is not positions, in words (a square one is T5's: ``find_t5`` says what it
    is)."""
    import numpy as np

    if index.size and np.all(index == index.ravel()[0]):
        return f"every element {int(index.ravel()[0])}"
    return f"values {sorted(set(index.ravel().tolist()))[:6]}"


def accepted_together(found: list[Found]) -> bool:
    """Whether several discovered PEs are all the model's, each replaced: RoPEs of different
    frequencies (Gemma3's local and global bases, ModernBERT's), or tables and RoPEs each read
    by its own tensor (never the same tensor twice); or T5's biases, one per stack."""
    import numpy as np

    if len(found) < 2 or not all(f.params.get("discovered") for f in found):
        return False
    replaced = [r for f in found for r in f.replaces]
    if len(set(replaced)) != len(replaced):
        return False
    if all(f.family == "t5-bias" for f in found):  # T5: the encoder's bias and the decoder's
        return True
    ropes = [f for f in found if f.family == "rope" and "inv_freq" in f.params]
    return len(ropes) == len(found) and all(
        not np.array_equal(a.params["inv_freq"], b.params["inv_freq"])
        for i, a in enumerate(ropes) for b in ropes[i + 1:])


def confirm(model, found: list[Found]) -> tuple[list[Found], list[str]]:
    """``(kept, seen)``: ``find_pe``'s table candidates whose index is positions by its values
    (``_positions_offset``), the others dropped and said in words (T5's relative-position
    buckets read as a "learned" table before issue 40: a square index is left to ``discover``,
    which fits T5's buckets to it); RoPE and ALiBi pass as found."""
    import numpy as np

    tables = [f for f in found if "table" in f.params and f.positions and
              not f.params.get("discovered")]
    if not tables:
        return found, []
    runs = _runs(model, list(dict.fromkeys(f.positions for f in tables)))
    kept, seen = [], []
    for f in found:
        if f in tables and _positions_offset(f.positions, runs) is None:
            index = np.asarray(runs[0][0][f.positions])
            if square(index):  # discover says what it is (T5's buckets: find_t5)
                continue
            seen.append(f"a constant table {f.params['table_name']!r} "
                        f"{list(f.params['table'].shape)} gathered by {f.positions!r} "
                        f"{list(index.shape)}, not positions ({_what_index(index)})")
            continue
        kept.append(f)
    return kept, seen
