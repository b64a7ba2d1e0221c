"""Dynamic NTK RoPE (``rope_type`` ``dynamic``) as transformers 5.24 computes it, against what
edgepe builds for it (issue 29).

transformers' ``_compute_dynamic_ntk_parameters`` gives the default RoPE's ``inv_freq`` for every
``seq_len <= max_position_embeddings`` ``P``; ``dynamic_rope_update`` recomputes it in the forward
once ``max(position_ids) + 1`` passes the longest length the module has cached, and keeps it as
module state. So ``--from-hf-config`` of a dynamic config (export and graft) builds the default
frequencies for up to ``P`` positions, faithfully, and refuses more in one line
(``hf_config.check_dynamic_ntk``); ``--param seq_len=S`` still builds one running length's table
on purpose. The model is the tiny Llama of ``tests/_hf_models.py`` (``P`` = 256, factor 2, R = 8).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the reference is transformers' own rotary embedding")
import _hf_models  # noqa: E402 - after the skip

P = 256


def _rotary(family: str):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(_hf_models.config(family))


def _run(rotary, length: int):
    """cos, sin of one forward over positions ``0 .. length - 1`` (a prefill of that length)."""
    positions = torch.arange(length)[None]
    with torch.no_grad():
        return rotary(torch.zeros(1, length, 8), positions)


def _edgepe_inv_freq(**extra):
    from edgepe.schemes import build, resolve
    from edgepe.schemes.hf_config import from_hf_config

    t = from_hf_config(_hf_models.config("llama-dynamic").to_dict())
    return build(resolve("rope", P, d_model=t.d_model, params={**t.params, **extra})).inv_freq


@pytest.mark.parametrize("length", [1, 100, P])
def test_up_to_max_position_embeddings_it_is_the_default_rope(length):
    """At every length <= P transformers' dynamic module gives the default module's cos/sin bit
    for bit, and its inv_freq is edgepe's for the config (what export and graft build)."""
    dynamic, default = _rotary("llama-dynamic"), _rotary("llama")
    cos, sin = _run(dynamic, length)
    want_cos, want_sin = _run(default, length)
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
    assert torch.equal(dynamic.inv_freq, _edgepe_inv_freq())


@pytest.mark.parametrize("length", [P + 1, 2 * P])
def test_past_it_the_frequencies_follow_the_running_length(length):
    """Past P the frequencies change with the length: no longer the default's, and equal bit for
    bit to edgepe's with ``seq_len`` = that length (the table ``--param seq_len=S`` builds)."""
    dynamic, default = _rotary("llama-dynamic"), _rotary("llama")
    cos, _ = _run(dynamic, length)
    assert not torch.equal(cos, _run(default, length)[0])
    assert torch.equal(dynamic.inv_freq, _edgepe_inv_freq(seq_len=length))
    assert not torch.equal(dynamic.inv_freq, _edgepe_inv_freq())


def test_the_grown_frequencies_are_state_kept_across_calls():
    """Why no stateless graph is faithful past P: after a call at 2P, a call at P still uses the
    frequencies of 2P (the module's cache), and only a call shorter than P resets them."""
    dynamic, default = _rotary("llama-dynamic"), _rotary("llama")
    _run(dynamic, 2 * P)
    cos, _ = _run(dynamic, P)
    assert not torch.equal(cos, _run(default, P)[0])
    assert torch.equal(dynamic.inv_freq, _edgepe_inv_freq(seq_len=2 * P))
    _run(dynamic, P - 1)
    assert torch.equal(dynamic.inv_freq, _edgepe_inv_freq())


def test_export_from_a_dynamic_config(tmp_path):
    """``edgepe export --from-hf-config``: P positions by default (the default RoPE's
    frequencies), more refused in one line with the figures, nothing written; ``--param
    seq_len=S`` builds one length's table when asked."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_hf_models.config("llama-dynamic").to_dict()))
    out = tmp_path / "rope.onnx"
    runner = CliRunner()
    result = runner.invoke(app, ["export", "--from-hf-config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifest = json.loads(out.with_name(out.name + ".json").read_text())
    assert manifest["max_len"] == P and manifest["params"]["rope_type"] == "dynamic"
    built = edgepe.schemes.build(edgepe.schemes.resolve("rope", P, d_model=8,
                                                        params=manifest["params"]))
    assert torch.equal(built.inv_freq, _edgepe_inv_freq())
    refused = tmp_path / "long.onnx"
    result = runner.invoke(app, ["export", "--from-hf-config", str(config), "--max-len", "512",
                                 "--out", str(refused)])
    assert result.exit_code == 2 and not refused.exists()
    assert result.stderr.strip().splitlines() == [
        "error: rope_type dynamic (NTK) is the default RoPE up to max_position_embeddings 256; "
        "past it transformers recomputes inv_freq from the running length (base 10,000 -> "
        "43,267.5 at 512 positions) and keeps it as state across calls, which no fixed table "
        "reproduces: 512 positions asked, at most 256 are faithful; give --max-len at most that, "
        "or --param seq_len=S for a table of one running length S's frequencies"]
    result = runner.invoke(app, ["export", "--from-hf-config", str(config), "--max-len", "512",
                                 "--param", "seq_len=512", "--out", str(refused)])
    assert result.exit_code == 0, result.output
    assert json.loads(refused.with_name(refused.name + ".json").read_text())["params"][
        "seq_len"] == 512
