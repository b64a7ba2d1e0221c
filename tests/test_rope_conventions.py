"""RoPE as deployed models define it (issue 16): layouts, partial rotary, HF frequency scalings,
per-row positions, 4-D inputs and the caches of the RotaryEmbedding ops.

The oracles are written here in float64 from the published formulas (Hugging Face's
``modeling_rope_utils.py`` init functions and ``rotate_half``; GPT-J's interleaved pairs), not
from edgepe's modules. The documented float32-angle tolerance: edgepe's angle is the float32
product ``pos * w_i`` of a float32 ``w_i``, within ``2^-23 |pos| w_i`` of the exact angle (two
roundings of 2^-24), and sin/cos kernels add <= 2.4e-7; a rotated pair moves by at most
``(|x_a| + |x_b|)`` times that, plus the float32 roundings of the products and sum.
"""

from __future__ import annotations

import io
import math

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import edgepe
from edgepe import api
from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.schemes import build, resolve

KERNEL = 2.4e-7  # sin/cos kernels: 2 ulp of a value <= 1 (the scheme's tolerance_why)


# ------------------------------------------------------------------ oracles (float64, from HF)

def hf_inv_freq(rope_type: str, dim: int, base: float = 10000.0, **k) -> tuple[np.ndarray, float]:
    """``(inv_freq [dim/2], attention_factor)`` as transformers' ROPE_INIT_FUNCTIONS define them."""
    i = np.arange(0, dim, 2, dtype=np.float64) / dim
    if rope_type == "dynamic":
        P, seq = k["original_max_position_embeddings"], k["seq_len"]
        seq = seq if seq > P else P
        base = base * ((k["factor"] * seq / P) - (k["factor"] - 1)) ** (dim / (dim - 2))
    inv = 1.0 / base**i
    if rope_type == "linear":
        return inv / k["factor"], 1.0
    if rope_type == "llama3":
        factor, low, high = k["factor"], k["low_freq_factor"], k["high_freq_factor"]
        old = k["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return np.where(medium, smoothed, out), 1.0
    if rope_type == "yarn":
        factor, P = k["factor"], k["original_max_position_embeddings"]
        attention = k.get("attention_factor") or 0.1 * math.log(factor) + 1.0

        def corr(rot):
            return (dim * math.log(P / (rot * 2 * math.pi))) / (2 * math.log(base))

        lo = max(math.floor(corr(k.get("beta_fast", 32))), 0)
        hi = min(math.ceil(corr(k.get("beta_slow", 1))), dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        return (1.0 / (factor * base**i)) * (1 - extra) + (1.0 / base**i) * extra, attention
    return inv, 1.0


def oracle_apply(x, positions, inv, layout, rotary_dim, attention=1.0):
    """float64 rotation of ``x [..., S, d]`` at ``positions`` (``[S]``, or ``[B, S]`` for ``x``
    ``[B, S, d]``/``[B, H, S, d]``): GPT-J pairs or HF's ``q cos + rotate_half(q) sin``."""
    x = np.asarray(x, dtype=np.float64)
    p = np.asarray(positions, dtype=np.float64)
    theta = p[..., None] * inv  # [..., S, R/2]
    if p.ndim == 2 and x.ndim == 4:
        theta = theta[:, None]
    cos, sin = np.cos(theta) * attention, np.sin(theta) * attention
    r = rotary_dim
    rot, rest = x[..., :r], x[..., r:]
    if layout == "half":  # HF: emb = cat(freqs, freqs); q * cos + rotate_half(q) * sin
        c, s = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
        half = r // 2
        rotate_half = np.concatenate([-rot[..., half:], rot[..., :half]], -1)
        out = rot * c + rotate_half * s
    else:  # GPT-J: pairs (2i, 2i+1)
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(rot.shape)
    return np.concatenate([out, rest], -1)


def angle_bound(x, positions, inv, layout, rotary_dim, attention=1.0):
    """Per-element bound of ``|float32 result - float64 oracle|`` (module docstring)."""
    p = np.abs(np.asarray(positions, dtype=np.float64))
    dtheta = (2.0**-23 * p[..., None] * inv + KERNEL) * attention  # [..., S, R/2]
    if p.ndim == 2 and np.ndim(x) == 4:
        dtheta = dtheta[:, None]
    x = np.abs(np.asarray(x, dtype=np.float64))
    r, half = rotary_dim, rotary_dim // 2
    if layout == "half":
        pair = x[..., :half] + x[..., half:r]
        per = np.concatenate([pair * dtheta] * 2, -1)
    else:
        pair = x[..., 0:r:2] + x[..., 1:r:2]
        per = np.repeat(pair * dtheta, 2, axis=-1)
    rounding = 4 * 2.0**-24 * attention * np.concatenate([pair] * 2, -1)
    bound = per + rounding
    return np.concatenate([bound, np.zeros(x.shape[:-1] + (x.shape[-1] - r,))], -1)


def rope(d, max_len=512, **params):
    config = resolve("rope", max_len, d_model=d, params=params)
    return config, build(config)


def uniform(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


# ------------------------------------------------------------------ frequencies

SCALINGS = [
    ("default", {}),
    ("linear", {"factor": 4.0}),
    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 256, "seq_len": 1024}),
    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 2048, "seq_len": 512}),
    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 128}),
    ("yarn", {"factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0,
              "beta_slow": 2.0, "attention_factor": 1.25}),
]


