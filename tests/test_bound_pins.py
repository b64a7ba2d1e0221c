"""Every proven int8 bound pinned to a number computed outside the code, and shown tight (issue 33).

Checking only ``measured <= bound`` let three planted bugs through (a bound formula tightened or
loosened). Here each bound of ``edgepe.graphs.quant`` is recomputed in the test from the formula its
docstring proves, written out again (exact rationals where the numbers allow), for a given
configuration, and compared with what the code records to 1e-12 relative; and a worst case
constructed for it reaches it within a stated factor (a loosened bound fails that).

The formulas (u = 2^-24, the float32 unit roundoff; s a channel's scale, m its max |x|):
- table (int8.half_step_bound): s (1/2 + 127 u);
- quantised output (quant.graphs._quantised_output): s (1/2 + 383 u) + atol + rtol m;
- learned residual (quant.graphs._residual):
  atol + rtol (1 + m) + s (1/2 + 127 u) + 2 u (1 + m + s);
- projection (quant.graphs.projection_quant): P s (1/2 + 127 u + S 127 (1 + u) gamma_n), S = 2 for
  the graph's float32 sum and 1 for the C header's int32 sum, gamma_n = n u / (1 - n u),
  P = n (bound) or the most ones of a position in 0..L-1 (bound_in_range).
"""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest

from edgepe import api
from edgepe.export import prepare
from edgepe.graphs import int8 as qgraphs
from edgepe.graphs import quant as int8
from edgepe.schemes import get_spec
from edgepe.schemes._registry import build

U = Fraction(1, 2**24)
REL = 1e-12


def _quant(scheme: str, max_len: int, **kw) -> dict:
    config = api.make_config(scheme, max_len, quantize="int8", **kw)
    prepared = prepare(config)
    prepared.write(io.BytesIO())
    return prepared.manifest["quant"]


# ---- the numbers at a known configuration (exact rationals) ---------------------------------


def test_half_step_bound_is_the_stated_number():
    # s = 1 (peak 127): 1/2 + 127/2^24, exactly 0.500007569789886474609375
    assert int8.half_step_bound(np.array([1.0]), np.array([127.0]))[0] == \
        float(Fraction(1, 2) + 127 * U) == 0.500007569789886474609375
    # s = 2^-7: the bound scales with s; an all-zero channel is exact (0)
    got = int8.half_step_bound(np.array([2.0**-7, 1.0]), np.array([127 / 128, 0.0]))
    assert got.tolist() == [float((Fraction(1, 2) + 127 * U) / 128), 0.0]
    assert int8.U32 == 2.0**-24 and (int8.QMIN, int8.QMAX) == (-127, 127)


def test_scales_at_known_peaks():
    got = int8.scales(np.array([127.0, 127 / 128, 0.0, 1.0]))
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 2.0**-7, 1.0, float(np.float32(1 / 127))]
    # float16 scales round UP, so nothing clips: 1/127 in float16 is 0.007874 -> 0.0078773...
    half = int8.half_scales(np.array([1.0]))
    assert half.dtype == np.float16
    # the smallest float16 at or above 1/127: float16(1/127) = 0.007873535 is below it
    assert float(np.float16(1 / 127)) < 1 / 127
    assert float(half[0]) == float(np.nextafter(np.float16(1 / 127), np.float16(1)))
    assert int8.half_scales(np.array([127 * 2.0**-15])) is None  # below float16's normal range


def _per_bit(s: float, n: int, sums: int) -> float:
    """The projection's per-bit term from the formula, in exact rationals."""
    gamma = n * U / (1 - n * U)
    return float(Fraction(s) * (Fraction(1, 2) + 127 * U + sums * 127 * (1 + U) * gamma))


def test_projection_per_bit_term_is_the_stated_number():
    # n = 10 bits, s = 1, by hand: 127 u = 7.56979e-6, gamma_10 = 10 u / (1 - 10 u) =
    # 5.96047e-7, 2 x 127 (1 + u) gamma_10 = 1.513959e-4: 0.5 + both = 0.5001589657; with the
    # int32 sum (S = 1) half the last term: 0.5000832677
    assert _per_bit(1.0, 10, 2) == pytest.approx(0.5001589657, abs=1e-10)
    assert _per_bit(1.0, 10, 1) == pytest.approx(0.5000832677, abs=1e-10)


@pytest.mark.parametrize(("max_len", "popcount"), [
    (1, 0), (2, 1), (3, 1), (4, 2), (8, 3), (9, 3), (500, 8), (511, 8), (512, 9), (513, 9),
    (1024, 10), (1000, 9)])
def test_max_popcount_against_enumeration(max_len, popcount):
    enumerated = max(bin(p).count("1") for p in range(max_len))
    assert qgraphs.max_popcount(max_len) == enumerated == popcount


# ---- what the exports record, against the formula --------------------------------------------


def test_table_bound_per_channel():
    q = _quant("sinusoidal", 64, mode="table", format="npy")
    s = np.array(q["scale"], dtype=np.float64)
    expected = [float(Fraction(v) * (Fraction(1, 2) + 127 * U)) for v in s]
    assert q["bound_per_channel"] == pytest.approx(expected, rel=REL)
    assert q["bound"] == pytest.approx(max(expected), rel=REL)
    # tight: 64 positions of sin/cos fall within 0.5% of the half step somewhere in the table
    assert q["max_abs_err"] <= q["bound"] <= q["max_abs_err"] * 1.005


