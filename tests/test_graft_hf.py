"""``edgepe graft MODEL.onnx --out OUT.onnx`` on transformers models, no PE given (issue 29).

Tiny random-weight models of each family (``tests/_hf_models.py``: config objects in code, no
download, seeded) exported as a user would, ``torch.onnx.export(..., dynamo=True)`` with
``model.onnx.data`` beside the file; exports are slow (10-25 s each on 2 cores), so each family is
exported once per session, and only Llama (RoPE) and GPT-2 (learned) run in the default suite;
the other families are marked slow. Each graft is checked three ways: graft's own proof (exit 0,
every output ok), the written files run again here against the original ONNX model on inputs the
proof did not use, and against the torch model itself.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from edgepe.graft.prove import hf_feeds

pytest.importorskip("transformers", reason="the transformers models need transformers")
import _hf_models  # noqa: E402 - after the skip: it imports transformers lazily, but is only for it

DEFAULT = ("llama", "gpt2")
# llama-dynamic (dynamic NTK) is not here: torch 2.13's torch.export refuses it (a data-dependent
# guard, `if seq_len > max_seq_len_cached` in transformers' dynamic_frequency_update), so there
# is no dynamo export to graft; TorchScript freezes inv_freq at the traced length, and graft
# keeps exactly what that graph computes (test_torchscript_export_of_dynamic_ntk_llama; with
# --from-hf-config up to max_position_embeddings only: tests/test_dynamic_ntk.py).
SLOW = ("bloom", "mpt", "gptj", "gpt_neox", "phi", "mistral", "qwen2", "opt", "xglm",
        "llama-linear", "llama-llama3", "llama-yarn", "phi3-longrope", "marian")
FAMILY = {"llama": "rope", "gpt2": "learned", "bloom": "alibi", "mpt": "alibi", "gptj": "rope",
          "gpt_neox": "rope", "phi": "rope", "mistral": "rope", "qwen2": "rope", "opt": "learned",
          "xglm": "sinusoidal", "llama-linear": "rope", "llama-llama3": "rope",
          "llama-yarn": "rope", "phi3-longrope": "rope", "marian": "sinusoidal"}
# Table rows per family (RoPE: --max-len); longrope's long inv_freq is picked past position 4095
# in this export, so its tables reach past it and the proof's decode step takes that branch.
MAX_LEN = {"phi3-longrope": 4200}
# onnxruntime and torch compute float32 attention in different orders (fused MatMul/Softmax):
# measured <= 2e-6 on these models' logits (|logits| < 1); 1e-5 leaves room, still far below
# what a wrong position (a changed cos/sin row: ~1e-2 here) moves.
TORCH_ATOL = 1e-5


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """``family -> model.onnx``, exported on first use and kept for the session."""
    folder = tmp_path_factory.mktemp("hf")
    made = {}

    def get(family: str):  # "llama@23": exported with opset_version=23
        if family not in made:
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            name, _, opset = family.partition("@")
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                made[family] = _hf_models.export(name, folder / family.replace("@", "-"),
                                                 opset=int(opset) if opset else None)
        return made[family]

    return get


def _cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _graft_and_check(exported, family, tmp_path, *options):
    path = exported(family)
    family = family.partition("@")[0]
    assert (path.parent / "model.onnx.data").exists()  # the export a user gets
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", path, "--out", out, *options)
    assert code == 0, (stdout, stderr)
    first = stdout.splitlines()[0]
    assert first.startswith(f"found {FAMILY[family]} "), stdout
    assert "MISMATCH" not in stdout and f"wrote {out}" in stdout
    # written as it came: external data beside it, under a name of its own bytes (issue 41)
    assert len(list(tmp_path.glob("out.onnx.*.data"))) == 1
    grafted = onnx.load(out)
    original = onnx.load(path)
    # outputs of the files as written, on inputs the proof did not draw (another seed)
    mine = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    names = [o.name for o in theirs.get_outputs()]
    for seq, past, pad in ((6, 0, 2), (2, 9, 0)) if family not in _hf_models.NO_CACHE else \
            ((6, 0, 2), (9, 0, 0)):
        feeds = hf_feeds(theirs, seq, past, pad, 256, rng)
        want, got = theirs.run(names, feeds), mine.run(names, feeds)
        torch_out = _hf_models.torch_outputs(family, feeds)
        # torch and the export disagree on rows of padding tokens (every key masked: their
        # outputs are arbitrary); compare the tokens the mask keeps
        keep = feeds["attention_mask"].astype(bool)
        if family in _hf_models.ENC_DEC:  # the mask is the encoder's: every decoder row counts
            keep = np.ones((len(keep), past + seq), bool)
        for name, w, g, t in zip(names, want, got, torch_out, strict=True):
            scale = float(np.abs(w).max())
            assert np.abs(g - w).max() <= 64 * np.spacing(np.float32(scale)) + (
                0.01 if "int8" in options else 0), name
            valid = keep[:, past:] if name == "logits" else keep
            if name != "logits":  # [B, H, past + seq, d]: the sequence axis is 2
                g, t = np.moveaxis(g, 2, 1), np.moveaxis(t, 2, 1)
            np.testing.assert_allclose(g[valid], t[valid], rtol=0, atol=TORCH_ATOL + (
                0.01 if "int8" in options else 0), err_msg=name)
    return stdout, original, grafted


@pytest.mark.parametrize("family", [*DEFAULT, *(pytest.param(f, marks=pytest.mark.slow)
                                                for f in SLOW)])
def test_graft_finds_the_pe_of_a_transformers_export(exported, family, tmp_path):
    """No PE given: graft names what it found, puts the artifact in, proves and writes; the
    written model equals the original ONNX model and torch; RoPE keeps no Sin/Cos."""
    length = MAX_LEN.get(family, 256)
    options = ("--max-len", length) if family not in ("gpt2", "opt", "gptj", "xglm", "mpt",
                                                      "marian") else ()
    stdout, original, grafted = _graft_and_check(exported, family, tmp_path, *options)
    ops = {n.op_type for n in grafted.graph.node}
    if FAMILY[family] == "rope" and family != "gptj":  # GPT-J's table is a constant already
        assert {"Sin", "Cos"} <= {n.op_type for n in original.graph.node}
        assert not ops & {"Sin", "Cos"}, "a trig op of the PE stayed"
    assert any(p.key == "edgepe.graft.0" for p in grafted.metadata_props)
    if family not in _hf_models.NO_CACHE:
        # a KV-cache decode step at the table's last row: after 8 cached tokens where
        # position_ids sets the positions, else the PE's cone alone after length - 1 and the
        # whole model after 8 (issue 41); MPT's bias is a weight of the original, which no
        # cone makes (compared through the outputs alone): the whole model after length - 1
        last = length - 1
        step = (f"1+8 (positions {last}..{last})"
                if "position_ids" in {i.name for i in original.graph.input} else
                f"3+5, 1+{last}:" if family == "mpt" else
                f"1+8, every position 0..{last} (the replaced tensors), 1+{last} (the replaced "
                "tensors)")
        assert step in stdout
        assert "present_key.0: max abs err" in stdout  # the cache's outputs proven too


@pytest.mark.slow
def test_marian_encoder_and_decoder_tables_both_replaced(exported, tmp_path):
    """Marian (an encoder-decoder): two sinusoidal ``[sin | cos]`` tables, equal in value but two
    initializers, one gathered by the encoder's positions, one by the decoder's (past length +
    offset). graft names both in one line, replaces each (two records), and proves logits and the
    decoder's present keys/values unchanged with encoder and decoder at different lengths (the
    decode steps: encoder 8 and 256 tokens, decoder 3 after 5 cached and 1 after 255)."""
    stdout, original, grafted = _graft_and_check(exported, "marian", tmp_path)
    first = stdout.splitlines()[0]
    assert first.startswith("found sinusoidal x2, one per input stream: (Marian sinusoidal")
    assert "encoder.embed_positions" in first and "decoder.embed_positions" in first
    assert "'decoder_input_ids'" in first and "1+255" in stdout and "3+5" in stdout
    tables = [t.name for t in original.graph.initializer if "embed_positions" in t.name]
    assert len(tables) == 2
    assert not {t.name for t in grafted.graph.initializer} & set(tables)
    records = [json.loads(p.value) for p in grafted.metadata_props
               if p.key.startswith("edgepe.graft.")]
    assert [r["table"] for r in records] == tables
    for r in records:  # Marian's table: float64 angles, rounded once to float32
        assert r["scheme"] == "sinusoidal" and r["layout"] == "half" and r["offset"] == 0
        assert 0 < r["definition_distance"] <= 2.0**-25
    # the rows put in are edgepe's sinusoidal layout=half, up to its float32 angle p * w
    from edgepe.schemes import build, resolve

    rows = onnx.numpy_helper.to_array(next(t for t in grafted.graph.initializer
                                           if t.name.startswith("edgepe_pe1/")
                                           and len(t.dims) == 2), str(tmp_path))
    import torch

    mine = build(resolve("sinusoidal", 256, d_model=32, params={"layout": "half"})).encode(
        torch.arange(256)).numpy()
    assert np.abs(mine - rows).max() <= 4 * 2.0**-23 + 256 * 2.0**-24
    # --quantize int8: both tables int8, the proof holds every output within twice its gain
    # times the larger of the two tables' bounds
    report = edgepe.graft(exported("marian"), quantize="int8")
    assert report and report.artifact.startswith("sinusoidal x2 (table, int8, 256 positions")
    assert len([t for t in report.model.graph.initializer
                if t.data_type == onnx.TensorProto.INT8]) == 2
    # --from-hf-config: each table checked against edgepe's sinusoidal for the model's config
    config = _hf_models.config("marian").to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    report = edgepe.graft(exported("marian"), hf_config=config)
    records = [json.loads(p.value) for p in report.model.metadata_props
               if p.key.startswith("edgepe.graft.")]
    assert report and len(records) == 2 and all(
        r["hf_config"]["table"].startswith("within ") for r in records)
    path.write_text(json.dumps(dict(config, model_type="xglm")))
    code, _, stderr = _cli("graft", exported("marian"), "--out", tmp_path / "o.onnx",
                           "--from-hf-config", path)
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "the PE found is Marian's" in stderr
    code, _, stderr = _cli("graft", exported("marian"), "--out", tmp_path / "o.onnx",
                           "--rope-lowering", "ort")
    assert code == 2 and "2 PE candidates" in stderr and "without --rope-lowering" in stderr


def test_llama_rope_int8_tables(exported, tmp_path):
    """``--quantize int8``: the tables stored int8 (a quarter of float32's bytes) and still
    proven within their bound."""
    stdout, _, grafted = _graft_and_check(exported, "llama", tmp_path, "--max-len", 256,
                                          "--quantize", "int8")
    assert "int8" in stdout.splitlines()[1]
    tables = [t for t in grafted.graph.initializer if t.name.endswith("_table_int8")]
    assert len(tables) == 2 and all(t.data_type == onnx.TensorProto.INT8 for t in tables)


def test_a_table_over_the_limit_is_refused(exported, tmp_path):
    """Llama's R = 8: 2^21 positions are 2^21 x 4 x 2 float32 = 64 MiB, over the 32 MiB limit
    (checked before any table is built) when tables are asked for (``--mode table``)."""
    out = tmp_path / "out.onnx"
    code, _, stderr = _cli("graft", exported("llama"), "--out", out, "--max-len", 2**21,
                           "--mode", "table")
    assert code == 2 and not out.exists()
    assert stderr.strip().splitlines() == [
        "error: the tables for 2097152 positions would be 67,108,864 B, over graft's "
        "33,554,432 B limit; give fewer positions (--max-len), --quantize int8 or --mode sliced"]


def test_llama_rope_sliced_no_trig_no_position_table(exported, tmp_path):
    """``--mode sliced`` (issue 34's graph in issue 29's graft): cos/sin from the position's bit
    slices, no Sin/Cos and no [max_len, R/2] table; proven within the sliced bound plus the
    model's own float32 recipe's distance from the float64 definition (both in the record)."""
    stdout, original, grafted = _graft_and_check(exported, "llama", tmp_path, "--max-len", 256,
                                                 "--mode", "sliced")
    assert "(sliced 4,4, float32, 256 positions" in stdout.splitlines()[1], stdout
    assert not {n.op_type for n in grafted.graph.node} & {"Sin", "Cos"}
    assert {"BitShift", "BitwiseAnd"} & {n.op_type for n in grafted.graph.node}
    record = next(json.loads(p.value) for p in grafted.metadata_props
                  if p.key == "edgepe.graft.0")
    assert record["mode"] == "sliced" and record["slices"] == [4, 4]
    assert record["proof_bound"] == record["bound"] + record["recipe_distance"]
    assert record["bound"] < 3e-7 and 0 < record["recipe_distance"] < 1e-4
    # the PE's initializers (2 slices x cos/sin x 16 rows x R/2, the slot and sign constants)
    # against the cos and sin tables of 256 rows x R/2 float32 the table mode stores (8 KiB)
    pe_bytes = sum(t.ByteSize() for t in grafted.graph.initializer
                   if t.name.startswith("edgepe_pe0/"))
    assert pe_bytes < 256 * 4 * 2 * 4 / 3, pe_bytes


def test_rope_goes_sliced_past_the_table_limit(exported):
    """With no --mode, RoPE is a table while it fits the limit and sliced past it."""
    from edgepe.graft.find_hf import build_found, find_pe
    from edgepe.graft.read import load_model

    model, _ = load_model(exported("llama"))
    (found,) = find_pe(model)
    _, table = build_found(model, found, 4096)
    _, sliced = build_found(model, found, 4096, table_bytes_limit=4096 * 8 * 4 - 1)
    assert table["mode"] == "table" and sliced["mode"] == "sliced"
    with pytest.raises(edgepe.EdgepeError, match="--mode sliced computes RoPE"):
        gpt2, _ = load_model(exported("gpt2"))
        build_found(gpt2, find_pe(gpt2)[0], None, mode="sliced")


def _tiny(tmp_path, nodes, inits, name="model.onnx"):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                   ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 4])], inits)
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), path)
    return path


def test_no_pe_found_is_one_line_exit_2(tmp_path):
    from onnx import helper

    path = _tiny(tmp_path, [helper.make_node("Cast", ["position_ids"], ["p"], to=1),
                            helper.make_node("Unsqueeze", ["p", "ax"], ["y0"]),
                            helper.make_node("Expand", ["y0", "shape"], ["y"])],
                 [onnx.numpy_helper.from_array(np.asarray([-1], np.int64), "ax"),
                  onnx.numpy_helper.from_array(np.asarray([1, 1, 4], np.int64), "shape")])
    out = tmp_path / "out.onnx"
    code, _, stderr = _cli("graft", path, "--out", out)
    assert code == 2 and not out.exists()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: no PE found in {str(path)!r}")


def test_two_candidates_are_named_and_refused(tmp_path):
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    path = _tiny(tmp_path, [helper.make_node("Gather", ["wpe_a", "position_ids"], ["a"]),
                            helper.make_node("Gather", ["wpe_b", "position_ids"], ["b"]),
                            helper.make_node("Add", ["a", "b"], ["y"])],
                 [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), n)
                  for n in ("wpe_a", "wpe_b")])
    code, _, stderr = _cli("graft", path, "--out", tmp_path / "out.onnx")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "2 PE candidates" in lines[0]
    assert "'wpe_a'" in lines[0] and "'wpe_b'" in lines[0]


def test_one_pe_per_input_stream_is_told_apart_from_two_on_one(tmp_path):
    """``find_hf.streams``: two position tables read by positions from disjoint model inputs (an
    encoder-decoder's two stacks) are one PE per stream; two read by the same input are not."""
    from onnx import TensorProto, helper, numpy_helper

    from edgepe.graft.find_hf import find_pe, streams

    rng = np.random.default_rng(0)
    tables = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), n)
              for n in ("wpe_a", "wpe_b")]
    for second, apart in (("decoder_position_ids", True), ("position_ids", False)):
        graph = helper.make_graph(
            [helper.make_node("Gather", ["wpe_a", "position_ids"], ["a"]),
             helper.make_node("Gather", ["wpe_b", second], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])], "g",
            [helper.make_tensor_value_info(n, TensorProto.INT64, ["B", "S"])
             for n in dict.fromkeys(["position_ids", second])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 4])], tables)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        found = find_pe(model)
        assert len(found) == 2
        assert streams(model, found) == (["'position_ids'", "'decoder_position_ids'"]
                                         if apart else None)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/hostname", "missing.bin"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, location):
    """External data is read only from the model's own folder: a location that leaves it, an
    absolute path or a missing file is one line, exit 2, and the outside file is never read."""
    from onnx import helper, numpy_helper

    folder = tmp_path / "model"
    folder.mkdir()
    table = numpy_helper.from_array(np.ones((8, 4), np.float32), "wpe")
    table.data_location = onnx.TensorProto.EXTERNAL
    table.ClearField("raw_data")
    for key, value in (("location", location), ("offset", "0"), ("length", "128")):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "outside.bin").write_bytes(b"\0" * 128)
    path = _tiny(folder, [helper.make_node("Gather", ["wpe", "position_ids"], ["y"])], [table])
    code, _, stderr = _cli("graft", path, "--out", tmp_path / "out.onnx")
    assert code == 2 and not (tmp_path / "out.onnx").exists()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "external data" in lines[0] and repr(location) in lines[0]