@pytest.mark.parametrize(("rope_type", "kw"), SCALINGS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(SCALINGS)])
@pytest.mark.parametrize("rotary_dim", [0, 24])
def test_frequencies_are_hugging_faces(rope_type, kw, rotary_dim):
    d = 64
    _, m = rope(d, rope_type=rope_type, rotary_dim=rotary_dim, **kw)
    r = rotary_dim or d
    inv, attention = hf_inv_freq(rope_type, r, **{"seq_len": 512,
                                                  "original_max_position_embeddings": 512, **kw})
    got = m.inv_freq.double().numpy()
    np.testing.assert_allclose(got[: r // 2], inv, rtol=2**-24, atol=0)
    assert (got[r // 2:] == 0).all()  # pass-through slots
    np.testing.assert_allclose(m.scale.double().numpy()[: r // 2], attention, rtol=2**-24)
    # dynamic NTK changes nothing until the sequence outgrows the trained context (HF)
    unchanged = rope_type == "default" or (
        rope_type == "dynamic" and kw["seq_len"] <= kw["original_max_position_embeddings"])
    assert np.allclose(inv, hf_inv_freq("default", r)[0], rtol=1e-12) == unchanged


def test_yarn_default_attention_factor_is_0_1_ln_factor_plus_1():
    _, m = rope(32, rope_type="yarn", factor=4.0)
    assert m.scale[0].item() == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=2**-24)


# ------------------------------------------------------------------ rotation

@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(("rope_type", "kw"), SCALINGS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(SCALINGS)])
@pytest.mark.parametrize("rotary_dim", [0, 16])
def test_apply_is_the_float64_formula_within_the_angle_bound(layout, rope_type, kw, rotary_dim):
    d = 48
    _, m = rope(d, layout=layout, rope_type=rope_type, rotary_dim=rotary_dim, **kw)
    r = rotary_dim or d
    inv, attention = hf_inv_freq(rope_type, r, **{"seq_len": 512,
                                                  "original_max_position_embeddings": 512, **kw})
    p = np.concatenate([np.arange(0, 40), [511, 512, 3000, 10**5, -77, 2**24]]).astype(np.int64)
    x = uniform((3, len(p), d))
    with torch.no_grad():
        got = m.apply(torch.from_numpy(x), torch.from_numpy(p)).double().numpy()
    want = oracle_apply(x, p, inv, layout, r, attention)
    assert (np.abs(got - want) <= angle_bound(x, p, inv, layout, r, attention)).all()
    np.testing.assert_array_equal(got[..., r:], x[..., r:])  # passed through, bit for bit


def test_the_two_layouts_differ_and_half_is_a_permutation_of_interleaved():
    """Using the wrong layout is not a no-op; the half layout is the interleaved one on
    de-interleaved dimensions (what converting a GPT-J checkpoint to NeoX does)."""
    d = 16
    _, inter = rope(d)
    _, half = rope(d, layout="half")
    x = torch.from_numpy(uniform((5, d)))
    p = torch.arange(100, 105)
    with torch.no_grad():
        a, b = inter.apply(x, p), half.apply(x, p)
    assert (a - b).abs().max() > 0.1
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # interleaved -> halves
    with torch.no_grad():
        c = half.apply(x[:, perm], p)
    torch.testing.assert_close(c, a[:, perm], rtol=0, atol=0)


def test_per_row_positions_for_3d_and_4d_inputs():
    """positions [B, S]: row b at its own offsets (padding, packed sequences)."""
    _, m = rope(32, layout="half", rotary_dim=16)
    p = torch.tensor([[0, 1, 2, 3], [300, 301, 302, 303]])
    x4 = torch.from_numpy(uniform((2, 3, 4, 32)))
    with torch.no_grad():
        y4 = m.apply(x4, p)
        y3 = m.apply(x4[:, 0], p)
        for b in range(2):
            torch.testing.assert_close(y4[b], m.apply(x4[b], p[b]), rtol=0, atol=0)
        torch.testing.assert_close(y3, y4[:, 0], rtol=0, atol=0)


def test_bad_conventions_are_refused():
    for params, words in [({"layout": "neox"}, "allowed: interleaved, half"),
                          ({"rotary_dim": 7}, "even"), ({"rotary_dim": 80}, "at most"),
                          ({"rope_type": "su"}, "allowed: default"),
                          ({"rope_type": "longrope"}, "short_factor with rotary_dim / 2 = 32"),
                          ({"freq_dtype": "float16"}, "allowed: float64, float32"),
                          ({"rope_type": "llama3", "low_freq_factor": 4.0}, "high_freq_factor")]:
        with pytest.raises(BadParameterError, match=words):
            resolve("rope", 64, d_model=64, params=params)


# ------------------------------------------------------------------ acceptance: [2, 8, 128, 64]

B, H, S, D, R, OFFSET, L = 2, 8, 128, 64, 32, 300, 512


def _cache(layout: str):
    """edgepe's cos_cache/sin_cache [L, R/2] from the exported cache graph at 0 .. L-1."""
    import onnxruntime as ort

    config = api.make_config("rope", L, d_model=D, params={"layout": layout,
                                                                  "rotary_dim": R},
                                    extra={"rope_graph": "cache"})
    buffer = io.BytesIO()
    prepare(config).write(buffer)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    pe, cos, sin = session.run(["pe", "cos_cache", "sin_cache"],
                               {"positions": np.arange(L, dtype=np.int64)})
    assert cos.shape == sin.shape == (L, R // 2)
    np.testing.assert_array_equal(cos, pe[:, : R // 2])
    np.testing.assert_array_equal(sin, pe[:, D // 2: D // 2 + R // 2])
    return cos, sin


def _rotary_model(domain: str, interleaved: int) -> bytes:
    """One RotaryEmbedding node on a 4-D x [B, H, S, D] with position_ids [B, S]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H, S, D])
    ids = helper.make_tensor_value_info("position_ids", TensorProto.INT64, [B, S])
    cos = helper.make_tensor_value_info("cos_cache", TensorProto.FLOAT, [L, R // 2])
    sin = helper.make_tensor_value_info("sin_cache", TensorProto.FLOAT, [L, R // 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, S, D])
    if domain == "com.microsoft":
        inputs, opsets = ["x", "position_ids", "cos_cache", "sin_cache"], [
            helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    else:
        inputs, opsets = ["x", "cos_cache", "sin_cache", "position_ids"], [
            helper.make_opsetid("", 23)]
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], domain=domain.replace("ai.onnx", ""),
                            interleaved=interleaved, num_heads=H, rotary_embedding_dim=R)
    graph = helper.make_graph([node], "rotary", [x, ids, cos, sin], [y])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.onnx"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_acceptance_b2_h8_s128_d64_at_offset_300(layout, domain):
    """half (and interleaved) layout, rotary_dim = head_dim / 2, x [2, 8, 128, 64] at positions
    300 .. 427: module.apply equals the float64 formula within the float32-angle bound, and so
    do onnxruntime's RotaryEmbedding ops fed edgepe's caches (interleaved attribute = layout)."""
    import onnxruntime as ort

    _, m = rope(D, layout=layout, rotary_dim=R)
    x = uniform((B, H, S, D), seed=7)
    p = np.broadcast_to(np.arange(OFFSET, OFFSET + S, dtype=np.int64), (B, S)).copy()
    inv, _ = hf_inv_freq("default", R)
    want = oracle_apply(x, p, inv, layout, R)
    bound = angle_bound(x, p, inv, layout, R)
    with torch.no_grad():
        got = m.apply(torch.from_numpy(x), torch.from_numpy(p)).double().numpy()
    assert (np.abs(got - want) <= bound).all()
    cos, sin = _cache(layout)
    session = ort.InferenceSession(_rotary_model(domain, int(layout == "interleaved")),
                                   providers=["CPUExecutionProvider"])
    y = session.run(["y"], {"x": x, "position_ids": p, "cos_cache": cos, "sin_cache": sin})[0]
    assert (np.abs(y - want) <= bound).all()
    np.testing.assert_array_equal(y[..., R:], x[..., R:])
    # the op and edgepe's module agree far closer than the bound: same float32 cos/sin
    assert np.abs(y - got).max() <= 4 * 2.0**-24 * 2 + 2 * 1.2e-7


@pytest.mark.parametrize("lowering", ["onnx", "ort", "rotary23"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_graph_in_each_layout_with_partial_rotary(layout, lowering):
    """The exported apply graph (x [B*H, S, d], positions [S]) equals module.apply."""
    import onnxruntime as ort

    opset = 23 if lowering == "rotary23" else 18
    config = api.make_config("rope", L, d_model=D, params={"layout": layout,
                                                                  "rotary_dim": R},
                                    opset=opset, extra={"rope_graph": "apply",
                                                        "rope_lowering": lowering})
    buffer = io.BytesIO()
    prepare(config).write(buffer)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    _, m = rope(D, layout=layout, rotary_dim=R)
    x = uniform((B * H, S, D), seed=3)
    p = np.arange(OFFSET, OFFSET + S, dtype=np.int64)
    y = session.run(["y"], {"x": x, "positions": p})[0]
    with torch.no_grad():
        ref = m.apply(torch.from_numpy(x), torch.from_numpy(p)).numpy()
    np.testing.assert_allclose(y, ref, rtol=0, atol=2 * 1e-6)
    np.testing.assert_array_equal(y[..., R:], x[..., R:])


@pytest.mark.parametrize("lowering", ["onnx", "ort", "rotary23"])
def test_apply_4d_graph_takes_attention_shapes_and_per_row_positions(tmp_path, lowering):
    """--rope-graph apply-4d: x [2, 8, 128, 64], positions [B, S] with rows at different
    offsets (300.. and a padded row), on onnxruntime and through edgepe.load(...).apply."""
    opset = 23 if lowering == "rotary23" else 18
    params = {"layout": "half", "rotary_dim": R}
    out = tmp_path / f"rope-4d-{lowering}.onnx"
    config = api.make_config("rope", L, d_model=D, params=params, opset=opset, out=out,
                             extra={"rope_graph": "apply-4d", "rope_lowering": lowering})
    result, report = api.export(config)
    assert report, str(report)  # the quick parity check ran on the 4-D graph and passed
    _, m = rope(D, **params)
    x = uniform((B, H, S, D), seed=11)
    p = np.stack([np.arange(OFFSET, OFFSET + S), np.r_[np.zeros(28), np.arange(100)]]).astype(
        np.int64)
    with torch.no_grad():
        ref = m.apply(torch.from_numpy(x), torch.from_numpy(p)).numpy()
    runtime = edgepe.load(result.path)
    for got in (runtime.apply(x, positions=p), runtime.apply(x[:, 0], positions=p)[:, None]):
        assert got.shape[-1] == D
        np.testing.assert_allclose(got, ref[:, : got.shape[1]], rtol=0, atol=2e-6)
    # the encode graph of the same convention, read by edgepe.load, rotates alike
    enc = tmp_path / "rope-encode.onnx"
    api.export(api.make_config("rope", L, d_model=D, params=params, out=enc), verify=False)
    np.testing.assert_allclose(edgepe.load(enc).apply(x, positions=p), ref, rtol=0, atol=2e-6)


def test_head_dim_is_rope_d_model_on_the_cli(tmp_path):
    from typer.testing import CliRunner

    from edgepe.cli import app

    runner = CliRunner()
    out = tmp_path / "r.onnx"
    ok = runner.invoke(app, ["export", "--scheme", "rope", "--max-len", "16", "--head-dim", "8",
                             "--param", "layout=half", "--out", str(out)])
    assert ok.exit_code == 0, ok.output
    assert edgepe.load(out).manifest["d_model"] == 8
    for args, words in [(["--scheme", "sinusoidal", "--head-dim", "8"], "rope only"),
                        (["--scheme", "rope", "--head-dim", "8", "--d-model", "16"], "disagree")]:
        bad = runner.invoke(app, ["export", "--max-len", "16", *args,
                                  "--out", str(tmp_path / "bad.onnx")])
        assert bad.exit_code == 2 and words in bad.stderr, bad.output
        assert not (tmp_path / "bad.onnx").exists()
