"""T5's relative bias and Qwen2-VL's multimodal RoPE (issue 40, point 3), against transformers.

- t5-bias's Log-free lookup (``T5Bias.magnitude_buckets``, the ONNX graph's ``distance_buckets``)
  against transformers' own ``T5Attention._relative_position_bucket`` at every distance up to
  2^17 (fast) and up to 2^25, every distance two positions within the 2^24 limit can have (slow);
- ``--from-hf-config`` for model_type t5 and qwen2_vl: what is read, what is refused;
- end to end: a tiny T5 encoder's checkpoint and config exported by the CLI equal that model's
  ``compute_bias``, and a Qwen2-VL config's artifact equals its rotary module, on onnxruntime.

Models are built from config objects with random weights (no download).
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.contract.errors import BadParameterError
from edgepe.schemes import build, resolve
from edgepe.schemes.hf_config import from_hf_config

CONFIGS = [  # (num_buckets, max_distance, bidirectional): T5's both, and awkward ones
    (32, 128, True), (32, 128, False), (33, 40, True), (20, 12, False), (4, 3, True),
    (2, 2, False), (64, 1000, True),
]


def hf_bucket(relative: torch.Tensor, bidirectional: bool, buckets: int, distance: int):
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(relative, bidirectional=bidirectional,
                                                 num_buckets=buckets, max_distance=distance)


def lookup_bucket(module, relative: torch.Tensor) -> torch.Tensor:
    """The graph's bucket, written out: ``lut[min(a, C)]`` plus the later half's offset."""
    lut = module.magnitude_buckets()
    if module.bidirectional:
        a = relative.abs()
        later = (relative > 0) * (module.config.params["num_buckets"] // 2)
    else:
        a, later = (-relative).clamp(min=0), 0
    return lut[a.clamp(max=len(lut) - 1)] + later


def _module(buckets, distance, bidirectional):
    return build(resolve("t5-bias", 8, heads=1, params={
        "num_buckets": buckets, "max_distance": distance,
        "direction": "bidirectional" if bidirectional else "causal"}))


@pytest.mark.parametrize(("buckets", "distance", "bidirectional"), CONFIGS)
def test_the_lookup_is_transformers_bucket_at_every_distance_up_to_2_17(
        buckets, distance, bidirectional):
    module = _module(buckets, distance, bidirectional)
    relative = torch.arange(-(2**17), 2**17 + 1, dtype=torch.int64)
    want = hf_bucket(relative, bidirectional, buckets, distance)
    assert torch.equal(lookup_bucket(module, relative), want)
    assert torch.equal(module.bucket(relative), want)
    # the lookup ends where the buckets stop changing, at or before max_distance
    lut = module.magnitude_buckets()
    assert len(lut) - 1 <= distance and (len(lut) == 1 or lut[-2] != lut[-1])


@pytest.mark.slow
@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_the_lookup_is_transformers_bucket_at_every_distance_up_to_2_25(bidirectional):
    """T5's sizes (32 buckets, 128): the lookup's saturation holds at every distance ``a`` two
    positions within +-2^24 can have. transformers takes ``|u - t|`` (bidirectional; keys after
    the query add an offset, checked above) or ``max(t - u, 0)`` (causal) before anything else,
    so ``u - t = -a`` covers every distance of both signs."""
    module = _module(32, 128, bidirectional)
    lut = module.magnitude_buckets()
    step = 1 << 22
    for start in range(0, 2**25 + 1, step):
        a = torch.arange(start, min(start + step, 2**25 + 1), dtype=torch.int64)
        assert torch.equal(lut[a.clamp(max=len(lut) - 1)],
                           hf_bucket(-a, bidirectional, 32, 128)), start


def test_parameters_t5_cannot_compute_are_refused():
    with pytest.raises(BadParameterError, match=r"num_buckets 3 leaves 1 bucket\(s\) per "
                                                r"direction \(bidirectional\).*num_buckets >= 4"):
        resolve("t5-bias", 8, params={"num_buckets": 3})
    resolve("t5-bias", 8, params={"num_buckets": 2, "direction": "causal"})
    with pytest.raises(BadParameterError, match=r"max_distance 8 must be above the 8 exact "
                                                r"buckets"):
        resolve("t5-bias", 8, params={"max_distance": 8})
    resolve("t5-bias", 8, params={"max_distance": 9})
    with pytest.raises(BadParameterError, match="d_model 64 must be 2 x sum"):
        resolve("mrope", 8, d_model=64)


# -- --from-hf-config --------------------------------------------------------------------------

def test_t5_configs_translate_to_t5_bias():
    t = from_hf_config({"model_type": "t5", "num_heads": 6, "relative_attention_num_buckets": 16,
                        "relative_attention_max_distance": 64, "n_positions": 512})
    assert (t.scheme, t.max_len, t.d_model, t.heads) == ("t5-bias", 512, None, 6)
    assert t.params == {"num_buckets": 16, "max_distance": 64, "direction": "bidirectional"}
    assert "--param direction=causal" in t.notes[0]
    t = from_hf_config({"model_type": "t5", "is_decoder": True})
    assert t.params == {"num_buckets": 32, "max_distance": 128, "direction": "causal"}
    assert (t.max_len, t.heads) == (None, 8)
    assert "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight" in t.notes[1]
    with pytest.raises(BadParameterError, match="relative_attention_num_buckets must be an "
                                                "integer >= 1"):
        from_hf_config({"model_type": "t5", "relative_attention_num_buckets": "32"})


def test_qwen2_vl_configs_translate_to_mrope():
    t = from_hf_config({"model_type": "qwen2_vl", "text_config": {
        "hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0,
                            "mrope_section": [4, 6, 6]}}})
    assert (t.scheme, t.max_len, t.d_model, t.heads) == ("mrope", 4096, 32, None)
    assert t.params == {"base": 5000.0, "mrope_section": (4, 6, 6)}
    # transformers 4.x: the text keys at the top, rope_scaling {"type": "mrope"}
    t = from_hf_config({"model_type": "qwen2_vl", "hidden_size": 1536, "num_attention_heads": 12,
                        "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})
    assert (t.d_model, t.max_len, t.params["base"]) == (128, 32768, 1000000.0)
    # transformers' defaults: sections 16, 24, 24 and theta 1e6
    t = from_hf_config({"model_type": "qwen2_vl", "head_dim": 128})
    assert t.params == {"base": 1000000.0, "mrope_section": (16, 24, 24)}


@pytest.mark.parametrize(("config", "message"), [
    ({"head_dim": 64}, r"mrope_section \[16, 24, 24\] covers 128 dimensions, head_dim is 64"),
    ({"head_dim": 128, "rope_parameters": {"rope_type": "yarn"}},
     "qwen2_vl rope_type 'yarn': edgepe's mrope has the default frequencies only"),
    ({"head_dim": 8, "rope_parameters": {"mrope_section": [2, "2"]}},
     r"rope_parameters.mrope_section must be a list of positive integers, got \[2, '2'\]"),
    ({}, "qwen2_vl names no head_dim and no hidden_size / num_attention_heads"),
])
def test_qwen2_vl_configs_edgepe_cannot_follow_are_refused(config, message):
    with pytest.raises(BadParameterError, match=message):
        from_hf_config({"model_type": "qwen2_vl", **config})


# -- end to end, through the CLI -----------------------------------------------------------

def test_a_t5_checkpoint_and_config_export_its_own_bias(tmp_path):
    """A tiny T5 encoder: its config.json and state_dict through ``edgepe export`` (compute
    graph, no Log) equal its first layer's ``compute_bias`` on onnxruntime, bitwise, at every
    (t, u) of a 200 x 200 grid offset by 30 queries."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(d_model=16, d_kv=4, num_heads=3, num_layers=1, d_ff=8, vocab_size=10,
                      relative_attention_max_distance=40)
    model = T5EncoderModel(config).eval()
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    torch.save(model.state_dict(), tmp_path / "model.pt")
    out = tmp_path / "t5.onnx"
    result = CliRunner().invoke(app, [
        "export", "--from-hf-config", str(tmp_path / "config.json"), "--max-len", "64",
        "--checkpoint", str(tmp_path / "model.pt"), "--checkpoint-param",
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "parity PASSED" in result.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(["bias"], {"positions": np.arange(30, 230, dtype=np.int64),
                                 "key_positions": np.arange(200, dtype=np.int64)})[0]
    attention = model.encoder.block[0].layer[0].SelfAttention
    with torch.no_grad():
        want = attention.compute_bias(200, 200, past_seen_tokens=30)[0].numpy()
    np.testing.assert_array_equal(got, want)


def test_a_qwen2_vl_config_exports_its_rotary_cos_sin(tmp_path):
    """A Qwen2-VL config.json through ``edgepe export``: on onnxruntime, cos/sin within 1e-6
    (onnxruntime's Cos/Sin against torch's, the angle bitwise) of the model's own text rotary
    module at image-like (t, h, w) positions; a config whose sections do not fit is refused."""
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    config = Qwen2VLConfig(text_config={
        "hidden_size": 64, "num_attention_heads": 2, "rope_parameters": {
            "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}})
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    out = tmp_path / "mrope.onnx"
    result = CliRunner().invoke(app, ["export", "--from-hf-config",
                                      str(tmp_path / "config.json"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    t, h, w = np.meshgrid(np.arange(0, 40, 3), np.arange(5, 29), np.arange(7, 31), indexing="ij")
    positions = np.stack([t.ravel(), h.ravel(), w.ravel()], axis=1).astype(np.int64)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        ["pe"], {"positions": positions})[0]
    rotary = Qwen2VLRotaryEmbedding(config.text_config)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1), torch.from_numpy(positions.T[:, None, :]))
    half = 16
    np.testing.assert_allclose(got[:, :half], cos[0, :, :half].numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got[:, half:], sin[0, :, half:].numpy(), rtol=0, atol=1e-6)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "qwen2_vl", "head_dim": 64}))
    result = CliRunner().invoke(app, ["export", "--from-hf-config", str(bad), "--max-len", "8",
                                      "--out", str(tmp_path / "bad.onnx")])
    assert result.exit_code == 2 and not (tmp_path / "bad.onnx").exists()
    assert result.output.strip().splitlines() == [
        "error: HF config: mrope_section [16, 24, 24] covers 128 dimensions, head_dim is 64"]