def test_external_data_output_into_a_new_folder(exported, tmp_path):
    """``--out`` in a folder that does not exist yet: made, as for every other output (it was an
    internal error, FileNotFoundError, when the model is written with external data)."""
    out = tmp_path / "new" / "deeper" / "out.onnx"
    code, stdout, stderr = _cli("graft", exported("gpt2"), "--out", out)
    assert code == 0, (stdout, stderr)
    # both files, nothing staged left beside them
    data, = out.parent.glob("out.onnx.*.data")
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.onnx", data.name]


def test_graft_api_returns_the_found_report(exported, tmp_path):
    report = edgepe.graft(exported("gpt2"), out=tmp_path / "o.onnx")
    assert report and report.found.startswith("found learned (table ")
    assert report.removed_nodes == 1 and all(c.passed for c in report.checks)


@pytest.mark.slow
def test_torchscript_export_of_llama(tmp_path):
    """The TorchScript exporter (``dynamo=False``; no cache, one file): the same RoPE found, its
    attention-factor ``Mul`` by 1 folded into the tables, positions shifted to reach the table's
    last row since there is no cache to do it."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        path = _hf_models.export_torchscript("llama", tmp_path / "ts")
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", path, "--out", out, "--max-len", 256)
    assert code == 0, (stdout, stderr)
    assert stdout.startswith("found rope (half layout, R=8") and "positions 240..255" in stdout
    assert not list(tmp_path.glob("out.onnx*.data"))  # it came as one file: it goes as one
    assert not {n.op_type for n in onnx.load(out).graph.node} & {"Sin", "Cos"}


@pytest.mark.slow
def test_torchscript_export_of_mpt_with_a_cache(tmp_path):
    """MPT with a KV cache by the TorchScript exporter (``dynamo=False``, ``dynamic_axes``; one
    file): its bias is a ``Constant`` node there, not an initializer. graft finds it, computes it
    instead, proves logits and present keys/values at prefill and at decode steps (3 after 5
    cached, 1 after 8; the bias itself at every position and in the step after 255, by the
    PE's cone: issue 41), and the written model equals torch on a cache it did not see."""
    import torch

    lm = _hf_models.model("mpt")
    args, names = _hf_models.example_inputs(lm, with_positions=False)
    layers = lm.config.num_hidden_layers
    outputs = ["logits", *[f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            **{n: {0: "batch", 2: "past"} for n in names[2:]}}
    path = tmp_path / "ts" / "model.onnx"
    path.parent.mkdir()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(_hf_models.wrap(lm, False), args, str(path), dynamo=False,
                          opset_version=18, input_names=names, output_names=outputs,
                          dynamic_axes=axes)
    original = onnx.load(path)
    bias = [n.output[0] for n in original.graph.node if n.op_type == "Constant"
            and list(n.attribute[0].t.dims) == [4, 1, 256]]
    assert len(bias) == 1 and bias[0] not in {t.name for t in original.graph.initializer}
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", path, "--out", out)
    assert code == 0, (stdout, stderr)
    assert stdout.startswith(f"found alibi (MPT bias constant {bias[0]!r} [4, 1, 256]")
    assert "3+5, 1+8, every position 0..255 (the replaced tensors), 1+255 (the replaced " \
        "tensors)" in stdout and "present_value.1: max abs err" in stdout
    grafted = onnx.load(out)  # the bias is made by the PE now (a Range times the slopes)
    maker = next(n for n in grafted.graph.node if bias[0] in n.output)
    assert maker.op_type == "Mul" and "edgepe_pe0/slopes" in maker.input
    assert not any(n.op_type == "Constant" and 256 in n.attribute[0].t.dims
                   for n in grafted.graph.node)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = hf_feeds(session, 2, 9, 0, 256, np.random.default_rng(5))
    for name, got, want in zip(outputs, session.run(outputs, feeds),
                               _hf_models.torch_outputs("mpt", feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=TORCH_ATOL, err_msg=name)


def test_rope_lowering_ort_fuses_every_rotation(exported, tmp_path):
    """``--rope-lowering ort``: q and k of both layers rotate in one RotaryEmbedding each (4
    nodes), no Neg (rotate_half) left, every output still proven and equal to torch."""
    stdout, _, grafted = _graft_and_check(exported, "llama", tmp_path, "--max-len", 256,
                                          "--rope-lowering", "ort")
    assert "rotations fused into RotaryEmbedding x4" in stdout
    ops = [n.op_type for n in grafted.graph.node]
    assert ops.count("RotaryEmbedding") == 4 and "Neg" not in ops
    assert not {"Sin", "Cos"} & set(ops)


def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def test_rope_lowering_rotary23_converts_to_opset_23_and_fuses(exported, tmp_path):
    """``--rope-lowering rotary23``: the opset-20 export converted to opset 23, q and k of both
    layers rotated by ONNX's own RotaryEmbedding (domain "", reading graft's tables and
    positions), no Neg left and no com.microsoft op; onnxruntime runs it and every output equals
    the original ONNX model and torch (``_graft_and_check``), and the ONNX reference evaluator
    (the op's definition) agrees with onnxruntime on the grafted model."""
    stdout, original, grafted = _graft_and_check(exported, "llama", tmp_path, "--max-len", 256,
                                                 "--rope-lowering", "rotary23")
    assert "rotations fused into RotaryEmbedding (ONNX opset 23) x4, opset 20 -> 23" in stdout
    assert _opset(original) == 20 and _opset(grafted) == 23 and grafted.ir_version >= 11
    onnx.checker.check_model(grafted, full_check=True)
    rotary = [n for n in grafted.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == 4 and all(n.domain == "" for n in rotary)
    assert all(n.input[1:] == ["edgepe_pe0/cos_table", "edgepe_pe0/sin_table",
                               "edgepe_pe0/batched_positions"] for n in rotary)  # [B, S]
    assert "com.microsoft" not in {o.domain for o in grafted.opset_import}
    ops = {n.op_type for n in grafted.graph.node}
    assert not ops & {"Neg", "Sin", "Cos"}
    record = next(json.loads(p.value) for p in grafted.metadata_props
                  if p.key == "edgepe.graft.0")
    assert record["rope_lowering"] == {"op": "RotaryEmbedding (ONNX opset 23)", "fused": 4,
                                       "opset": "20 -> 23"}
    # the targets that have ONNX's op take the graft's nodes (position_ids, input 3, judged as
    # indices, not data: a profile with float-only RotaryEmbedding still takes them); one
    # without it names the op
    import dataclasses

    from edgepe.targets.check import check
    from edgepe.targets.profiles import FLOATS, PROFILES

    def rotations(profile):
        return [n for n in check(grafted, profile).nodes if n.op == "RotaryEmbedding"]

    floats_only = dataclasses.replace(PROFILES["ort-cpu"], ops={
        **PROFILES["ort-cpu"].ops, "RotaryEmbedding": FLOATS})
    for profile in (PROFILES["ort-cpu"], PROFILES["ort-cuda"], floats_only):
        assert len(rotations(profile)) == 4 and all(n.supported for n in rotations(profile))
    assert not any(n.supported for n in rotations(PROFILES["openvino"]))
    # the converter drops nodes' metadata_props; graft puts the exporter's back
    assert sum(len(n.metadata_props) for n in grafted.graph.node) > len(grafted.graph.node) / 2
    from onnx.reference import ReferenceEvaluator

    session = ort.InferenceSession(str(tmp_path / "out.onnx"),
                                   providers=["CPUExecutionProvider"])
    feeds = hf_feeds(session, 5, 3, 1, 256, np.random.default_rng(5))
    names = [o.name for o in session.get_outputs()]
    for got, want in zip(session.run(names, feeds), ReferenceEvaluator(grafted).run(names, feeds),
                         strict=True):
        assert np.abs(got - want).max() <= 64 * np.spacing(np.float32(np.abs(want).max()))


@pytest.mark.slow
@pytest.mark.parametrize("family,rotary", [("phi", 4), ("gpt_neox", 2)])
def test_rope_lowering_rotary23_partial_rotary(exported, tmp_path, family, rotary):
    """Partial rotary: ``Concat(rotate(x[..., :R]), x[..., R:])`` becomes one ONNX
    RotaryEmbedding on all of x with ``rotary_embedding_dim=R``; proven, equal to torch."""
    stdout, _, grafted = _graft_and_check(exported, family, tmp_path, "--max-len", 256,
                                          "--rope-lowering", "rotary23")
    assert "x4, opset 20 -> 23" in stdout
    nodes = [n for n in grafted.graph.node if n.op_type == "RotaryEmbedding"]
    makers = {o: n for n in grafted.graph.node for o in n.output}
    assert len(nodes) == 4
    for node in nodes:
        attrs = {a.name: a.i for a in node.attribute}
        assert attrs == {"interleaved": 0, "rotary_embedding_dim": rotary}
        # the op takes all of x (not its first R dimensions) and no Concat on the last axis
        # puts pass-through dimensions back (a KV cache's Concat on the sequence axis may read it)
        assert makers[node.input[0]].op_type != "Slice"
        assert not [n for n in grafted.graph.node if n.op_type == "Concat" and node.output[0]
                    in n.input and onnx.helper.get_attribute_value(n.attribute[0]) in (3, -1)]


@pytest.mark.parametrize("option", [("--quantize", "int8"), ("--mode", "sliced")])
def test_rope_lowering_needs_the_float32_tables(exported, tmp_path, option):
    """The fused ops read float32 cos/sin caches: with int8 tables or sliced RoPE (no table)
    the lowering is one line, exit 2, nothing written."""
    out = tmp_path / "o.onnx"
    code, _, stderr = _cli("graft", exported("llama"), "--out", out, "--max-len", 256,
                           "--rope-lowering", "rotary23", *option)
    assert code == 2 and not out.exists()
    assert stderr.strip().splitlines() == [
        "error: --rope-lowering needs the float32 RoPE tables (--mode table, not with "
        "--quantize int8 or --mode sliced)"]


def test_rotary23_refuses_what_the_converter_cannot_convert():
    """A model onnx's version converter cannot take to opset 23 is one line naming why."""
    from onnx import TensorProto, helper

    from edgepe.graft.lower import to_opset

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], alpha=1.0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    with pytest.raises(edgepe.EdgepeError) as info:
        to_opset(model)
    line = str(info.value)
    assert "\n" not in line and line.startswith(
        "--rope-lowering rotary23 needs opset 23 and this model is opset 20: onnx's version "
        "converter cannot take it there (")
    assert to_opset(model, 20) is model  # at the opset already: left as it is


def test_rope_lowering_refuses_a_pe_that_is_not_half_rope(exported, tmp_path):
    for lowering in ("ort", "rotary23"):
        code, _, stderr = _cli("graft", exported("gpt2"), "--out", tmp_path / "o.onnx",
                               "--rope-lowering", lowering)
        assert code == 2 and "--rope-lowering: the PE found is learned" in stderr
    code, _, stderr = _cli("graft", exported("gpt2"), "--out", tmp_path / "o.onnx",
                           "--rope-lowering", "rotary")
    assert code == 2 and stderr.strip().splitlines() == [
        "error: --rope-lowering 'rotary': choose ort (com.microsoft.RotaryEmbedding) or "
        "rotary23 (the ONNX opset 23 RotaryEmbedding)"]


def test_from_hf_config_checks_the_pe_against_edgepe_and_sets_max_len(exported, tmp_path):
    """``--from-hf-config`` (issue 29): the model's own config.json; RoPE's inv_freq must equal
    edgepe's ``rope`` (``freq_dtype=float32``) for it bit for bit, and the config's
    ``max_position_embeddings`` is the rows' default; a config of another model is refused."""
    config = _hf_models.config("llama").to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", exported("llama"), "--out", out, "--from-hf-config",
                                path)
    assert code == 0, (stdout, stderr)
    length = config["max_position_embeddings"]
    assert f"{length} positions" in stdout.splitlines()[1], stdout
    record = next(json.loads(p.value) for p in onnx.load(out, load_external_data=False)
                  .metadata_props if p.key == "edgepe.graft.0")
    assert record["hf_config"]["scheme"] == "rope"
    assert record["hf_config"]["inv_freq"].startswith("equal to edgepe's rope")
    other = dict(config, rope_theta=20000.0, rope_parameters={"rope_type": "default",
                                                              "rope_theta": 20000.0})
    path.write_text(json.dumps(other))
    code, _, stderr = _cli("graft", exported("llama"), "--out", tmp_path / "o2.onnx",
                           "--from-hf-config", path)
    assert code == 2 and not (tmp_path / "o2.onnx").exists()
    assert "differs from edgepe's rope for this config" in stderr and len(
        stderr.strip().splitlines()) == 1
    gpt2 = _hf_models.config("gpt2").to_dict()
    path.write_text(json.dumps(gpt2))
    code, _, stderr = _cli("graft", exported("llama"), "--out", tmp_path / "o3.onnx",
                           "--from-hf-config", path)
    assert code == 2 and "describes a 'learned' model; the PE graft found is rope" in stderr


def test_from_hf_config_dynamic_ntk_grafts_up_to_max_position_embeddings(exported, tmp_path):
    """A dynamic NTK config (``rope_type`` dynamic, factor 2, P = 256) is the default RoPE for
    every running length <= P (tests/test_dynamic_ntk.py), so the Llama export's RoPE is that
    model's there: grafted at P positions by default; more positions refused in one line with the
    reason and the figures, nothing written."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_hf_models.config("llama-dynamic").to_dict()))
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", exported("llama"), "--out", out, "--from-hf-config",
                                path)
    assert code == 0, (stdout, stderr)
    assert "256 positions" in stdout.splitlines()[1] and "1+8 (positions 255..255)" in stdout
    record = next(json.loads(p.value) for p in onnx.load(out, load_external_data=False)
                  .metadata_props if p.key == "edgepe.graft.0")
    assert record["hf_config"]["params"]["rope_type"] == "dynamic"
    assert record["hf_config"]["inv_freq"].startswith("equal to edgepe's rope")
    long = tmp_path / "long.onnx"
    code, _, stderr = _cli("graft", exported("llama"), "--out", long, "--from-hf-config", path,
                           "--max-len", 257)
    assert code == 2 and not long.exists()
    assert stderr.strip().splitlines() == [
        "error: rope_type dynamic (NTK) is the default RoPE up to max_position_embeddings 256; "
        "past it transformers recomputes inv_freq from the running length (base 10,000 -> "
        "10,104.3 at 257 positions) and keeps it as state across calls, which no fixed table "
        "reproduces: 257 positions asked, at most 256 are faithful; give --max-len at most that"]


@pytest.mark.slow
def test_torchscript_export_of_dynamic_ntk_llama(tmp_path):
    """The one export a dynamic NTK model has (TorchScript, inv_freq frozen at the traced length
    8 <= P: the default's), grafted with its config: proven, and on onnxruntime equal to the
    transformers model in torch at positions up to P - 1, where dynamic NTK is the default."""
    import torch

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        path = _hf_models.export_torchscript("llama-dynamic", tmp_path / "ts")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_hf_models.config("llama-dynamic").to_dict()))
    out = tmp_path / "out.onnx"
    code, stdout, stderr = _cli("graft", path, "--out", out, "--from-hf-config", config)
    assert code == 0, (stdout, stderr)
    assert "256 positions" in stdout and "positions 240..255" in stdout
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for start in (0, 100, 240):
        ids = rng.integers(0, _hf_models.VOCAB, (2, 16))
        positions = np.broadcast_to(np.arange(start, start + 16), (2, 16)).copy()
        feeds = {"input_ids": ids, "attention_mask": np.ones((2, 16), np.int64),
                 "position_ids": positions}
        (got,) = session.run(["logits"], feeds)
        with torch.no_grad():  # a fresh model each time: its cached length starts at P
            want = _hf_models.model("llama-dynamic")(
                **{k: torch.from_numpy(v) for k, v in feeds.items()}, use_cache=False).logits
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=TORCH_ATOL)


@pytest.mark.parametrize("family", ["llama@23", pytest.param("phi@23", marks=pytest.mark.slow)])
def test_an_opset_23_export_rotates_with_onnx_rotary_embedding(exported, tmp_path, family):
    """torch 2.13 at ``opset_version=23`` writes each rotation as ONNX's RotaryEmbedding itself,
    its caches ``Cos``/``Sin`` of ``positions * inv_freq`` ``[B, S, R/2]`` once per op: graft
    finds that RoPE, replaces the caches by one table lookup (no Sin/Cos left), and with
    ``--rope-lowering rotary23`` feeds the ops graft's tables and positions (no lookup left);
    both proven and equal to the original ONNX model and torch. ``ort`` is refused there."""
    stdout, original, grafted = _graft_and_check(exported, family, tmp_path, "--max-len", 256)
    assert _opset(original) == 23
    assert "at the caches of 4 RotaryEmbedding ops (opset 23)" in stdout.splitlines()[0]
    before = [n.op_type for n in original.graph.node]
    assert before.count("Cos") == before.count("Sin") == 4
    ops = [n.op_type for n in grafted.graph.node]
    assert not {"Sin", "Cos"} & set(ops) and ops.count("RotaryEmbedding") == 4
    lowered = tmp_path / "lowered"
    lowered.mkdir()
    stdout, _, grafted = _graft_and_check(exported, family, lowered, "--max-len", 256,
                                          "--rope-lowering", "rotary23")
    assert "rotations fused into RotaryEmbedding (ONNX opset 23) x4)" in stdout
    rotary = [n for n in grafted.graph.node if n.op_type == "RotaryEmbedding"]
    tables = {t.name for t in grafted.graph.initializer if t.name.endswith("_table")}
    assert len(rotary) == 4 and all(n.input[1:] == rotary[0].input[1:] for n in rotary)
    assert set(rotary[0].input[1:3]) == tables and len(tables) == 2
    assert rotary[0].input[3] == "edgepe_pe0/positions_squeezed"
    assert "Gather" not in {n.op_type for n in grafted.graph.node  # (but the range guard's)
                            if any(i.startswith("edgepe_pe0/") and "/range_guard/" not in i
                                   for i in n.input)}
    code, _, stderr = _cli("graft", exported(family), "--out", tmp_path / "o.onnx",
                           "--max-len", 256, "--rope-lowering", "ort")
    assert code == 2 and "rotates with ONNX's RotaryEmbedding (opset 23) already" in stderr
    code, _, stderr = _cli("graft", exported(family), "--out", tmp_path / "o.onnx",
                           "--max-len", 256, "--mode", "sliced")
    assert code == 2 and "read [.., R/2] caches: they go in as tables" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("lowering", ["rotary23", "ort"])
def test_rope_lowering_gptj_interleaved(exported, tmp_path, lowering):
    """GPT-J's interleaved partial rotation (``rotate_every_two`` on ``x[..., :4]`` of
    ``[B, S, H, D]``, then the pass-through Concat) becomes one RotaryEmbedding per q/k
    (``interleaved=1``, the op's 3-D form with ``num_heads``, ``rotary_embedding_dim=4``) fed
    the [sin | cos] rows as its two caches; no Neg or Split left; proven, equal to torch."""
    stdout, _, grafted = _graft_and_check(exported, "gptj", tmp_path, "--rope-lowering",
                                          lowering)
    assert "rotations fused into RotaryEmbedding" in stdout and " x4" in stdout
    nodes = [n for n in grafted.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(nodes) == 4 and {n.domain for n in nodes} == (
        {"com.microsoft"} if lowering == "ort" else {""})
    for node in nodes:
        assert {a.name: a.i for a in node.attribute} == {
            "interleaved": 1, "num_heads": 4, "rotary_embedding_dim": 4}
    ops = {n.op_type for n in grafted.graph.node}
    assert not ops & {"Neg", "Split"}
    caches = {t.name: onnx.numpy_helper.to_array(t) for t in grafted.graph.initializer
              if t.name.endswith("_cache")}
    assert {c.shape for c in caches.values()} == {(256, 2)}


@pytest.mark.parametrize("mode", ["table", "sliced"])
def test_rope_past_max_len_and_negative_fails_never_answers_otherwise(exported, mode,
                                                                      monkeypatch):
    """Issue 41: the proof feeds position_ids past max_len - 1 and negative ones, where the
    model's own RoPE answers; graft's RoPE must fail there (splice._range_guard), never give
    other values: without the guard the table took -1 as its last row and sliced RoPE wrapped
    its bits just past max_len, and the proof says MISMATCH."""
    from edgepe.graft import graft, splice

    report = graft(exported("llama"), max_len=64, mode=mode, lengths=[2])
    assert report, str(report)
    assert report.lengths[-1] == ("positions 64, 65, 131, -1, -2, -64 (the grafted model "
                                  "refuses them)")
    monkeypatch.setattr(splice, "_range_guard", lambda pe, prefix, positions, record: (
        onnx.helper.make_graph([], "none", [], []), positions))
    unguarded = graft(exported("llama"), max_len=64, mode=mode, lengths=[2])
    assert not unguarded
    assert any(not c.passed and c.max_abs_err > 0.01 for c in unguarded.checks)


def test_a_transformers_exports_own_expand_is_refused_before_any_run(exported, tmp_path):
    """graft with no PE given (prove_found's path) bounds the user's model at every proof run's
    input shapes before a session runs it (issue 41): Llama plus an Expand to 40000 x 32000
    float32 (5.1 GB) refused in one line naming it, nothing written."""
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(exported("llama"))
    model.graph.initializer.extend([
        numpy_helper.from_array(np.asarray([40000, 32000], np.int64), "huge"),
        numpy_helper.from_array(np.ones(1, np.float32), "one_f")])
    model.graph.node.extend([helper.make_node("Expand", ["one_f", "huge"], ["wide"]),
                             helper.make_node("ReduceSum", ["wide"], ["total"], keepdims=0)])
    model.graph.output.append(helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
    onnx.save(model, tmp_path / "model.onnx")
    out = tmp_path / "out.onnx"
    code, _, stderr = _cli("graft", tmp_path / "model.onnx", "--out", out, "--max-len", 256)
    lines = stderr.strip().splitlines()
    assert code == 2 and not out.exists() and len(lines) == 1, stderr
    assert lines[0].startswith("error: the original model's tensors would hold 5,12"), lines
    assert lines[0].endswith(" B in all at sequence length 1 (the largest, 'wide', "
                             "5,120,000,000 B), over graft's proof memory limit of "
                             "4,294,967,296 B; refused before running it"), lines
