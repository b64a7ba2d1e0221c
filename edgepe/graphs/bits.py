"""Compute graphs of the bit family: integer ops on the position, one cast, one float step.

Two lowerings of the same integer function (``--lowering``):

- ``bitwise`` (default): ``Cast(int64 -> uint64)`` (two's complement: ``-1`` becomes
  ``2^64 - 1``, so the bits are those of ``pos mod 2^n``), ``BitShift`` right by a constant
  vector of shift counts, ``BitwiseAnd`` with a mask (``BitwiseXor`` for Gray), then ONE ``Cast``
  to float (binary-smooth: to bool, then ``Where`` between its two constants; ``--dtype uint8``:
  to uint8, no float at all). onnxruntime's CPU BitShift takes uint8/uint32/uint64 only
  (DESIGN.md), hence uint64.
- ``arith``: no bitwise op at all, for runtimes without bitwise kernels (onnxruntime's CUDA
  provider has none: such nodes fall back to the CPU). ``Mod(pos, 2^n)`` with ``fmod=0`` takes
  the sign of the divisor, so it is the non-negative ``pos mod 2^n`` (two's complement wrap)
  for every int64; integer ``Div`` of that non-negative value by ``2^k`` is
  ``floor(r / 2^k) = r >> k``; ``Mod(., 2)`` is its low bit. Exact for every int64 position and
  every bit width up to 62 (``2^62`` is the largest power of two Div/Mod take as an int64 divisor
  with its sign bit clear), i.e. the same domain and the same outputs as ``bitwise``.

The linear-projection schemes (``binary``, ``fourier-binary``: the float step is ``bits @ W``)
use a shorter ``bitwise`` form, the *mask* form, when their weights allow it
(``_mask_projection_model``): ``BitwiseAnd`` of the positions with the masks ``2^k`` (in int32
after one ``Cast`` while ``n <= 32``, else in int64: onnxruntime's CPU BitwiseAnd takes both,
DESIGN.md), one ``Cast`` to float giving ``0`` or ``2^k`` exactly, and one ``Gemm`` with the
weights pre-scaled by ``2^-k``: 3-4 nodes, two passes over ``n x N`` (BitwiseAnd, Cast) before
the Gemm, against 6 nodes and three (BitShift, BitwiseAnd, Cast) for the shift form. Demo,
onnxruntime 1.32 CPU, 1 thread, timed alternately in one process here: 59 us per call vs 91 us
for the shift form; the torch.onnx peers 53-59 us (docs/readme/int8-speed.md for the int32 form).

Every graph reuses the module's buffers (projection weight, ``lo``/``hi``, gates, Fourier basis,
shift vectors), in the reference's op order, so float parity is bitwise where the reference is.
Source: integer-and-binary-pe-guide sections 3.2-3.7, 5.1-5.4, 6.2, 6.4; DESIGN.md for the ops.
"""

from __future__ import annotations

import numpy as np

from edgepe.contract.config import ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.graphs._common import POSITIONS, Graph, output, positions_input
from edgepe.graphs.lowerings import arith32_columns, float_columns, trunc_columns

# Lowerings whose arithmetic is int32 or float32, built in lowerings.py.
NARROW = {"arith32": arith32_columns, "float": float_columns, "trunc": trunc_columns}

# BitShift of a uint64 by 64 or more is undefined in C++ (onnxruntime shifts with ">>"): counts
# are clamped to 63 and those columns masked to 0 instead.
MAX_SHIFT = 63
# Largest power of two used as an int64 Div/Mod divisor in the arith lowering.
MAX_ARITH_BITS = 62


def _columns(g: Graph, index: np.ndarray | None, index_dtype=np.int64) -> str:
    """``[N, W]`` int64 positions, one column per output bit (``[N, 1]`` when ``index`` is None).

    Multi-index schemes pick coordinate ``index[j]`` for column ``j`` (Gather on axis 1, with
    ``index_dtype`` indices: int32 for the lowerings meant for runtimes that want them).
    """
    if index is None:
        return g.op("Unsqueeze", POSITIONS, g.const([-1], np.int64, "last_axis"))
    return g.op("Gather", POSITIONS, g.const(index, index_dtype, "coordinate"), axis=1)


