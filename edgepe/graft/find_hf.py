"""Finding the PE of a transformers model in its ONNX export, with no PE named (issue 29).

``find_pe(model)`` looks for each family's subgraph as ``torch.onnx.export`` (dynamo, torch 2.13;
transformers 5.24) writes it, and returns every match as a ``Found``: the tensors the model reads
(the ones the artifact must make, exactly), the integer positions tensor they come from, and the
parameters read from the model's own constants.

- RoPE, half layout (Llama, Mistral, Qwen2, Phi, GPT-NeoX; partial rotary when ``R`` is less than
  the head size): ``Cos`` and ``Sin`` of one ``Concat(f, f)``, ``f = Cast(positions) * inv_freq``
  with ``inv_freq`` a constant ``[R/2]`` (already scaled for linear/llama3/yarn/longrope), each
  optionally times a constant scalar (yarn/longrope's attention factor). The artifact: the rows
  ``[cos(p w) | cos(p w)] * a`` (and sin) of tables built from the model's float32 ``inv_freq`` as
  the model multiplies it (a float32 product), gathered by the same positions tensor, so the
  positions stay what the model makes of its inputs (``position_ids``, the attention mask, the
  past length of a KV cache). Longrope (Phi-3) picks one of two constant ``inv_freq`` by a
  ``Where`` on the positions at run time: the artifact holds both pairs of tables and the same
  ``Where`` on the model's own condition.
- RoPE exported at ``opset_version=23`` (torch 2.13 writes each rotation as ONNX's
  ``RotaryEmbedding``, its caches ``Cos``/``Sin`` of ``Cast(positions) * inv_freq`` ``[B, S,
  R/2]``, once per op): the artifact is the same tables without the duplicated half, one lookup
  for all the ops (``merge_duplicates``); ``--rope-lowering rotary23`` then feeds the ops the
  tables and positions directly (``lower.feed_tables``).
- Learned absolute (GPT-2; OPT, whose positions carry its offset 2; a constant sinusoidal table
  such as XGLM's): a constant float32 ``[L, D]`` table gathered by positions (not token ids). The
  artifact: the same rows (``--quantize int8``: a quarter of the bytes), gathered the same way.
- GPT-J's interleaved RoPE: a constant ``[L, R]`` ``[sin | cos]`` table (``create_sinusoidal_
  positions``, recognised by its values) read by ``GatherND(table, positions[..., None])``; the
  artifact: its rows, as for a learned table.
- MPT's ALiBi: a constant ``[H, 1, L]`` bias ``m_h (u - (L - 1))`` the model slices (an
  initializer from dynamo, a ``Constant`` node from TorchScript); the
  artifact computes it from a ``Range`` with edgepe's slopes (required equal): ``H`` floats in
  place of ``H L``.
- fairseq/XGLM sinusoidal: a constant ``[sin | cos]`` table (row 1, the padding index, zero;
  positions offset by 2), recognised by its values and grafted as its rows.
- Marian's sinusoidal (``layout=half``, ``w_i = 10000^(-2i/D)``, no padding row): a constant
  ``[sin | cos]`` table gathered (``Gather``, not GPT-J's ``GatherND``) by positions, recognised
  by its values (its distance from the float64 definition goes in the record) and grafted as its
  rows. An encoder-decoder has one per stack: ``streams`` tells whether several candidates are
  one PE per input stream (graft replaces each) or two on one stream (refused).
- Whisper's encoder sinusoidal table, added whole (no positions gather it; found by
  ``discover.whole_sinusoids``): ``build_whole`` rebuilds it as edgepe's ``sinusoidal``
  (``WHISPER_PARAMS``) of positions ``0 .. L - 1`` from a ``Range`` inside the PE, as a table
  or sliced.
- ALiBi (Bloom): ``Mul(slopes [H, 1], Cast(positions [B, 1, T]))``, positions from the mask's
  ``CumSum``; the model reshapes it to ``[B * H, 1, T]``. The artifact: edgepe's ``alibi`` slopes
  for ``H`` heads (the paper's rule), required equal to the model's constant, times the same
  positions (``compute``; no table, so no ``--quantize``).
- Optimum's exports (the TorchScript exporter on transformers 4.x; ``tests/data/optimum/``):
  RoPE's angle is ``Transpose(MatMul(inv_freq [1, R/2, 1], position_ids[:, None]))``
  (``_rope_matmul``; the artifact takes ``position_ids [B, S]`` through an ``Unsqueeze``,
  ``_flat_positions``), GPT-J's table is read by ``GatherElements`` (``_gptj_gather_elements``),
  MPT's bias is a ``Constant`` node; the rest is found as above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgepe.contract.config import INT8_OPSET
from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.export.options import make_config
from edgepe.graft.find import _constants, graph_index, op
from edgepe.graft.read import parse_model
from edgepe.graft.splice import _opset, _slim, _value_type

# Whisper's encoder table as edgepe's sinusoidal scheme (issue 40 point 2): transformers'
# ``sinusoids(L, D)`` is ``torch.cat([sin, cos])`` (layout half) of ``arange(L)[:, None] *
# exp(-ln(10000) / (D/2 - 1) * arange(D/2))`` (frequencies fairseq, base 10000), each op in
# float32 (freq_dtype float32: edgepe's ``inverse_frequencies`` computes it op for op).
WHISPER_PARAMS = {"base": 10000.0, "layout": "half", "frequencies": "fairseq",
                  "freq_dtype": "float32"}

# Table rows when neither --max-len nor the model says how many positions it takes.
DEFAULT_MAX_LEN = 4096
# RoPE goes in as tables up to this many bytes (both tables, as stored: float32 or int8). A
# 128k-position Llama (R = 128) needs 64 MiB in float32 with the halves stored once, 16 MiB int8.
TABLE_BYTES_LIMIT = 32 * 2**20
# GPT-J's and fairseq's sinusoidal tables are recognised by their values: within this much of
# their angle ``p w`` (relative) of the float64 definition, beside sin/cos's own rounding. The
# model's float32 angle is off the exact one by w's error (torch's float32 pow for GPT-J: 0.6 ulp
# measured; fairseq's exp of a float32 product ``i * -ln(10000) / (D/2 - 1)``: 7.1 ulp measured at
# D = 1024) plus half an ulp for ``p w``: 16 ulp (2^-19) bounds both with room, and is still
# ~10^4 times tighter than anything a learned table could match by chance.
ANGLE_SLACK = 2.0**-19


# Every family graft finds with no PE given (``Found.family``), and how it is seen, in words:
# the "no PE found" refusal lists them all (``looked_for``), so a family added to graft's search
# is named there too (a ``Found`` of a family not listed here is an internal error).
LOOKED_FOR = {
    "rope": "RoPE (Cos/Sin of float32(p) * w, any layout, one per base; or GPT-J's [sin | cos] "
            "table gathered by positions)",
    "mrope": "multimodal RoPE (Qwen2-VL's three position streams)",
    "learned": "a position table (a constant [L, D] gathered by positions)",
    "sinusoidal": "a sinusoidal table (fairseq's or Marian's gathered by positions; Whisper's "
                  "encoder's added whole)",
    "alibi": "ALiBi (slopes times positions; MPT's constant bias)",
    "t5-bias": "T5's relative position bias (a table gathered by buckets of k - q)",
}


def looked_for() -> str:
    """``LOOKED_FOR``'s words as one list: ``a, b, ... and z``."""
    words = list(LOOKED_FOR.values())
    return ", ".join(words[:-1]) + " and " + words[-1]


