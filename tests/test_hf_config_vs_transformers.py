"""``--from-hf-config`` checked against transformers itself (issue 40, point 4).

For every RoPE ``model_type`` that ``edgepe.schemes.hf_config`` accepts, a tiny config is built
in code from the family's transformers config class (no download) and saved as its
``config.json`` would be; the translation's artifacts, the encode graph and the ``--rope-graph
apply`` graph run on onnxruntime, are compared at every position ``0 .. max_len-1`` with the
family's own rotary module and its own rotation (``apply_rotary_pos_emb``, GPT-J's
``rotate_every_two``, the complex products of DeepSeek-V2 and Llama 4) applied to random q.
The encode graph's ``cos``/``sin`` of each pair are read off the model by rotating the basis
vectors: rotating ``e_a`` at position ``p`` puts ``cos`` in dimension ``a`` and ``sin`` in its
partner, so a wrong layout (which dimensions pair) fails here too, not only in apply.

Tolerances: the model and the artifact compute the same float32 angle ``p * w_i`` from the same
float32 ``w_i`` (``freq_dtype=float32``); only the sin/cos kernels differ (onnxruntime's against
torch's, <= 2 ulp: the rope scheme's 1e-6). A rotated element ``x_a cos - x_b sin`` of
``|x| <= 1`` moves by at most twice that plus float32 roundings: 2e-6 (as
tests/test_rope_conventions.py), times the attention factor (<= 1.25 here).
"""

from __future__ import annotations

import importlib
import io
import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the dev extra pins transformers; "
                                   "these tests compare with its own rotary modules")

from edgepe import api  # noqa: E402
from edgepe.contract.errors import BadParameterError  # noqa: E402
from edgepe.export import prepare  # noqa: E402
from edgepe.schemes.hf_config import ROPE_FAMILIES, from_hf_config  # noqa: E402

L = 48  # max_position_embeddings of the tiny configs: every position 0 .. L-1 is compared
ENCODE_ATOL = 1e-6 * 1.25  # the scheme's sin/cos kernel tolerance, times the attention factor
APPLY_ATOL = 2e-6 * 1.25  # |x| <= 1: two kernel errors plus roundings, times the factor
SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=32,
             num_hidden_layers=1, vocab_size=32, max_position_embeddings=L)
MLA = dict(qk_rope_head_dim=16, qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=16,
           q_lora_rank=16)


def _longrope(half: int) -> dict:
    return {"rope_type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(half)],
            "long_factor": [1.0 + 0.37 * i for i in range(half)]}


