"""Multimodal RoPE (Qwen2-VL's mrope) in a user's ONNX model: found by its values, spliced with no
trigonometric op, proven over three distinct position streams (issue 40 point 3).

transformers' ``Qwen2VLRotaryEmbedding`` (5.24, ``models/qwen2_vl/modeling_qwen2_vl.py``) takes
positions ``[3, B, S]`` (temporal, height, width), computes ``cos``/``sin`` of the float32 angle
``p[..., None] * inv_freq`` for all three streams (``[3, B, S, K]``), then
``recomposition_frequencies`` keeps, for frequency slot ``i``, the stream of its
``mrope_section`` (section ``j`` reads stream ``j mod 3``) and concatenates the result with
itself: the attention reads ``cos, sin [B, S, 2K]``. In an export that is a ``Split`` of the
last axis, a ``Gather`` of one stream per part and two ``Concat``s, or any other selection
(Qwen3-VL's ``apply_interleaved_mrope``: scatters of one stream's columns over another's).

Found (``find``, called by ``discover`` for an angle fitted as ``float32(P) * w`` over positions
``P [3, ..., 1]``): ``w`` is the angle's own ``K`` columns (``discover._fit_angle``); which
stream and slot each column of the tensors the attention reads holds is read off the model by
running its own selection on a code tensor: the ``Cos`` (and ``Sin``) output replaced by
``s * K + i`` at stream ``s``, slot ``i`` (exact in float32), the first tensors downstream whose
shape is ``P``'s without the stream axis then hold, per column, the code of what they took
(``patch.build.mrope_index`` reads the PyTorch module so). Nothing about 16/24/24, the head size
or the order of the sections is assumed: any selection of (stream, slot) per column splices; it
is named ``mrope_section`` when it is Qwen2-VL's consecutive sections.

Spliced (``build``): the model's cos/sin of each slot at every position ``0 .. max_len - 1`` as
``[L, K]`` tables, read by one ``Gather`` of each flattened table at ``P[stream] * K + slot``
per column (``_gathered``: integer ops before it, so the result is the tables' values), or
``--mode sliced`` (``graphs.model_tensors.sliced_rope``, from the position's bit slices) for all
three streams, then each column's (stream, slot) picked by one integer-indexed ``Gather``
(``_select``).
The proof (``prove_streams``) runs both models' cones of the replaced tensors from ``P`` itself,
streams distinct at every position: an export whose positions are made inside from
``input_ids`` (all streams equal) would otherwise never show a misread stream.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from edgepe.contract.errors import BadParameterError
from edgepe.graft.find import op
from edgepe.graft.find_hf import (
    DEFAULT_MAX_LEN,
    TABLE_BYTES_LIMIT,
    Found,
    _check_size,
    _flat_positions,
    _origin,
    rope_tables,
)
from edgepe.graft.prove import (
    PROOF_SECONDS,
    _run,
    _session,
    _Worst,
    cone_model,
    hf_feeds,
    three_streams,
)
from edgepe.graft.splice import _opset, _value_type

STREAMS = 3  # temporal, height, width
# Ops that only move or select their first input's values: the recomposition is made of these
SELECTING = ("Split", "Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Identity",
             "Cast", "Expand", "Transpose", "Tile", "Flatten", "ScatterND", "ScatterElements")
# ...and the inputs that carry those values (the others: indices, shapes); Qwen3-VL's interleave
# writes one stream's columns over another's (``freqs_thw[..., idx] = freq[dim, ..., idx]``)
DATA = {"Concat": None, "ScatterND": (0, 2), "ScatterElements": (0, 2)}
# Readers of a tensor's shape alone, not its values
SHAPE_ONLY = ("Shape", "Size")
# Positions per run of the distinct-streams proof (as prove.CONE_CHUNK)
CHUNK = 1 << 12


def _constant_names(graph) -> set[str]:
    """The names of ``find._constants`` (initializers, ``Constant`` outputs, ``Identity`` of
    them) without reading any tensor's values (a user model's weights stay where they are)."""
    names = {t.name for t in graph.initializer}
    for node in graph.node:  # in topological order, as find._constants
        if op(node) == "Constant" or (op(node) == "Identity" and node.input[0] in names):
            names.add(node.output[0])
    return names


def _closure(start: str, makers, readers, consts) -> list:
    """The nodes downstream of ``start`` that only select or move its values (``SELECTING``),
    every non-constant input of theirs made inside (a ``Concat`` with another tensor ends it)."""
    inside, nodes, taken, todo = {start}, [], set(), [start]
    while todo:
        for node in readers.get(todo.pop(0), []):
            if op(node) not in SELECTING or id(node) in taken:
                continue
            at = DATA.get(op(node), (0,))
            data = node.input if at is None else [node.input[k] for k in at]
            if any(i and i not in inside and i not in consts for i in data):
                continue
            nodes.append(node)
            taken.add(id(node))
            for out in node.output:
                if out and out not in inside:
                    inside.add(out)
                    todo.append(out)
    return nodes


def _codes_run(model, start: str, names: list[str], shape, feeds: dict) -> dict[str, Any]:
    """``names`` computed by ``model`` with ``start`` fed the code tensor of ``shape [3, ...,
    K]`` (module doc) instead of what the model makes there; other inputs from ``feeds``."""
    import numpy as np
    import onnx
    from onnx import helper

    session = _session(cone_model(
        model, names, cut=[helper.make_tensor_value_info(start, onnx.TensorProto.FLOAT, None)]))
    k = shape[-1]
    codes = (np.arange(STREAMS, dtype=np.float32).reshape(-1, *[1] * (len(shape) - 1)) * k
             + np.arange(k, dtype=np.float32))
    run = {start: np.ascontiguousarray(np.broadcast_to(codes, shape), np.float32)}
    wanted = {i.name for i in session.get_inputs()}
    run.update({n: v for n, v in feeds.items() if n in wanted and n != start})
    return dict(zip(names, session.run(names, run), strict=True))


def _read(model, start: str, shape, feeds: dict, makers, readers, consts):
    """``(tensor, streams [R], slots [R])`` of the one tensor the attention reads, downstream of
    ``start``, or ``(None, why)``."""
    import numpy as np

    nodes = _closure(start, makers, readers, consts)
    inside = {id(n) for n in nodes}
    other = next((n for n in readers.get(start, []) if id(n) not in inside and
                  op(n) not in SHAPE_ONLY), None)
    if other is not None or not nodes:
        return None, (f"{start!r} is read by {op(other)} {other.output[0]!r}, not only "
                      "selected from" if other is not None else f"nothing reads {start!r}")
    made = [o for n in nodes for o in n.output if o]
    values = _codes_run(model, start, made, shape, feeds)
    outputs = {o.name for o in model.graph.output}
    frontier = [o for o in made if o in outputs or any(
        id(r) not in inside and op(r) not in SHAPE_ONLY for r in readers.get(o, []))]
    lead = list(shape[1:-1])
    chosen = []
    for name in frontier:  # back from what the attention reads to the float32 [..., R] tensor
        while name in values and (list(np.shape(values[name])[:-1]) != lead or
                                  np.asarray(values[name]).dtype != np.float32):
            maker = makers.get(name)
            name = maker.input[0] if maker is not None and maker.input else None
        if name not in values:
            return None, (f"no float32 tensor of shape {lead + ['R']} between {start!r} and its "
                          "readers")
        chosen.append(name)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:  # (none: the selections are never read)
        return None, (f"{len(chosen)} tensors {chosen} select from {start!r} (graft splices one "
                      "cos/sin pair)")
    codes = np.asarray(values[chosen[0]])
    row = codes.reshape(-1, codes.shape[-1])
    k = shape[-1]
    if not np.all(row == row[:1]) or not np.array_equal(np.rint(row[0]), row[0]) or \
            row[0].min(initial=0) < 0 or row[0].max(initial=0) >= STREAMS * k:
        return None, f"{chosen[0]!r} is not the same selection of the three streams on every row"
    index = row[0].astype(np.int64)
    return chosen[0], (index // k, index % k)


def section(streams, slots) -> list[int] | None:
    """Qwen2-VL's ``mrope_section`` when the columns are ``[sel | sel]`` with ``sel`` slots
    ``0 .. K - 1`` in order: consecutive runs of slots, section ``j`` from stream ``j mod 3``
    (transformers' ``split(mrope_section)`` then ``m[j % 3]``; a section of 0 slots where a
    stream is skipped, so any order of streams is some section list: Qwen3-VL's interleaved
    ``t, h, w, t, ..`` is ``[1, 1, 1, 1, ..]``); else None."""
    import numpy as np

    k = len(slots) // 2
    if len(slots) % 2 or not k or not np.array_equal(slots[:k], slots[k:]) or \
            not np.array_equal(streams[:k], streams[k:]) or \
            not np.array_equal(slots[:k], np.arange(k)):
        return None
    sizes = [0]
    for s in streams[:k].tolist():
        while s != (len(sizes) - 1) % STREAMS:
            sizes.append(0)
        sizes[-1] += 1
    return sizes


def find(model, r: dict, source: str, w, runs, makers, readers, inputs) -> tuple[
        Found | None, str]:
    """``(Found "mrope", where)``, or ``(None, what was seen)``, for ``discover``'s RoPE
    candidate ``r`` whose angle is ``float32(P) * w`` over ``P = source`` ``[3, ..., 1]``."""
    import numpy as np

    consts = _constant_names(model.graph)
    values, feeds, _ = runs[0]
    angle = np.asarray(values[r["angle"]])
    positions = np.asarray(values[source])
    shape = list(angle.shape)
    picked = []
    for start in r["replaces"]:
        tensor, how = _read(model, start, shape, feeds, makers, readers, consts)
        if tensor is None:
            return None, (f"a RoPE angle {r['angle']!r} {shape} over three position streams "
                          f"{source!r} {list(positions.shape)} (multimodal RoPE), but {how}")
        picked.append((tensor, how))
    (cos, (streams, slots)), (sin, (streams_sin, slots_sin)) = picked
    if not (np.array_equal(streams, streams_sin) and np.array_equal(slots, slots_sin)):
        return None, (f"a multimodal RoPE angle {r['angle']!r} whose cos {cos!r} and sin {sin!r} "
                      "select different streams")
    sizes = section(streams, slots)
    flat = not (positions.ndim and positions.shape[-1] == 1 and
                positions.shape[:-1] == angle.shape[:-1])
    per = [int((streams[: slots.size // 2] == j).sum()) for j in range(STREAMS)]
    how = (f"mrope_section {sizes}" if sizes is not None and len(sizes) <= STREAMS else
           f"{len(sizes)} sections cycling t, h, w, {per} slots each" if sizes is not None else
           "streams per column " + "".join("thw"[s] for s in streams.tolist()))
    where = (f"({how}, R={slots.size}, angle {r['angle']!r} = float32(p) * w over three "
             f"position streams, w read off the model's values [{w.size}], stream and slot of "
             f"each column read off its selection"
             + (f", attention factor {r['factor']:.6g}" if r["factor"] != 1.0 else "")
             + f") at {cos!r} / {sin!r}, positions {_origin(source, makers, inputs)}")
    return Found("mrope", [cos, sin], source, where, {
        "inv_freq": np.asarray(w, np.float32), "inv_freq_name": r["angle"],
        "attention_factor": np.float32(r["factor"]), "streams": streams, "slots": slots,
        "mrope_section": sizes, "rotary_dim": int(slots.size), "flat_positions": flat,
        "rank": int(positions.ndim) + (1 if flat else 0), "discovered": True}), ""


def _select(pe, names: list[str], streams, slots, width: int):
    """``pe`` (outputs ``names``, ``[3, *lead, width]``) with each output ``[*lead, R]``: column
    ``c`` the value of stream ``streams[c]``, slot ``slots[c]`` (one ``Gather`` of the streams
    side by side: ``[*lead, 3 * width]``)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = pe.graph
    rank = len(graph.output[0].type.tensor_type.shape.dim)
    index = (np.asarray(streams, np.int64) * width + np.asarray(slots, np.int64))
    graph.initializer.extend([numpy_helper.from_array(index, "mrope_columns"),
                              numpy_helper.from_array(np.asarray([0] * (rank - 2) + [-1],
                                                                 np.int64), "mrope_side_by_side")])
    perm = [*range(1, rank - 1), 0, rank - 1]
    for out in graph.output:
        name = out.name
        for node in graph.node:
            node.output[:] = [f"{name}_streams" if o == name else o for o in node.output]
        graph.node.extend([
            helper.make_node("Transpose", [f"{name}_streams"], [f"{name}_moved"], perm=perm),
            helper.make_node("Reshape", [f"{name}_moved", "mrope_side_by_side"],
                             [f"{name}_side_by_side"]),
            helper.make_node("Gather", [f"{name}_side_by_side", "mrope_columns"], [name],
                             axis=-1)])
        dims = out.type.tensor_type.shape.dim
        lead = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims][1:-1]
        out.CopyFrom(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                   [*lead, len(index)]))
    onnx.checker.check_model(pe, full_check=True)
    return pe