def bit_columns(g: Graph, config: ExportConfig, x: str, shifts, wrap, gray: bool = False) -> str:
    """``[N, W]`` integer 0/1: column ``j`` is bit ``shifts[j]`` of ``x mod 2^wrap``.

    ``x`` is int64 ``[N, 1]`` or ``[N, W]``; ``wrap`` a bit width (scalar, or one per column);
    ``gray`` reads the Gray code ``p ^ (p >> 1)`` of ``p = x mod 2^wrap`` instead (scalar wrap).
    Columns with ``shifts[j] >= wrap`` are 0. The result is uint64 (``bitwise``), int64
    (``arith``), int32 (``arith32``) or float32 (``float``, exact 0/1).
    """
    shifts = np.asarray(shifts, dtype=np.int64)
    wrap = np.asarray(wrap, dtype=np.int64)
    if config.lowering in NARROW:  # int32 or float32 arithmetic (lowerings.py)
        return NARROW[config.lowering](g, x, shifts, wrap, gray)
    inside = (shifts < wrap).astype(np.uint64)
    if config.lowering == "bitwise":
        u = g.cast(x, "uint64")  # two's complement: the low bits of a negative int64 survive
        if gray:
            # p = pos mod 2^n, then p ^ (p >> 1)
            p = g.op("BitwiseAnd", u, g.const((1 << int(wrap)) - 1, np.uint64, "wrap_mask"))
            u = g.op("BitwiseXor", p, g.op("BitShift", p, g.const(1, np.uint64, "one"),
                                             direction="RIGHT"))
        shifted = g.op("BitShift", u, g.const(np.minimum(shifts, MAX_SHIFT), np.uint64, "shifts"),
                       direction="RIGHT")
        # the mask is 0 for columns past the width
        return g.op("BitwiseAnd", shifted, g.const(inside, np.uint64, "bit_mask"))
    if int(wrap.max()) > MAX_ARITH_BITS:
        raise BadParameterError(
            f"--lowering arith supports bit widths up to {MAX_ARITH_BITS}; this configuration "
            f"needs {int(wrap.max())}: use --lowering bitwise"
        )
    # fmod=0: the remainder takes the divisor's sign, so r = x mod 2^wrap is in [0, 2^wrap).
    r = g.op("Mod", x, g.const(np.left_shift(1, wrap), np.int64, "modulus"), fmod=0)
    # r < 2^wrap <= 2^shift for masked columns, so their quotient is 0 without a mask.
    quotient = g.op("Div", r, g.const(np.left_shift(1, np.minimum(shifts, MAX_ARITH_BITS)),
                                      np.int64, "powers"))
    if gray:
        # Gray bit k = b_k xor b_(k+1); floor(r/2^k) + floor(r/2^(k+1)) = 3 floor(r/2^(k+1)) + b_k,
        # whose parity is b_(k+1) + b_k mod 2.
        above = g.op("Div", r, g.const(np.left_shift(1, np.minimum(shifts + 1, MAX_ARITH_BITS)),
                                       np.int64, "powers_next"))
        quotient = g.op("Add", quotient, above)
    return g.op("Mod", quotient, g.const(2, np.int64, "two"), fmod=0)