@dataclass
class Found:
    """One PE subgraph: ``replaces`` (tensors the model reads, made by the artifact), ``positions``
    (the integer tensor they are computed from), what it is in words, and its parameters."""

    family: str
    replaces: list[str]
    positions: str
    where: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        assert self.family in LOOKED_FOR, f"family {self.family!r} not in LOOKED_FOR"

    def describe(self) -> str:
        return f"{self.family} {self.where}"


def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _scalar_factor(node, consts):
    """The constant scalar a ``Mul`` node multiplies its other input by, or None."""
    import numpy as np

    if op(node) != "Mul":
        return None
    for i, other in ((0, 1), (1, 0)):
        value = consts.get(node.input[i])
        if value is not None and np.asarray(value).size == 1:
            return float(np.asarray(value).ravel()[0]), node.input[other]
    return None


def _rope(graph, consts, makers, readers) -> list[Found]:
    import numpy as np

    found = []
    for cos in (n for n in graph.node if op(n) == "Cos"):
        angle = cos.input[0]
        sin = next((n for n in readers.get(angle, []) if op(n) == "Sin"), None)
        concat = makers.get(angle)
        if sin is None or concat is None or op(concat) != "Concat" or \
                len(concat.input) != 2 or concat.input[0] != concat.input[1]:
            continue
        mul = makers.get(concat.input[0])
        if mul is None or op(mul) != "Mul":
            continue
        inv = [i for i in mul.input if i in consts and np.asarray(consts[i]).ndim == 1]
        choice = None  # longrope: Where(cond, long inv_freq, short inv_freq) picked at run time
        if not inv:
            where_node = next((makers.get(i) for i in mul.input if makers.get(i) is not None
                               and op(makers[i]) == "Where"), None)
            if where_node is not None and all(
                    i in consts and np.asarray(consts[i]).ndim == 1 for i in where_node.input[1:]):
                inv = [where_node.output[0]]
                choice = {"condition": where_node.input[0],
                          "if_true": np.asarray(consts[where_node.input[1]]),
                          "if_false": np.asarray(consts[where_node.input[2]]),
                          "names": list(where_node.input[1:])}
        if len(inv) != 1:
            continue
        inv_freq = np.asarray(consts[inv[0]]) if choice is None else choice["if_false"]
        cast = makers.get(next(i for i in mul.input if i != inv[0]))
        if cast is None or op(cast) != "Cast" or inv_freq.dtype != np.float32 or (
                choice is not None and choice["if_true"].shape != inv_freq.shape):
            continue
        outs, factors = [], []
        for node in (cos, sin):
            users = readers.get(node.output[0], [])
            scaled = _scalar_factor(users[0], consts) if len(users) == 1 else None
            if scaled is not None:
                factors.append(scaled[0])
                outs.append(users[0].output[0])
            else:
                factors.append(1.0)
                outs.append(node.output[0])
        if factors[0] != factors[1]:
            continue
        rotary = 2 * inv_freq.size
        source = (f"inv_freq {inv[0]!r} [{inv_freq.size}]" if choice is None else
                  f"inv_freq {choice['names'][0]!r} or {choice['names'][1]!r} [{inv_freq.size}] "
                  f"chosen at run time by {choice['condition']!r} (longrope)")
        where = (f"(half layout, R={rotary}, {source}"
                 + (f", attention factor {factors[0]:.6g}" if factors[0] != 1.0 else "")
                 + f") at Cos {cos.output[0]!r} / Sin {sin.output[0]!r}, positions "
                 f"{_origin(cast.input[0], makers, set(v.name for v in graph.input))}")
        found.append(Found("rope", outs, cast.input[0], where,
                           {"inv_freq": inv_freq, "inv_freq_name": inv[0],
                            "attention_factor": np.float32(factors[0]), "layout": "half",
                            "rotary_dim": rotary, "choice": choice}))
    return found


def _rope_fused(graph, consts, makers, readers) -> list[Found]:
    """RoPE as torch 2.13 exports it at ``opset_version=23``: the rotation is already ONNX's
    ``RotaryEmbedding`` (no ``position_ids`` input), each op's caches ``Cos``/``Sin`` (optionally
    times a constant scalar) of one ``f = Cast(positions) * inv_freq`` ``[B, S, R/2]``, recomputed
    per op. One ``Found`` per ``f``: it replaces the first op's cos/sin; ``duplicates`` maps the
    other ops' (the same ops on the same tensor) to them."""
    import numpy as np

    found = []
    for mul in (n for n in graph.node if op(n) == "Mul"):
        inv = [i for i in mul.input if i in consts and np.asarray(consts[i]).ndim == 1]
        cast = makers.get(next((i for i in mul.input if i not in inv), ""))
        if len(inv) != 1 or cast is None or op(cast) != "Cast" or \
                np.asarray(consts[inv[0]]).dtype != np.float32:
            continue
        trig = [n for n in readers.get(mul.output[0], []) if op(n) in ("Cos", "Sin")]
        if not trig or len(trig) != len(readers[mul.output[0]]):
            continue
        caches: dict[str, list[str]] = {"Cos": [], "Sin": []}
        factors, ops = set(), []
        for node in trig:
            out, factor = node.output[0], 1.0
            users = readers.get(out, [])
            scaled = _scalar_factor(users[0], consts) if len(users) == 1 else None
            if scaled is not None:
                factor, out = scaled[0], users[0].output[0]
                users = readers.get(out, [])
            slot = 1 if op(node) == "Cos" else 2
            if not users or any(op(u) != "RotaryEmbedding" or len(u.input) != 3 or
                                list(u.input).index(out) != slot for u in users):
                break
            caches[op(node)].append(out)
            factors.add(factor)
            ops += users
        else:
            if len(factors) != 1 or not caches["Cos"] or not caches["Sin"]:
                continue
            layouts = {_attr(u, "interleaved", 0) for u in ops}
            if len(layouts) != 1:
                continue
            inv_freq = np.asarray(consts[inv[0]])
            factor = factors.pop()
            cos, sin = caches["Cos"][0], caches["Sin"][0]
            duplicates = {**{c: cos for c in caches["Cos"][1:]},
                          **{c: sin for c in caches["Sin"][1:]}}
            layout = "interleaved" if layouts.pop() else "half"
            where = (f"({layout} layout, R={2 * inv_freq.size}"
                     f", inv_freq {inv[0]!r} [{inv_freq.size}]"
                     + (f", attention factor {factor:.6g}" if factor != 1.0 else "")
                     + f") at the caches of {len({u.name for u in ops})} RotaryEmbedding ops "
                     f"(opset 23), positions "
                     f"{_origin(cast.input[0], makers, set(v.name for v in graph.input))}")
            found.append(Found("rope", [cos, sin], cast.input[0], where,
                               {"inv_freq": inv_freq, "inv_freq_name": inv[0],
                                "attention_factor": np.float32(factor), "layout": layout,
                                "rotary_dim": 2 * inv_freq.size, "choice": None,
                                "fused": True, "duplicates": duplicates}))
    return found


def merge_duplicates(model, found: Found):
    """``(model, nodes removed)``: ``model`` (a copy) with every reader of ``found``'s duplicate
    caches reading the first ones instead (the same op on the same tensor: bit-identical), so one
    artifact replaces them, and the nodes that made the duplicates (now read by nothing)
    removed."""
    import onnx

    duplicates = found.params.get("duplicates") or {}
    if not duplicates:
        return model, 0
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for node in graph.node:
        node.input[:] = [duplicates.get(name, name) for name in node.input]
    outputs = {o.name for o in graph.output}
    makers = {o: n for n in graph.node for o in n.output}
    todo, removed = list(duplicates), 0
    while todo:
        node = makers.get(todo.pop())
        if node is None or node not in graph.node:
            continue
        read = {i for n in graph.node for i in n.input} | outputs
        if read.intersection(node.output):
            continue
        graph.node.remove(node)
        removed += 1
        todo += list(node.input)
    return model, removed


