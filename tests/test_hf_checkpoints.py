"""Learned position tables taken from real transformers checkpoints (issue 29).

Tiny random-weight GPT-2 and OPT models are built from config objects (no download) and saved as
a deployer has them: ``save_pretrained`` (``config.json`` + ``model.safetensors``) and
``torch.save(model.state_dict())``. ``edgepe export --from-hf-config config.json --checkpoint
FILE --checkpoint-param NAME`` must give the model's own table, row for row (exact: rows are
copied); OPT's two leading rows are skipped, as its embedding adds 2 to every position. A wrong
name lists the file's 2-D tensors; a hostile safetensors header is refused in one line.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers", reason="the dev extra pins transformers; "
                                   "these tests save its models")

from edgepe.cli import app  # noqa: E402


def _invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``{name: (folder, table)}``: each tiny model saved twice, and its position table as the
    model uses it (row p = the embedding of position p)."""
    from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

    torch.manual_seed(29)
    out = {}
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=1, n_positions=64,
                                      vocab_size=100)).eval()
    opt = OPTForCausalLM(OPTConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=1,
                                   ffn_dim=64, max_position_embeddings=64, vocab_size=100,
                                   word_embed_proj_dim=32)).eval()
    positions = torch.arange(64)[None]
    with torch.no_grad():
        gpt2_table = gpt2.transformer.wpe(positions)[0]
        # OPT's own forward: position_ids p read row p + 2
        opt_table = opt.model.decoder.embed_positions(
            torch.ones(1, 64, dtype=torch.long), position_ids=positions)[0]
    for name, model, table in (("gpt2", gpt2, gpt2_table), ("opt", opt, opt_table)):
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)  # safetensors by default
        torch.save(model.state_dict(), folder / "state_dict.pt")
        out[name] = (folder, table.numpy())
    return out


PARAMS = {"gpt2": "transformer.wpe.weight", "opt": "model.decoder.embed_positions.weight"}


@pytest.mark.parametrize("family", ["gpt2", "opt"])
@pytest.mark.parametrize("file", ["model.safetensors", "state_dict.pt"])
def test_learned_table_is_the_models_row_for_row(saved, tmp_path, family, file):
    folder, table = saved[family]
    out = tmp_path / "wpe.npy"
    result = _invoke("export", "--from-hf-config", folder / "config.json", "--checkpoint",
                     folder / file, "--checkpoint-param", PARAMS[family], "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("from config.json: scheme learned, max_len 64, d_model 32")
    got = np.load(out)
    assert got.shape == table.shape and np.array_equal(got, table)
    manifest = json.loads((tmp_path / "wpe.npy.json").read_text())
    assert manifest["checkpoint"]["param"] == PARAMS[family]
    # verify rebuilds it from the same checkpoint, byte for byte
    verified = _invoke("verify", out, "--checkpoint", folder / file)
    assert verified.exit_code == 0 and "rebuilt byte-identical" in verified.output, \
        verified.output


def test_a_shorter_table_takes_the_first_rows(saved, tmp_path):
    folder, table = saved["gpt2"]
    out = tmp_path / "wpe16.npy"
    result = _invoke("export", "--from-hf-config", folder / "config.json", "--max-len", "16",
                     "--checkpoint", folder / "model.safetensors", "--checkpoint-param",
                     PARAMS["gpt2"], "--out", out)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(out), table[:16])


@pytest.mark.parametrize("file", ["model.safetensors", "state_dict.pt"])
def test_a_missing_name_lists_the_2d_tensors(saved, tmp_path, file):
    folder, _ = saved["gpt2"]
    result = _invoke("export", "--from-hf-config", folder / "config.json", "--checkpoint",
                     folder / file, "--checkpoint-param", "transformer.wpe",
                     "--out", tmp_path / "x.npy")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "has no tensor 'transformer.wpe'" in lines[0]
    # position-like names first, with their shapes
    assert "its 2-D tensors: transformer.wpe.weight [64, 32], " in lines[0]
    assert "transformer.wte.weight [100, 32]" in lines[0]
    assert not (tmp_path / "x.npy").exists()