def _bits_model(config: ExportConfig, module, manifest: dict, name: str, shifts, wrap,
                float_step=None, index=None, gray: bool = False, select=None):
    """The shared pipeline: columns, integer bits, then uint8 output or one Cast and a float step.

    ``select=(hi, lo)`` replaces the cast: ``Where(bit, hi, lo)`` picks one of two float32
    constants per bit (the reference's ``torch.where``), so no float arithmetic rounds.

    ``float_step(g, bits_f, x) -> name`` maps the float32 bits ``[N, W]`` (and the int64
    positions ``x [N, 1]``) to the float32 output.
    """
    g = Graph(name)
    x = _columns(g, index, np.int32 if config.lowering in NARROW else np.int64)
    b = bit_columns(g, config, x, shifts, wrap, gray)
    arity = config.scheme.arity
    width = config.scheme.d_model
    if config.dtype == "uint8":
        g.cast(b, "uint8", out="pe")  # exact 0/1 bits: no float anywhere
    elif select is not None:
        hi, lo = select
        y = g.op("Where", g.cast(b, "bool"), g.const(hi, np.float32, "hi"),
                 g.const(lo, np.float32, "lo"))
        g.finish(y, config.dtype)
    else:
        # the one cast to float (the float lowering's bits already are)
        y = b if config.lowering == "float" else g.cast(b, "float32")
        g.finish(float_step(g, y, x) if float_step else y, config.dtype)
    return g.model([positions_input(arity)], [output("pe", config.dtype, ["N", width])],
                   config.opset, manifest)


def _f32(value) -> np.ndarray:
    return np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value,
                      dtype=np.float32)


def _normalised(g: Graph, config: ExportConfig, x: str) -> str:
    """float32 ``x / (L - 1)`` (``L = 1`` divides by 1): Cast then Div, as the reference."""
    return g.op("Div", g.cast(x, "float32"),
                g.const(float(max(config.scheme.max_len - 1, 1)), np.float32, "l_minus_1"))


def _plain(config: ExportConfig):
    s = config.scheme
    return np.arange(s.d_model), s.n_bits


# The mask form's integer width: positions are ANDed as int32 where the masks fit (n <= 32),
# int64 beyond. int32 halves the bytes the BitwiseAnd and Cast stream (issue 19 measured the
# int32 front end at 0.91-0.97x the time of the int64 one).
INT32_BITS = 32


def mask_width(n: int) -> int:
    """The integer width (32 or 64) the mask form ANDs ``n`` bits in: 32 while ``n <= 32``."""
    return INT32_BITS if n <= INT32_BITS else 64


def bit_masks(n: int, width: int = 64) -> np.ndarray:
    """``2^k`` for ``k < n`` as ``int{width}``; ``2^(width-1)`` is the type's minimum (two's
    complement). ``pos & mask_k`` is nonzero exactly when bit ``k`` of ``pos mod 2^n`` is set,
    for every int64 ``pos`` (cast to int32 first for ``width = 32``: the cast keeps the low 32
    bits, ``pos mod 2^32``, which hold every bit ``k < n <= 32``)."""
    unsigned = np.left_shift(np.uint64(1), np.arange(n, dtype=np.uint64))
    if width == 32:
        return unsigned.astype(np.uint32).view(np.int32)
    return unsigned.view(np.int64)


def mask_inverse(n: int, width: int) -> np.ndarray:
    """float32 ``1 / float32(mask_k)``: ``2^-k``, negated for the sign bit ``k = width - 1``
    (its mask is the type's minimum, whose float is ``-2^k``). Powers of two: exact."""
    k = np.arange(n)
    return (np.where(k == width - 1, -1.0, 1.0) * np.ldexp(1.0, -k)).astype(np.float32)


def _mask_weights(weight: np.ndarray, width: int = 64) -> np.ndarray | None:
    """``weight [n, d]`` with row ``k`` times ``mask_inverse``, or None if that is inexact.

    A power-of-two scaling is exact, and so is its undoing in the graph
    (``float32(mask_k) * (w / float32(mask_k)) == w`` bit for bit), as long as every scaled value
    is 0 or a normal float32 (no subnormal, no overflow): checked here, None when some is not
    (or when ``n`` exceeds the width: no mask for that bit).
    """
    n = weight.shape[0]
    if n > width:
        return None
    inverse = mask_inverse(n, width)[:, None]
    scaled = (weight * inverse).astype(np.float32)
    back = (scaled / inverse).astype(np.float32)
    finite = np.isfinite(weight)
    normal = (scaled == 0) | (np.abs(scaled) >= np.finfo(np.float32).tiny) | ~finite
    if not (np.array_equal(back.view(np.uint32), weight.view(np.uint32)) and normal.all()):
        return None
    return scaled