def _ancestors(name: str, makers, limit: int = 64) -> tuple[set[str], set[str]]:
    """``(op types, model inputs)`` of the cone that makes ``name`` (up to ``limit`` nodes)."""
    ops, seen, todo, count = set(), set(), [name], 0
    leaves = set()
    while todo and count < limit:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = makers.get(name)
        if node is None:
            leaves.add(name)
            continue
        count += 1
        ops.add(op(node))
        todo += [i for i in node.input if i]
    return ops, leaves


def _learned(graph, consts, makers, readers) -> list[Found]:
    """A constant ``[L, D]`` float table gathered on axis 0 by positions: indices made from a
    ``position_ids`` input, a ``Range`` or the mask's ``CumSum`` (OPT adds its offset 2), never
    from ``input_ids`` (token embeddings)."""
    import numpy as np

    found = []
    inputs = {v.name for v in graph.input}
    for node in graph.node:
        nd = op(node) == "GatherND"  # GPT-J: GatherND(table, positions[..., None])
        if not (op(node) == "Gather" and _attr(node, "axis", 0) == 0 or
                nd and _attr(node, "batch_dims", 0) == 0):
            continue
        table = consts.get(node.input[0])
        if table is None or table.ndim != 2 or table.dtype != np.float32:
            continue
        if nd:
            unsqueeze = makers.get(node.input[1])
            axes = consts.get(unsqueeze.input[1]) if unsqueeze is not None and \
                op(unsqueeze) == "Unsqueeze" and len(unsqueeze.input) > 1 else None
            if axes is None or np.asarray(axes).ravel().tolist() != [-1]:
                continue
        ops, leaves = _ancestors(node.input[1], makers)
        if "input_ids" in leaves or "inputs_embeds" in leaves:
            continue
        by_position = any("position" in leaf for leaf in leaves & inputs) or \
            ops & {"Range", "CumSum"}
        if not by_position:
            continue
        length, width = table.shape
        offset = 0  # OPT: positions + 2 index the table (an Add of an integer constant)
        maker = makers.get(node.input[1])
        for _ in range(4):  # through reshapes (XGLM flattens positions + 2 before its Gather)
            if maker is None or op(maker) not in ("Reshape", "Unsqueeze", "Squeeze", "Cast",
                                                      "Identity", "Flatten"):
                break
            maker = makers.get(maker.input[0])
        added = _scalar_add(maker, consts) if maker is not None else None
        if added is not None:
            offset = added
        sincos = nd and _is_sincos(table)  # GPT-J's table is read by GatherND
        fairseq = not sincos and _is_fairseq_sinusoidal(table)
        half = None if sincos or fairseq or nd else _half_sinusoidal_distance(table)
        sincos, half = _sincos_by_use(table, sincos, half, node.output[0], readers)
        where = ("(GPT-J [sin | cos] table " if sincos else
                 "(fairseq/XGLM sinusoidal [sin | cos] table " if fairseq else
                 "(Marian sinusoidal [sin | cos] table " if half is not None else "(table ") + (
            f"{node.input[0]!r} [{length}, {width}]")
        where = (f"{where}"
                 + (f", positions + offset {offset}" if offset else "")
                 + f") at {op(node)} {node.output[0]!r}, positions "
                 f"{_origin(node.input[1], makers, inputs)}")
        family = "rope" if sincos else "sinusoidal" if fairseq or half is not None else \
            "learned"
        found.append(Found(family, [node.output[0]], node.input[1],
                           where, {"table": table, "table_name": node.input[0],
                                   "offset": offset, "squeeze": nd, "sincos": sincos,
                                   **({"layout": "half", "definition_distance": half}
                                      if half is not None else {})}))
    return found


PASS_THROUGH = ("Reshape", "Unsqueeze", "Squeeze", "Cast", "Identity", "Flatten", "Expand",
                "Transpose")


def _table_use(rows: str, readers, depth: int = 6) -> str | None:
    """What the model does with the rows a ``[sin | cos]`` table's gather reads (issue 40):
    ``"rope"`` where they are split (``Split``/``Slice``) into the sin and cos of a rotation,
    ``"sinusoidal"`` where they are added (``Add``) to the embeddings; None where neither or both
    is seen within ``depth`` reshapes. GPT-J's and Marian's tables hold the same values, so their
    values alone cannot tell a RoPE from an absolute sinusoidal PE."""
    uses, frontier = set(), [rows]
    for _ in range(depth):
        following = []
        for name in frontier:
            for node in readers.get(name, []):
                if op(node) in ("Split", "Slice"):
                    uses.add("rope")
                elif op(node) == "Add":
                    uses.add("sinusoidal")
                elif op(node) in PASS_THROUGH:
                    following += list(node.output)
        frontier = following
    return uses.pop() if len(uses) == 1 else None


def _sincos_by_use(table, sincos: bool, half: float | None, rows: str, readers
                   ) -> tuple[bool, float | None]:
    """``(sincos, half)`` for a table whose values are ``[sin(p w) | cos(p w)]`` (GPT-J's
    ``_is_sincos`` or Marian's ``_half_sinusoidal_distance``, whichever matched first), decided
    by its consumer (``_table_use``): split into a rotation's sin and cos, GPT-J's RoPE; added to
    the embeddings, Marian's sinusoidal. Unchanged where the consumer says neither, or the
    values fit only the pattern that matched (the two differ in their tolerances)."""
    if not sincos and half is None:
        return sincos, half
    use = _table_use(rows, readers)
    if use == "sinusoidal" and sincos:
        distance = _half_sinusoidal_distance(table)
        if distance is not None:
            return False, distance
    elif use == "rope" and half is not None and _is_sincos(table):
        return True, None
    return sincos, half


def _sinusoid_within(table, w) -> bool:
    """Whether ``table [L, 2 k]`` is ``[sin(p w) | cos(p w)]`` (``w [k]`` float64, the exact
    frequencies) as a model computes it in float32: within ``4 ulp(1)`` (sin/cos rounded to
    float32) plus ``ANGLE_SLACK`` of the angle ``p w`` (the model's float32 angle: its ``w`` from a
    float32 pow or exp, then times ``p`` rounded)."""
    import numpy as np

    angle = np.arange(table.shape[0], dtype=np.float64)[:, None] * w[None, :]
    ref = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    slack = 4 * 2.0**-23 + np.concatenate([angle, angle], axis=1) * ANGLE_SLACK
    return bool(np.all(np.abs(ref - table) <= slack))


def _is_sincos(table) -> bool:
    """Whether ``table [L, W]`` is GPT-J's ``create_sinusoidal_positions``: ``[sin(p w) | cos(p
    w)]``, ``w = 1 / 10000^(2i / W)``, as torch computes it in float32 (``_sinusoid_within``)."""
    import numpy as np

    length, width = table.shape
    if width % 2 or length < 2:
        return False
    return _sinusoid_within(table, 10000.0 ** (-np.arange(0, width, 2) / width))


