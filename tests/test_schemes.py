"""Layer (a): every scheme against a slow, obviously-right formula written from its seed section.

``SLOW_FORMULAS`` maps each scheme id to plain Python (ints, ``math``, one element at a time),
written from the seed's formula and not from the module. Each is compared with the module's
``encode`` over every position ``0 .. max_len - 1`` and over out-of-range and negative positions
per the scheme's policy (``spec.oob``): ``wrap`` schemes take any int64 (the bits of
``pos mod 2^n``, two's complement), ``clamp`` any int64, ``extrapolate``/``mixed`` schemes every
position up to the float32 limit ``spec.position_limit``.

How values compare: the formula runs in float64. Where the spec's tolerance is ``(0, 0)`` and the
reference does one correctly rounded float32 operation (or none), the module must equal the
formula rounded to float32 exactly. Otherwise the error may be ``atol + rtol |want|`` (the spec)
plus ``EPS32 |want|`` (the final rounding to float32) plus ``SLACK[id]``: the float32 roundings
the reference makes before that, each bounded below where it is given.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgepe.schemes import FLOAT_EXACT_POSITIONS, build, get_spec, resolve

EPS32 = 2.0**-24  # float32 unit roundoff: one correctly rounded op errs by <= EPS32 |result|
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def bit(p: int, k: int, n: int) -> int:
    """Bit ``k`` of ``p mod 2^n`` (Python's ``%`` keeps a negative's two's complement low bits)."""
    return ((p % (1 << n)) >> k) & 1


def ratio(cfg, pos: int) -> float:
    """Guide 2.2's ``pos / (L - 1)``; ``L = 1`` divides by 1 (edgepe's convention)."""
    return pos / max(cfg.max_len - 1, 1)


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def sinusoid(cfg, pos: int) -> list[float]:
    """Principles: ``(sin(w_0 t), cos(w_0 t), sin(w_1 t), ...)``, ``w_i = base^(-2i/d)``."""
    d, base = cfg.d_model, cfg.params["base"]
    out = []
    for i in range(d // 2):
        w = base ** (-2 * i / d)
        out += [math.sin(pos * w), math.cos(pos * w)]
    return out


# Each formula takes (config, learned values as nested lists, position) and returns one row:
# [D] for pe schemes (position an int, or a tuple for multi-index schemes), [H] for the bias
# schemes (position a (t, u) pair).
def f_binary(cfg, w, pos):  # demo notebook: bit_k(i) = (i >> k) & 1, then Linear(n_bits, d)
    n, weight = cfg.n_bits, w["projection.weight"]
    return [sum(bit(pos, k, n) * weight[o][k] for k in range(n)) for o in range(cfg.d_model)]


def f_binary_bits(cfg, w, pos):  # guide 3.2: floor(pos / 2^i) mod 2
    return [bit(pos, i, cfg.n_bits) for i in range(cfg.d_model)]


def f_binary_signed(cfg, w, pos):  # guide 3.5 solution 1: 2 b_i - 1
    return [2 * bit(pos, i, cfg.n_bits) - 1 for i in range(cfg.d_model)]


def f_binary_smooth(cfg, w, pos):  # guide 3.5 solution 2: sigmoid(c (2 b_i - 1))
    c = cfg.params["c"]
    return [sigmoid(c * (2 * bit(pos, i, cfg.n_bits) - 1)) for i in range(cfg.d_model)]


def f_gray(cfg, w, pos):  # guide 3.6: bit_i(pos xor floor(pos / 2)), of pos mod 2^n
    n = cfg.n_bits
    q = pos % (1 << n)
    return [bit(q ^ (q // 2), i, n) for i in range(cfg.d_model)]


def f_binary_multilevel(cfg, w, pos):  # guide 3.7: PE(pos, g k + i) = bit_i(floor(pos / 2^g))
    n, groups = cfg.n_bits, cfg.params["groups"]
    k = cfg.d_model // groups
    out = []
    for g in range(groups):
        pos_g = (pos % (1 << n)) // 2**g
        out += [bit(pos_g, i, n) for i in range(k)]
    return out


def f_integer(cfg, w, pos):  # guide 2.1: pos / C on every dimension
    return [pos / cfg.params["C"]] * cfg.d_model


def f_integer_norm(cfg, w, pos):  # guide 2.2: pos / (L - 1) 1_d
    return [ratio(cfg, pos)] * cfg.d_model


def f_integer_multiscale(cfg, w, pos):  # guide 2.3: pos / (L - 1) (i / (d - 1))^alpha
    d, alpha = cfg.d_model, cfg.params["alpha"]
    scales = [(i / (d - 1)) ** alpha for i in range(d)] if d > 1 else [1.0]
    return [ratio(cfg, pos) * s for s in scales]


def f_integer_learnable(cfg, w, pos):  # guide 2.4: w_i pos / (L - 1) + b_i
    return [wi * ratio(cfg, pos) + bi for wi, bi in zip(w["weight"], w["bias"], strict=True)]


def f_hybrid_int_binary(cfg, w, pos):  # guide 5.1: pos / (L - 1) for i < d/2, else bit_{i - d/2}
    half = cfg.d_model // 2
    return [ratio(cfg, pos)] * half + [bit(pos, i, cfg.n_bits) for i in range(cfg.d_model - half)]


def f_binary_gated(cfg, w, pos):  # guide 5.3: g_i b_i + (1 - g_i) pos / (L - 1), g = sigmoid
    gates = [sigmoid(v) for v in w["gate_logits"]]
    return [g * bit(pos, i, cfg.n_bits) + (1 - g) * ratio(cfg, pos) for i, g in enumerate(gates)]


def f_fourier_binary(cfg, w, pos):  # guide 5.2 made precise: F_k = sum_j b_j e^(-2 pi i j k / n)
    n, half = cfg.n_bits, cfg.d_model // 2
    f = [sum(bit(pos, j, n) * cmath.exp(-2j * math.pi * j * k / n) for j in range(n))
         for k in range(half)]
    return [v.real for v in f] + [v.imag for v in f]


def f_binary_2d(cfg, w, pos):  # guide 6.2: even i -> bit_{i/2}(x), odd i -> bit_{(i-1)/2}(y)
    x, y = pos
    n = cfg.n_bits
    return [bit(x, i // 2, n) if i % 2 == 0 else bit(y, (i - 1) // 2, n)
            for i in range(cfg.d_model)]


def f_hierarchical(cfg, w, pos):  # guide 5.4, 6.4: concat(bin(level_0), bin(level_1), ...)
    out = []
    for p, width in zip(pos, cfg.params["widths"], strict=True):
        out += [bit(p, i, width) for i in range(width)]
    return out


def f_sinusoidal(cfg, w, pos):
    return sinusoid(cfg, pos)


def f_learned(cfg, w, pos):  # principles: a table; "clamping reuses the vector for the last"
    return w["table"][min(max(pos, 0), cfg.max_len - 1)]


def f_sinusoidal_learned(cfg, w, pos):  # principles: fixed sinusoidal + residual, off outside
    fixed = sinusoid(cfg, pos)
    if not 0 <= pos < cfg.max_len:
        return fixed
    return [a + r for a, r in zip(fixed, w["residual"][pos], strict=True)]


def f_rope(cfg, w, pos):  # principles: theta_i = pos base^(-2i/d); encode gives [cos | sin]
    d, base = cfg.d_model, cfg.params["base"]
    theta = [pos * base ** (-2 * i / d) for i in range(d // 2)]
    return [math.cos(t) for t in theta] + [math.sin(t) for t in theta]


def alibi_paper_slopes(n):  # the ALiBi paper's get_slopes (Press et al., reference code)
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_paper_slopes(2 * closest)[0::2][: n - closest]


def f_alibi(cfg, w, pos):  # principles: -m_h |t - u|, m_h by the paper's rule (default)
    t, u = pos
    heads = cfg.heads
    if cfg.params["slopes"] == "geometric":
        return [-(2 ** (-8 * (h + 1) / heads)) * abs(t - u) for h in range(heads)]
    return [-m * abs(t - u) for m in alibi_paper_slopes(heads)]


def f_gaussian(cfg, w, pos):  # principles: Gaussian locality bump -(t - u)^2 / (2 sigma^2)
    t, u = pos
    return [-((t - u) ** 2) / (2 * cfg.params["sigma"] ** 2)] * cfg.heads



def t5_bucket(cfg, relative: int) -> int:  # T5 (Raffel et al. 2020, Mesh TensorFlow's rule)
    # buckets of u - t: exact below half a direction's buckets, then logarithmic up to
    # max_distance, the last bucket from there on; bidirectional: the later keys get their own
    # half of the buckets
    n, far, later = cfg.params["num_buckets"], cfg.params["max_distance"], 0
    if cfg.params["direction"] == "bidirectional":
        n //= 2
        later = n if relative > 0 else 0
        a = abs(relative)
    else:
        a = max(-relative, 0)
    exact = n // 2
    if a < exact:
        return later + a
    return later + min(exact + int(math.log(a / exact) / math.log(far / exact) * (n - exact)),
                       n - 1)


def f_t5_bias(cfg, w, pos):  # T5: bias[h, t, u] = E[bucket(u - t), h]
    t, u = pos
    return w["relative_attention_bias.weight"][t5_bucket(cfg, u - t)]


def f_mrope(cfg, w, pos):  # Qwen2-VL: slot i of section j takes stream j mod 3; [cos | sin]
    d, base = cfg.d_model, cfg.params["base"]
    stream = [j % 3 for j, size in enumerate(cfg.params["mrope_section"]) for _ in range(size)]
    theta = [pos[stream[i]] * base ** (-2 * i / d) for i in range(d // 2)]
    return [math.cos(t) for t in theta] + [math.sin(t) for t in theta]


SLOW_FORMULAS: dict[str, Callable] = {
    "binary": f_binary,
    "binary-bits": f_binary_bits,
    "binary-signed": f_binary_signed,
    "binary-smooth": f_binary_smooth,
    "gray": f_gray,
    "binary-multilevel": f_binary_multilevel,
    "integer": f_integer,
    "integer-norm": f_integer_norm,
    "integer-multiscale": f_integer_multiscale,
    "integer-learnable": f_integer_learnable,
    "hybrid-int-binary": f_hybrid_int_binary,
    "binary-gated": f_binary_gated,
    "fourier-binary": f_fourier_binary,
    "binary-2d": f_binary_2d,
    "hierarchical": f_hierarchical,
    "sinusoidal": f_sinusoidal,
    "learned": f_learned,
    "sinusoidal-learned": f_sinusoidal_learned,
    "rope": f_rope,
    "alibi": f_alibi,
    "gaussian": f_gaussian,
    "t5-bias": f_t5_bias,
    "mrope": f_mrope,
}


def angle_slack(cfg, pos: int) -> list[float]:
    """Per column: the float32 angle ``pos * fl32(w_i)`` rounded is within ``2 EPS32 |pos| w_i``
    of ``pos w_i`` (``w_i`` rounded once, the product once); sin and cos are 1-Lipschitz."""
    d, base = cfg.d_model, cfg.params["base"]
    return [2 * EPS32 * abs(pos) * base ** (-2 * i / d) for i in range(d // 2)]


# Rounding the reference does before its final float32 result, per scheme (see the docstring).
SLACK: dict[str, Callable] = {
    # float32 sum of <= n exact products b_k W_ok: each of the <= n additions rounds by at most
    # EPS32 of a partial sum, which is <= sum_k |W_ok|.
    "binary": lambda cfg, w, pos, want: cfg.n_bits * EPS32 * max(
        sum(abs(v) for v in row) for row in w["projection.weight"]),
    # torch's float32 sigmoid of -c and c is within a few ulp of the exact value.
    "binary-smooth": lambda cfg, w, pos, want: 4 * EPS32 * np.abs(want),
    # pos / (L - 1), the scale s_i and their product are each rounded to float32.
    "integer-multiscale": lambda cfg, w, pos, want: 3 * EPS32 * np.abs(want),
    # x = pos / (L - 1), w x and w x + b each rounded: <= 3 EPS32 (|w x| + |b|).
    "integer-learnable": lambda cfg, w, pos, want: 3 * EPS32 * (
        np.abs(np.array(w["weight"]) * ratio(cfg, pos)) + np.abs(np.array(w["bias"]))),
    # g (float32 sigmoid, a few ulp), 1 - g, x, (1 - g) x and the sum, on terms <= max(1, |x|).
    "binary-gated": lambda cfg, w, pos, want: 8 * EPS32 * (1 + abs(ratio(cfg, pos))),
    # the float32 basis (|M| <= 1, rounded once) and <= n additions of partial sums <= n.
    "fourier-binary": lambda cfg, w, pos, want: cfg.n_bits * (cfg.n_bits + 1) * EPS32,
    "sinusoidal": lambda cfg, w, pos, want: np.repeat(angle_slack(cfg, pos), 2),
    # as sinusoidal, plus the addition of a residual |r| < 1 to a value <= 1.
    "sinusoidal-learned": lambda cfg, w, pos, want: np.repeat(angle_slack(cfg, pos), 2)
    + 2 * EPS32 * (1 + np.abs(want)),
    "rope": lambda cfg, w, pos, want: np.tile(angle_slack(cfg, pos), 2),
    # the float32 slope; |t - u| past 2^24 is rounded by the cast.
    "alibi": lambda cfg, w, pos, want: 2 * EPS32 * np.abs(want),
    # the cast of t - u (past 2^24), the square and 2 sigma^2.
    "gaussian": lambda cfg, w, pos, want: 3 * EPS32 * np.abs(want),
    # as rope, with w_i computed as transformers does (a float32 pow and a reciprocal: <= 3
    # roundings of w_i, then the product: 4 EPS32 |pos| w_i), each slot at its stream's position
    "mrope": lambda cfg, w, pos, want: np.tile(
        [2 * a for a in angle_slack(cfg, max(abs(p) for p in pos))], 2),
}

MAX_LENS = (1, 2, 7, 16, 100, 255, 512)  # 1, powers of two, 2^k - 1, and neither
# Widths for the second configuration of each max_len: the first that the scheme accepts and
# that differs from its default; none is a multiple of 8.
WIDTHS = (5, 6, 10, 11, 13, 14, 22, 26, 30, 34, 42)
# Non-default parameters for that second configuration (integer's C stays float32-exact: the
# reference divides by float32(C)).
VARIANT_PARAMS = {
    "binary-smooth": {"c": 2.5},
    "binary-multilevel": {"groups": 2},
    "integer": {"C": 100.0},
    "integer-multiscale": {"alpha": 2.0},
    "hierarchical": {"widths": "3,1,5"},
    "sinusoidal": {"base": 100.0},
    "sinusoidal-learned": {"base": 500.0},
    "rope": {"base": 100.0},
    "gaussian": {"sigma": 2.5},
    "t5-bias": {"direction": "causal", "num_buckets": 16, "max_distance": 20},
    "mrope": {"mrope_section": "2,3,1,1", "base": 100.0},  # a 4th section reads stream 0
}
VARIANT_HEADS = {"alibi": 12, "gaussian": 3, "t5-bias": 3}
TRIG = ("sinusoidal", "sinusoidal-learned", "rope", "mrope")


def variant(scheme_id: str, max_len: int):
    """The second configuration: other parameters and a width that is not a multiple of 8."""
    spec = get_spec(scheme_id)
    params = VARIANT_PARAMS.get(scheme_id, {})
    if spec.kind == "bias":
        return resolve(scheme_id, max_len, heads=VARIANT_HEADS[scheme_id], params=params)
    default = resolve(scheme_id, max_len, params=params)
    for width in WIDTHS:
        if width == default.d_model:
            continue
        try:
            return resolve(scheme_id, max_len, d_model=width, params=params)
        except Exception:  # noqa: BLE001 - a width this scheme refuses: try the next
            continue
    return default  # hierarchical: d_model is sum(widths), set by the parameters


CASES = [
    pytest.param(scheme_id, max_len, which, id=f"{scheme_id}-L{max_len}-{which}")
    for scheme_id in SLOW_FORMULAS
    for max_len in MAX_LENS
    for which in ("default", "variant")
]


def make_config(scheme_id: str, max_len: int, which: str):
    return resolve(scheme_id, max_len) if which == "default" else variant(scheme_id, max_len)


def randomized(cfg, seed: int = 1):
    """The module with every learnable parameter set to seeded random values (init values like
    w = 1, b = 0 or g = 1/2 would hide mistakes), and those values as nested lists."""
    module = build(cfg, seed=0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.7)
    values = {k: v.tolist() for k, v in module.state_dict().items() if v.is_floating_point()}
    return module, values


def outside(cfg) -> list[int]:
    """Out-of-range and negative positions that the scheme's policy defines."""
    spec, length, n = cfg.spec, cfg.max_len, cfg.n_bits
    if spec.oob == "wrap":
        return [length, length + 1, 2**n - 1, 2**n, 2**n + 1, 3 * 2**n + 5, -1, -2, -length,
                -(2**n), -(2**n) - 1, 2**40 + 3, 2**62 + 7, INT64_MAX, INT64_MIN]
    if spec.oob == "clamp":
        return [length, length + 1, 2 * length + 7, 2**40, INT64_MAX, -1, -2, -length, INT64_MIN]
    assert spec.position_limit == FLOAT_EXACT_POSITIONS
    far = [4099, -4099, 65537] if cfg.scheme in TRIG else [
        spec.position_limit, -spec.position_limit, spec.position_limit - 1, 1 << 23 | 1]
    return [length, length + 1, 2 * length + 7, -1, -2, -length, *far]


def positions_for(cfg) -> list:
    """Every in-range position (a sample of the grid for multi-index schemes), then outside."""
    length, k = cfg.max_len, cfg.arity
    if k is None:
        return list(range(length)) + outside(cfg)
    if k == 2 and length <= 16:
        inside = [(x, y) for x in range(length) for y in range(length)]
    else:
        inside = [tuple((p * (2 * level + 1) + level) % length for level in range(k))
                  for p in range(length)]
    far = outside(cfg)
    return inside + [tuple(far[(i + level) % len(far)] for level in range(k))
                     for i in range(len(far))]


def encode_rows(module, cfg, positions) -> np.ndarray:
    """``encode`` as rows ``[N, D]``; bias schemes take (t, u) pairs and give ``[N, H]``."""
    with torch.no_grad():
        if cfg.spec.kind == "bias":
            t = torch.tensor([p[0] for p in positions], dtype=torch.int64)
            u = torch.tensor([p[1] for p in positions], dtype=torch.int64)
            idx = torch.arange(len(positions))
            return module.encode(t, u)[:, idx, idx].T.numpy()  # the diagonal: bias(t_i, u_i)
        return module.encode(torch.tensor(positions, dtype=torch.int64)).numpy()


def check_rows(cfg, values, positions, got: np.ndarray) -> None:
    """Assert each row of ``got`` matches the slow formula (see the module docstring)."""
    scheme_id = cfg.scheme
    formula, slack = SLOW_FORMULAS[scheme_id], SLACK.get(scheme_id)
    rtol, atol = cfg.spec.tolerance
    assert got.dtype == np.float32 and got.shape[0] == len(positions), (got.dtype, got.shape)
    for pos, row in zip(positions, got, strict=True):
        want = np.array(formula(cfg, values, pos), dtype=np.float64)
        assert row.shape == want.shape, f"{scheme_id} at {pos}: shape {row.shape} vs {want.shape}"
        if slack is None and (rtol, atol) == (0.0, 0.0):
            bad = row != want.astype(np.float32)
        else:
            extra = 0.0 if slack is None else slack(cfg, values, pos, want)
            allowed = atol + (rtol + EPS32) * np.abs(want) + extra
            bad = np.abs(row.astype(np.float64) - want) > allowed
        if bad.any():
            col = int(np.argmax(bad))
            raise AssertionError(
                f"{scheme_id} {cfg.as_dict()} at position {pos}, column {col}: module "
                f"{row[col]!r}, slow formula {want[col]!r}"
            )


@pytest.mark.parametrize(("scheme_id", "max_len", "which"), CASES)
def test_scheme_matches_slow_formula(scheme_id, max_len, which):
    cfg = make_config(scheme_id, max_len, which)
    module, values = randomized(cfg)
    if cfg.spec.kind == "bias":
        ts = list(range(min(max_len, 24))) + outside(cfg)
        positions = [(t, u) for t in ts for u in ts]
    else:
        positions = positions_for(cfg)
    check_rows(cfg, values, positions, encode_rows(module, cfg, positions))


def test_variants_cover_the_awkward_widths():
    """The grid really has max_len = 1 and widths that are not a multiple of 8."""
    widths = {s: {variant(s, length).d_model for length in MAX_LENS} for s in SLOW_FORMULAS}
    for scheme_id, found in widths.items():
        if get_spec(scheme_id).kind != "bias":
            assert any(w % 8 for w in found), (scheme_id, found)


WRAP = [s for s in SLOW_FORMULAS if get_spec(s).oob == "wrap"]
INT64 = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
_MODULES: dict[str, tuple] = {}


@pytest.mark.parametrize("scheme_id", WRAP)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_wrap_schemes_match_formula_for_any_int64(scheme_id, data):
    """Random int64 positions (any sign, any size): the bits of ``pos mod 2^n``."""
    if scheme_id not in _MODULES:
        cfg = resolve(scheme_id, 100)
        _MODULES[scheme_id] = (cfg, *randomized(cfg))
    cfg, module, values = _MODULES[scheme_id]
    k = cfg.arity
    item = INT64 if k is None else st.tuples(*[INT64] * k)
    positions = data.draw(st.lists(item, min_size=1, max_size=12))
    check_rows(cfg, values, positions, encode_rows(module, cfg, positions))


FLOAT_LIMITED = [s for s in SLOW_FORMULAS if get_spec(s).position_limit is not None]


@pytest.mark.parametrize("scheme_id", FLOAT_LIMITED)
def test_float_schemes_refuse_positions_past_their_limit(scheme_id):
    """Float schemes are defined for ``|pos| <= 2^24``; past it ``encode`` raises, never rounds
    silently (int64's minimum included: its ``abs`` overflows to itself)."""
    from edgepe.contract.errors import PositionError

    cfg = resolve(scheme_id, 16)
    module = build(cfg)
    limit = cfg.spec.position_limit
    edge = torch.tensor([limit, -limit], dtype=torch.int64)
    if cfg.arity is not None:
        edge = edge.unsqueeze(-1).expand(-1, cfg.arity)
    with torch.no_grad():
        args = (edge, edge) if cfg.spec.kind == "bias" else (edge,)
        assert torch.isfinite(module.encode(*args)).all()
        for bad in (limit + 1, -limit - 1, INT64_MIN, INT64_MAX):
            p = torch.tensor([0, bad], dtype=torch.int64)
            with pytest.raises(PositionError, match=str(bad)):
                module.encode(*((p, p[:1]) if cfg.spec.kind == "bias" else (p,)))
            if cfg.spec.kind == "bias":  # key positions are checked too
                with pytest.raises(PositionError):
                    module.encode(p[:1], p)