# case -> (config class, its keywords, transformers module, rotary class, how it rotates)
CASES = {
    "llama": ("LlamaConfig", dict(SMALL, rope_theta=500000.0), "llama", "LlamaRotaryEmbedding",
              "half"),
    # Llama's rotary init ignores partial_rotary_factor (default RoPE): all of head_dim rotates
    "llama-partial-ignored": ("LlamaConfig", dict(SMALL, partial_rotary_factor=0.5), "llama",
                              "LlamaRotaryEmbedding", "half"),
    "mistral": ("MistralConfig", dict(SMALL, rope_theta=1e6), "mistral",
                "MistralRotaryEmbedding", "half"),
    "mixtral": ("MixtralConfig", dict(SMALL, num_local_experts=2), "mixtral",
                "MixtralRotaryEmbedding", "half"),
    "qwen2": ("Qwen2Config", SMALL, "qwen2", "Qwen2RotaryEmbedding", "half"),
    "qwen2_moe": ("Qwen2MoeConfig", SMALL, "qwen2_moe", "Qwen2MoeRotaryEmbedding", "half"),
    "qwen3": ("Qwen3Config", dict(SMALL, head_dim=8), "qwen3", "Qwen3RotaryEmbedding", "half"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(SMALL, head_dim=8), "qwen3_moe",
                  "Qwen3MoeRotaryEmbedding", "half"),
    "gemma": ("GemmaConfig", dict(SMALL, head_dim=16), "gemma", "GemmaRotaryEmbedding", "half"),
    "gemma2": ("Gemma2Config", dict(SMALL, head_dim=16), "gemma2", "Gemma2RotaryEmbedding",
               "half"),
    "phi": ("PhiConfig", SMALL, "phi", "PhiRotaryEmbedding", "half"),  # default partial 0.5
    "phi3": ("Phi3Config", SMALL, "phi3", "Phi3RotaryEmbedding", "half"),
    # longrope past the trained context: long factors, attention factor from the ratio
    "phi3-longrope": ("Phi3Config", dict(SMALL, original_max_position_embeddings=16,
                                         rope_scaling=_longrope(8)),
                      "phi3", "Phi3RotaryEmbedding", "half"),
    # max_position_embeddings below the original: short factors, attention factor 1
    "phi3-longrope-short-context": ("Phi3Config", dict(SMALL, original_max_position_embeddings=
                                                       4 * L, rope_scaling=_longrope(8)),
                                    "phi3", "Phi3RotaryEmbedding", "half"),
    "gpt_neox": ("GPTNeoXConfig", dict(SMALL, rotary_pct=0.5), "gpt_neox",
                 "GPTNeoXRotaryEmbedding", "half"),
    "stablelm": ("StableLmConfig", SMALL, "stablelm", "StableLmRotaryEmbedding", "half"),
    "starcoder2": ("Starcoder2Config", SMALL, "starcoder2", "Starcoder2RotaryEmbedding", "half"),
    "olmo": ("OlmoConfig", SMALL, "olmo", "OlmoRotaryEmbedding", "half"),
    "olmo2": ("Olmo2Config", SMALL, "olmo2", "Olmo2RotaryEmbedding", "half"),
    "falcon": ("FalconConfig", dict(SMALL, alibi=False, new_decoder_architecture=True),
               "falcon", "FalconRotaryEmbedding", "half"),
    "persimmon": ("PersimmonConfig", SMALL, "persimmon", "PersimmonRotaryEmbedding", "half"),
    "granite": ("GraniteConfig", SMALL, "granite", "GraniteRotaryEmbedding", "half"),
    # interleaved pairs: cos/sin by repeat_interleave (Cohere), GLM's even/odd rotate_half
    "cohere": ("CohereConfig", SMALL, "cohere", "CohereRotaryEmbedding", "half"),
    "glm": ("GlmConfig", dict(SMALL, head_dim=16), "glm", "GlmRotaryEmbedding", "half"),
    # complex products of (2i, 2i+1) pairs
    "deepseek_v2": ("DeepseekV2Config", dict(SMALL, **MLA), "deepseek_v2",
                    "DeepseekV2RotaryEmbedding", "complex-bhsd"),
    "deepseek_v3": ("DeepseekV3Config", dict(SMALL, **MLA), "deepseek_v3",
                    "DeepseekV3RotaryEmbedding", "deepseek-interleave"),
    "deepseek_v3-yarn": ("DeepseekV3Config", dict(SMALL, **MLA, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 16}), "deepseek_v3", "DeepseekV3RotaryEmbedding",
                         "deepseek-interleave"),
    "deepseek_v3-not-interleaved": ("DeepseekV3Config", dict(SMALL, **MLA, rope_interleave=False),
                                    "deepseek_v3", "DeepseekV3RotaryEmbedding", "half"),
    "llama4_text": ("Llama4TextConfig", dict(SMALL, head_dim=16), "llama4",
                    "Llama4TextRotaryEmbedding", "complex-bshd"),
    "gptj": ("GPTJConfig", dict(n_embd=64, n_head=4, rotary_dim=8, n_positions=L, n_layer=1,
                                vocab_size=32), "gptj", "GPTJRotaryEmbedding", "gptj"),
    "codegen": ("CodeGenConfig", dict(n_embd=64, n_head=4, rotary_dim=8, n_positions=L,
                                      n_layer=1, vocab_size=32), "codegen",
                "CodeGenRotaryEmbedding", "gptj"),
}


def as_json(config) -> dict:
    """The config as its config.json holds it (what a deployer hands edgepe)."""
    return json.loads(config.to_json_string())


def make_config(case: str):
    name, kwargs, *_ = CASES[case]
    return getattr(transformers, name)(**kwargs)