def _gathered(tables: dict, opset: int, dims: list, elem: int, streams, slots,
              quantize: str):
    """``positions [3, *lead, 1] -> {name: [*lead, R]}``: column ``c`` of each output the row of
    ``positions[streams[c]]`` at slot ``slots[c]`` of its ``[L, K]`` table, one ``Gather`` of
    the table flattened at ``positions * K + slot`` (integer ops only before it; int8: the rows
    dequantised after it, the last op: onnxruntime 1.32 with its basic graph optimisations gave 0
    for the negative values of a ``DequantizeLinear -> Transpose -> Reshape -> Gather`` here,
    right with them off)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgepe.graphs.model_tensors import POSITIONS, int8_tables

    k = next(iter(tables.values())).shape[1]
    lead = [d if d is not None else f"positions_{i + 1}" for i, d in enumerate(dims[1:-1])]
    streams, slots = np.asarray(streams, np.int64), np.asarray(slots, np.int64)
    inits = [numpy_helper.from_array(np.asarray([-1], np.int64), "last_axis"),
             numpy_helper.from_array(streams, "column_streams"),
             numpy_helper.from_array(np.asarray(k, np.int64), "slots_per_row"),
             numpy_helper.from_array(slots, "column_slots")]
    pos = POSITIONS
    nodes = []
    if elem != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", [pos], ["positions_int64"], to=TensorProto.INT64))
        pos = "positions_int64"
    nodes += [helper.make_node("Squeeze", [pos, "last_axis"], ["positions_squeezed"]),
              helper.make_node("Gather", ["positions_squeezed", "column_streams"],
                               ["column_positions"], axis=0),
              helper.make_node("Transpose", ["column_positions"], ["column_positions_last"],
                               perm=[*range(1, len(lead) + 1), 0]),
              helper.make_node("Mul", ["column_positions_last", "slots_per_row"], ["row_start"]),
              helper.make_node("Add", ["row_start", "column_slots"], ["flat_index"])]
    quantised = int8_tables(tables) if quantize == "int8" else {}
    outputs = []
    for name, table in tables.items():
        if name in quantised:
            q, scale, _ = quantised[name]
            inits += [numpy_helper.from_array(q.reshape(-1), f"{name}_table_int8"),
                      numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_scale")]
            nodes += [helper.make_node("Gather", [f"{name}_table_int8", "flat_index"],
                                       [f"{name}_rows"], axis=0),
                      helper.make_node("DequantizeLinear", [f"{name}_rows", f"{name}_scale"],
                                       [name])]
        else:
            inits.append(numpy_helper.from_array(
                np.ascontiguousarray(table, np.float32).reshape(-1), f"{name}_table"))
            nodes.append(helper.make_node("Gather", [f"{name}_table", "flat_index"], [name],
                                          axis=0))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                     [*lead, len(slots)]))
    dims = [d if d is not None else f"positions_{i}" for i, d in enumerate(dims)]
    graph = helper.make_graph(nodes, "mrope_tables",
                              [helper.make_tensor_value_info(POSITIONS, elem, dims)], outputs,
                              inits)
    pe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    pe.ir_version = 8
    onnx.checker.check_model(pe, full_check=True)
    return pe


def build(model, found: Found, max_len: int | None, quantize: str = "none",
          mode: str | None = None, table_bytes_limit: int = TABLE_BYTES_LIMIT):
    """``(pe ModelProto, record)`` for ``found`` (module doc): positions ``P [3, ..., 1]`` (the
    model's own tensor) ``->`` the replaced cos, sin ``[..., R]``; ``mode`` ``table``,
    ``sliced`` or None (the table while it fits ``table_bytes_limit``, as ``build_found``)."""
    import hashlib

    from onnx import TensorProto

    from edgepe.graphs import sliced as sl
    from edgepe.graphs.model_tensors import int8_tables, recipe_distance, sliced_rope

    if mode not in (None, "table", "sliced"):
        raise BadParameterError(f"--mode {mode!r}: multimodal RoPE goes in as a table or sliced")
    params = found.params
    max_len = max_len or DEFAULT_MAX_LEN
    elem, dims = _value_type(model, found.positions)
    if dims is None:
        dims = [None] * (params["rank"] - (1 if params["flat_positions"] else 0))
    if params["flat_positions"]:
        dims = [*dims, 1]
    if len(dims) != params["rank"] or any(isinstance(d, int) and d != want for d, want in
                                          ((dims[0], STREAMS), (dims[-1], 1))):
        raise BadParameterError(f"the positions tensor {found.positions!r} of the multimodal "
                                f"RoPE graft found has shape {dims}; graft takes [3, ..., 1]")
    dims = [STREAMS, *dims[1:-1], 1]
    elem = elem or TensorProto.INT64
    w = params["inv_freq"]
    k = w.size
    attention = float(params["attention_factor"])
    stored = max_len * 2 * k * (1 if quantize == "int8" else 4)
    record: dict[str, Any] = {
        "scheme": "mrope", "mrope_section": params["mrope_section"],
        "streams": params["streams"].tolist(), "slots": params["slots"].tolist(),
        "rotary_dim": params["rotary_dim"],
        "inv_freq": {"initializer": params["inv_freq_name"], "dtype": "float32",
                     "values": w.tolist()},
        "attention_factor": attention, "max_len": max_len}
    if mode == "sliced" or (mode is None and stored > table_bytes_limit and quantize == "none"):
        if quantize != "none":
            raise BadParameterError("--mode sliced computes cos/sin from bit slices: no table "
                                    "to quantise (--quantize none)")
        lowering = "bitwise" if _opset(model) >= 18 else "trunc"
        if lowering == "trunc" and max_len > sl.TRUNC_LIMIT:
            raise BadParameterError(f"--mode sliced in an opset-{_opset(model)} model slices by "
                                    f"float arithmetic, exact below {sl.TRUNC_LIMIT} positions; "
                                    f"got --max-len {max_len}")
        widths = sl.default_plan(max_len)
        pe = sliced_rope(w, widths, found.replaces, _opset(model), dims, elem, attention,
                         lowering)
        bound = sl.bound(widths, attention)
        distance = recipe_distance(w, max_len, attention)
        record.update(mode="sliced", slices=list(widths), lowering=lowering, quantize="none",
                      bound=bound, recipe_distance=distance, proof_bound=bound + distance)
        # [cos | cos] of every slot per stream ([3, ..., 2K]: slot i in column i), then picked
        pe = _select(pe, list(found.replaces), params["streams"], params["slots"], 2 * k)
    else:
        _check_size(max_len * 2 * k, max_len, quantize, table_bytes_limit)
        tables = rope_tables(found, max_len)
        pe = _gathered(tables, _opset(model), dims, elem, params["streams"], params["slots"],
                       quantize)
        digest = hashlib.sha256()
        for t in tables.values():
            digest.update(t.tobytes())
        record.update(mode="table", quantize=quantize, tables_sha256=digest.hexdigest())
        if quantize == "int8":
            record["quant"] = {"bound": max(b for _, _, b in int8_tables(tables).values())}
    if params["flat_positions"]:
        pe = _flat_positions(pe)
    record.update(replaces=found.replaces, positions=found.positions)
    return pe, record


def check_config(found: Found, config: dict, max_len: int | None) -> tuple[int | None, dict]:
    """``(max_len, record)`` as ``find_hf.check_hf_config``, for multimodal RoPE: the config's
    translation (``edgepe.schemes.hf_config``) must be ``mrope`` with the section graft read off
    the model and frequencies equal, bit for bit, to the model's ``w`` (edgepe's ``mrope``
    scheme computes them in float32 as transformers does); ``max_len``: the given one, else the
    config's ``max_position_embeddings``."""
    import numpy as np

    from edgepe.schemes import build as build_scheme
    from edgepe.schemes import resolve
    from edgepe.schemes.hf_config import from_hf_config

    t = from_hf_config(config)
    if t.scheme != "mrope":
        raise BadParameterError(f"--from-hf-config describes a {t.scheme!r} model; the PE graft "
                                f"found is mrope ({found.where})")
    section = list(t.params["mrope_section"])
    if section != found.params["mrope_section"]:
        raise BadParameterError(f"--from-hf-config's mrope_section {section} is not the model's: "
                                f"graft read {found.params['mrope_section']} off its selection")
    length = max_len if max_len is not None else t.max_len
    mine = build_scheme(resolve("mrope", length or DEFAULT_MAX_LEN, d_model=t.d_model,
                                params=t.params)).inv_freq.detach().numpy()
    theirs = found.params["inv_freq"]
    if mine.shape != theirs.shape or not np.array_equal(mine, theirs):
        raise BadParameterError(f"the model's inv_freq {found.params['inv_freq_name']!r} "
                                f"{list(theirs.shape)} differs from edgepe's mrope for this "
                                f"config ({list(mine.shape)}): the config is not this model's")
    return length, {"scheme": "mrope", "model_type": config.get("model_type"),
                    "params": {k: list(v) if isinstance(v, tuple) else v
                               for k, v in t.params.items()},
                    "inv_freq": "equal to edgepe's mrope scheme (float32) bit for bit"}