def _is_fairseq_sinusoidal(table) -> bool:
    """Whether ``table [L, D]`` is fairseq's (XGLM, M2M100) sinusoidal table: ``[sin(p w) |
    cos(p w)]``, ``w_i = exp(-i ln(10000) / (D/2 - 1))``, row 1 (the padding index) zero, as torch
    computes it in float32 (``_sinusoid_within``)."""
    import numpy as np

    length, width = table.shape
    half = width // 2
    if width % 2 or half < 2 or length < 3 or np.any(table[1]):
        return False
    w = np.exp(-np.arange(half) * (np.log(10000.0) / (half - 1)))
    padded = table.copy()
    padded[1] = np.concatenate([np.sin(w), np.cos(w)])  # row 1 checked zero above
    return _sinusoid_within(padded, w)


def _half_sinusoidal_distance(table) -> float | None:
    """``max |table - [sin(p w) | cos(p w)]|`` when ``table [L, D]`` is Marian's sinusoidal table
    (edgepe's ``sinusoidal`` with ``layout=half``: ``w_i = 10000^(-2i/D)``, no padding row), else
    None. The definition in float64; the table may come from float64 angles (Marian's numpy:
    within half an ulp of 1) or float32 ones (``p w`` rounded: ``p 2^-24`` off at most), so it is
    recognised within ``4 ulp(1) + L 2^-24``."""
    import numpy as np

    length, width = table.shape
    half = width // 2
    if width % 2 or half < 2 or length < 3:
        return None
    w = 10000.0 ** (-2.0 * np.arange(half, dtype=np.float64) / width)
    angle = np.arange(length, dtype=np.float64)[:, None] * w[None, :]
    distance = float(np.abs(np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
                            - table).max())
    return distance if distance <= 4 * 2.0**-23 + length * 2.0**-24 else None


def _scalar_add(node, consts) -> int | None:
    """The integer constant an ``Add`` node adds to its other input, or None."""
    import numpy as np

    if op(node) != "Add":
        return None
    for i in (0, 1):
        value = consts.get(node.input[i])
        if value is not None and np.asarray(value).size == 1 and \
                np.asarray(value).dtype.kind in "iu":
            return int(np.asarray(value).ravel()[0])
    return None


def _alibi(graph, consts, makers, readers) -> list[Found]:
    """Bloom's ALiBi: ``Mul(slopes [H, 1], Cast(positions [B, 1, T]))`` with the positions made
    from the attention mask's ``CumSum`` (or a ``Range``)."""
    import numpy as np

    found = []
    inputs = {v.name for v in graph.input}
    for node in graph.node:
        if op(node) != "Mul":
            continue
        for i in (0, 1):
            slopes = consts.get(node.input[i])
            cast = makers.get(node.input[1 - i])
            if slopes is None or slopes.ndim != 2 or slopes.shape[1] != 1 or \
                    slopes.dtype != np.float32 or cast is None or op(cast) != "Cast":
                continue
            ops, _ = _ancestors(cast.input[0], makers)
            if not ops & {"CumSum", "Range"}:
                continue
            where = (f"(slopes {node.input[i]!r} [{slopes.shape[0]}, 1]) at Mul "
                     f"{node.output[0]!r}, positions "
                     f"{_origin(cast.input[0], makers, inputs)}")
            found.append(Found("alibi", [node.output[0]], cast.input[0], where,
                               {"slopes": slopes, "slopes_name": node.input[i]}))
    return found


def _mpt_alibi(graph, consts, makers, readers) -> list[Found]:
    """MPT's ALiBi: a constant ``[H, 1, L]`` equal to ``m_h (u - (L - 1))`` with the slopes of
    edgepe's ``alibi`` (the paper's rule), read by a Slice."""
    import numpy as np

    from edgepe.schemes.alibi import slopes as alibi_slopes

    found = []
    # an initializer, or a Constant node (the TorchScript exporter's, in Optimum's exports)
    names = [t.name for t in graph.initializer] + [n.output[0] for n in graph.node
                                                   if op(n) == "Constant"]
    for name in names:
        value = consts.get(name)
        if value is None or value.ndim != 3 or value.shape[1] != 1 or value.dtype != np.float32 \
                or value.shape[2] < 2 or not any(op(n) == "Slice"
                                                 for n in readers.get(name, [])):
            continue
        heads, _, length = value.shape
        slopes = alibi_slopes(heads).numpy()
        distance = np.arange(1 - length, 1, dtype=np.float32)
        if not np.array_equal(slopes[:, None, None] * distance[None, None, :], value):
            continue
        where = (f"(MPT bias constant {name!r} [{heads}, 1, {length}], slopes of the "
                 f"ALiBi paper's rule) sliced by the model")
        found.append(Found("alibi", [name], "", where,
                           {"slopes": slopes, "length": length, "table_name": name}))
    return found


def _origin(name: str, makers, inputs: set[str]) -> str:
    """Where an integer positions tensor comes from, in words: a model input, or the op."""
    seen = name
    for _ in range(12):
        if name in inputs:
            return f"from input {name!r}" + ("" if name == seen else f" (via {seen!r})")
        node = makers.get(name)
        if node is None:
            break
        if op(node) in ("Unsqueeze", "Cast", "Expand", "Reshape", "Identity", "Squeeze"):
            name = node.input[0]
            continue
        ops, leaves = _ancestors(name, makers)
        made = " and ".join(sorted(kind for kind in ops if kind in ("CumSum", "Range")))
        sources = ", ".join(map(repr, sorted(leaves & inputs))) or "no input"  # (constants)
        return f"{seen!r} (from {sources}" + (f" by {made})" if made else ")")
    return repr(seen)


# --- Optimum's exports (the TorchScript exporter; transformers 4.x) ------------------------------


def _through(name: str, makers, ops: tuple[str, ...]):
    """``(name, node)``: from ``name`` up through the first input of nodes of type ``ops``, to
    the first tensor that is not made by one of them (and its maker, None for an input or an
    initializer)."""
    for _ in range(8):
        node = makers.get(name)
        if node is None or op(node) not in ops:
            return name, node
        name = node.input[0]
    return name, makers.get(name)