def model_rotation(case: str, config, q: torch.Tensor) -> torch.Tensor:
    """``q [1, H, S, D]`` rotated at positions ``0 .. S-1`` by the family's own code, in the
    model's dimension order."""
    _, _, package, rotary_name, how = CASES[case]
    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    rotary = getattr(module, rotary_name)(config).eval()
    positions = torch.arange(q.shape[2])[None]
    with torch.no_grad():
        if how == "gptj":  # [B, S, H, D], the table's [sin | cos] halves, rotary_dim then pass
            sin, cos = rotary(q, positions)
            x = q.transpose(1, 2)
            r = config.rotary_dim
            rot = module.apply_rotary_pos_emb(x[..., :r], sin, cos)
            return torch.cat([rot, x[..., r:]], dim=-1).transpose(1, 2)
        if how == "complex-bhsd":  # DeepSeek-V2: freqs_cis.unsqueeze(1) against [B, H, S, D]
            return module.apply_rotary_emb(q, q, rotary(q, positions))[0]
        if how == "complex-bshd":  # Llama 4: freqs_cis[:, :, None] against [B, S, H, D]
            x = q.transpose(1, 2)
            return module.apply_rotary_emb(x, x, rotary(x, positions))[0].transpose(1, 2)
        cos, sin = rotary(q, positions)
        r = cos.shape[-1]  # the rotated width: phi/stablelm/persimmon split in attention
        apply = (module.apply_rotary_pos_emb_interleave if how == "deepseek-interleave"
                 else module.apply_rotary_pos_emb)
        rot = apply(q[..., :r], q[..., :r], cos, sin)[0]
        out = torch.cat([rot, q[..., r:]], dim=-1)
    if how == "deepseek-interleave":
        # DeepSeek-V3 rotates the pairs (2i, 2i+1) and writes them de-interleaved ([rotated
        # evens | rotated odds]): the same fixed permutation of q and k, so q.k and the
        # attention are unchanged. Undone here, the rotation itself is compared.
        half = r // 2
        order = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()
        out = torch.cat([out[..., :r][..., order], out[..., r:]], dim=-1)
    return out


