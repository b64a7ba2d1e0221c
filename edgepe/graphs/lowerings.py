"""The bit family's lowerings without int64 arithmetic: ``arith32`` and ``float`` (issue 17).

``bits.bit_columns`` hands ``--lowering arith32`` and ``--lowering float`` here; ``bitwise`` and
``arith`` stay in ``bits.py``. Both compute column ``j`` = bit ``shifts[j]`` of
``p = pos mod 2^wrap`` (its Gray code for ``gray``) from the int64 ``positions`` input (the
contract's input dtype) after ONE ``Cast`` at the front, for targets that lack bitwise kernels
and dislike int64 (TensorRT, QNN, CoreML, NNAPI: docs/readme/targets.md).

``arith32`` (integer Div/Mod in int32). ``Cast(int64 -> int32)``, then the ``arith`` recipe in
int32: ``r = Mod(x, 2^w)`` with ``fmod=0`` (the divisor's sign: ``r`` in ``[0, 2^w)``),
``Div(r, 2^k)`` (``r >= 0``, so truncation is floor: ``r >> k``), ``Mod(., 2)``. The largest
positive int32 power of two is ``2^30``, so widths up to ``MAX_ARITH32_BITS = 30``. Accepted
positions: ``|pos| <= 2^31 - 1`` (``artifact.LOWERING_LIMITS``: the manifest's
``positions.limit``), where the Cast is exact on every runtime; there the int32 value IS the
int64 one and the result is the ``arith`` lowering's, bit for bit. (onnxruntime's Cast also
wraps larger int64 to their low 32 bits, which keeps ``pos mod 2^w`` for ``w <= 30``, but a
runtime may saturate instead, so the artifact does not promise it.)

``float`` (Floor/Mul/Sub in float32). ``x = Cast(int64 -> float32)``; then, with every
multiplier a power of two::

    r = x - Floor(x * 2^-w) * 2^w            # pos mod 2^w, in [0, 2^w)
    b_k = Floor(r * 2^-k) - 2 Floor(r * 2^-(k+1))

Exact for ``|pos| <= 2^24`` and ``w <= 24`` (``LOWERING_LIMITS``, ``MAX_FLOAT_BITS``); the proof:

1. every integer of magnitude ``<= 2^24`` is a float32, so the Cast is exact;
2. multiplying by ``2^-m`` (``m <= w + 2 <= 26``) only changes the exponent: the results are
   ``>= 2^-26`` in magnitude when nonzero, far above float32's smallest normal ``2^-126``, so
   they are exact, and ``Floor`` of an exact value is exact;
3. ``q = Floor(x 2^-w)`` is an integer with ``|q| <= 2^(24-w) + 1 <= 2^24``, a float32, and
   ``q 2^w`` only scales it by a power of two: exact;
4. ``x - q 2^w`` is the integer ``pos mod 2^w`` in ``[0, 2^w) subset [0, 2^24)``: a float32,
   and IEEE subtraction returns the exact result whenever it is representable;
5. ``Floor(r 2^-k)`` is ``floor(r / 2^k) < 2^24`` (steps 2 and 1), and ``f_k - 2 f_(k+1)`` is
   the integer ``b_k`` in ``{0, 1}``, every operand and result exact (``2 f`` is a power-of-two
   scaling).

Columns past the width read shift ``w`` (``r < 2^w`` makes both floors 0). Gray bit ``k`` is
``|b_k - b_(k+1)|`` (b xor b', exact for 0/1): not the ``arith`` lowering's parity of
``f_k + f_(k+1)``, whose sum can pass ``2^24`` and round. Widths past 24 (``max_len >= 2^24``)
are refused (``BadParameterError``); positions past ``2^24`` are outside the manifest's
``positions.limit`` (``edgepe.load`` refuses them; the verifier probes up to it).
tests/test_lowerings.py sweeps every position in ``[-2^24, 2^24]``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from edgepe.contract.errors import BadParameterError

# Largest power of two an int32 Div/Mod divisor can be with its sign bit clear.
MAX_ARITH32_BITS = 30
# float32 holds every integer up to 2^24 exactly.
MAX_FLOAT_BITS = 24
MAX_BITS = {"arith32": MAX_ARITH32_BITS, "float": MAX_FLOAT_BITS}


def check_width(lowering: str, wrap: np.ndarray) -> None:
    """Refuse a bit width past what ``lowering`` computes exactly, naming what would work."""
    widest = int(np.max(wrap))
    if widest > MAX_BITS[lowering]:
        why = ("2^30 is int32's largest power of two" if lowering == "arith32"
               else "float32 is exact for integers up to 2^24 only")
        raise BadParameterError(
            f"--lowering {lowering} supports bit widths up to {MAX_BITS[lowering]} ({why}); "
            f"this configuration needs {widest} (max_len up to 2^{MAX_BITS[lowering]} - 1): use "
            "--lowering arith or bitwise, or --mode table"
        )


def arith32_columns(g, x: str, shifts: np.ndarray, wrap: np.ndarray, gray: bool) -> str:
    """``[N, W]`` int32 0/1: bit ``shifts[j]`` of ``x mod 2^wrap`` (int64 ``x``, |x| < 2^31)."""
    check_width("arith32", wrap)
    x32 = g.op("Cast", x, to=TensorProto.INT32)
    r = g.op("Mod", x32, g.const(np.left_shift(1, wrap), np.int32, "modulus32"), fmod=0)
    # r < 2^wrap <= 2^shift for masked columns: their quotient is 0 without a mask.
    capped = np.minimum(shifts, wrap)
    quotient = g.op("Div", r, g.const(np.left_shift(1, capped), np.int32, "powers32"))
    if gray:
        # floor(r/2^k) + floor(r/2^(k+1)) = 3 floor(r/2^(k+1)) + b_k < 1.5 * 2^30: no overflow;
        # its parity is b_k xor b_(k+1) (bits.py's arith Gray).
        above = g.op("Div", r, g.const(np.left_shift(1, np.minimum(capped + 1, wrap)), np.int32,
                                       "powers32_next"))
        quotient = g.op("Add", quotient, above)
    return g.op("Mod", quotient, g.const(2, np.int32, "two32"), fmod=0)


def float_columns(g, x: str, shifts: np.ndarray, wrap: np.ndarray, gray: bool) -> str:
    """``[N, W]`` float32 0/1: bit ``shifts[j]`` of ``x mod 2^wrap`` (int64 ``x``, |x| <= 2^24)."""
    check_width("float", wrap)
    xf = g.op("Cast", x, to=TensorProto.FLOAT)
    down = g.op("Floor", g.op("Mul", xf, g.const(np.ldexp(1.0, -wrap), np.float32, "inv_modulus")))
    r = g.op("Sub", xf, g.op("Mul", down, g.const(np.ldexp(1.0, wrap), np.float32, "modulus_f")))
    capped = np.minimum(shifts, wrap)
    two = g.const(2.0, np.float32, "bit_two")

    def floor_div(k: np.ndarray, stem: str) -> str:
        return g.op("Floor", g.op("Mul", r, g.const(np.ldexp(1.0, -k), np.float32, stem)))

    # b_k = floor(r/2^k) - 2 floor(r/2^(k+1)); columns at the width give 0 - 0.
    lo = floor_div(capped, "scale")
    hi = floor_div(np.minimum(capped + 1, wrap), "scale_next")
    b = g.op("Sub", lo, g.op("Mul", hi, two))
    if gray:
        # b_k xor b_(k+1) = |b_k - b_(k+1)| for 0/1 values, b_(k+1) from the floor above
        top = floor_div(np.minimum(capped + 2, wrap), "scale_next2")
        b = g.op("Abs", g.op("Sub", b, g.op("Sub", hi, g.op("Mul", top, two))))
    return b


# trunc: float32 multiplies by powers of two and a truncating Cast to int32 (no Floor, Mod or
# bitwise op: CoreML's operator set), int32 Sub/Mul/Add. Every Cast'ed float is an integer or a
# non-negative value below 2^24 (exact), so widths up to 23 (r + 2^w must stay below 2^24).
MAX_TRUNC_BITS = 23
MAX_BITS["trunc"] = MAX_TRUNC_BITS


def trunc_columns(g, x: str, shifts: np.ndarray, wrap: np.ndarray, gray: bool) -> str:
    """``[N, W]`` int32 0/1: bit ``shifts[j]`` of ``x mod 2^wrap`` (int64 ``x``, |x| <= 2^24),
    with ``trunc(v) = Cast(v -> int32)`` (toward zero) as the only rounding op::

        q  = trunc(x 2^-w)            # toward zero: r = x - q 2^w in (-2^w, 2^w)
        r' = r + 2^w                  # in (0, 2^(w+1)), below 2^24 for w <= 23
        p  = r' - trunc(r' 2^-w) 2^w  # x mod 2^w, in [0, 2^w)
        b_k = trunc(p 2^-k) - 2 trunc(p 2^-(k+1))

    Proof of exactness as for ``float_columns``: every Cast from int32 to float32 is of an integer
    below 2^24 in magnitude (exact), a product by ``2^-m`` only moves the exponent (exact), and
    ``trunc`` of a non-negative value is its floor (``trunc`` of ``x 2^-w`` may be a ceiling for
    negative ``x``; the ``+ 2^w`` step repairs it). Gray bit ``k`` is ``(b_k - b_(k+1))^2`` (xor of
    0/1 values, no Abs)."""
    check_width("trunc", wrap)
    w = int(np.max(wrap))
    if np.any(wrap != w):
        raise BadParameterError("--lowering trunc takes one bit width for every column")
    x32 = g.op("Cast", x, to=TensorProto.INT32)
    xf = g.op("Cast", x, to=TensorProto.FLOAT)

    def trunc(v: str, k, stem: str) -> str:
        scaled = g.op("Mul", v, g.const(np.ldexp(1.0, -np.asarray(k)), np.float32, stem))
        return g.op("Cast", scaled, to=TensorProto.INT32)

    modulus = g.const(1 << w, np.int32, "trunc_modulus")
    r = g.op("Sub", x32, g.op("Mul", trunc(xf, w, "trunc_down"), modulus))
    r = g.op("Add", r, modulus)
    rf = g.op("Cast", r, to=TensorProto.FLOAT)
    p = g.op("Sub", r, g.op("Mul", trunc(rf, w, "trunc_down2"), modulus))
    pf = g.op("Cast", p, to=TensorProto.FLOAT)
    capped = np.minimum(shifts, wrap)
    two = g.const(2, np.int32, "trunc_two")
    hi = trunc(pf, np.minimum(capped + 1, wrap), "trunc_next")
    b = g.op("Sub", trunc(pf, capped, "trunc_scale"), g.op("Mul", hi, two))
    if gray:
        top = trunc(pf, np.minimum(capped + 2, wrap), "trunc_next2")
        above = g.op("Sub", hi, g.op("Mul", top, two))
        diff = g.op("Sub", b, above)
        b = g.op("Mul", diff, diff)
    return b