def _rope_matmul(graph, consts, makers, readers) -> list[Found]:
    """Half-layout RoPE as the TorchScript exporter writes transformers 4.x's rotary embedding
    (Optimum's exports of Llama, Mistral, Qwen2, Phi, GPT-NeoX): ``Cos`` and ``Sin`` of
    ``Concat(f, f)``, ``f = Transpose(MatMul(Expand(inv_freq [1, R/2, 1]), Cast(Unsqueeze(
    position_ids, 1))), [0, 2, 1])`` (casts between), each optionally times a constant scalar.
    A MatMul over an axis of 1 is one float32 product per element, ``p * inv_freq`` as ``_rope``'s
    ``Mul``. The positions are ``position_ids [B, S]`` itself (``flat_positions``: the artifact
    takes them without the trailing axis of 1)."""
    import numpy as np

    found = []
    inputs = {v.name for v in graph.input}
    for cos in (n for n in graph.node if op(n) == "Cos"):
        sin = next((n for n in readers.get(cos.input[0], []) if op(n) == "Sin"), None)
        concat = makers.get(cos.input[0])
        if sin is None or concat is None or op(concat) != "Concat" or \
                len(concat.input) != 2 or concat.input[0] != concat.input[1]:
            continue
        transpose = makers.get(concat.input[0])
        if transpose is None or op(transpose) != "Transpose" or \
                list(_attr(transpose, "perm", [])) != [0, 2, 1]:
            continue
        matmul = makers.get(transpose.input[0])
        if matmul is None or op(matmul) != "MatMul":
            continue
        inv_name, _ = _through(matmul.input[0], makers, ("Cast", "Expand", "Identity"))
        inv = consts.get(inv_name)
        if inv is None or inv.dtype != np.float32 or inv.ndim != 3 or \
                inv.shape[0] != 1 or inv.shape[2] != 1:
            continue
        _, unsqueeze = _through(matmul.input[1], makers, ("Cast",))
        if unsqueeze is None or op(unsqueeze) != "Unsqueeze" or len(unsqueeze.input) < 2 \
                or np.asarray(consts.get(unsqueeze.input[1], [])).ravel().tolist() != [1]:
            continue
        inv_freq = inv.reshape(-1)
        outs, factors = [], []
        for node in (cos, sin):
            users = readers.get(node.output[0], [])
            scaled = _scalar_factor(users[0], consts) if len(users) == 1 else None
            factors.append(1.0 if scaled is None else scaled[0])
            outs.append(node.output[0] if scaled is None else users[0].output[0])
        if factors[0] != factors[1]:
            continue
        positions = unsqueeze.input[0]
        where = (f"(half layout, R={2 * inv_freq.size}, inv_freq {inv_name!r} "
                 f"[{inv_freq.size}] by MatMul"
                 + (f", attention factor {factors[0]:.6g}" if factors[0] != 1.0 else "")
                 + f") at Cos {cos.output[0]!r} / Sin {sin.output[0]!r}, positions "
                 f"{_origin(positions, makers, inputs)}")
        found.append(Found("rope", outs, positions, where,
                           {"inv_freq": inv_freq, "inv_freq_name": inv_name,
                            "attention_factor": np.float32(factors[0]), "layout": "half",
                            "rotary_dim": 2 * inv_freq.size, "choice": None,
                            "flat_positions": True}))
    return found


def _gptj_gather_elements(graph, consts, makers, readers) -> list[Found]:
    """GPT-J's ``[sin | cos]`` table as the TorchScript exporter writes transformers 4.x's
    ``torch.gather(embed_positions.repeat(B, 1, 1), 1, position_ids[..., None].repeat(1, 1,
    R))``: ``GatherElements(axis=1)`` of the tiled constant ``[L, R]`` (``_is_sincos``) by the
    tiled positions. The artifact: the table's rows gathered by ``position_ids [B, S]``."""
    import numpy as np

    found = []
    inputs = {v.name for v in graph.input}
    for node in graph.node:
        if op(node) != "GatherElements" or _attr(node, "axis", 0) != 1:
            continue
        table_name, _ = _through(node.input[0], makers, ("Tile", "Expand", "Identity"))
        table = consts.get(table_name)
        if table is not None and table.ndim == 3 and table.shape[0] == 1:
            table = table[0]
        if table is None or table.ndim != 2 or table.dtype != np.float32 or \
                not _is_sincos(table):
            continue
        _, unsqueeze = _through(node.input[1], makers, ("Tile", "Expand", "Identity"))
        if unsqueeze is None or op(unsqueeze) != "Unsqueeze" or len(unsqueeze.input) < 2 \
                or np.asarray(consts.get(unsqueeze.input[1], [])).ravel().tolist() not in (
                    [-1], [2]):
            continue
        positions = unsqueeze.input[0]
        length, width = table.shape
        where = (f"(GPT-J [sin | cos] table {table_name!r} [{length}, {width}]) at "
                 f"GatherElements {node.output[0]!r}, positions "
                 f"{_origin(positions, makers, inputs)}")
        found.append(Found("rope", [node.output[0]], positions, where,
                           {"table": table, "table_name": table_name, "offset": 0,
                            "squeeze": False, "sincos": True}))
    return found


def _alibi_shaped(slopes, opset: int, dims, elem: int):
    """``positions -> slopes * float32(positions)``: ALiBi's bias with the model's own slopes
    shape (``[H, 1, 1]`` times positions ``[S]`` in Bloom's export without a mask input), the
    output's shape left to onnx's inference."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgepe.graphs.model_tensors import POSITIONS

    dims = [d if d is not None else f"positions_{i}" for i, d in enumerate(dims or ["seq"])]
    # numpy's broadcast of slopes [H, 1, ..] and positions [..]: aligned on the last axis
    rank = max(slopes.ndim, len(dims))
    left = [1] * (rank - slopes.ndim) + list(slopes.shape)
    right = [1] * (rank - len(dims)) + list(dims)
    out = [b if a == 1 else a for a, b in zip(left, right, strict=True)]
    graph = helper.make_graph(
        [helper.make_node("Cast", [POSITIONS], ["positions_float"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["slopes", "positions_float"], ["bias"])], "alibi_bias",
        [helper.make_tensor_value_info(POSITIONS, elem, dims)],
        [helper.make_tensor_value_info("bias", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(np.ascontiguousarray(slopes, np.float32), "slopes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _flat_positions(pe):
    """``pe`` taking its positions ``[...]`` where it took ``[..., 1]``: an ``Unsqueeze`` on the
    last axis in front (for a model whose positions tensor has no trailing axis of 1)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    pe = onnx.ModelProto.FromString(pe.SerializeToString())
    graph = pe.graph
    value = graph.input[0]
    column, axis = f"{value.name}_column", f"{value.name}_column_axis"
    for node in graph.node:
        node.input[:] = [column if i == value.name else i for i in node.input]
    graph.node.insert(0, helper.make_node("Unsqueeze", [value.name, axis], [column]))
    graph.initializer.append(numpy_helper.from_array(np.asarray([-1], np.int64), axis))
    value.type.tensor_type.shape.dim.pop()
    onnx.checker.check_model(pe, full_check=True)
    return pe


def find_pe(model) -> list[Found]:
    """Every PE subgraph of a family ``find_pe`` knows (module doc) in ``model``."""
    graph = model.graph
    consts = _constants(graph)
    makers, readers = graph_index(graph)
    return [*_rope(graph, consts, makers, readers), *_rope_fused(graph, consts, makers, readers),
            *_learned(graph, consts, makers, readers),
            *_alibi(graph, consts, makers, readers), *_mpt_alibi(graph, consts, makers, readers),
            *_rope_matmul(graph, consts, makers, readers),
            *_gptj_gather_elements(graph, consts, makers, readers)]


def streams(model, found: list[Found]) -> list[str] | None:
    """The model inputs each candidate's positions come from, when ``found`` holds one PE per
    input stream: two or more candidates of one family whose positions are made from pairwise
    disjoint sets of model inputs (an encoder-decoder: the encoder's from ``input_ids`` or its
    mask, the decoder's from ``decoder_input_ids`` and its cache), so each stack reads exactly one
    PE. None otherwise (two PEs on one stream: graft cannot tell which is the model's)."""
    graph = model.graph
    makers, _ = graph_index(graph)
    inputs = {v.name for v in graph.input}
    if len(found) < 2 or len({f.family for f in found}) != 1:
        return None
    cones = [_ancestors(f.positions, makers)[1] & inputs if f.positions else set()
             for f in found]
    if any(not c for c in cones) or any(a & b for i, a in enumerate(cones)
                                        for b in cones[i + 1:]):
        return None
    return [", ".join(map(repr, sorted(c))) for c in cones]