def _cut_at(model, positions: str, names: list[str], rank: int, which: str):
    """A session of ``model``'s cone of ``names`` with ``positions`` an input (its maker cut)."""
    import onnx
    from onnx import helper

    elem, _ = _value_type(model, positions)
    fed = helper.make_tensor_value_info(positions, elem or onnx.TensorProto.INT64,
                                        [f"positions_{i}" for i in range(rank)])
    return _session(cone_model(model, names, cut=[fed]), which)


def stream_positions(start: int, size: int, max_len: int, rank: int, equal: bool = False):
    """``[3, 2, size, (1)]`` int64 (a batch of 2, as graft's proof runs): positions ``start ..
    start + size - 1`` in three different streams (``prove.three_streams``), or ``equal`` ones
    (text tokens)."""
    import numpy as np

    p = np.broadcast_to(np.arange(start, start + size, dtype=np.int64), (2, size))
    streams = np.broadcast_to(p, (STREAMS, 2, size)) if equal else three_streams(p, max_len)
    return np.ascontiguousarray(streams.reshape(STREAMS, 2, size, *([1] * (rank - 3))))


def prove_streams(original, grafted_model, found: Found, max_len: int, bound: float = 0.0,
                  seed: int = 0) -> tuple[str, list]:
    """``(label, [OutputCheck])``: the replaced tensors of both models computed from the
    positions tensor itself (``_cut_at``), its three streams distinct (``stream_positions``),
    then equal, at every position ``0 .. max_len - 1``, and random ones in a batch of 2; 4 ulp
    per element plus ``bound``, as ``prove.prove_found`` holds the replaced tensors."""
    import time

    import numpy as np

    names = list(found.replaces)
    rank = found.params["rank"] - (1 if found.params["flat_positions"] else 0)
    theirs = _cut_at(original, found.positions, names, rank, "original")
    mine = _cut_at(grafted_model, found.positions, names, rank, "grafted")
    worst = {name: _Worst(4) for name in names}
    rng = np.random.default_rng(seed)
    runs = [stream_positions(s, min(CHUNK, max_len - s), max_len, rank, equal)
            for equal in (False, True) for s in range(0, max_len, CHUNK)]
    runs.append(rng.integers(0, max_len, size=(STREAMS, 2, min(max_len, 16), *[1] * (rank - 3))))
    deadline = time.monotonic() + PROOF_SECONDS
    for positions in runs:
        outs = []
        for session, which in ((theirs, "original"), (mine, "grafted")):
            # the cone's other inputs (a shape it reads) as the proof feeds them, for this length
            others = [i for i in session.get_inputs() if i.name != found.positions]
            feeds = hf_feeds(SimpleNamespace(get_inputs=lambda others=others: others),
                             positions.shape[2], 0, 0, max_len, rng)
            feeds[found.positions] = positions.astype(np.int64)
            wanted = {i.name for i in session.get_inputs()}
            label = f"{positions.shape[2]} (three position streams)"
            outs.append(_run(session, names, {k: v for k, v in feeds.items() if k in wanted},
                             label, which, deadline))
        for name, want, got in zip(names, *outs, strict=True):
            worst[name].add(got, want)
    label = f"three distinct, and equal, position streams at every position 0..{max_len - 1} " \
            "(the replaced tensors, from the positions tensor)"
    return label, [worst[name].check(f"{name} (distinct streams)", bound) for name in names]
