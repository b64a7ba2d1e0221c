"""Checks whose expected values do not come from edgepe's code (issue 24).

Every registered scheme has at least one oracle here (``test_every_scheme_has_an_oracle``): rows
written literally in this file (worked by hand from the definition, or float64 values from
Python's ``math`` pasted as numbers), published rows (a tutorial's sinusoidal table), numpy's FFT
for ``fourier-binary``, and a standard RoPE implementation (the complex-number form of Meta's
LLaMA ``apply_rotary_emb``) for ``rope``. Learnable schemes get fixed weights written here, so
the expected rows are hand arithmetic too. This file also serves as the numeric golden (a few
float64 rows) of the schemes that have no golden graph in tests/goldens.

Tolerances: bit and exact-float schemes compare with ``==`` against the literal rounded to
float32 once; float schemes whose reference does several float32 operations allow the few ulp
those operations cost (stated at each check).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from edgepe.schemes import build, resolve, scheme_ids

ORACLES: dict[str, list[Callable[[], None]]] = {}


def oracle(*schemes: str):
    """Register a check as an outside oracle for ``schemes``."""

    def wrap(fn):
        for s in schemes:
            ORACLES.setdefault(s, []).append(fn)
        return fn

    return wrap


def encode(scheme, max_len, positions, keys=None, weights=None, **kw) -> np.ndarray:
    """float64 copy of ``encode`` of ``resolve(scheme, max_len, **kw)``, with ``weights``
    (parameter name -> values) written into the module first."""
    module = build(resolve(scheme, max_len, **kw))
    with torch.no_grad():
        for name, value in (weights or {}).items():
            module.get_parameter(name).copy_(torch.tensor(value, dtype=torch.float32))
        p = torch.tensor(positions, dtype=torch.int64)
        out = module.encode(p) if keys is None else module.encode(p, torch.tensor(keys))
    return out.numpy().astype(np.float64)


def f32(values) -> np.ndarray:
    """Literal float64 values rounded once to float32 (what an exact reference returns)."""
    return np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)


# -- the bit family: hand-written rows (LSB-first, DESIGN.md) --------------------------------

@oracle("binary-bits", "binary-signed")
def bits_and_signed_rows():
    # L = 12: n = 4; 10 = 0b1010 -> [0, 1, 0, 1] (guide 4.3); 7 = 0b0111; -1 wraps to 15
    np.testing.assert_array_equal(encode("binary-bits", 12, [10, 7, 0, -1, 16 + 3]),
                                  [[0, 1, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1],
                                   [1, 1, 0, 0]])
    np.testing.assert_array_equal(encode("binary-bits", 12, [10], d_model=6), [[0, 1, 0, 1, 0, 0]])
    np.testing.assert_array_equal(encode("binary-signed", 12, [10, 7]),
                                  [[-1, 1, -1, 1], [1, 1, 1, -1]])


@oracle("binary-smooth")
def smooth_rows():
    hi, lo = 0.8807970779778823, 0.11920292202211755  # sigmoid(2), sigmoid(-2)
    got = encode("binary-smooth", 7, [5, 2], params={"c": 2})
    # torch's float32 sigmoid is within one ulp (6e-8 at 0.88) of the correctly rounded value
    np.testing.assert_allclose(got, [[hi, lo, hi], [lo, hi, lo]], rtol=0, atol=1.2e-7)


@oracle("gray")
def gray_rows():
    # Gray codes of 0..7: 0, 1, 3, 2, 6, 7, 5, 4 (reflected binary), LSB-first; 8 wraps to 0
    codes = [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 1, 1], [1, 1, 1], [1, 0, 1],
             [0, 0, 1], [0, 0, 0]]
    np.testing.assert_array_equal(encode("gray", 7, list(range(9))), codes)


@oracle("binary-multilevel")
def multilevel_rows():
    # guide 3.7: position 13, 3 groups of 4 bits; group g = bits of 13 >> g, LSB-first
    np.testing.assert_array_equal(encode("binary-multilevel", 15, [13]),
                                  [[1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0]])
    # 2 groups of 3 bits (L = 7): 6 = 0b110 -> [0,1,1], 6 >> 1 = 3 -> [1,1,0]
    np.testing.assert_array_equal(encode("binary-multilevel", 7, [6], params={"groups": 2},
                                         d_model=6), [[0, 1, 1, 1, 1, 0]])


@oracle("binary-2d")
def binary_2d_rows():
    # guide 6.2: (x, y) = (5, 3), d = 8 -> [x0, y0, x1, y1, ...] = [1,1, 0,1, 1,0, 0,0]
    np.testing.assert_array_equal(encode("binary-2d", 15, [[5, 3]], d_model=8),
                                  [[1, 1, 0, 1, 1, 0, 0, 0]])


@oracle("hierarchical")
def hierarchical_rows():
    # guide 6.4: section 2, paragraph 3, sentence 5, widths 2, 2, 3 -> [0,1, 1,1, 1,0,1]
    np.testing.assert_array_equal(
        encode("hierarchical", 8, [[2, 3, 5], [4, 4, 9]], params={"widths": "2,2,3"}),
        [[0, 1, 1, 1, 1, 0, 1], [0, 0, 0, 0, 1, 0, 0]])  # 4 mod 4 = 0, 9 mod 8 = 1


# -- the integer family: hand-written rows ----------------------------------------------------

@oracle("integer", "integer-norm")
def integer_rows():
    np.testing.assert_array_equal(encode("integer", 8, [2, 12, -4], d_model=2),
                                  [[0.25, 0.25], [1.5, 1.5], [-0.5, -0.5]])
    np.testing.assert_array_equal(encode("integer", 8, [3], d_model=1, params={"C": 4}),
                                  [[0.75]])
    # guide 4.3: L = 12, position 10 -> 10 / 11 = 0.909...
    np.testing.assert_array_equal(encode("integer-norm", 12, [10, 22], d_model=2),
                                  f32([[10 / 11, 10 / 11], [2.0, 2.0]]))


@oracle("integer-multiscale")
def multiscale_rows():
    # L = 5: x(2) = 0.5, scales (i / 3)^2 = 0, 1/9, 4/9, 1 for d = 4 (alpha = 2)
    got = encode("integer-multiscale", 5, [2, 4], d_model=4, params={"alpha": 2})
    # x rounds to float32 (exact here), the scale is float32(i^2/9), one rounded product
    expected = [[0.0, f32(1 / 9)[()] * 0.5, f32(4 / 9)[()] * 0.5, 0.5],
                [0.0, f32(1 / 9)[()], f32(4 / 9)[()], 1.0]]
    np.testing.assert_array_equal(got, expected)


@oracle("integer-learnable")
def learnable_rows():
    # w = [2, -1, 0.5], b = [0.25, 1, -3]; L = 5: x(2) = 0.5, x(8) = 2
    got = encode("integer-learnable", 5, [2, 8], d_model=3,
                 weights={"weight": [2, -1, 0.5], "bias": [0.25, 1, -3]})
    np.testing.assert_array_equal(got, [[1.25, 0.5, -2.75], [4.25, -1.0, -2.0]])


@oracle("hybrid-int-binary")
def hybrid_rows():
    # L = 7: n = 3, d = 6; position 5: x = 5 / 6 on 3 columns, then bits of 5 = [1, 0, 1]
    got = encode("hybrid-int-binary", 7, [5, 9])
    np.testing.assert_array_equal(got, f32([[5 / 6] * 3 + [1, 0, 1], [1.5] * 3 + [1, 0, 0]]))
    # odd d = 7: floor(7/2) = 3 integer columns, then 4 bit columns (DESIGN.md edge conventions)
    got = encode("hybrid-int-binary", 7, [5], d_model=7)
    np.testing.assert_array_equal(got, f32([[5 / 6] * 3 + [1, 0, 1, 0]]))


@oracle("binary-gated")
def gated_rows():
    # logits [0, ln 3, -ln 3] -> gates [1/2, 3/4, 1/4]; L = 5, n = 3
    # position 5 = [1, 0, 1], x = 5/4: g b + (1 - g) x
    got = encode("binary-gated", 5, [5, 2],
                 weights={"gate_logits": [0.0, math.log(3), -math.log(3)]})
    expected = [[0.5 + 0.5 * 1.25, 0.25 * 1.25, 0.25 + 0.75 * 1.25],
                [0.5 * 0.5, 0.75 + 0.25 * 0.5, 0.75 * 0.5]]
    # float32 gates (sigmoid rounded) and two rounded products and a sum: a few ulp of <= 1.25
    np.testing.assert_allclose(got, expected, rtol=0, atol=4e-7)


@oracle("fourier-binary")
def fourier_matches_numpy_fft():
    """``[Re F_k | Im F_k]`` with ``F = numpy.fft.fft(bits)`` (``F_k = sum_j b_j e^{-2 pi i j k /
    n}``), frequencies past ``n`` aliasing ``k mod n``; every position of L = 100 and a wrap."""
    for max_len, d in ((100, 14), (100, 20), (5, 4)):
        n = max(1, max_len.bit_length())
        p = np.concatenate([np.arange(max_len), [-1, 2**n, 2**n + 3]])
        bits = ((p[:, None] % 2**n) >> np.arange(n)) & 1
        spectrum = np.fft.fft(bits.astype(np.float64), axis=1)[:, np.arange(d // 2) % n]
        expected = np.concatenate([spectrum.real, spectrum.imag], axis=1)
        got = encode("fourier-binary", max_len, p, d_model=d)
        # float32 basis (<= 2^-24 relative each) and a float32 sum of n <= 7 terms <= 1
        np.testing.assert_allclose(got, expected, rtol=0, atol=n * 2e-7)


# -- sinusoidal, learned tables, rope --------------------------------------------------------

@oracle("sinusoidal")
def sinusoidal_published_rows():
    # machinelearningmastery.com, "A Gentle Introduction to Positional Encoding in Transformer
    # Models" (n = 100, d = 4): the printed P matrix, rows k = 0..3, 8 decimals.
    published = [[0.0, 1.0, 0.0, 1.0],
                 [0.84147098, 0.54030231, 0.09983342, 0.99500417],
                 [0.90929743, -0.41614684, 0.19866933, 0.98006658],
                 [0.14112001, -0.9899925, 0.29552021, 0.95533649]]
    got = encode("sinusoidal", 4, [0, 1, 2, 3], d_model=4, params={"base": 100})
    np.testing.assert_allclose(got, published, rtol=0, atol=1e-7)  # 5e-9 printed, 6e-8 float32
    # base 10000, d = 8 (the paper's form): position 10, float64 math values; guide 4.3's row
    row10 = [-0.5440211108893698, -0.8390715290764524, 0.8414709848078965, 0.5403023058681398,
             0.09983341664682815, 0.9950041652780258, 0.009999833334166664, 0.9999500004166653]
    np.testing.assert_allclose(encode("sinusoidal", 16, [10], d_model=8), [row10], rtol=0,
                               atol=1e-6)  # float32 angle 10 * w_i: <= 2^-23 * 10 rad


@oracle("learned")
def learned_rows():
    # a 3 x 2 table written here; positions clamp to [0, 2]
    table = [[1.5, -2.0], [0.25, 3.0], [-7.0, 0.125]]
    got = encode("learned", 3, [-5, 0, 1, 2, 9, 2**62], d_model=2, weights={"table": table})
    np.testing.assert_array_equal(got, [table[0], table[0], table[1], table[2], table[2],
                                        table[2]])


@oracle("sinusoidal-learned")
def sinusoidal_learned_rows():
    # base 10000, d = 2 (w_0 = 1): [sin p, cos p] + residual[p] for 0 <= p < 2, + 0 outside
    residual = [[0.5, -0.5], [0.25, 0.125]]
    got = encode("sinusoidal-learned", 2, [0, 1, 2, -1], d_model=2,
                 weights={"residual": residual})
    expected = [[0.0 + 0.5, 1.0 - 0.5],
                [0.8414709848078965 + 0.25, 0.5403023058681398 + 0.125],
                [0.9092974268256817, -0.4161468365471424],
                [-0.8414709848078965, 0.5403023058681398]]
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-7)  # sin/cos + one float32 add


@oracle("rope")
def rope_frequencies_and_llama_rotation():
    """Frequencies ``base^(-2i/d)`` written out, and ``apply`` against LLaMA's complex rotation:
    ``view_as_complex(x pairs) * polar(1, p * freqs)`` (facebookresearch/llama, model.py,
    ``precompute_freqs_cis`` / ``apply_rotary_emb``), in float64."""
    module = build(resolve("rope", 64, d_model=8))
    inv_freq = [1.0, 0.1, 0.01, 0.001]  # 10000^(-0/8), ^(-2/8), ^(-4/8), ^(-6/8)
    np.testing.assert_array_equal(module.inv_freq.numpy(), f32(inv_freq))
    positions = torch.tensor([0, 1, 5, 63, 1000])
    freqs = torch.outer(positions.double(), 1.0 / (10000.0 ** (torch.arange(0, 8, 2).double()
                                                                / 8)))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    with torch.no_grad():
        encoded = module.encode(positions).double()
        np.testing.assert_allclose(encoded, torch.cat([freqs_cis.real, freqs_cis.imag], -1),
                                   rtol=0, atol=2e-5)  # float32 angle: 2^-23 * 1000 rad
        x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
        llama = torch.view_as_real(
            torch.view_as_complex(x.double().reshape(2, 5, 4, 2)) * freqs_cis).flatten(-2)
        np.testing.assert_allclose(module.apply(x, positions).double(), llama, rtol=0,
                                   atol=2e-5 * float(x.abs().max()) * 2)


# -- the bias schemes ---------------------------------------------------------------------

@oracle("alibi")
def alibi_paper_slopes():
    # Press et al., "Train Short, Test Long" (ALiBi), 3: for 8 heads the slopes are
    # 1/2^1 .. 1/2^8; bias[h, t, u] = -m_h |t - u|
    got = encode("alibi", 8, [0, 3], [0, 1, 5])
    slopes = [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    expected = [[[-m * 0, -m * 1, -m * 5], [-m * 3, -m * 2, -m * 2]] for m in slopes]
    np.testing.assert_array_equal(got, expected)
    # 4 heads: 1/4, 1/16, 1/64, 1/256 (2^(-8/H) geometric)
    np.testing.assert_array_equal(encode("alibi", 8, [2], [0], heads=4).reshape(-1),
                                  [-0.5, -0.125, -0.03125, -0.0078125])


@oracle("gaussian")
def gaussian_rows():
    # sigma = 2: -(t - u)^2 / 8, the same for each of 2 heads
    got = encode("gaussian", 8, [0, 3], [0, 1, 7], heads=2, params={"sigma": 2})
    row = [[0.0, -0.125, -6.125], [-1.125, -0.5, -2.0]]
    np.testing.assert_array_equal(got, [row, row])
    # sigma = 3: 2 sigma^2 = 18, -(5^2) / 18 rounded once to float32
    np.testing.assert_array_equal(encode("gaussian", 8, [5], [0], params={"sigma": 3}),
                                  f32([[[-25 / 18]]]))


@oracle("t5-bias")
def t5_bias_is_transformers_compute_bias():
    # transformers' own T5Attention.compute_bias (a tiny random T5Config, no download), encoder
    # (bidirectional) and decoder (causal, is_decoder), its relative_attention_bias copied in:
    # equal at every (t, u) of a 300 x 300 grid (distances past max_distance 40 included) and with
    # queries offset by past_seen_tokens
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    for decoder, buckets in ((False, 32), (True, 20)):
        hf_config = T5Config(d_model=16, d_kv=4, num_heads=3, num_layers=1, vocab_size=10,
                             relative_attention_num_buckets=buckets,
                             relative_attention_max_distance=40, is_decoder=decoder)
        attention = T5Attention(hf_config, has_relative_attention_bias=True, layer_idx=0)
        weights = attention.relative_attention_bias.weight.detach().tolist()
        direction = "causal" if decoder else "bidirectional"
        for offset in (0, 57):
            with torch.no_grad():
                want = attention.compute_bias(300, 300, past_seen_tokens=offset)[0].numpy()
            got = encode("t5-bias", 64, np.arange(300) + offset, np.arange(300), heads=3,
                         params={"num_buckets": buckets, "max_distance": 40,
                                 "direction": direction},
                         weights={"relative_attention_bias.weight": weights})
            np.testing.assert_array_equal(got, want)


@oracle("mrope")
def mrope_is_transformers_qwen2_vl_rotary():
    # transformers' own Qwen2VLRotaryEmbedding (a tiny Qwen2VLTextConfig, no download): its cos
    # and sin are [c | c] halves of the slots edgepe's encode gives as [cos | sin]; positions
    # (temporal, height, width) drawn independently over 0 .. 4095, plus text tokens (all equal).
    # Bitwise equal: the same float32 inv_freq and product, and the same torch cos/sin kernels
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    for section, theta in (((2, 3, 3), 10000.0), ((16, 24, 24), 1000000.0)):
        d = 2 * sum(section)
        hf_config = Qwen2VLTextConfig(hidden_size=2 * d, num_attention_heads=2, rope_parameters={
            "rope_type": "default", "rope_theta": theta, "mrope_section": list(section)})
        rotary = Qwen2VLRotaryEmbedding(hf_config)
        gen = torch.Generator().manual_seed(4)
        positions = torch.cat([torch.randint(0, 4096, (3, 1, 500), generator=gen),
                               torch.arange(0, 4096, 7).expand(3, 1, -1)], dim=-1)
        with torch.no_grad():
            cos, sin = rotary(torch.zeros(1), positions)
        got = encode("mrope", 4096, positions[:, 0].T.tolist(),
                     params={"mrope_section": ",".join(map(str, section)), "base": theta})
        half = d // 2
        for hf, ours in ((cos[0], got[:, :half]), (sin[0], got[:, half:])):
            np.testing.assert_array_equal(hf[:, :half].numpy(), ours)
            np.testing.assert_array_equal(hf[:, half:].numpy(), ours)


# -- binary: fixed weights ------------------------------------------------------------------

@oracle("binary")
def binary_fixed_weights():
    # L = 7: n = 3, d = 2; W [2, 3]; encode(p) = bits(p) @ W^T
    w = [[1.0, 2.0, 4.0], [0.5, -1.0, 0.25]]
    got = encode("binary", 7, [0, 1, 5, 6, 8], d_model=2, weights={"projection.weight": w})
    np.testing.assert_array_equal(got, [[0, 0], [1, 0.5], [5, 0.75], [6, -0.75], [0, 0]])


def test_every_scheme_has_an_oracle():
    """Completeness: a scheme added to the registry needs a check from outside edgepe."""
    assert set(ORACLES) == set(scheme_ids())


@pytest.mark.parametrize("check", list(dict.fromkeys(f for fs in ORACLES.values() for f in fs)),
                         ids=lambda f: f.__name__)
def test_oracle(check):
    check()