def run(config_kwargs: dict, graph: str, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    config = api.make_config(**config_kwargs, extra=None if graph == "encode" else {
        "rope_graph": graph})
    buffer = io.BytesIO()
    prepare(config).write(buffer)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.fixture(scope="module")
def translated():
    """case -> (transformers config, translation): the configs built once."""
    out = {}
    for case in CASES:
        config = make_config(case)
        out[case] = config, from_hf_config(as_json(config))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_artifacts_are_the_models_rotation_at_every_position(translated, case):
    config, t = translated[case]
    assert t.scheme == "rope"
    n, d = t.max_len, t.d_model
    assert n == L
    heads = 3
    rng = np.random.default_rng(sum(map(ord, case)))
    q = torch.from_numpy(rng.uniform(-1, 1, (1, heads, n, d)).astype(np.float32))
    want = model_rotation(case, config, q)[0].numpy()
    kwargs = dict(scheme="rope", max_len=n, d_model=d, params=t.params)
    positions = np.arange(n, dtype=np.int64)
    got = run(kwargs, "apply", {"x": q[0].numpy(), "positions": positions})
    assert np.abs(got - want).max() <= APPLY_ATOL, (case, t.params, np.abs(got - want).max())
    # encode: cos/sin of every pair, read off the model by rotating the basis vectors
    basis = torch.eye(d).reshape(1, d, 1, d).expand(1, d, n, d).contiguous()
    turned = model_rotation(case, config, basis)[0].numpy()  # [a, p, :]: e_a rotated at p
    pe = run(kwargs, "encode", {"positions": positions})
    r = t.params.get("rotary_dim") or d
    first = np.arange(r // 2) * 2 if t.params["layout"] == "interleaved" else np.arange(r // 2)
    partner = first + 1 if t.params["layout"] == "interleaved" else first + r // 2
    cos = turned[first, :, first].T  # [n, R/2]
    sin = turned[first, :, partner].T
    assert np.abs(pe[:, : r // 2] - cos).max() <= ENCODE_ATOL, case
    assert np.abs(pe[:, d // 2: d // 2 + r // 2] - sin).max() <= ENCODE_ATOL, case
    # the pass-through dimensions are the model's too: e_a beyond R comes back unchanged
    rest = np.arange(r, d)
    np.testing.assert_array_equal(turned[rest][:, :, rest], np.broadcast_to(
        np.eye(d - r, dtype=np.float32)[:, None], (d - r, n, d - r)))


def test_every_accepted_rope_family_is_checked_here():
    """Each model_type the translation accepts for RoPE has a case above (a family added to
    ROPE_FAMILIES without one fails here)."""
    covered = {as_json(make_config(case))["model_type"] for case in CASES}
    assert set(ROPE_FAMILIES) <= covered, sorted(set(ROPE_FAMILIES) - covered)


def test_layout_and_partial_follow_each_family(translated):
    layout = {case: t.params["layout"] for case, (_, t) in translated.items()}
    interleaved = {"cohere", "glm", "deepseek_v2", "deepseek_v3", "deepseek_v3-yarn",
                   "llama4_text", "gptj", "codegen"}
    assert {c for c, v in layout.items() if v == "interleaved"} == interleaved
    rotary = {case: t.params.get("rotary_dim") for case, (_, t) in translated.items()}
    assert {c: v for c, v in rotary.items() if v} == {
        "phi": 8, "gpt_neox": 8, "stablelm": 4, "persimmon": 8, "glm": 8, "gptj": 8,
        "codegen": 8}
    assert any("ignores partial_rotary_factor" in n
               for n in translated["llama-partial-ignored"][1].notes)
    # DeepSeek-V3's yarn: the attention factor from mscale / mscale_all_dim, as its module's
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    config, t = translated["deepseek_v3-yarn"]
    assert t.params["attention_factor"] == DeepseekV3RotaryEmbedding(config).attention_scaling
    assert 0.9 < t.params["attention_factor"] < 0.99


def test_longrope_short_context_is_transformers_short_factors_and_factor_1(translated):
    """max_position_embeddings below original_max_position_embeddings is a valid Phi-3 config:
    transformers takes the short factors and attention factor 1 (its ratio is below 1)."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    config, t = translated["phi3-longrope-short-context"]
    assert Phi3RotaryEmbedding(config).attention_scaling == 1.0
    assert t.params["attention_factor"] == 1.0 and "factor" not in t.params
    long = translated["phi3-longrope"]
    assert long[1].params["attention_factor"] == Phi3RotaryEmbedding(long[0]).attention_scaling


def test_the_translation_names_the_model_type_it_followed(translated):
    for case, (config, t) in translated.items():
        assert t.model_type == as_json(config)["model_type"], case


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
         "max_position_embeddings": 64}


@pytest.mark.parametrize("config, words", [
    # rotary width 0: transformers rotates nothing, edgepe's 0 means all of head_dim
    ({**LLAMA, "model_type": "phi", "partial_rotary_factor": 0.01},
     "partial_rotary_factor 0.01 gives a rotary width of int(16 x 0.01) = 0"),
    ({**LLAMA, "model_type": "gpt_neox", "rotary_pct": 0.3},
     "rotary_pct 0.3 gives a rotary width of int(16 x 0.3) = 4"),  # accepted: even
    # Llama's scaled inits read the factor but its rotation covers head_dim: a shape error there
    ({**LLAMA, "partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear",
                                                             "factor": 2.0}},
     "partial_rotary_factor 0.5 with rope_type linear"),
    ({**LLAMA, "model_type": "phi3", "original_max_position_embeddings": 32,
      "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 7,
                       "long_factor": [1.0] * 8}},
     "short_factor has 7 numbers; longrope needs rotary_dim / 2 = 8"),
    ({**LLAMA, "model_type": "phi3", "original_max_position_embeddings": 32,
      "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8,
                       "long_factor": [9.0] * 7 + [float("inf")]}},
     "long_factor must be a list of positive numbers"),
    ({**LLAMA, "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 128}},
     "yarn factor max_position_embeddings / original_max_position_embeddings = 64 / 128 = 0.5"),
    ({**LLAMA, "model_type": "exaone"}, "model_type 'exaone' is not one edgepe translates"),
    ({**LLAMA, "model_type": "internlm2"}, "model_type 'internlm2' is not one"),
    ({**LLAMA, "model_type": "gptj", "rotary_dim": None, "n_embd": 64, "n_head": 4},
     "gptj without rotary_dim"),
])
def test_configs_transformers_does_not_compute_as_asked_are_one_line(config, words):
    if "= 4" in words:  # the even width is accepted, and is transformers' int()
        assert from_hf_config(config).params["rotary_dim"] == 4
        return
    with pytest.raises(BadParameterError, match="^HF config: ") as info:
        from_hf_config(config)
    assert words in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_cli_export_of_cohere_is_interleaved_and_its_manifest_names_the_family(tmp_path):
    """The CLI path: the line and the manifest say which model_type the translation followed;
    the artifact verifies and rebuilds byte-identical with that record in it."""
    from typer.testing import CliRunner

    from edgepe.cli import app

    path = tmp_path / "config.json"
    path.write_text(json.dumps(as_json(make_config("cohere"))))
    out = tmp_path / "cohere.onnx"
    result = CliRunner().invoke(app, ["export", "--from-hf-config", str(path), "--rope-graph",
                                      "apply", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "layout=interleaved" in result.output and "as transformers' cohere" in result.output
    manifest = json.loads((tmp_path / "cohere.onnx.json").read_text())
    assert manifest["inputs"]["hf_model_type"] == "cohere"
    assert manifest["inputs"]["params"]["layout"] == "interleaved"
    verified = CliRunner().invoke(app, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    # loaded back (its manifest's claims checked), it rotates q as Cohere's own code does
    import edgepe

    config = make_config("cohere")
    q = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (1, 2, L, 16)).astype(
        np.float32))
    got = edgepe.load(out).apply(q[0].numpy(), positions=np.arange(L))
    assert np.abs(got - model_rotation("cohere", config, q)[0].numpy()).max() <= APPLY_ATOL


# ------------------------------------------------------------------ ALiBi


@pytest.mark.parametrize("family, heads", [("bloom", 4), ("bloom", 12), ("mpt", 8)])
def test_alibi_artifact_is_the_models_bias_at_every_position(family, heads):
    """The exported alibi graph against the model's own bias builder: BLOOM's
    ``build_alibi_tensor`` (slope x key position, the query's row constant dropped, as softmax
    does) and MPT's ``build_mpt_alibi_tensor`` (slope x (key - last query)). Both are the graph's
    ``-m |t - u|`` at query row 0 (BLOOM, negated) or row L-1 (MPT). Power-of-two head counts:
    exact (the slopes are powers of 2). BLOOM's 12 heads take 4 slopes ``2^(-k/2)`` that
    ``torch.pow`` rounds in float32, 1 ulp from edgepe's correctly rounded ones: the bias differs
    by at most ``u m 2^-23`` plus one rounding of the product (measured 9.5e-7 at u = 47)."""
    import onnxruntime as ort
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    if family == "bloom":
        config = transformers.BloomConfig(hidden_size=8 * heads, n_head=heads)
        model = -build_alibi_tensor(torch.ones(1, L, dtype=torch.long), heads,
                                    torch.float32)[:, 0].numpy()
        row = 0
    else:
        config = transformers.MptConfig(d_model=8 * heads, n_heads=heads, max_seq_len=L)
        model = build_mpt_alibi_tensor(heads, L)[:, 0].numpy()
        row = L - 1
    t = from_hf_config(as_json(config))
    assert (t.scheme, t.heads, t.model_type) == ("alibi", heads, family)
    buffer = io.BytesIO()
    prepare(api.make_config("alibi", t.max_len or L, heads=t.heads, params=t.params)).write(
        buffer)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    positions = np.arange(L, dtype=np.int64)
    bias = session.run(None, {"positions": positions, "key_positions": positions})[0]
    got = bias[:, row, :]
    if heads & (heads - 1) == 0:
        np.testing.assert_array_equal(got, model)
    else:
        slopes = np.abs(model[:, 1:2] if family == "bloom" else model[:, -2:-1])
        bound = positions * slopes * 2.0**-23 + np.spacing(np.abs(model).astype(np.float32))
        assert (np.abs(got - model) <= bound).all()


def test_falcon_alibi_is_refused_for_its_bfloat16_bias():
    """transformers' Falcon multiplies bfloat16 slopes by the positions: a bfloat16 bias, off by
    up to 0.055 from the float32 one at 48 positions and 12 heads, measured here."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    config = transformers.FalconConfig(hidden_size=96, num_attention_heads=12, alibi=True)
    with pytest.raises(BadParameterError, match="^HF config: falcon with alibi true: "
                       "transformers rounds its bias"):
        from_hf_config(as_json(config))
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor as bloom

    mask = torch.ones(1, L, dtype=torch.long)
    gap = (build_alibi_tensor(mask, 12, torch.float32) - bloom(mask, 12, torch.float32)).abs()
    assert gap.max().item() > 0.01


# ------------------------------------------------------------------ learned tables

LEARNED = {
    "gpt2": ("GPT2Config", dict(n_embd=16, n_head=2, n_layer=1, n_positions=L)),
    "gpt_neo": ("GPTNeoConfig", dict(hidden_size=16, num_heads=2, num_layers=1,
                                     attention_types=[[["global"], 1]],
                                     max_position_embeddings=L)),
    "gpt_bigcode": ("GPTBigCodeConfig", dict(n_embd=16, n_head=2, n_layer=1, n_positions=L)),
    "opt": ("OPTConfig", dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                              ffn_dim=32, max_position_embeddings=L, word_embed_proj_dim=16)),
    "biogpt": ("BioGptConfig", dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                    intermediate_size=32, max_position_embeddings=L)),
    "bert": ("BertConfig", dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                intermediate_size=32, max_position_embeddings=L)),
    "roberta": ("RobertaConfig", dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                      intermediate_size=32, max_position_embeddings=L)),
    "xlm-roberta": ("XLMRobertaConfig", dict(hidden_size=16, num_attention_heads=2,
                                             num_hidden_layers=1, intermediate_size=32,
                                             max_position_embeddings=L, pad_token_id=3)),
    "distilbert": ("DistilBertConfig", dict(dim=16, n_heads=2, n_layers=1, hidden_dim=32,
                                            max_position_embeddings=L)),
    # ELECTRA's embeddings are embedding_size wide, not hidden_size
    "electra": ("ElectraConfig", dict(hidden_size=16, embedding_size=8, num_attention_heads=2,
                                      num_hidden_layers=1, intermediate_size=32,
                                      max_position_embeddings=L)),
}


def test_every_accepted_learned_family_is_checked_here():
    from edgepe.schemes.hf_config import LEARNED_MODELS

    assert set(LEARNED) == set(LEARNED_MODELS)


@pytest.mark.parametrize("family", list(LEARNED))
def test_learned_table_is_what_the_models_own_forward_reads(tmp_path, family):
    """The bare model built from the config runs its own forward on ``max_len`` tokens; a hook on
    its position embedding catches the rows it reads (the model's own position ids: RoBERTa's
    from the padding index, OPT's and BioGPT's + 2). edgepe's learned table, taken from the
    saved weights by the family's tensor name with the translation's offset and length, gives
    the same rows, exactly (rows are copied)."""
    from edgepe.schemes import build, resolve
    from edgepe.schemes.hf_config import learned_tensor

    name, kwargs = LEARNED[family]
    config = getattr(transformers, name)(**kwargs, vocab_size=32)
    torch.manual_seed(40)
    model = transformers.AutoModel.from_config(config).eval()
    t = from_hf_config(as_json(config))
    state = model.state_dict()
    tensor = learned_tensor(family, state)
    assert tensor is not None, sorted(state)
    module = model.get_submodule(tensor.removesuffix(".weight"))
    seen = []
    module.register_forward_hook(lambda m, args, out: seen.append(out.detach()))
    ids = torch.full((1, t.max_len), 5)
    with torch.no_grad():
        model(input_ids=ids)
    read = seen[0].reshape(-1, seen[0].shape[-1])[-t.max_len:].numpy()  # [max_len, width]
    checkpoint = tmp_path / "state_dict.pt"
    torch.save(state, checkpoint)
    pe = build(resolve("learned", t.max_len, d_model=t.d_model, params=t.params),
               checkpoint=str(checkpoint), checkpoint_param=tensor)
    with torch.no_grad():
        got = pe.encode(torch.arange(t.max_len)).numpy()
    assert got.shape == read.shape, (family, t)
    np.testing.assert_array_equal(got, read)


def test_llama_with_partial_factor_and_a_scaled_rope_does_not_run_in_transformers():
    """Why that config is refused: the linear init reads partial_rotary_factor (cos 8 wide), the
    rotation covers head_dim (16), and transformers' own apply fails on the shapes."""
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(**SMALL, partial_rotary_factor=0.5, rope_scaling={
        "rope_type": "linear", "factor": 2.0})
    q = torch.ones(1, 4, 8, 16)
    cos, sin = modeling_llama.LlamaRotaryEmbedding(config)(q, torch.arange(8)[None])
    assert cos.shape[-1] == 8
    with pytest.raises(RuntimeError, match="must match the size"):
        modeling_llama.apply_rotary_pos_emb(q, q, cos, sin)
    with pytest.raises(BadParameterError, match="the model does not run$"):
        from_hf_config(as_json(config))
