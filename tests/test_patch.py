"""``edgepe.patch``: a transformers model's PE modules found, replaced, proven (issue 42).

Every model is a tiny random-weight one built from a transformers config object (no download;
tests/_hf_models.py and ``_extra`` below). The proofs are edgepe's own; these tests check that
they hold where they should, fail where they should (Cohere's interleaved layout in sliced mode,
a dynamic RoPE, an mrope module without a readable recomposition), and that the patched model
computes no Sin/Cos.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import _hf_models  # noqa: E402

import edgepe  # noqa: E402
from edgepe.contract.errors import BadParameterError, EdgepeError  # noqa: E402
from edgepe.patch import Refused, find, patch  # noqa: E402
from edgepe.patch.modules import RotarySliced, RotaryTable  # noqa: E402

LLAMA = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def _extra(family: str):
    """Families tests/_hf_models.py does not build: Gemma3 (two layer types), Qwen3, Cohere
    (interleaved cos/sin), and a Phi-3 whose longrope switches sets below L."""
    torch.manual_seed(0)
    if family == "gemma3":
        config = tf.Gemma3TextConfig(**LLAMA, head_dim=8, sliding_window=4,
                                     layer_types=["sliding_attention", "full_attention"])
    elif family == "qwen3":
        config = tf.Qwen3Config(**LLAMA, head_dim=8)
    elif family == "phi3-long":
        # Phi3Config's own original_max_position_embeddings argument (default 4096) overrides
        # the one in rope_parameters: both say 64 here, so positions from 64 use the long set
        # (tests/_hf_models.py's phi3-longrope keeps 4096: its long set is never used below 256)
        config = tf.Phi3Config(**LLAMA, pad_token_id=0, original_max_position_embeddings=64,
                               rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                "short_factor": [1.0, 1.1, 1.2, 1.3],
                                                "long_factor": [2.0, 2.5, 3.0, 4.0],
                                                "original_max_position_embeddings": 64})
    elif family == "cohere":
        config = tf.CohereConfig(**LLAMA)
    else:
        return _hf_models.model(family)
    return tf.AutoModelForCausalLM.from_config(config).eval()


ROTARY = ["llama", "mistral", "qwen2", "qwen3", "phi", "gpt_neox", "gemma3", "phi3-long",
          "llama-linear", "llama-llama3", "llama-yarn", "cohere"]
SLICED = ["llama", "gpt_neox", "gemma3", "phi3-long", "llama-yarn"]


@pytest.mark.parametrize("family", ROTARY)
def test_table_patch_is_exact_per_module_and_on_the_logits(family):
    model = _extra(family)
    report = patch(model)
    assert report
    [item] = report.replaced
    assert isinstance(item.replacement, RotaryTable)
    assert item.bound == 0 and item.max_abs_err == 0
    assert model.get_submodule(item.found.name) is item.replacement
    # batch, left padding, KV cache (two steps), offset near L: every logit bit-identical
    assert report.cases == ["batch", "left padding", "KV cache", "offset 248"]
    assert report.logits_tolerance == 0 and report.logits_err == 0
    assert str(report).splitlines()[0].startswith(f"{item.found.name}: ")


@pytest.mark.parametrize("family", SLICED)
def test_sliced_patch_holds_within_its_bound(family):
    model = _extra(family)
    report = patch(model, mode="sliced")
    [item] = report.replaced
    assert isinstance(item.replacement, RotarySliced)
    assert 0 < item.max_abs_err <= item.bound < 2e-5
    assert 0 <= report.logits_err <= report.logits_tolerance


def test_gemma3_keeps_both_layer_types_and_longrope_both_sets():
    report = patch(_extra("gemma3"))
    [item] = report.replaced
    assert item.found.layer_types == ("full_attention", "sliding_attention")
    x = torch.zeros(1, 1)
    pos = torch.arange(5)[None]
    full = item.replacement(x, pos, "full_attention")
    sliding = item.replacement(x, pos, "sliding_attention")
    assert not torch.equal(full[0], sliding[0])  # two bases, two tables
    # longrope: the short set below P = 64, the long set once the batch reaches it
    model = _extra("phi3-long")
    rotary = model.model.rotary_emb
    short_ref = rotary(x, torch.arange(10)[None])
    long_ref = rotary(x, torch.tensor([[3, 100]]))
    patch(model)
    new = model.model.rotary_emb
    assert torch.equal(new(x, torch.arange(10)[None])[0], short_ref[0])
    assert torch.equal(new(x, torch.tensor([[3, 100]]))[1], long_ref[1])
    assert not torch.equal(short_ref[0][0, 3], long_ref[0][0, 0])


def test_cohere_interleaved_layout_is_refused_in_sliced_mode_naming_the_class():
    # the sliced module duplicates halves (cat, as Llama); Cohere interleaves: the proof fails
    model = _extra("cohere")
    before = model.model.rotary_emb
    with pytest.raises(Refused, match="CohereRotaryEmbedding .*cannot reproduce"):
        patch(model, mode="sliced")
    assert model.model.rotary_emb is before  # nothing changed


@pytest.mark.parametrize("family, kind, cls", [
    ("gpt2", "learned", "Embedding"),
    ("opt", "learned", "OPTLearnedPositionalEmbedding"),
    ("xglm", "sinusoidal", "XGLMSinusoidalPositionalEmbedding"),
    ("gptj", "sinusoidal", "GPTJRotaryEmbedding"),
    ("bloom", "alibi", "BloomModel"),
    ("mpt", "alibi", "MptModel"),
])
def test_trig_free_pe_modules_are_found_and_kept(family, kind, cls):
    model = _extra(family)
    report = patch(model)
    assert report and not report.replaced
    [item] = report.modules
    assert (item.found.kind, item.found.cls) == (kind, cls)
    assert str(item).endswith("-> kept")


def test_marian_two_sinusoidal_tables_and_opt_offset():
    found = find(_extra("marian"))
    assert [(f.name, f.kind) for f in found] == [
        ("model.encoder.embed_positions", "sinusoidal"),
        ("model.decoder.embed_positions", "sinusoidal")]
    line = str(patch(_extra("opt")))
    assert "learned table [258, 32], offset 2" in line


@pytest.mark.parametrize("family, message", [
    ("llama-dynamic", "LlamaRotaryEmbedding .*rope_type 'dynamic'"),
])
def test_modules_it_cannot_reproduce_are_refused_naming_the_class(family, message):
    with pytest.raises(Refused, match=message):
        patch(_extra(family))


def test_mrope_without_its_recomposition_and_a_model_without_pe_are_refused():
    # T5's bias and Qwen2-VL's mrope are patched: tests/test_patch_t5_mrope.py
    config = tf.Qwen2VLTextConfig(**LLAMA, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]})
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    holder = torch.nn.Module()
    holder.rotary_emb = Qwen2VLRotaryEmbedding(config)
    holder.rotary_emb.recomposition_frequencies = None  # not a method edgepe can read
    with pytest.raises(Refused, match="Qwen2VLRotaryEmbedding .*mrope .*recomposition"):
        find(holder)
    with pytest.raises(Refused, match="^cannot patch Sequential: no PE module"):
        patch(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_positions_past_max_len_read_the_last_row():
    model = _extra("llama")
    report = patch(model, max_len=16)
    new = report.replaced[0].replacement
    x = torch.zeros(1, 1)
    cos, _ = new(x, torch.tensor([[15, 16, 400]]))
    assert torch.equal(cos[0, 1], cos[0, 0]) and torch.equal(cos[0, 2], cos[0, 0])


@pytest.mark.parametrize("options, message", [
    ({"mode": "trig"}, "mode must be one of table, sliced"),
    ({"quantize": "int8"}, "quantize must be one of none"),
    ({"max_len": 0}, "max_len must be a positive integer"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(BadParameterError, match=message):
        edgepe.patch(_extra("llama"), **options)  # the package, once imported, is callable


def test_the_patched_model_traces_without_sin_or_cos():
    from edgepe.patch.export import Logits, _torch_export, _trig_in_graph, inputs

    model = _extra("llama")
    example = inputs(model, 256)[0]
    assert _trig_in_graph(_torch_export(model, example)) == 2  # the check can fail
    patch(model, mode="sliced")
    exported = _torch_export(model, example)
    assert _trig_in_graph(exported) == 0
    ops = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert not any("bitwise" in op or "shift" in op for op in ops)  # litert-torch takes it
    assert torch.equal(exported.module()(*example), Logits(model)(*example))


# --- the CLI over a saved folder ---------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("patch") / "llama"
    _hf_models.model("llama").save_pretrained(path)
    return path


def _cli(*args):
    from typer.testing import CliRunner

    from edgepe.cli import app

    return CliRunner().invoke(app, list(map(str, args)))


def test_cli_patches_a_saved_folder(folder):
    result = _cli("patch", folder, "--mode", "sliced", "--max-len", "128")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("model.rotary_emb: LlamaRotaryEmbedding (rotary default, sliced "
                               "L=128) -> RotarySliced, max |diff| ")
    assert lines[1].startswith("logits: 4 inputs (batch, left padding, KV cache, offset 120)")


def test_cli_refuses_what_it_cannot_load_or_patch(folder, tmp_path):
    (tmp_path / "empty").mkdir()
    assert _cli("patch", tmp_path / "empty").exit_code == 2
    remote = tmp_path / "remote"
    remote.mkdir()
    config = json.loads((folder / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps({**config, "auto_map": {"x": "y.Z"}}))
    result = _cli("patch", remote)
    assert result.exit_code == 2
    assert "auto_map" in result.stderr and "never runs code" in result.stderr
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps(config))
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04")
    result = _cli("patch", pickled)
    assert result.exit_code == 2 and "no *.safetensors" in result.stderr
    dynamic = tmp_path / "dynamic"
    _hf_models.model("llama-dynamic").save_pretrained(dynamic)
    result = _cli("patch", dynamic)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot patch LlamaRotaryEmbedding (model.rotary_emb)"
                                    ": rope_type 'dynamic'")
    assert len(result.stderr.strip().splitlines()) == 1
    result = _cli("patch", folder, "--out", tmp_path / "x.bin")
    assert result.exit_code == 2 and ".onnx, .pte or .tflite" in result.stderr


def test_an_edgepe_error_is_the_root_of_refusals():
    assert issubclass(Refused, EdgepeError)