def test_quantised_output_bound_per_channel():
    q = _quant("sinusoidal", 64, mode="compute")
    rtol, atol = get_spec("sinusoidal").tolerance
    assert (rtol, atol) == (0.0, 1e-6)
    s = np.array(q["scale"], dtype=np.float64)
    expected = [float(Fraction(v) * (Fraction(1, 2) + 383 * U) + Fraction(atol)) for v in s]
    assert q["bound_per_channel"] == pytest.approx(expected, rel=REL)
    assert q["max_abs_err"] <= q["bound"] <= q["max_abs_err"] * 1.005


def test_quantised_output_bound_with_rtol():
    """alibi (bias, heads on axis 0): the rtol term m rtol and the atol term each appear once."""
    q = _quant("alibi", 16, mode="compute")
    rtol, atol = get_spec("alibi").tolerance
    s = np.array(q["scale"], dtype=np.float64)
    peak = s * 127  # m: the scale is float32(m / 127), m recovered to 1e-7 relative
    expected = s * (0.5 + 383 * 2.0**-24) + atol + rtol * peak
    assert q["bound_per_channel"] == pytest.approx(expected.tolist(), rel=1e-9)
    assert q["max_abs_err"] <= q["bound"] <= q["max_abs_err"] * 1.1


def test_residual_bound_per_channel():
    config = api.make_config("sinusoidal-learned", 64, quantize="int8")
    q = _quant("sinusoidal-learned", 64)
    residual = build(config.scheme, config.seed).residual.detach().numpy().astype(np.float64)
    m = np.abs(residual).max(axis=0)
    rtol, atol = get_spec("sinusoidal-learned").tolerance
    s = np.array(q["scale"], dtype=np.float64)
    u = 2.0**-24
    expected = atol + rtol * (1 + m) + s * (0.5 + 127 * u) * (m > 0) + 2 * u * (1 + m + s)
    assert q["bound_per_channel"] == pytest.approx(expected.tolist(), rel=REL)
    assert q["max_abs_err"] <= q["bound"] <= q["max_abs_err"] * 1.02


@pytest.mark.parametrize("max_len", [500, 512])
def test_projection_bound_per_channel(max_len):
    q = _quant("binary", max_len)
    config = api.make_config("binary", max_len, quantize="int8")
    n = config.scheme.n_bits
    p = max(bin(x).count("1") for x in range(max_len))
    s = np.array(q["scale"], dtype=np.float64)
    per_bit = np.array([_per_bit(v, n, 2) for v in s])
    assert q["bound_per_channel"] == pytest.approx((n * per_bit).tolist(), rel=REL)
    assert q["bound_in_range"] == pytest.approx(float(p * per_bit.max()), rel=REL)
    assert q["max_popcount"] == p
    # random weights: the rounding errors of the active bits partly cancel
    assert q["max_abs_err"] <= q["bound_in_range"] <= 2 * q["max_abs_err"]


def _worst_projection(max_len: int):
    """binary with weights at half steps: column j's peak is 127 s (bit 0, exact) and every
    other bit holds s / 2, which rounds to 0 (ties to even): each active bit but bit 0 adds
    exactly s / 2, all of one sign, with s = 2^-7 (exact in float16 and float32)."""
    import torch

    config = api.make_config("binary", max_len, quantize="int8")
    module = build(config.scheme, config.seed)
    n = config.scheme.n_bits
    s = 2.0**-7
    weight = np.full((n, module.projection.weight.shape[0]), s / 2, dtype=np.float32)
    weight[0] = 127 * s
    with torch.no_grad():
        module.projection.weight.copy_(torch.from_numpy(weight.T.copy()))
    return config, module, n, s


@pytest.mark.parametrize("summation", ["float32", "int32"])
def test_projection_bound_is_reached_by_a_constructed_worst_case(summation):
    max_len = 512
    config, module, n, s = _worst_projection(max_len)
    _, scale, _, quant = qgraphs.projection_quant(config, module, summation)
    assert set(np.asarray(scale).tolist()) == {s}
    # the worst in-range position with bit 0 clear has 8 ones (510): error 8 s / 2, exactly
    assert quant["max_abs_err"] == 8 * s / 2
    sums = 2 if summation == "float32" else 1
    assert quant["bound_in_range"] == pytest.approx(9 * _per_bit(s, n, sums), rel=REL)
    assert quant["bound"] == pytest.approx(n * _per_bit(s, n, sums), rel=REL)
    # tight within 9/8 (bit 0 carries the peak, stored exactly) times the rounding terms
    assert quant["bound_in_range"] <= quant["max_abs_err"] * 9 / 8 * (1 + 1e-3)


def test_table_bound_is_reached_by_a_constructed_worst_case():
    """A channel of peak 127 (s = 1) holding 0.5 and 2.5: ties to even round both down by
    exactly s / 2, so the measured error equals s / 2 and the bound is within 127 u of it."""
    chunk = np.array([[127.0, 127.0], [0.5, 2.5], [-0.5, 1.0]], dtype=np.float32)
    tq = int8.measure_table("channel", lambda: iter([chunk]))
    assert tq.scale.tolist() == [1.0, 1.0]
    assert tq.max_abs_err == 0.5
    assert tq.bound == float(Fraction(1, 2) + 127 * U)
    assert tq.bound <= tq.max_abs_err * (1 + 2 * 127 * 2.0**-24)
