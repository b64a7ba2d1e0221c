"""Properties the seeds claim for the schemes: uniqueness, bounds, Gray adjacency, relative
position in sinusoidal dot products and RoPE scores, ALiBi slopes, symmetric zero-diagonal biases.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgepe.schemes import FLOAT_EXACT_POSITIONS, build, resolve

EPS32 = 2.0**-24
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
LIMIT = FLOAT_EXACT_POSITIONS


def module(scheme_id: str, max_len: int, **kw):
    return build(resolve(scheme_id, max_len, **kw))


def enc(m, positions) -> torch.Tensor:
    with torch.no_grad():
        return m.encode(torch.as_tensor(positions, dtype=torch.int64))


def distinct_rows(x: torch.Tensor) -> int:
    return torch.unique(x, dim=0).shape[0]


# Schemes whose code is a function of the bits of pos mod 2^n alone (guide 3.4 property 1).
PURE_BIT = ["binary", "binary-bits", "binary-signed", "binary-smooth", "gray",
            "binary-multilevel", "fourier-binary"]


@pytest.mark.parametrize("scheme_id", PURE_BIT + ["hybrid-int-binary", "binary-gated"])
@pytest.mark.parametrize("max_len", [1, 7, 100, 512])
def test_bit_schemes_give_2n_distinct_codes(scheme_id, max_len):
    """Guide 3.4: each of the 2^n positions 0 .. 2^n - 1 has its own code."""
    m = module(scheme_id, max_len)
    n = m.config.n_bits
    codes = enc(m, range(2**n))
    assert distinct_rows(codes) == 2**n
    if scheme_id in ("binary", "fourier-binary"):  # float codes: also well separated
        gaps = torch.cdist(codes.double(), codes.double()) + torch.eye(2**n) * 1e9
        assert gaps.min() > 1e-3, gaps.min()


@pytest.mark.parametrize("scheme_id", PURE_BIT)
def test_bit_schemes_wrap_at_2n(scheme_id):
    """Past 2^n the code repeats (wrap policy), so 2^n is where uniqueness ends."""
    m = module(scheme_id, 100)
    n = m.config.n_bits
    p = torch.arange(-(2**n), 2**n)
    assert torch.equal(enc(m, p), enc(m, p + 2**n))
    assert torch.equal(enc(m, p), enc(m, p + 2**40 * 2**n))


def test_fourier_binary_is_unique_at_its_minimum_width():
    """The DFT of n real bits is fixed by frequencies 0 .. floor(n/2): d = 2 (floor(n/2) + 1)."""
    for max_len in (7, 100, 1000):
        n = resolve("binary-bits", max_len).n_bits
        m = module("fourier-binary", max_len, d_model=2 * (n // 2 + 1))
        assert distinct_rows(enc(m, range(2**n))) == 2**n


def test_multi_index_schemes_give_distinct_codes():
    m = module("binary-2d", 16)  # n = 5: all 32 x 32 (x, y) pairs
    grid = torch.cartesian_prod(torch.arange(32), torch.arange(32))
    assert distinct_rows(enc(m, grid)) == 32 * 32
    m = module("hierarchical", 8, params={"widths": "2,2,3"})  # all 2^7 level triples
    grid = torch.cartesian_prod(torch.arange(4), torch.arange(4), torch.arange(8))
    assert distinct_rows(enc(m, grid)) == 2**7


BIT_VALUED = {"binary-bits": {0.0, 1.0}, "gray": {0.0, 1.0}, "binary-multilevel": {0.0, 1.0},
              "binary-signed": {-1.0, 1.0}}


@pytest.mark.parametrize("scheme_id", sorted(BIT_VALUED))
@settings(max_examples=30, deadline=None)
@given(positions=st.lists(INT64, min_size=1, max_size=20))
def test_bit_values_for_any_int64(scheme_id, positions):
    values = set(enc(module(scheme_id, 100), positions).flatten().tolist())
    assert values <= BIT_VALUED[scheme_id]


@settings(max_examples=30, deadline=None)
@given(positions=st.lists(st.tuples(INT64, INT64, INT64), min_size=1, max_size=10))
def test_multi_index_bits_for_any_int64(positions):
    assert set(enc(module("hierarchical", 100), positions).flatten().tolist()) <= {0.0, 1.0}
    pairs = [p[:2] for p in positions]
    assert set(enc(module("binary-2d", 100), pairs).flatten().tolist()) <= {0.0, 1.0}


def test_smooth_bits_lie_strictly_inside_0_1():
    for c in (0.1, 5.0, 10.0):
        values = enc(module("binary-smooth", 100, params={"c": c}), range(-5, 200))
        assert 0 < values.min() < 0.5 < values.max() < 1
        assert len(set(values.flatten().tolist())) == 2


@pytest.mark.parametrize("scheme_id", ["integer-norm", "integer-multiscale", "hybrid-int-binary",
                                       "binary-gated", "integer"])
@pytest.mark.parametrize("max_len", [1, 2, 100, 513])
def test_integer_family_in_0_1_inside_the_range(scheme_id, max_len):
    m = module(scheme_id, max_len)
    if scheme_id == "binary-gated":  # any gates: a convex mix of a bit and pos / (L - 1)
        with torch.no_grad():
            m.gate_logits.copy_(torch.linspace(-20, 20, m.gate_logits.numel()))
    values = enc(m, range(max_len))
    assert values.min() >= 0 and values.max() <= 1
    if scheme_id == "integer-norm":
        assert values[0].eq(0).all() and values[-1].eq(1 if max_len > 1 else 0).all()
    if scheme_id == "integer":  # C = max_len by default: pos / L < 1
        assert values.max() < 1


@pytest.mark.parametrize("scheme_id", ["sinusoidal", "rope", "sinusoidal-learned"])
def test_trig_values_bounded(scheme_id):
    m = module(scheme_id, 100, d_model=10)
    p = torch.cat([torch.arange(-300, 300), torch.tensor([LIMIT, -LIMIT, LIMIT - 1])])
    values = enc(m, p)
    residual_bound = 0 if scheme_id != "sinusoidal-learned" else m.residual.abs().max().item()
    assert values.abs().max() <= 1 + residual_bound


def hamming(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a != b).sum(-1)


@pytest.mark.parametrize("max_len", [1, 7, 8, 100])
def test_gray_neighbours_differ_in_one_bit_including_the_wrap(max_len):
    m = module("gray", max_len)
    n = m.config.n_bits
    p = torch.arange(-(2**n) - 3, 2 ** (n + 1) + 3)  # crosses 0, 2^n - 1 -> 2^n, 2^(n+1)
    codes = enc(m, p)
    assert hamming(codes[:-1], codes[1:]).eq(1).all()


@settings(max_examples=60, deadline=None)
@given(p=st.integers(min_value=-(2**63), max_value=2**63 - 2))
def test_gray_neighbours_differ_in_one_bit_for_any_int64(p):
    codes = enc(module("gray", 1000), [p, p + 1])
    assert hamming(codes[0], codes[1]) == 1


def angle_error(m, pos: int) -> float:
    """Sum over frequencies of the float32 angle error bound ``2 EPS32 |pos| w_i`` (sin and cos
    are 1-Lipschitz), plus a few ulp per sin/cos value."""
    return float(2 * EPS32 * abs(pos) * m.inv_freq.double().sum() + 4e-7 * m.inv_freq.numel())


@settings(max_examples=40, deadline=None)
@given(t=st.integers(-5000, 5000), u=st.integers(-5000, 5000), s=st.integers(-5000, 5000))
def test_sinusoidal_dot_product_depends_only_on_the_offset(t, u, s):
    """Principles: sin(wt) sin(wu) + cos(wt) cos(wu) = cos(w (t - u)), summed over w."""
    m = module("sinusoidal", 512, d_model=22)
    rows = enc(m, [t, u, t + s, u + s]).double()
    dot, shifted = rows[0] @ rows[1], rows[2] @ rows[3]
    w = m.inv_freq.double()
    exact = torch.cos(w * (t - u)).sum()  # w as stored (float32): the offset's own formula
    tol = angle_error(m, t) + angle_error(m, u)
    assert abs(dot - exact) <= tol
    assert abs(shifted - dot) <= tol + angle_error(m, t + s) + angle_error(m, u + s)


@settings(max_examples=40, deadline=None)
@given(t=st.integers(-5000, 5000), u=st.integers(-5000, 5000), s=st.integers(-5000, 5000),
       seed=st.integers(0, 2**16))
def test_rope_scores_depend_only_on_the_offset(t, u, s, seed):
    """Principles: (R(theta t) q) . (R(theta u) k) = q^T R(theta (u - t)) k."""
    m = module("rope", 512, d_model=14)
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 14, generator=gen)
    with torch.no_grad():
        def score(a: int, b: int) -> float:
            return float(m.apply(q[None], torch.tensor([a])).double()
                         @ m.apply(k[None], torch.tensor([b])).double().T)

        base, shifted = score(t, u), score(t + s, u + s)
    q0, q1, k0, k1 = q[0::2].double(), q[1::2].double(), k[0::2].double(), k[1::2].double()
    phi = m.inv_freq.double() * (u - t)
    exact = float((torch.cos(phi) * (q0 * k0 + q1 * k1) + torch.sin(phi) * (q1 * k0 - q0 * k1))
                  .sum())
    scale = float(q.norm() * k.norm())
    tol = scale * (angle_error(m, t) + angle_error(m, u)) + 1e-5 * scale
    assert abs(base - exact) <= tol
    assert abs(shifted - base) <= 2 * tol + scale * (angle_error(m, t + s) + angle_error(m, u + s))


def test_rope_apply_on_batched_heads_rotates_each_position():
    m = module("rope", 64, d_model=8)
    x = torch.randn(2, 3, 5, 8)  # [B, H, N, d]
    with torch.no_grad():
        out = m(x, offset=7)
        for i in range(5):
            one = m.apply(x[:, :, i:i + 1], torch.tensor([7 + i]))
            assert torch.equal(out[:, :, i:i + 1], one)
        # pairs keep their length: a rotation
        pairs = out.view(2, 3, 5, 4, 2).norm(dim=-1)
        assert torch.allclose(pairs, x.view(2, 3, 5, 4, 2).norm(dim=-1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("heads", "expected"), [
    (8, [2.0**-k for k in range(1, 9)]),
    (4, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]),
    (1, [2.0**-8]),
])
def test_alibi_slopes_powers_of_two(heads, expected):
    assert module("alibi", 16, heads=heads).slopes.tolist() == expected


def test_alibi_geometric_slopes_for_any_head_count():
    for heads in (3, 12, 20):
        slopes = module("alibi", 16, heads=heads, params={"slopes": "geometric"}).slopes.double()
        exact = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)],
                             dtype=torch.float64)
        assert torch.allclose(slopes, exact, rtol=EPS32, atol=0)


@pytest.mark.parametrize("scheme_id", ["alibi", "gaussian"])
def test_biases_symmetric_zero_diagonal_and_maximal_there(scheme_id):
    m = build(resolve(scheme_id, 64, heads=4))
    p = torch.cat([torch.arange(-10, 70), torch.tensor([LIMIT, -LIMIT])])
    with torch.no_grad():
        bias = m.encode(p, p)  # [H, N, N]
    assert bias.shape == (4, p.numel(), p.numel())
    assert torch.equal(bias, bias.transpose(1, 2))
    assert bias.diagonal(dim1=1, dim2=2).eq(0).all()
    assert bias.max() == 0  # the diagonal is the maximum: no key is favoured over the query
    # and the penalty grows with the distance |t - u| on either side of the query
    row = bias[:, 20, :80]  # query position 10 (index 20) against keys -10 .. 69
    left, right = row[:, :21], row[:, 20:]
    assert (left[:, 1:] > left[:, :-1]).all() and (right[:, 1:] < right[:, :-1]).all()


def test_gaussian_bias_follows_sigma():
    m = build(resolve("gaussian", 64, params={"sigma": 4.0}))
    with torch.no_grad():
        bias = m.encode(torch.tensor([0]), torch.tensor([4, 8]))
    assert bias[0, 0].tolist() == [-0.5, -2.0]  # -(d^2) / (2 sigma^2) at d = sigma, 2 sigma
    assert math.isclose(math.exp(bias[0, 0, 0]), math.exp(-0.5))


def test_n_bits_is_the_demos_ceil_log2():
    """``n = ceil(log2(max_len + 1))`` as the demo computes it, for every max_len where float
    log2 is exact enough to say (edgepe uses ``max_len.bit_length()``, exact for every size)."""
    from edgepe.schemes import n_bits

    lengths = list(range(1, 4100)) + [2**k + e for k in range(12, 40) for e in (-1, 0, 1)]
    for length in lengths:
        assert n_bits(length) == math.ceil(math.log2(length + 1)), length