def mask_scaling(config: ExportConfig, weight: np.ndarray) -> np.ndarray | None:
    """The row scaling ``2^-k`` (``mask_inverse``) the mask form applies to ``weight [n, d]``,
    or None where ``_mask_projection_model`` falls back to the shift form (``--lowering`` other
    than bitwise, or a scaling that is inexact for these weights)."""
    width = mask_width(config.scheme.n_bits)
    if config.lowering != "bitwise" or _mask_weights(weight, width) is None:
        return None
    return mask_inverse(config.scheme.n_bits, width)


def stored_weight(weight: np.ndarray, name: str, scaled_name: str):
    """The float32 graphs' ``weight_node``: ``weight`` itself, or its masked-scaled copy, as an
    initializer (``_mask_projection_model``)."""

    def node(g: Graph, inverse: np.ndarray | None) -> str:
        if inverse is None:
            return g.const(weight, np.float32, name)
        return g.const((weight * inverse[:, None]).astype(np.float32), np.float32, scaled_name)

    return node


def _mask_projection_model(config: ExportConfig, module, manifest: dict, name: str,
                           weight: np.ndarray, weight_node):
    """``positions [N] int64 -> pe [N, d]``: ``bits(pos mod 2^n) @ weight`` in 3 or 4 nodes.

    ``BitwiseAnd(masks [n, 1], positions [N]) -> [n, N]`` keeps bit ``k`` of the position in
    place (``2^k`` or 0); two's complement AND reads exactly the bits of ``pos mod 2^n`` for
    every int64, negative ones included, so the wrap is the shift form's. onnxruntime's CPU
    BitwiseAnd takes every integer type (DESIGN.md), so no Cast to unsigned and no BitShift.
    For ``n <= 32`` the positions are first ``Cast`` to int32 (it keeps their low 32 bits: the
    wrap at ``2^n`` divides ``2^32``) and ANDed with int32 masks (``mask_width``). One ``Cast``
    to float32 gives ``0`` or ``2^k`` (``-2^31``/``-2^63`` for the sign bit), exact;
    ``Gemm(transA=1)`` with ``weight`` row ``k`` scaled by ``mask_inverse`` makes each product
    the same float32 as ``bit * w`` and reads the ``[n, N]`` bits without an Unsqueeze or
    Transpose node. Outputs are bitwise equal to the shift form's on onnxruntime CPU.

    ``weight_node(g, inverse) -> name`` adds the ``[n, d]`` float32 tensor ``weight * inverse``
    row-wise (``inverse`` None: ``weight`` itself) to ``g``: an initializer (``stored_weight``)
    or int8 dequantised in front (``edgepe.graphs.int8``); ``weight`` is its float32 value.
    Falls back to the shift form (``_bits_model``) where the mask form does not apply:
    ``--lowering arith`` or weights whose scaling is not exact.
    """
    n = config.scheme.n_bits
    width = mask_width(n)
    if mask_scaling(config, weight) is None:
        def step(g, bits_f, x):
            return g.op("MatMul", bits_f, weight_node(g, None))

        return _bits_model(config, module, manifest, name, np.arange(n), n, step)
    g = Graph(name)
    x = g.cast(POSITIONS, "int32") if width == 32 else POSITIONS
    masks = g.const(bit_masks(n, width)[:, None], np.int32 if width == 32 else np.int64,
                    "bit_masks")
    b = g.op("BitwiseAnd", masks, x)
    y = g.op("Gemm", g.cast(b, "float32"), weight_node(g, mask_inverse(n, width)),
             transA=1)  # the one cast to float, then [n, N]^T @ [n, d]
    g.finish(y, config.dtype)
    return g.model([positions_input(None)], [output("pe", config.dtype, ["N", weight.shape[1]])],
                   config.opset, manifest)


