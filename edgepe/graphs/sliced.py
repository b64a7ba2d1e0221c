"""Trig-free sin/cos from position bits and small tables: ``--mode sliced`` (issue 34).

The position is split into bit slices, ``|pos| = sum_c s_c 2^(k_c)``, slice ``c`` of width
``w_c`` at shift ``k_c`` (``k_0 = 0``, ``k_(c+1) = k_c + w_c``). For every slice a table holds the
cos and sin of its angles ``s 2^(k_c) w_i`` (``s < 2^(w_c)``, ``w_i`` the module's stored float32
inverse frequencies), computed in float64 and stored as float32; angle addition combines them::

    cos(a + b) = cos a cos b - sin a sin b,    sin(a + b) = sin a cos b + cos a sin b.

No Sin or Cos runs: slicing is ``BitShift``/``BitwiseAnd`` on uint64 (``lowering="bitwise"``, as
the bit family does) or a float ``Mul`` by ``2^-k`` with a truncating ``Cast`` to int32 and int32
``Sub``/``Mul`` (``lowering="trunc"``, for targets without bitwise ops, ``Mod`` or ``Floor``:
CoreML), the rest is ``Gather``, ``Mul`` and ``Add``. ``lowering="clip32"`` is ``trunc`` with every
Gather index clamped by an int32 ``Clip`` to its table (targets that must see indices proven
``>= 0``: QNN; a position past the plan then reads the table's edge instead of failing).

Graph form. The output columns ``j`` are each the cos or the sin of one slot ``i(j)``. The top
(most significant) slice's tables are expanded in the graph, per column, into ``H`` (``cos`` for a
cos column, ``sin`` for a sin column) and ``H'`` (``-sin`` / ``cos``); the lowest slice's into
``L = cos`` and ``L' = sin`` of the column's slot. Then, for two slices::

    out = H[s_1] * L[s_0] + H'[s_1] * L'[s_0]

is ``cos_1 cos_0 - sin_1 sin_0`` in a cos column and ``sin_1 cos_0 + cos_1 sin_0`` in a sin column:
four Gathers, two Muls and one Add over ``[N, columns]``. A middle slice rotates ``(L, L')`` by
its own cos/sin first (four Gathers, four Muls, two Adds). Negative positions use
``cos(-x) = cos x``, ``sin(-x) = -sin x``: ``H`` and ``H'`` get a second block of rows with the
sin columns negated, read at ``s_top + 2^(w_top)`` when ``pos < 0``. Every expanded table is built
from the stored ones by ``Gather``/``Concat``/``Mul`` on initializers only, which onnxruntime folds
at session load: the file holds ``sum_c 2^(w_c) x slots x 2`` float32 and no more. An attention
factor (yarn) is folded into the stored top tables (``fl(a cos)``, ``fl(a sin)`` from float64).

Error bound (against the float64 definition: ``a_i cos(pos w_i)``, ``a_i sin(pos w_i)`` in
float64 with the stored float32 ``w_i`` and ``a_i``; ``pos w_i`` is exact in float64 while
``|pos| < 2^29``; ``edgepe.schemes.definition``).
Let ``u = 2^-24`` (float32's unit roundoff) and ``U(x) = 2^-25`` for ``x <= 1``, ``2^(e - 25)``
for ``1 < x <= 2^e``: half an ulp of a value below ``x`` in magnitude. With at most ``a =
max a_i`` in the top tables and 1 in the others, for one position and column:

- one slice: the stored value itself: ``U(a)``;
- two slices: the table roundings ``|L e_H + L' e_H'| <= sqrt(2) U(a)`` and
  ``|H e_L + H' e_L'| <= sqrt(2) a U(1)`` (Cauchy-Schwarz, ``L^2 + L'^2 = 1``), the two products'
  roundings ``<= u (|H L| + |H' L'|) <= u a`` and the Add's ``<= U(a)``::

      B_2 = sqrt(2) U(a) + sqrt(2) a 2^-25 + a 2^-24 + U(a)      (a = 1: 1.737e-7)

- each middle slice adds to the 2-norm ``E`` of the ``(L, L')`` error (``E_0 = sqrt(2) 2^-25``) at
  most ``sqrt(2) 2^-25`` (its table) ``+ sqrt(2) 3 2^-25`` (two products and a sum per component):
  ``E <- E (1 + 2^-24) + 4 sqrt(2) 2^-25``; the top stage then gives ``B = a (1 + 2^-24) E +
  sqrt(2) U(a) + a 2^-24 + U(a)`` (three slices, ``a = 1``: 3.42e-7).

``bound(widths, a)`` computes it (second-order terms ``O(2^-48)`` covered by a ``1 + 2^-20``
factor); it does not depend on the position. tests/test_sliced.py pins it and measures every
position of every slice plan it builds.

Graft: ``cos_sin(g, positions, inv_freq, widths, ...)`` adds the nodes to any ``Graph`` and returns
``(cos, sin)`` names, ``[..., k]`` for positions ``[...]``; ``subgraph(inv_freq, widths)`` gives the
nodes and initializers standalone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgepe.contract.errors import BadParameterError
from edgepe.graphs import trig
from edgepe.graphs._common import POSITIONS, Graph, make_model, output, positions_input

LOWERINGS = ("bitwise", "trunc", "clip32")
# float32 holds every integer up to 2^24, so the trunc lowering's Cast is exact up to there; the
# float64 definition's angle pos * w (w a float32, 24 significant bits) is exact below 2^29.
TRUNC_LIMIT = 2**24
DEFINITION_BITS = 29
# Past this many table bytes a plan is refused (a plan of one 20-bit slice is a full cache).
MAX_SLICE_BITS = 16
COS, SIN = 0, 1


def default_plan(max_len: int) -> tuple[int, ...]:
    """Slice widths, most significant first, covering positions ``0 .. max_len - 1``: one slice
    up to 64 positions (the tables are the cache), two near-equal slices up to ``2^24`` (the
    fastest form: four Gathers, two Muls, an Add), then slices of at most 12 bits."""
    bits = max(1, (int(max_len) - 1).bit_length())
    count = 1 if bits <= 6 else 2 if bits <= 24 else math.ceil(bits / 12)
    low = bits // count
    extra = bits - low * count
    return tuple(low + 1 if c < extra else low for c in range(count))


def parse_plan(text: Any, max_len: int) -> tuple[int, ...]:
    """``--slices 8,7`` (widths, most significant first), or the default plan for ``None``;
    refused (one line) when a width is out of ``1 .. MAX_SLICE_BITS`` or the slices do not cover
    ``max_len``."""
    if text is None:
        return default_plan(max_len)
    try:
        items = text.split(",") if isinstance(text, str) else list(text)
        widths = tuple(int(str(v).strip()) for v in items)
    except (TypeError, ValueError):
        raise BadParameterError(f"--slices must be comma-separated bit widths, most significant "
                                f"first (e.g. 8,7), got {text!r}") from None
    if not widths or any(not 1 <= w <= MAX_SLICE_BITS for w in widths):
        raise BadParameterError(f"--slices widths must be 1 to {MAX_SLICE_BITS} bits each, got "
                                f"{text!r}")
    total = sum(widths)
    if (1 << total) < max_len:
        raise BadParameterError(f"--slices {text} cover positions below 2^{total} = {1 << total}, "
                                f"fewer than max_len {max_len}: add bits")
    if total > DEFINITION_BITS:
        raise BadParameterError(f"--slices {text} span {total} bits; positions are defined below "
                                f"2^{DEFINITION_BITS} (pos * w exact in float64)")
    return widths


def plan_text(widths: Sequence[int]) -> str:
    return ",".join(str(int(w)) for w in widths)


def position_limit(widths: Sequence[int], lowering: str = "bitwise") -> int:
    """``|pos|`` up to which the sliced graph is defined: what its slices hold."""
    limit = (1 << sum(widths)) - 1
    return limit if lowering == "bitwise" else min(limit, TRUNC_LIMIT)


def _half_ulp_below(x: float) -> float:
    """``U(x)``: half an ulp of float32 values of magnitude at most ``x``."""
    e = max(0, math.ceil(math.log2(x))) if x > 1 else 0
    return 2.0 ** (e - 25)


def bound(widths: Sequence[int], attention: float = 1.0) -> float:
    """The position-independent max abs error against the float64 definition (module doc)."""
    a = max(1.0, float(attention))
    ua, u1, u = _half_ulp_below(a), 2.0**-25, 2.0**-24
    r2 = math.sqrt(2.0)
    if len(widths) == 1:
        total = ua
    else:
        e = r2 * u1
        for _ in range(len(widths) - 2):
            e = e * (1 + u) + 4 * r2 * u1
        total = a * (1 + u) * e + r2 * ua + a * u + ua
    return total * (1 + 2.0**-20)


def slice_tables(inv_freq: np.ndarray, widths: Sequence[int],
                 scale: np.ndarray | None = None,
                 top_extra: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per slice, least significant first: ``(cos, sin)`` float32 ``[2^w, k]`` of the angles
    ``s 2^shift w_i``, computed in float64 (exact products); the top slice times ``scale``, with
    one more row (``s = 2^w``) when ``top_extra`` (the bitwise graph's negative rows use it)."""
    w = np.asarray(inv_freq, dtype=np.float32).astype(np.float64)
    tables = []
    shift = 0
    low_first = list(reversed([int(v) for v in widths]))
    for c, width in enumerate(low_first):
        rows = (1 << width) + (1 if top_extra and c == len(low_first) - 1 else 0)
        s = np.arange(rows, dtype=np.float64) * float(1 << shift)
        angle = s[:, None] * w[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
        if c == len(low_first) - 1 and scale is not None:
            a = np.asarray(scale, dtype=np.float32).astype(np.float64)[None, :]
            cos, sin = cos * a, sin * a
        tables.append((cos.astype(np.float32), sin.astype(np.float32)))
        shift += width
    return tables


def _slice_indices(g: Graph, positions: str, widths_low: list[int], lowering: str,
                   prefix: str) -> tuple[list[str], str]:
    """Per slice (least significant first) the int index ``s_c`` of ``|pos|``, and the top
    index with ``2^(w_top)`` added where ``pos < 0``."""
    shifts = np.cumsum([0, *widths_low[:-1]]).tolist()
    top_rows = 1 << widths_low[-1]
    if lowering == "bitwise":
        # q_c = floor(pos / 2^k_c) = (pos - (pos & (2^k_c - 1))) / 2^k_c: an exact int64 Div of
        # a multiple (two's complement AND: pos mod 2^k_c, >= 0 for negative pos too); slice
        # s_c = q_c & (2^w_c - 1); the top q is signed and Gather reads a negative one from the
        # table's end, where the negative rows are (columns_graph). 3 nodes for two slices.
        idx, top = [], positions
        for c, (k, w) in enumerate(zip(shifts, widths_low, strict=True)):
            if k == 0:
                q = positions
            else:
                below = (idx[0] if c == 1 else g.op(
                    "BitwiseAnd", positions, g.const((1 << k) - 1, np.int64, f"{prefix}below{c}")))
                q = g.op("Div", g.op("Sub", positions, below),
                         g.const(1 << k, np.int64, f"{prefix}step{c}"))
            if c < len(widths_low) - 1:
                idx.append(g.op("BitwiseAnd", q, g.const((1 << w) - 1, np.int64,
                                                          f"{prefix}mask{c}")))
            else:
                top = q
        return idx, top
    if lowering not in ("trunc", "clip32"):
        raise BadParameterError(f"--lowering {lowering} does not apply to --mode sliced; it "
                                f"takes: {', '.join(LOWERINGS)}")
    # trunc: float32 |pos| (exact up to 2^24), Mul by 2^-k (exact), truncating Cast to int32
    # (a value >= 0: floor), int32 Sub/Mul; [pos < 0] = Clip(-x, 0, 1) (x is an integer) and
    # |x| = x (1 - 2 [pos < 0]): every product exact, no Abs, Max or comparison.
    x = g.cast(positions, "float32")
    minus = g.op("Mul", x, g.const(-1.0, np.float32, f"{prefix}minus_one"))
    negf = g.op("Clip", minus, g.const(0.0, np.float32, f"{prefix}clip_low"),
                g.const(1.0, np.float32, f"{prefix}clip_high"))
    sign = g.op("Sub", g.const(1.0, np.float32, f"{prefix}one"),
                g.op("Mul", negf, g.const(2.0, np.float32, f"{prefix}two")))
    a = g.op("Mul", x, sign)
    neg = g.cast(negf, "int32")
    quotients = []
    for c, k in enumerate(shifts):
        if k == 0:
            quotients.append(g.cast(a, "int32"))
        else:
            scaled = g.op("Mul", a, g.const(np.ldexp(1.0, -k), np.float32, f"{prefix}down{c}"))
            quotients.append(g.cast(scaled, "int32"))
    idx = []
    for c in range(len(widths_low) - 1):  # s_c = q_c - q_(c+1) 2^w_c
        up = g.op("Mul", quotients[c + 1], g.const(1 << widths_low[c], np.int32,
                                                   f"{prefix}up{c}"))
        idx.append(g.op("Sub", quotients[c], up))
    rows = g.const(top_rows, np.int32, f"{prefix}top_rows")
    top = g.op("Add", quotients[-1], g.op("Mul", neg, rows))
    if lowering == "clip32":
        zero = g.const(0, np.int32, f"{prefix}index_low")
        idx = [g.op("Clip", v, zero, g.const((1 << w) - 1, np.int32, f"{prefix}index_high{c}"))
               for c, (v, w) in enumerate(zip(idx, widths_low, strict=False))]
        top = g.op("Clip", top, zero, g.const(2 * top_rows - 1, np.int32, f"{prefix}top_high"))
    return idx, top


def columns_graph(g: Graph, positions: str, inv_freq: np.ndarray, widths: Sequence[int],
                  slots: Sequence[int], kinds: Sequence[int], scale: np.ndarray | None = None,
                  lowering: str = "bitwise", prefix: str = "sliced_") -> str:
    """Add to ``g`` the sliced computation of ``[..., J]`` float32 for positions ``[...]``:
    column ``j`` is ``scale_i cos(pos w_i)`` (``kinds[j] == COS``) or ``scale_i sin(pos w_i)``
    (``SIN``) of slot ``i = slots[j]``; ``inv_freq``/``scale`` float32 ``[k]``; ``widths`` most
    significant first. Returns the output's name."""
    widths_low = list(reversed([int(w) for w in widths]))
    signed = lowering == "bitwise"  # the top index is floor(pos / 2^k), negative below 0
    tables = slice_tables(inv_freq, widths, scale, top_extra=signed)
    names = [(g.const(cos, np.float32, f"{prefix}cos{c}"), g.const(sin, np.float32,
                                                                   f"{prefix}sin{c}"))
             for c, (cos, sin) in enumerate(tables)]
    index_type = np.int64 if lowering == "bitwise" else np.int32  # CoreML: int32 indices
    slot_idx = g.const(np.asarray(slots, dtype=index_type), index_type, f"{prefix}slots")
    kinds = np.asarray(kinds)
    is_sin = (kinds == SIN).astype(np.float32)[None, :]

    def expand(t: str) -> str:  # [rows, k] -> [rows, J]: the column's slot
        return g.op("Gather", t, slot_idx, axis=1)

    low_idx, top_idx = _slice_indices(g, positions, widths_low, lowering, prefix)
    cos_t, sin_t = (expand(t) for t in names[-1])
    # H: cos in cos columns, sin in sin columns; H': -sin / cos. Rows 2^w..: pos < 0 (sin
    # columns negated). Built from initializers only: folded at session load.
    sin_mask = g.const(is_sin, np.float32, f"{prefix}sin_columns")
    cos_mask = g.const(1 - is_sin, np.float32, f"{prefix}cos_columns")
    flip = g.const(1 - 2 * is_sin, np.float32, f"{prefix}negative_rows")
    h = g.op("Add", g.op("Mul", cos_t, cos_mask), g.op("Mul", sin_t, sin_mask))
    h2 = g.op("Sub", g.op("Mul", cos_t, sin_mask), g.op("Mul", sin_t, cos_mask))
    rows = 1 << widths_low[-1]
    # Rows 0 .. R-1: s = 0 .. R-1. Rows R .. 2R-1 (what Gather reads for an index -R .. -1):
    # bitwise, s = -R .. -1, the stored rows R .. 1 with the sin columns negated; trunc/clip32
    # index |pos|'s slices and add R for pos < 0, so rows R + s are rows s negated.
    def rows_of(start: int, stop: int, step: int, name: str):
        return [g.const([v], index_type, f"{prefix}{name}_{what}")
                for what, v in (("start", start), ("stop", stop), ("axis", 0), ("step", step))]

    keep = rows_of(0, rows, 1, "top_rows_kept")
    mirror = rows_of(rows, 0, -1, "top_rows_mirrored") if signed else keep

    # bitwise: cos(-x) = cos x, sin(-x) = -sin x entry by entry, so H' (-sin | cos) flips its
    # cos columns; trunc/clip32 flip the sin of the whole sum: the sin columns of both.
    flip2 = g.const(2 * is_sin - 1 if signed else 1 - 2 * is_sin, np.float32,
                    f"{prefix}negative_rows2")

    def both_signs(t: str, sign: str) -> str:
        return g.op("Concat", g.op("Slice", t, *keep),
                    g.op("Mul", g.op("Slice", t, *mirror), sign), axis=0)

    h = both_signs(h, flip)
    top_h = g.op("Gather", h, top_idx, axis=0)
    if len(widths_low) == 1:
        return top_h
    h2 = both_signs(h2, flip2)
    low_c = g.op("Gather", expand(names[0][0]), low_idx[0], axis=0)
    low_s = g.op("Gather", expand(names[0][1]), low_idx[0], axis=0)
    for c in range(1, len(widths_low) - 1):  # rotate (L, L') by the middle slice's angle
        tc = g.op("Gather", expand(names[c][0]), low_idx[c], axis=0)
        ts = g.op("Gather", expand(names[c][1]), low_idx[c], axis=0)
        low_c, low_s = (g.op("Sub", g.op("Mul", tc, low_c), g.op("Mul", ts, low_s)),
                        g.op("Add", g.op("Mul", ts, low_c), g.op("Mul", tc, low_s)))
    top_h2 = g.op("Gather", h2, top_idx, axis=0)
    return g.op("Add", g.op("Mul", top_h, low_c), g.op("Mul", top_h2, low_s))


# CUDA's grid (CUDA C++ Programming Guide, "Compute Capabilities", technical specifications:
# maximum y- or z-dimension of a grid of thread blocks 65535, x 2^31 - 1; every capability from
# 3.0 on). onnxruntime's CUDA RotaryEmbedding kernels launch one block per (row, head):
# com.microsoft's (contrib_ops/cuda/bert/rotary_embedding_impl.cu, LaunchRotaryEmbeddingKernel)
# as ``grid(num_heads, sequence_length, batch_size)``, ONNX opset 23's
# (core/providers/cuda/llm/rotary_embedding_impl.cu) as ``grid(sequence_length, batch_size,
# num_heads)``: batch and (for com.microsoft) sequence are y/z dimensions, so neither may pass
# 65535 (issue 44: ``[N, 1, d]`` rows failed with "CUDA failure 1: invalid argument" from
# N = 65536 on onnxruntime-gpu 1.31.1, an H200).
CUDA_GRID_YZ_LIMIT = 65535
# Both kernels (and their CPU twins) address the rows with 32-bit ``int`` offsets
# (``b * batch_stride + s * seq_stride``): a call holds at most 2^31 - 1 elements.
KERNEL_INT_LIMIT = 2**31 - 1


def fold(n: int) -> tuple[int, int]:
    """``(batch, sequence)`` the fused graph gives the RotaryEmbedding ops for ``n`` positions:
    ``sequence = n // CUDA_GRID_YZ_LIMIT + 1`` rows per batch entry (1 below the limit: the
    ``[N, 1]`` form), ``batch = ceil(n / sequence)``, both ``<= CUDA_GRID_YZ_LIMIT`` for every
    ``n < CUDA_GRID_YZ_LIMIT^2``; the last entry is padded with position 0."""
    seq = int(n) // CUDA_GRID_YZ_LIMIT + 1
    return -(-int(n) // seq), seq


def max_rows(width: int) -> int:
    """The most positions one call of a fused graph of output width ``width`` (``2k``) takes:
    the kernels' int offsets (``KERNEL_INT_LIMIT``)."""
    return KERNEL_INT_LIMIT // int(width)


def rotary_columns(g: Graph, positions: str, inv_freq: np.ndarray, widths: Sequence[int],
                   scale: np.ndarray | None, rotary: str, prefix: str = "sliced_",
                   pairs: str = "cos-sin") -> str:
    """``[N, 2k]`` float32 of positions ``[N]`` (bitwise slicing), the angle additions done by
    a ``RotaryEmbedding`` kernel per slice above the lowest (``rotary``: ``"ort"`` for
    ``com.microsoft``'s, ``"rotary23"`` for ONNX opset 23's). ``pairs``: ``"cos-sin"``, rope's
    ``[cos | sin]``; ``"sin-cos"``, sinusoidal's ``layout=half`` ``[sin | cos]``;
    ``"sin-cos-interleaved"``, sinusoidal's ``[sin_0, cos_0, sin_1, cos_1, ...]``.

    The op rotates a row ``[x1 | x2]`` by the cache row ``p``: ``[x1 cos - x2 sin | x2 cos + x1
    sin]``, which for ``x = [cos b | sin b]`` and the caches ``cos a``, ``sin a`` is ``[cos(a + b)
    | sin(a + b)]``: the two products and the sum per column that ``columns_graph`` writes as
    six nodes, in one fused pass. For ``x = [sin b | cos b]`` the sin cache holds ``-sin a``:
    ``[sin b cos a + cos b sin a | cos b cos a - sin b sin a] = [sin(a + b) | cos(a + b)]``;
    ``interleaved=1`` rotates the pairs ``(x_2i, x_2i+1)`` the same way (issue 44: sinusoidal's
    fused form). So: ``x = `` the lowest slice's row, then one ``RotaryEmbedding`` per higher
    slice, its caches that slice's tables and its ``position_ids`` the slice index; the top
    slice's caches hold the negative rows too (``columns_graph``'s: ``cos(-x) = cos x``,
    ``sin(-x) = -sin x``, rows ``2^w ..``), read at ``floor(pos / 2^k) mod 2^(w+1)``. Every id is
    masked into its cache: the CPU kernels read row ``position_id`` unchecked, so a position past
    the plan wraps (wrong, never out of bounds), where ``columns_graph``'s Gather fails. The
    products and sums are the same as ``columns_graph``'s (a sign flip is exact), so ``bound``
    holds unchanged.

    Rows go to the ops as ``[B, S, 2k]`` (one head of width ``2k``): ``fold``'s ``S = N // 65535
    + 1``, ``B = ceil(N / S)`` keep CUDA's grid within ``CUDA_GRID_YZ_LIMIT`` at any ``N`` up to
    ``max_rows`` (positions padded with 0 to ``B S``, the rows cut back to ``N`` at the end).
    Both kernels refuse a sequence longer than their cache ("Updating cos_cache and sin_cache
    ... is not currently supported"), so every cache is padded with zero rows (never read: the
    ids are masked) to the longest ``S`` (``fold(max_rows(2k))``) by an ``Expand``/``Concat`` of
    initializers: onnxruntime folds it at session load, the file does not grow."""
    if rotary not in ("ort", "rotary23"):
        raise BadParameterError(f"--rope-lowering {rotary} does not fuse sliced angle additions; "
                                "choose ort or rotary23")
    if pairs not in ("cos-sin", "sin-cos", "sin-cos-interleaved"):
        raise ValueError(pairs)
    widths_low = list(reversed([int(w) for w in widths]))
    tables = slice_tables(inv_freq, widths, scale, top_extra=True)
    k = len(inv_freq)
    rows = 1 << widths_low[-1]
    shifts = np.cumsum([0, *widths_low]).tolist()
    longest = fold(max_rows(2 * k))[1]
    # fold: S = N // 65535 + 1, pad = (-N) mod S (Mod's fmod=0 takes the divisor's sign: in
    # [0, S)), positions + pad zeros -> [B S], every id reshaped [B, S]. Shape arithmetic on
    # [1]-tensors; the slicing itself stays on a flat vector (onnxruntime's broadcast walks an
    # [N, 1] operand a row at a time: 2.5x slower at N = 512).
    n = g.op("Shape", positions)
    seq = g.op("Add", g.op("Div", n, g.const([CUDA_GRID_YZ_LIMIT], np.int64,
                                            f"{prefix}grid_limit")),
               g.const([1], np.int64, f"{prefix}one_row"))
    pad = g.op("Mod", g.op("Neg", n), seq, fmod=0)
    padded = g.op("Concat", positions, g.op("Expand", g.const(0, np.int64, f"{prefix}pad_row"),
                                            pad), axis=0)
    grid = g.op("Concat", g.const([-1], np.int64, f"{prefix}batch"), seq, axis=0)
    ids = []
    for c, (k_c, w) in enumerate(zip(shifts, widths_low, strict=False)):
        bits = w + 1 if c == len(widths_low) - 1 else w
        masked = g.op("BitwiseAnd", padded, g.const(((1 << bits) - 1) << k_c, np.int64,
                                                    f"{prefix}bits{c}"))
        if k_c:
            masked = g.op("Div", masked, g.const(1 << k_c, np.int64, f"{prefix}step{c}"))
        ids.append(g.op("Reshape", masked, grid))
    cos0, sin0 = tables[0]
    if pairs == "cos-sin":
        low_row = np.hstack([cos0, sin0])
    elif pairs == "sin-cos":
        low_row = np.hstack([sin0, cos0])
    else:
        low_row = np.stack([sin0, cos0], axis=-1).reshape(len(sin0), 2 * k)
    low = g.const(low_row, np.float32, f"{prefix}low")
    x = g.op("Gather", low, ids[0], axis=0)  # [B, S, 2k]
    minus = g.const(-1.0, np.float32, f"{prefix}minus_one")
    zero = None
    for c, (cos, sin) in enumerate(tables[1:], start=1):
        cos_t = g.const(cos, np.float32, f"{prefix}cos{c}")
        sin_t = g.const(sin, np.float32, f"{prefix}sin{c}")
        if c == len(tables) - 1:  # rows R .. 2R-1: s = -R .. -1, the stored rows R .. 1
            keep = [g.const([v], np.int64, f"{prefix}kept_{n_}")
                    for n_, v in (("start", 0), ("stop", rows), ("axis", 0), ("step", 1))]
            mirror = [g.const([v], np.int64, f"{prefix}mirrored_{n_}")
                      for n_, v in (("start", rows), ("stop", 0), ("axis", 0), ("step", -1))]
            cos_t = g.op("Concat", g.op("Slice", cos_t, *keep), g.op("Slice", cos_t, *mirror),
                         axis=0)
            sin_t = g.op("Concat", g.op("Slice", sin_t, *keep),
                         g.op("Mul", g.op("Slice", sin_t, *mirror), minus), axis=0)
        if pairs != "cos-sin":  # x = [sin b | cos b]: rotate by -a's sin (docstring)
            sin_t = g.op("Mul", sin_t, minus)
        have = 2 * rows if c == len(tables) - 1 else len(cos)
        if have < longest:  # the kernels' sequence <= cache rows (docstring)
            zero = zero or g.const(0.0, np.float32, f"{prefix}zero")
            zeros = g.op("Expand", zero,
                         g.const([longest - have, k], np.int64, f"{prefix}cache_pad{c}"))
            cos_t, sin_t = (g.op("Concat", t, zeros, axis=0) for t in (cos_t, sin_t))
        interleaved = int(pairs == "sin-cos-interleaved")
        if rotary == "ort":
            x = g.op("RotaryEmbedding", x, ids[c], cos_t, sin_t, domain="com.microsoft",
                     interleaved=interleaved, num_heads=1)
        else:
            x = g.op("RotaryEmbedding", x, cos_t, sin_t, ids[c], interleaved=interleaved,
                     num_heads=1)
    flat = g.op("Reshape", x, g.const([-1, 2 * k], np.int64, f"{prefix}rows"))
    return g.op("Slice", flat, g.const([0], np.int64, f"{prefix}first_row"), n,
                g.const([0], np.int64, f"{prefix}row_axis"))


def cos_sin(g: Graph, positions: str, inv_freq: np.ndarray, widths: Sequence[int],
            scale: np.ndarray | None = None, lowering: str = "bitwise",
            prefix: str = "sliced_") -> tuple[str, str]:
    """``(cos, sin)`` ``[..., k]`` float32 of positions ``[...]`` (int64) for the ``k`` float32
    inverse frequencies: what graft splices in place of a ``Cos``/``Sin`` pair."""
    k = len(inv_freq)
    slots = [*range(k), *range(k)]
    kinds = [COS] * k + [SIN] * k
    both = columns_graph(g, positions, inv_freq, widths, slots, kinds, scale, lowering, prefix)
    last = g.const([-1], np.int64, f"{prefix}last_axis")
    start, middle, end = (g.const([v], np.int64, f"{prefix}{n}")
                          for n, v in (("first", 0), ("middle", k), ("end", 2 * k)))
    cos = g.op("Slice", both, start, middle, last, out=f"{prefix}cos")
    sin = g.op("Slice", both, middle, end, last, out=f"{prefix}sin")
    return cos, sin


def subgraph(inv_freq: np.ndarray, widths: Sequence[int], positions: str = POSITIONS,
             scale: np.ndarray | None = None, lowering: str = "bitwise",
             prefix: str = "sliced_") -> tuple[list, list, str, str]:
    """``(nodes, initializers, cos, sin)``: the sliced cos/sin of ``positions`` standalone, every
    name but ``positions`` prefixed with ``prefix`` (for splicing into another model)."""
    g = Graph(f"{prefix}cos_sin")
    g._fresh = lambda stem: _prefixed(g, prefix, stem)  # type: ignore[method-assign]
    cos, sin = cos_sin(g, positions, inv_freq, widths, scale, lowering, prefix)
    return g.nodes, g.initializers, cos, sin


def _prefixed(g: Graph, prefix: str, stem: str) -> str:
    g._count += 1
    return f"{prefix}{stem}_{g._count}"


# -- the schemes' sliced graphs (``--mode sliced``) ------------------------------------------


def plan_of(config) -> tuple[int, ...]:
    """The slice plan of an export: ``config.extra["slices"]`` or the default for max_len
    (plus sinusoidal's position offset, which the slices see added)."""
    offset = abs(int(config.scheme.params.get("offset", 0))) if config.scheme.scheme == \
        "sinusoidal" else 0
    return parse_plan(config.extra.get("slices"), config.scheme.max_len + offset)


def _frequencies(module) -> tuple[np.ndarray, np.ndarray | None, float]:
    inv_freq = module.inv_freq.detach().numpy().astype(np.float32)
    if getattr(module, "scaled", False):
        scale = module.scale.detach().numpy().astype(np.float32)
        return inv_freq, scale, float(scale.max())
    return inv_freq, None, 1.0


def tolerance(widths: Sequence[int], attention: float, apply: bool = False) -> float:
    """The verifier's atol for a sliced graph against the float64 definition rounded to float32
    (the reference the verifier holds): ``bound`` plus that rounding (``U(a)``), plus ``2^-23``
    for a rope apply graph (``x`` drawn with ``|x_2i| + |x_2i+1| <= 1``: the graph's and the
    reference's float32 rotations each round two products below 1/2 and a sum below 1, at most
    ``2 (2 2^-26 + 2^-25)`` apart)."""
    return bound(widths, attention) + _half_ulp_below(max(1.0, attention)) + (
        2.0**-23 if apply else 0.0)


def _record(config, manifest: dict, widths: Sequence[int], attention: float,
            apply: bool = False) -> None:
    """The manifest's ``sliced`` section (the plan, the bound, the stored bytes), its tolerance
    and its position limit."""
    slots = config.scheme.d_model // 2
    shifts = np.cumsum([0, *reversed(widths)])[:-1][::-1].tolist()
    manifest["sliced"] = {
        "slices": [int(w) for w in widths],
        "shifts": [int(k) for k in shifts],
        "bound": bound(widths, attention),
        # the bitwise graph's top tables hold one row more (s = 2^w, for negative positions)
        "table_bytes": int(sum(2 * (1 << int(w)) * slots * 4 for w in widths)
                           + (2 * slots * 4 if config.lowering == "bitwise" else 0)),
        "reference": "float64 definition (a cos/sin(pos w) in float64, stored float32 w and a)",
    }
    manifest["tolerance"] = {"rtol": 0.0, "atol": tolerance(widths, attention, apply)}
    # The slices see pos + offset (sinusoidal's fairseq padding offset): |pos| < limit - |offset|.
    offset = abs(int(config.scheme.params.get("offset", 0))) if config.scheme.scheme == \
        "sinusoidal" else 0
    limit = max(0, position_limit(widths, config.lowering) - offset)
    spec_limit = config.scheme.spec.position_limit
    positions = dict(manifest["positions"])
    positions["limit"] = limit if spec_limit is None else min(limit, spec_limit)
    positions["out_of_range"] = "extrapolate"
    manifest["positions"] = positions


def sinusoidal(config, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d]`` from bit slices: sin even, cos odd columns
    (``layout=half``: ``[sin | cos]``), at ``positions + offset`` (fairseq's padding offset)."""
    widths = plan_of(config)
    inv_freq, _, _ = _frequencies(module)
    k = len(inv_freq)
    if module.layout == "half":
        slots, kinds = np.tile(np.arange(k), 2), np.repeat([SIN, COS], k)
    else:
        slots, kinds = np.repeat(np.arange(k), 2), np.tile([SIN, COS], k)
    _record(config, manifest, widths, 1.0)
    g = Graph("edgepe_sinusoidal_sliced")
    positions = POSITIONS
    if module.offset:
        positions = g.op("Add", POSITIONS, g.const(np.int64(module.offset), np.int64, "offset"))
    rotary = _fused(config, widths)
    if rotary is not None:  # issue 44: the angle additions fused, as rope's
        pairs = "sin-cos" if module.layout == "half" else "sin-cos-interleaved"
        pe = rotary_columns(g, positions, inv_freq, widths, None, rotary, pairs=pairs)
        return _fused_model(config, g, pe, manifest, rotary)
    pe = columns_graph(g, positions, inv_freq, widths, slots, kinds, None, config.lowering)
    return trig._pe_model(config, g, pe, manifest)


def _fused(config, widths: Sequence[int]) -> str | None:
    """``--rope-lowering ort|rotary23`` of a sliced encode graph (``None``: plain ops), checked:
    it fuses bitwise slicing's angle additions (a one-slice plan has none: plain)."""
    rotary = config.extra.get("rope_lowering", "onnx")
    if rotary == "onnx" or len(widths) == 1:
        return None
    if rotary not in ("ort", "rotary23"):
        raise BadParameterError(f"--rope-lowering {rotary!r} is not one of: onnx, ort, rotary23")
    if config.lowering != "bitwise":
        raise BadParameterError(
            f"--rope-lowering {rotary} fuses the sliced graph's angle additions after "
            f"bitwise slicing; --lowering {config.lowering} is for targets without "
            "RotaryEmbedding: drop one of them")
    if rotary == "rotary23" and config.opset < 23:
        raise BadParameterError(f"--rope-lowering rotary23 needs --opset 23 or later "
                                f"(RotaryEmbedding), got {config.opset}")
    return rotary


def _fused_model(config, g: Graph, pe: str, manifest: dict, rotary: str):
    g.finish(pe, config.dtype)
    out = output("pe", config.dtype, ["N", config.scheme.d_model])
    extra = {trig.MS_DOMAIN: 1} if rotary == "ort" else None
    return make_model(g.nodes, [positions_input(None)], [out], g.initializers,
                      config.opset, manifest, g.name, extra_opsets=extra)


def rope(config, module, manifest: dict):
    """rope's graphs (``--rope-graph`` encode/cache/apply/apply-4d, every lowering) with the
    sliced cos/sin in place of Sin/Cos: ``encode`` is ``[cos | sin]`` in one sliced pass."""
    widths = plan_of(config)
    inv_freq, scale, attention = _frequencies(module)
    graph, _ = trig.rope_choice(config)
    _record(config, manifest, widths, attention, apply=graph.startswith("apply"))
    if graph == "encode":
        k = len(inv_freq)
        g = Graph("edgepe_rope_sliced")
        rotary = _fused(config, widths)
        if rotary is not None:
            pe = rotary_columns(g, POSITIONS, inv_freq, widths, scale, rotary)
            return _fused_model(config, g, pe, manifest, rotary)
        pe = columns_graph(g, POSITIONS, inv_freq, widths, [*range(k), *range(k)],
                           [COS] * k + [SIN] * k, scale, config.lowering)
        return trig._pe_model(config, g, pe, manifest)

    def sin_cos(g: Graph, module, width: int | None = None) -> tuple[str, str]:
        cos, sin = cos_sin(g, POSITIONS, inv_freq[:width], widths,
                           None if scale is None else scale[:width], config.lowering)
        return sin, cos

    return trig.rope(config, module, manifest, sin_cos=sin_cos)


# -- the bit family: PE(pos) = sum_c T_c[(p >> k_c) & m_c] -------------------------------------


def binary_tables(weights: np.ndarray, widths_low: list[int], integer: bool) -> list[np.ndarray]:
    """Per slice (least significant first) ``T_c[s] = sum of weights[k_c + b]`` over the bits
    ``b`` set in ``s``: exact int32 sums (int8 weights) or float64 sums stored float32."""
    out, k = [], 0
    for w in widths_low:
        s = np.arange(1 << w)
        bits = ((s[:, None] >> np.arange(w)[None, :]) & 1).astype(np.int64 if integer
                                                                  else np.float64)
        rows = weights[k:k + w].astype(np.int64 if integer else np.float64)
        if len(rows) < w:  # slices past n_bits: those bits are always 0 (pos mod 2^n)
            rows = np.concatenate([rows, np.zeros((w - len(rows), weights.shape[1]),
                                                  rows.dtype)])
        table = bits @ rows
        out.append(table.astype(np.int16) if integer else table.astype(np.float32))
        k += w
    return out


def binary_plan(config) -> tuple[int, ...]:
    """The bit family's slices: ``--slices`` or two near-equal slices of the ``n`` bits."""
    nb = config.scheme.n_bits
    given = config.extra.get("slices")
    widths = parse_plan(given, 1) if given is not None else (
        default_plan(1 << nb) if nb > 6 else (nb,))
    if sum(widths) != nb:
        raise BadParameterError(f"--slices {plan_text(widths)} must cover exactly the "
                                f"{nb} bits of binary (max_len {config.scheme.max_len}), got "
                                f"{sum(widths)}")
    return widths




def binary(config, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d]``: binary's projection of the bits of ``pos mod 2^n``
    as a sum of one Gather per slice (float32 tables of float64 sums), bitwise slicing."""
    if config.lowering != "bitwise":
        raise BadParameterError("binary --mode sliced slices with BitShift/BitwiseAnd "
                                "(--lowering bitwise); other lowerings: --mode compute")
    if config.quantize != "none":
        raise BadParameterError("binary --mode sliced --quantize int8 is a C header (--format "
                                "c); the int8 ONNX graph is --mode compute")
    widths = binary_plan(config)
    low_first = list(reversed(widths))
    weights = module.projection.weight.detach().float().numpy().T.astype(np.float32)
    tables = binary_tables(weights, low_first, False)
    shifts = np.cumsum([0, *low_first[:-1]]).tolist()
    manifest["sliced"] = {"slices": [int(w) for w in widths],
                          "shifts": [int(k) for k in shifts[::-1]],
                          "table_bytes": int(sum(t.nbytes for t in tables))}
    g = Graph("edgepe_binary_sliced")
    u = g.cast(POSITIONS, "uint64")  # two's complement: the bits of pos mod 2^n survive
    total = None
    for c, (k, w) in enumerate(zip(shifts, low_first, strict=True)):
        v = u if k == 0 else g.op("BitShift", u, g.const(k, np.uint64, f"shift{c}"),
                                  direction="RIGHT")
        v = g.cast(g.op("BitwiseAnd", v, g.const((1 << w) - 1, np.uint64, f"mask{c}")), "int64")
        rows = g.op("Gather", g.const(tables[c], np.float32, f"slice{c}"), v, axis=0)
        total = rows if total is None else g.op("Add", total, rows)
    if total == POSITIONS:  # pragma: no cover - there is always one slice
        raise AssertionError
    g.finish(total, config.dtype)
    out = output("pe", config.dtype, ["N", config.scheme.d_model])
    return g.model([positions_input(None)], [out], config.opset, manifest)