def rope_tables(found: Found, max_len: int, inv_freq=None) -> dict[str, Any]:
    """``{replaced tensor: [max_len, R/2] float32}``: cos and sin rows as the model computes them
    (float32 angle ``p * inv_freq``, then cos/sin correctly rounded, times the attention factor
    in float32); the model concatenates each row with itself."""
    import numpy as np

    # The model's own float32 inv_freq (already scaled): the exact tensor it multiplied. When
    # the rope scheme computes float32 frequencies (freq_dtype=float32, issue 29's HF inputs),
    # those should be required equal to this, as ALiBi's slopes are, and the tables built there.
    inv_freq = found.params["inv_freq"] if inv_freq is None else inv_freq
    angle = np.arange(max_len, dtype=np.float32)[:, None] * inv_freq[None, :]
    factor = found.params["attention_factor"]
    cos = (np.cos(angle.astype(np.float64)).astype(np.float32) * factor).astype(np.float32)
    sin = (np.sin(angle.astype(np.float64)).astype(np.float32) * factor).astype(np.float32)
    return dict(zip(found.replaces, (cos, sin), strict=True))


def sliced_found(model, found: Found, max_len: int, elem, dims):
    """``(pe ModelProto, record)`` for half-layout RoPE with ``--mode sliced``: the model's own
    float32 ``inv_freq`` and attention factor, the default slice plan for ``max_len``
    (``graphs.sliced.default_plan``), no trigonometric op. Its distance from the tensors the
    model computed is at most the sliced bound (against the float64 definition) plus the model's
    own float32 recipe's distance from that definition (``recipe_distance``, measured over every
    position): the proof holds the grafted model to their sum (``record["proof_bound"]``)."""
    from onnx import TensorProto

    from edgepe.graphs import sliced as sl
    from edgepe.graphs.model_tensors import recipe_distance, sliced_rope

    if found.params.get("choice") is not None:
        raise BadParameterError("--mode sliced: longrope picks one of two inv_freq at run time; "
                                "graft it as tables (--mode table)")
    if dims is None or not dims or dims[-1] != 1:
        raise BadParameterError(
            f"the positions tensor {found.positions!r} of the PE graft found has shape "
            f"{dims}; graft takes [..., 1] (positions[..., None])")
    opset = _opset(model)
    # BitShift/BitwiseAnd need opset 18; below it, the truncating-Cast slicing (exact < 2^24)
    lowering = "bitwise" if opset >= 18 else "trunc"
    if lowering == "trunc" and max_len > sl.TRUNC_LIMIT:
        raise BadParameterError(f"--mode sliced in an opset-{opset} model slices by float "
                                f"arithmetic, exact below {sl.TRUNC_LIMIT} positions; got "
                                f"--max-len {max_len}")
    widths = sl.default_plan(max_len)
    inv_freq = found.params["inv_freq"]
    attention = float(found.params["attention_factor"])
    pe = sliced_rope(inv_freq, widths, found.replaces, opset, dims,
                     elem or TensorProto.INT64, attention, lowering)
    bound = sl.bound(widths, attention)
    distance = recipe_distance(inv_freq, max_len, attention)
    record = {"scheme": "rope", "layout": found.params["layout"],
              "rotary_dim": found.params["rotary_dim"],
              "inv_freq": {"initializer": found.params["inv_freq_name"], "dtype": "float32",
                           "values": found.params["inv_freq"].tolist()},
              "attention_factor": attention, "max_len": max_len, "mode": "sliced",
              "slices": list(widths), "lowering": lowering, "quantize": "none",
              "bound": bound, "recipe_distance": distance, "proof_bound": bound + distance,
              "replaces": found.replaces, "positions": found.positions}
    return pe, record