def binary(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``bits(pos mod 2^n) @ W.T`` (the demo)."""
    weight_t = _f32(module.projection.weight).T.copy()  # [n, d]: Linear's y = x W^T
    return _mask_projection_model(config, module, manifest, "binary", weight_t,
                                  stored_weight(weight_t, "projection_weight_t",
                                                "projection_scaled"))


def binary_bits(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: bit ``k`` of ``pos mod 2^n`` (0 past n)."""
    return _bits_model(config, module, manifest, "binary_bits", *_plain(config))


def binary_signed(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``2 b - 1`` (exact in float32)."""

    def step(g, bits_f, x):
        doubled = g.op("Mul", bits_f, g.const(2.0, np.float32, "two_f"))
        return g.op("Sub", doubled, g.const(1.0, np.float32, "one_f"))

    return _bits_model(config, module, manifest, "binary_signed", *_plain(config), step)


def binary_smooth(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``hi`` where the bit is 1, else ``lo``."""
    lo, hi = _f32(module.lo), _f32(module.hi)

    return _bits_model(config, module, manifest, "binary_smooth", *_plain(config),
                       select=(hi, lo))


def gray(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: bits of ``p ^ (p >> 1)``, ``p = pos mod 2^n``."""
    return _bits_model(config, module, manifest, "gray", *_plain(config), gray=True)


def binary_multilevel(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: column ``g k + i`` is bit ``g + i``."""
    shifts = module.shifts.cpu().numpy()
    return _bits_model(config, module, manifest, "binary_multilevel", shifts,
                       config.scheme.n_bits)


def hybrid_int_binary(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``[pos / (L - 1)] * (d//2)`` then the bits."""
    s = config.scheme
    half = s.d_model // 2

    def step(g, bits_f, x):
        if half == 0:
            return bits_f
        lin = _normalised(g, config, x)
        lin = g.op("Expand", lin, g.const([1, half], np.int64, "half_shape"))
        return g.op("Concat", lin, bits_f, axis=1)

    return _bits_model(config, module, manifest, "hybrid_int_binary",
                       np.arange(s.d_model - half), s.n_bits, step)


def binary_gated(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``b g + (pos / (L - 1)) (1 - g)``."""
    gate, rest = (_f32(t) for t in module.gates())  # folded: no Exp in the graph

    def step(g, bits_f, x):
        lin = _normalised(g, config, x)
        gated = g.op("Mul", bits_f, g.const(gate, np.float32, "gate"))
        return g.op("Add", gated, g.op("Mul", lin, g.const(rest, np.float32, "one_minus_gate")))

    return _bits_model(config, module, manifest, "binary_gated", *_plain(config), step)


def fourier_binary(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``bits(pos mod 2^n) @ [cos | -sin]``."""
    basis = _f32(module.basis)  # [n, d], computed in float64 by the module: no trig here
    return _mask_projection_model(config, module, manifest, "fourier_binary", basis,
                                  stored_weight(basis, "fourier_basis", "fourier_basis_scaled"))


def binary_2d(config: ExportConfig, module, manifest: dict):
    """``positions [N, 2] int64 -> pe [N, d_model]``: ``[x0, y0, x1, y1, ...]``."""
    return _bits_model(config, module, manifest, "binary_2d", module.shifts.cpu().numpy(),
                       config.scheme.n_bits, index=module.axis.cpu().numpy())


def hierarchical(config: ExportConfig, module, manifest: dict):
    """``positions [N, levels] int64 -> pe [N, sum(widths)]``: each level's bits, concatenated."""
    level = module.level.cpu().numpy()
    widths = np.asarray(config.scheme.params["widths"], dtype=np.int64)
    return _bits_model(config, module, manifest, "hierarchical", module.shifts.cpu().numpy(),
                       widths[level], index=level)