def test_a_table_too_short_names_the_sizes_it_fits(saved, tmp_path):
    folder, _ = saved["gpt2"]
    result = _invoke("export", "--scheme", "learned", "--max-len", "128", "--d-model", "32",
                     "--checkpoint", folder / "model.safetensors", "--checkpoint-param",
                     PARAMS["gpt2"], "--out", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert "transformer.wpe.weight is [64, 32]" in result.output
    assert "it fits --max-len 64 --d-model 32" in result.output


def test_checkpoint_key_reads_safetensors_too(saved, tmp_path):
    """The whole-state_dict path (``--checkpoint-key``) reads safetensors files as well."""
    from edgepe.contract.checkpoint import read_state_dict

    folder, table = saved["gpt2"]
    state = read_state_dict(folder / "model.safetensors", "transformer.wpe")
    assert list(state) == ["weight"] and np.array_equal(state["weight"].numpy(), table)


def _safetensors(path, header: bytes, length: int | None = None, body: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header
                     + body)


@pytest.mark.parametrize("case, words", [
    ("huge", "its safetensors header claims 1099511627776 bytes"),
    ("past-end", "its safetensors header claims 4096 bytes (the file has"),
    ("not-json", "its safetensors header is not JSON"),
    ("not-tensor", "safetensors entry 'w' is not a tensor record"),
    ("bad-offsets", "is not a readable safetensors file"),
    ("complex", "w is a C64 tensor"),
])
def test_hostile_safetensors_are_refused_in_one_line(tmp_path, case, words):
    path = tmp_path / "evil.safetensors"
    if case == "huge":
        _safetensors(path, b"{}", length=1 << 40)
    elif case == "past-end":
        _safetensors(path, b'{"w":{}}', length=4096)
    elif case == "not-json":
        _safetensors(path, b"{not json at all")
    elif case == "not-tensor":
        _safetensors(path, b'{"w": 3}')
    elif case == "bad-offsets":  # claims 4096 bytes of data the file does not hold
        _safetensors(path, b'{"w":{"dtype":"F32","shape":[32,32],"data_offsets":[0,4096]}}')
    else:
        _safetensors(path, b'{"w":{"dtype":"C64","shape":[4,4],"data_offsets":[0,128]}}',
                     body=bytes(128))
    result = _invoke("export", "--scheme", "learned", "--max-len", "4", "--d-model", "4",
                     "--checkpoint", path, "--checkpoint-param", "w",
                     "--out", tmp_path / "x.npy")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and words in result.output, \
        result.output
    assert not (tmp_path / "x.npy").exists()


def test_checkpoint_param_needs_a_one_tensor_scheme_and_a_checkpoint(saved, tmp_path):
    folder, _ = saved["gpt2"]
    no_file = _invoke("export", "--scheme", "learned", "--max-len", "4", "--checkpoint-param",
                      "x", "--out", tmp_path / "x.npy")
    assert no_file.exit_code == 2 and "give --checkpoint too" in no_file.output
    both = _invoke("export", "--scheme", "learned", "--max-len", "4", "--checkpoint",
                   folder / "model.safetensors", "--checkpoint-param", "x",
                   "--checkpoint-key", "y", "--out", tmp_path / "x.npy")
    assert both.exit_code == 2 and "--checkpoint-key (a prefix) does not apply" in both.output


def test_the_familys_table_is_found_without_checkpoint_param(saved, tmp_path):
    folder, table = saved["opt"]
    out = tmp_path / "opt.npy"
    result = _invoke("export", "--from-hf-config", folder / "config.json", "--checkpoint",
                     folder / "model.safetensors", "--out", out)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(
        "; table model.decoder.embed_positions.weight of model.safetensors")
    assert np.array_equal(np.load(out), table)


def test_roberta_positions_start_after_its_padding_index(tmp_path):
    """RoBERTa numbers positions from pad_token_id + 1 inside its max_position_embeddings rows:
    the table holds max_position_embeddings - pad - 1 positions, position 0 first."""
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(3)
    model = RobertaModel(RobertaConfig(hidden_size=32, num_attention_heads=4,
                                       num_hidden_layers=1, intermediate_size=64,
                                       max_position_embeddings=40, vocab_size=50,
                                       pad_token_id=1)).eval()
    model.save_pretrained(tmp_path / "roberta")
    ids = torch.full((1, 38), 7)  # no padding: positions 2 .. 39
    with torch.no_grad():
        positions = model.embeddings.create_position_ids_from_input_ids(ids, 1)
        expected = model.embeddings.position_embeddings(positions)[0].numpy()
    out = tmp_path / "r.npy"
    result = _invoke("export", "--from-hf-config", tmp_path / "roberta" / "config.json",
                     "--checkpoint", tmp_path / "roberta" / "model.safetensors", "--out", out)
    assert result.exit_code == 0, result.output
    assert "scheme learned, max_len 38, d_model 32, offset=2" in result.output
    assert np.array_equal(np.load(out), expected)


def test_a_learned_config_without_weights_is_refused(saved, tmp_path):
    folder, _ = saved["gpt2"]
    result = _invoke("export", "--from-hf-config", folder / "config.json",
                     "--out", tmp_path / "x.npy")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: --from-hf-config describes a learned position table (gpt2): give the model's "
        "weights, --checkpoint model.safetensors (its table: transformer.wpe.weight)")