def check_hf_config(found: Found, config: dict, max_len: int | None) -> tuple[int | None, dict]:
    """``(max_len, record)``: the PE ``found`` checked against the model's own ``config.json``
    (``--from-hf-config``, issue 29), translated by ``edgepe.schemes.hf_config``: the family must
    be the config's scheme, and RoPE's ``inv_freq`` must equal, bit for bit, the frequencies of
    edgepe's ``rope`` scheme for the config's parameters (``freq_dtype=float32``: computed as
    transformers computes them), so the artifact is that scheme's, read from the model or not.
    ``max_len``: the given one, else the config's ``max_position_embeddings`` (None for a
    position table the model reads: its rows are its length)."""
    import numpy as np

    from edgepe.schemes import build, resolve
    from edgepe.schemes.hf_config import check_dynamic_ntk, from_hf_config

    t = from_hf_config(config)
    family = "rope" if found.family == "rope" else found.family
    if family == "rope":
        check_dynamic_ntk(t, max_len if max_len is not None else t.max_len or DEFAULT_MAX_LEN,
                          "give --max-len at most that")
    if t.scheme != family:
        raise BadParameterError(f"--from-hf-config describes a {t.scheme!r} model; the PE graft "
                                f"found is {found.family} ({found.where})")
    length = max_len if max_len is not None else t.max_len
    if max_len is None and "table" in found.params:  # a table the model reads keeps its rows
        length = None  # (OPT's: max_position_embeddings + its offset 2)
    record = {"scheme": t.scheme, "model_type": config.get("model_type"),
              "params": {k: list(v) if isinstance(v, tuple) else v for k, v in t.params.items()}}
    if family == "rope" and not found.params.get("sincos"):
        choice = found.params.get("choice")
        sets = [(found.params["inv_freq_name"], found.params["inv_freq"], {})]
        if choice is not None:  # longrope (issue 40): the short set (if false) and the long one
            original = t.params.get("original_max_position_embeddings", 1)
            short = {"seq_len": original} if t.params["rope_type"] == "longrope" else {}
            longer = {"seq_len": original + 1} if short else {}
            sets = [(choice["names"][1], choice["if_false"], short),
                    (choice["names"][0], choice["if_true"], longer)]
        for name, values, extra in sets:
            rope = build(resolve("rope", length or DEFAULT_MAX_LEN, d_model=t.d_model,
                                 params={**t.params, **extra}))
            mine = rope.inv_freq.detach().numpy().astype(np.float32)
            mine = mine[: found.params["rotary_dim"] // 2]
            theirs = np.asarray(values, np.float32)
            if mine.shape != theirs.shape or not np.array_equal(mine, theirs):
                gap = (float(np.abs(mine.astype(np.float64) - theirs).max())
                       if mine.shape == theirs.shape else None)
                raise BadParameterError(
                    f"the model's inv_freq {name!r} {list(theirs.shape)} "
                    f"differs from edgepe's rope for this config ({list(mine.shape)}"
                    + (f", by up to {gap:.3g}" if gap is not None else "")
                    + "): the config is not this model's, or its scaling is not static (dynamic "
                    "NTK); graft without --from-hf-config keeps the model's own")
        ours = float(rope.scale[0])
        theirs_factor = float(np.float32(found.params["attention_factor"]))  # every rope's
        if ours != theirs_factor:  # yarn's and longrope's cos/sin scale, float32 both
            raise BadParameterError(
                f"the model scales cos/sin by {theirs_factor:.9g}, edgepe's rope for this config "
                f"by {ours:.9g} (the attention factor): the config is not this model's")
        record["inv_freq"] = ("equal to edgepe's rope scheme (freq_dtype=float32) bit for bit"
                              + (", short_factor's and long_factor's" if choice else ""))
    if found.family == "t5-bias":  # buckets fitted by their values (graft/t5.py, issue 40)
        lo, hi = found.params["max_distance_range"]
        mine = (found.params["num_buckets"], found.params["heads"])
        if (t.params["num_buckets"], t.heads) != mine or not lo <= t.params["max_distance"] <= hi:
            raise BadParameterError(
                f"--from-hf-config describes T5's bias with num_buckets {t.params['num_buckets']}"
                f", max_distance {t.params['max_distance']}, {t.heads} heads; the model's "
                f"{found.params['direction']} buckets {found.replaces[0]!r} are those of "
                f"num_buckets {mine[0]}, max_distance {lo if lo == hi else f'{lo}..{hi}'}, "
                f"gathering {mine[1]} heads: the config is not this model's")
        # the config's own value, one of those giving the model's buckets (graft/t5.py)
        found.params["max_distance"] = t.params["max_distance"]
        record["buckets"] = ("equal to edgepe's t5-bias for this config's num_buckets and "
                             "max_distance, at every relative position up to 2^20")
    if found.family == "sinusoidal" and found.params.get("layout") == "half":  # Marian
        import torch

        table = found.params["table"]
        rows, width = table.shape
        # (hf_config gives an offset with fairseq frequencies only: one test covers both)
        if t.d_model != width or t.params.get("frequencies", "base") != "base":
            raise BadParameterError(
                f"--from-hf-config describes sinusoidal d_model {t.d_model} with "
                f"{t.params}; the PE found is Marian's ({found.where})")
        mine = build(resolve("sinusoidal", rows, d_model=width, params=t.params)).encode(
            torch.arange(rows)).numpy()
        gap = float(np.abs(mine.astype(np.float64) - table).max())
        if gap > 4 * 2.0**-23 + rows * 2.0**-24:  # the float32 angle p w against float64
            raise BadParameterError(
                f"the model's table {found.params['table_name']!r} differs from edgepe's "
                f"sinusoidal for this config by {gap:.3g}: the config is not this model's")
        record["table"] = (f"within {gap:.3g} of edgepe's sinusoidal (layout=half) for this "
                           "config (its float32 angle p * w against the model's float64)")
    return length, record


def _check_size(values: int, max_len: int, quantize: str, limit: int) -> None:
    stored = values * (1 if quantize == "int8" else 4)
    if stored > limit:
        raise BadParameterError(
            f"the tables for {max_len} positions would be {stored:,} B, over graft's "
            f"{limit:,} B limit; give fewer positions (--max-len), --quantize int8 or --mode "
            "sliced")


def build_found(model, found: Found, max_len: int | None, quantize: str = "none",
                table_bytes_limit: int = TABLE_BYTES_LIMIT, mode: str | None = None):
    """``(pe ModelProto, record)``: the artifact for ``found``, at the model's opset.
    ``max_len``: RoPE's table rows (default ``DEFAULT_MAX_LEN``); a learned table keeps its own.
    ``mode`` (RoPE): ``table`` (gathered rows), ``sliced`` (``sliced_found``: cos/sin from the
    position's bit slices, no table of positions), or ``None``: the table while it fits
    ``table_bytes_limit``, else sliced (issues 29 and 34)."""
    import hashlib

    import numpy as np
    from onnx import TensorProto

    from edgepe.graphs.model_tensors import gathered_tables, int8_tables

    if found.params.get("whole"):  # Whisper's encoder table, added whole (issue 40 point 2)
        return build_whole(model, found, quantize, mode)  # L is the model's: no max_len
    elem, dims = _value_type(model, found.positions)
    flat = found.params.get("flat_positions", False)
    if flat and dims is not None:  # Optimum's position_ids [B, S]: the artifact unsqueezes them
        dims = [*dims, 1]
    if mode not in (None, "table", "sliced"):
        raise BadParameterError(f"--mode {mode!r}: a PE graft finds goes in as a table or "
                                "sliced (RoPE)")
    rope = found.family == "rope" and not found.params.get("sincos")
    if mode == "sliced" and not rope:
        raise BadParameterError(f"--mode sliced computes RoPE's half-layout cos/sin; the PE "
                                f"found is {found.family} ({found.where})")
    if rope:
        max_len = max_len or DEFAULT_MAX_LEN
        choice = found.params.get("choice")
        # both tables' values per position: R/2 each, or the angle's own columns each (issue 40:
        # an interleaved or per-frequency angle found by its values is stored as it is)
        width = 2 * found.params.get("columns", found.params["rotary_dim"] // 2)
        # float32 bytes: read only below, for one table set (no choice) not quantised
        stored = max_len * width * 4
        fused = found.params.get("fused")
        if mode == "sliced" and fused:
            raise BadParameterError("--mode sliced makes RoPE's cos/sin [.., R]; this model's "
                                    "RotaryEmbedding ops read [.., R/2] caches: they go in as "
                                    "tables (--mode table)")
        if mode == "sliced" and "columns" in found.params:
            raise BadParameterError(f"--mode sliced makes RoPE's half-layout cos/sin; this "
                                    f"model's angle is {found.params['layout']}: it goes in as "
                                    "tables (--mode table)")
        if mode == "sliced" or (mode is None and stored > table_bytes_limit
                                and quantize == "none" and choice is None and not fused
                                and "columns" not in found.params):
            pe, record = sliced_found(model, found, max_len, elem, dims)
            return (_flat_positions(pe) if flat else pe), record
        _check_size(max_len * width * (2 if choice else 1), max_len,
                    quantize, table_bytes_limit)
        tables = rope_tables(found, max_len)
        alternative = None if choice is None else rope_tables(found, max_len, choice["if_true"])
        if dims is None or not dims or dims[-1] != 1:
            raise BadParameterError(
                f"the positions tensor {found.positions!r} of the PE graft found has shape "
                f"{dims}; graft takes [..., 1] (positions[..., None])")
        record = {"scheme": "rope", "layout": found.params["layout"],
                  "rotary_dim": found.params["rotary_dim"],
                  "inv_freq": {"initializer": found.params["inv_freq_name"], "dtype": "float32",
                               "values": found.params["inv_freq"].tolist()},
                  "attention_factor": float(found.params["attention_factor"])}
        if choice is not None:
            record["inv_freq_if"] = {"condition": choice["condition"],
                                     "initializer": choice["names"][0],
                                     "values": choice["if_true"].tolist()}
        # fused: the op's [.., R/2]; columns: the angle's own columns, stored as they are
        squeeze = True
        duplicate = not found.params.get("fused") and "columns" not in found.params
    elif found.family == "alibi" and "length" in found.params:  # MPT: the constant computed
        from edgepe.graphs.model_tensors import alibi_distance_bias

        if quantize != "none":
            raise BadParameterError("--quantize int8: MPT's ALiBi bias goes in as slope x "
                                    "distance, no table to quantise")
        length = found.params["length"]
        pe = alibi_distance_bias(found.params["slopes"], length, _opset(model))
        return pe, {"scheme": "alibi", "heads": int(found.params["slopes"].size),
                    "slopes": "paper", "mode": "compute", "quantize": "none", "max_len": length,
                    "model_table": found.params["table_name"], "replaces": found.replaces,
                    "positions": None}
    elif found.family == "alibi":  # no table: edgepe's slopes, proven equal to the model's
        from edgepe.graphs.model_tensors import alibi_bias
        from edgepe.schemes.alibi import slopes as alibi_slopes

        model_slopes = found.params["slopes"]
        heads = model_slopes.shape[0]
        mine = alibi_slopes(heads).numpy().reshape(heads, 1)
        if not np.array_equal(mine, model_slopes):
            raise BadParameterError(
                f"the model's ALiBi slopes {found.params['slopes_name']!r} differ from the ALiBi "
                f"paper's rule for {heads} heads (edgepe's alibi) by up to "
                f"{float(np.abs(mine - model_slopes).max()):.3g}; graft keeps the model as is")
        if quantize != "none":
            raise BadParameterError("--quantize int8: ALiBi's bias is slope x position, no "
                                    "table to quantise")
        if "slopes_shape" in found.params:  # found by its values (issue 40): its own shapes
            pe = _alibi_shaped(mine.reshape(found.params["slopes_shape"]), _opset(model), dims,
                               elem or TensorProto.INT64)
        else:
            pe = alibi_bias(mine, _opset(model), dims or ["batch", 1, "seq"],
                            positions_type=elem or TensorProto.INT64)
        return pe, {"scheme": "alibi", "heads": heads, "slopes": "paper",
                    "model_slopes": found.params["slopes_name"], "mode": "compute",
                    "quantize": "none", "max_len": max_len or DEFAULT_MAX_LEN,
                    "replaces": found.replaces, "positions": found.positions}
    else:  # learned: the model's own table, gathered by the model's own positions
        table = found.params["table"]
        if max_len is not None and max_len != table.shape[0]:
            raise BadParameterError(f"--max-len {max_len}: the model's position table "
                                    f"{found.params['table_name']!r} has {table.shape[0]} rows")
        max_len = table.shape[0]
        tables = {found.replaces[0]: table}
        record = {"scheme": found.family, "table": found.params["table_name"],
                  "offset": found.params["offset"]}
        if found.params["sincos"]:
            record.update(layout="interleaved", rotary_dim=table.shape[1], table_layout="sin|cos")
        if found.family == "sinusoidal" and found.params.get("layout") == "half":  # Marian
            record.update(layout="half", frequencies="base", base=10000.0,
                          definition_distance=found.params["definition_distance"])
        squeeze, duplicate = found.params["squeeze"], False
        dims = dims if dims is not None else ["batch", "seq"] + ([1] if squeeze else [])
    _check_size(sum(t.size for t in tables.values()), max_len, quantize, table_bytes_limit)
    alternative = alternative if found.family == "rope" and "choice" in found.params else None
    pe = gathered_tables(tables, _opset(model), dims, positions_type=elem or TensorProto.INT64,
                         squeeze=squeeze, duplicate=duplicate, quantize=quantize,
                         if_true=alternative, condition_shape=None if alternative is None else
                         _value_type(model, found.params["choice"]["condition"])[1])
    if flat:
        pe = _flat_positions(pe)
    digest = hashlib.sha256()
    for t in [*tables.values(), *(alternative or {}).values()]:
        digest.update(t.tobytes())
    if alternative:  # the PE's second input: the model's own run-time condition
        record["condition"] = found.params["choice"]["condition"]
    record.update({"max_len": max_len, "mode": "table", "quantize": quantize,
                   "tables_sha256": digest.hexdigest(), "replaces": found.replaces,
                   "positions": found.positions})
    if quantize == "int8":
        record["quant"] = {"bound": max(b for _, _, b in int8_tables(tables).values())}
    return pe, record


def build_whole(model, found: Found, quantize: str, mode: str | None):
    """``(pe ModelProto, record)`` for a table the model adds whole (``discover.
    whole_sinusoids``: Whisper's encoder ``sinusoids(L, D)``, issue 40 point 2): edgepe's
    ``sinusoidal`` scheme (``WHISPER_PARAMS``) for positions ``0 .. L - 1``, exported
    as edgepe exports it (``mode`` ``table``, the default: an equal table rebuilt by edgepe;
    ``sliced``: cos/sin from bit slices and small tables, no ``[L, D]`` table and no trig op)
    at the model's opset, its positions a ``Range`` inside the PE (no input: the table's rows
    are the positions, as ``embed_positions(arange(L))`` made them; the grafted Add broadcasts
    ``[L, D]`` against the encoder's ``[B, L, D]`` exactly as the constant did, so a wrong
    number of frames fails there as before). No ``max_len``: the model fixes ``L``
    (``--max-len`` sizes the other PEs of the model, a decoder's).

    ``record["proof_bound"]``: how far the PE may be from the model's table, per element: the
    rebuilt table's measured distance from it (``table``: 0 when edgepe's float32 recipe
    reproduces transformers' bit for bit), or the sliced graph's bound against the float64
    definition plus the model table's measured distance from that definition (``sliced``)."""
    import io

    import numpy as np
    import torch
    from onnx import helper, numpy_helper

    from edgepe.schemes import build

    table = found.params["table"]
    length, width = table.shape
    if mode not in (None, "table", "sliced"):
        raise BadParameterError(f"--mode {mode!r}: Whisper's encoder table goes in as a table or "
                                "sliced")
    opset = _opset(model)
    # BitShift/BitwiseAnd need opset 18; below it the truncating-Cast slicing (as sliced_found)
    lowering = "bitwise" if opset >= 18 or mode != "sliced" else "trunc"
    if quantize == "int8" and opset < INT8_OPSET:  # edgepe's int8 graphs: DequantizeLinear
        raise BadParameterError(                   # per channel, as the reference evaluator has it
            f"--quantize int8: edgepe's int8 sinusoidal graph for Whisper's encoder table "
            f"{found.params['table_name']!r} needs opset {INT8_OPSET}, the model is opset "
            f"{opset}; graft it without --quantize (or --mode sliced: no table)")
    config = make_config("sinusoidal", length, d_model=width, params=WHISPER_PARAMS,
                         mode=mode or "table", quantize=quantize, lowering=lowering, opset=opset)
    module = build(config.scheme, seed=config.seed)
    prepared = prepare(config, module)
    buffer = io.BytesIO()
    prepared.write(buffer)
    data = buffer.getvalue()
    manifest = prepared.manifest  # (no file's sha256: _slim drops it from the record)
    pe = parse_model(data, "the built artifact")
    # the positions 0 .. L - 1 inside the PE: Range(0, L, 1) feeds the artifact's input
    given = pe.graph.input[0].name
    ends = [numpy_helper.from_array(np.asarray(v, np.int64), f"{given}/range_{k}")
            for k, v in (("start", 0), ("limit", length), ("delta", 1))]
    pe.graph.initializer.extend(ends)
    pe.graph.node.insert(0, helper.make_node("Range", [e.name for e in ends], [given],
                                             name=f"{given}/range"))
    del pe.graph.input[:]
    with torch.no_grad():  # edgepe's values at every row, against the model's constant
        mine = module.encode(torch.arange(length)).numpy().astype(np.float64)
    distance = float(np.abs(mine - table).max())
    w = module.inv_freq.detach().numpy().astype(np.float64)
    angle = np.arange(length, dtype=np.float64)[:, None] * w[None, :]
    definition = float(np.abs(np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
                              - table).max())
    record = {"scheme": "sinusoidal", **WHISPER_PARAMS, "table": found.params["table_name"],
              "added_at": found.params["add"], "max_len": length, "mode": config.mode,
              "quantize": quantize, "replaces": found.replaces, "positions": None,
              "positions_from": f"Range(0, {length}) inside the PE (the table's rows)",
              "table_distance": distance, "manifest": _slim(manifest)}
    if config.mode == "sliced":
        sliced = manifest["sliced"]
        record.update(slices=sliced["slices"], bound=sliced["bound"],
                      definition_distance=definition,
                      proof_bound=sliced["bound"] + definition)
    else:
        record["proof_bound"] = distance
    if quantize == "int8":  # int8 rows of edgepe's table: its bound on top of the table's distance
        record["quant"] = {"bound": float(manifest["quant"]["bound"])}
        record["proof_bound"] += record["quant"]["bound"]
    return pe, record
