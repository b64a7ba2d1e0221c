"""``edgepe graft MODEL.onnx --out OUT.onnx`` on Hugging Face Optimum's exports, no PE given
(issue 29).

The models are committed files, ``tests/data/optimum/<family>/model.onnx``: tiny seeded
random-weight transformers models exported by Optimum's own exporter
(``optimum-cli export onnx --task text-generation-with-past``; ``scripts/optimum_fixtures.py``
makes them, in a venv of its own, and ``tests/data/optimum/VERSIONS.txt`` records the versions).
Optimum's exports differ from ``torch.onnx.export``'s (``tests/test_graft_hf.py``): the
TorchScript exporter at opset 18, inputs ``position_ids`` ``[B, S]`` and
``past_key_values.N.key/value``, outputs ``present.N.key/value``, RoPE's angle a ``MatMul`` of
``inv_freq [1, R/2, 1]`` by ``position_ids[:, None]``, GPT-J's table read by
``GatherElements``, MPT's bias a ``Constant`` node. Only onnx and onnxruntime run here.

Each graft is checked four ways: graft's own proof (every output ok, a decode step at the
table's last row), the written file run again here against the original on inputs the proof did
not draw (several sequence lengths, left padding, a past cache), the replaced tensors at every
one of the 256 positions (graft's proof reaches only the positions its runs use), and no Sin/Cos
left for RoPE.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.utils import Extractor
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from edgepe.graft.prove import hf_feeds

DATA = Path(__file__).resolve().parent / "data" / "optimum"
# what graft's one-line "found" message must start with, per family
FOUND = {
    "llama": "found rope (half layout, R=8, ",
    "llama-linear": "found rope (half layout, R=8, ",   # rope_scaling: inv_freq scaled
    "llama-llama3": "found rope (half layout, R=8, ",
    "llama-yarn": "found rope (half layout, R=8, ",     # and its attention factor (below)
    "mistral": "found rope (half layout, R=8, ",
    "qwen2": "found rope (half layout, R=8, ",
    "phi": "found rope (half layout, R=4, ",        # partial rotary: 0.5 of head size 8
    "gpt_neox": "found rope (half layout, R=2, ",   # rotary_pct 0.25 of head size 8
    "gptj": "found rope (GPT-J [sin | cos] table ",
    "bloom": "found alibi (slopes ",
    "mpt": "found alibi (MPT bias constant ",
    "gpt2": "found learned (table 'transformer.wpe.weight' [256, 32]",
    "opt": "found learned (table 'model.decoder.embed_positions.weight' [258, 32], "
           "positions + offset 2",
}
HALF_ROPE = ("llama", "llama-linear", "llama-llama3", "llama-yarn", "mistral", "qwen2", "phi",
             "gpt_neox")
# RoPE tables hold the correctly rounded cos/sin of the model's own float32 angle; onnxruntime's
# Cos/Sin are within a few ulp of that (measured: 1 ulp, 5.96e-8, on these tables), and the
# difference reaches the outputs through the model: 64 ulp of an output's largest value (the
# proof's FLOAT_ULPS) bounds it (measured: <= 6e-8 against 1.9e-6 for the logits). The other
# families' artifacts make the very same float32 values the model made (the same table rows;
# ALiBi: the same slopes times the same positions), so their outputs must be equal, exactly.
ULPS = 64
# (new tokens, cached tokens, left padding of row 1): prefills, a padded prefill, a cache
CASES = ((1, 0, 0), (7, 0, 0), (12, 0, 3), (3, 5, 0), (2, 200, 0), (1, 255, 0))


def _families():
    return sorted(p.parent.name for p in DATA.glob("*/model.onnx"))


def test_the_fixtures_are_committed_and_small():
    """Every family of the issue that Optimum exports is here, each well under 1 MB, one file."""
    assert _families() == sorted(FOUND)
    for family in FOUND:
        path = DATA / family / "model.onnx"
        assert path.stat().st_size < 300_000, family
        assert not list(path.parent.glob("*data*")), family  # no external data beside it
    assert "optimum-onnx==0.1.0" in (DATA / "VERSIONS.txt").read_text()


def _session(path):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _check_equal(family, original, grafted, lowered: bool = False):
    """The written graft against the original ONNX model at ``CASES`` (another seed than the
    proof's): every output (logits and present.N.key/value); within ``ULPS`` where the
    arithmetic changed (RoPE's tables, a fused rotation), else equal."""
    theirs, mine = _session(original), _session(grafted)
    names = [o.name for o in theirs.get_outputs()]
    assert names[0] == "logits" and sum(n.startswith("present.") for n in names) == 4
    assert [o.name for o in mine.get_outputs()] == names
    rng = np.random.default_rng(23)
    for seq, past, pad in CASES:
        feeds = hf_feeds(theirs, seq, past, pad, 256, rng)
        want, got = theirs.run(names, feeds), mine.run(names, feeds)
        for name, w, g in zip(names, want, got, strict=True):
            assert w.shape == g.shape, (name, seq, past)
            if family in HALF_ROPE or lowered:
                tol = ULPS * float(np.spacing(np.float32(np.abs(w).max())))
                assert np.abs(g - w).max() <= tol, (name, seq, past, pad)
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{name} at {seq}+{past} pad {pad}")


def _rows(family):
    """RoPE's tables and Bloom's positions: 256 rows; the others' tables keep their own."""
    return {"max_len": 256} if family in (*HALF_ROPE, "bloom") else {}


def _check_every_row(family, original, grafted, replaces):
    """The replaced tensors at every one of the 256 positions, not only those the model runs
    reach: the cone that makes them, cut out of each model (``onnx.utils.Extractor``) from the
    input the positions come from (``position_ids 0 .. 255``; Bloom: a mask of 256 ones, whose
    cumulative sum they are; MPT: none, a constant bias), run on onnxruntime CPU. RoPE: within
    4 ulp of 1 (the tables' correctly rounded cos/sin against onnxruntime's Cos/Sin; measured
    1 ulp); the other families: equal."""
    source = {"bloom": "attention_mask", "mpt": None}.get(family, "position_ids")
    feeds = {} if source is None else {source: np.arange(256, dtype=np.int64)[None]
                                       if source == "position_ids" else np.ones((1, 256),
                                                                                np.int64)}
    rows = []
    for path in (original, grafted):
        model = onnx.shape_inference.infer_shapes(onnx.load(path))
        cone = Extractor(model).extract_model([source] if source else [], replaces)
        rows.append(ort.InferenceSession(cone.SerializeToString(),
                                         providers=["CPUExecutionProvider"]).run(None, feeds))
    for name, want, got in zip(replaces, *rows, strict=True):
        assert 256 in want.shape and want.shape == got.shape, (name, want.shape)
        if family in HALF_ROPE:
            assert np.abs(got - want).max() <= 4 * np.spacing(np.float32(1.0)), name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("family", sorted(FOUND))
def test_graft_finds_the_pe_of_an_optimum_export(family, tmp_path):
    """No PE given (the API): graft names the family it found, proves every output unchanged
    (with a decode step at the last of 256 positions) and writes one file that equals the
    original on other inputs; RoPE keeps no Sin/Cos."""
    path = DATA / family / "model.onnx"
    out = tmp_path / "out.onnx"
    table_rows = _rows(family)
    report = edgepe.graft(path, out=out, **table_rows)
    assert report, str(report)
    assert report.found.startswith(FOUND[family]), report.found
    # yarn's attention factor 0.1 ln(4) + 1, read from the model's Mul after Cos and Sin
    assert ("attention factor 1.13863" in report.found) == (family == "llama-yarn")
    if family not in ("bloom", "mpt"):  # Bloom: from the mask's CumSum; MPT: a Range inside
        assert "from input 'position_ids'" in report.found or "(from 'position_ids')" in \
            report.found, report.found
    assert all(c.passed for c in report.checks)
    assert {c.name for c in report.checks} >= {"logits", "present.1.value"}
    # a KV-cache decode step at the 256th position: after 8 cached tokens where position_ids
    # sets the positions, else the PE's cone alone after 255 and the whole model after 8
    # (Bloom's cone reads the mask, MPT's nothing), and at caches past the table, where
    # both compute their bias (issue 41)
    inputs = {i.name for i in onnx.load(path, load_external_data=False).graph.input}
    assert (["1+8 (positions 255..255)"] if "position_ids" in inputs else
            ["1+8", "1+255 (the replaced tensors)",
             "1+256, 1+257, 1+515 (the replaced tensors)"]) == [
                step for step in report.lengths if step.startswith("1+")]
    assert out.exists() and not list(tmp_path.glob("out.onnx*.data"))
    grafted = onnx.load(out)
    ops = {n.op_type for n in grafted.graph.node}
    if family in HALF_ROPE:
        assert {"Sin", "Cos"} <= {n.op_type for n in onnx.load(path).graph.node}
    assert not ops & {"Sin", "Cos"}, "a trig op of the PE stayed"
    record = next(json.loads(p.value) for p in grafted.metadata_props
                  if p.key == "edgepe.graft.0")
    _check_equal(family, path, out)
    _check_every_row(family, path, out, record["replaces"])


def test_graft_cli_on_an_optimum_llama(tmp_path):
    """The command a user types: the first line names what it found and where, then the proof,
    then ``wrote OUT``; the file written equals the original."""
    path = DATA / "llama" / "model.onnx"
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(app, ["graft", str(path), "--out", str(out), "--max-len", "256"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(FOUND["llama"]) and "by MatMul" in lines[0]
    assert lines[0].endswith("positions from input 'position_ids'")
    assert "MISMATCH" not in result.stdout and lines[-1] == f"wrote {out}"
    _check_equal("llama", path, out)


@pytest.mark.parametrize("options", [("--mode", "sliced"), ("--quantize", "int8")])
def test_optimum_llama_sliced_and_int8(options, tmp_path):
    """The artifact that takes ``position_ids [B, S]`` (an Unsqueeze in front) works for the
    sliced graph (no table of positions) and int8 tables too, each proven within its bound."""
    path = DATA / "llama" / "model.onnx"
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(app, ["graft", str(path), "--out", str(out), "--max-len", "256",
                                      *options])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert options[1] in result.stdout.splitlines()[1]
    assert "MISMATCH" not in result.stdout and out.exists()
    assert not {n.op_type for n in onnx.load(out).graph.node} & {"Sin", "Cos"}


def test_the_proof_covers_every_position_of_the_table(monkeypatch, tmp_path):
    """One wrong table row, at a position no proof run reaches by itself (200 of 256): graft's
    proof fails on its every-position pass (the replaced tensors' cone at 256 tokens) and
    writes nothing; with the row right it passes."""
    from edgepe.graft import find_hf

    real = find_hf.rope_tables

    def one_wrong_row(found, max_len, inv_freq=None):
        tables = real(found, max_len, inv_freq)
        first = next(iter(tables))
        tables[first] = tables[first].copy()
        tables[first][200, 0] += np.float32(1e-3)
        return tables

    path, out = DATA / "llama" / "model.onnx", tmp_path / "out.onnx"
    monkeypatch.setattr(find_hf, "rope_tables", one_wrong_row)
    report = edgepe.graft(path, out=out, max_len=256)
    assert not report and not out.exists()
    failed = [c for c in report.checks if not c.passed]
    assert failed and all(c.name.startswith("/model/rotary_emb/") for c in failed), failed
    assert report.lengths[-2:] == [
        "every position 0..255 (the replaced tensors)",
        "positions 256, 257, 515, -1, -2, -256 (the grafted model refuses them)"]
    monkeypatch.setattr(find_hf, "rope_tables", real)
    assert edgepe.graft(path, out=out, max_len=256)


@pytest.mark.parametrize("family,lowering", [("llama", "ort"), ("phi", "ort"),
                                             ("llama-yarn", "rotary23"),
                                             ("gpt_neox", "rotary23"), ("gptj", "ort"),
                                             ("gptj", "rotary23")])
def test_optimum_rope_lowering_fuses_every_rotation(family, lowering, tmp_path):
    """``--rope-lowering ort|rotary23`` on Optimum's graphs (cos/sin through a Cast, the slice
    bounds traced from ``x.shape[-1] // 2``; GPT-J's rows through a Cast, repeated by ``Tile``,
    read by ``position_ids`` itself): q and k of both layers fused (4 ops), no rotate-half
    ``Neg`` left, every output within 64 ulp of the original's at ``CASES``."""
    path = DATA / family / "model.onnx"
    out = tmp_path / "out.onnx"
    report = edgepe.graft(path, out=out, rope_lowering=lowering, **_rows(family))
    assert report, str(report)
    assert "rotations fused into RotaryEmbedding" in str(report) and " x4" in str(report)
    grafted = onnx.load(out)
    ops = [n.op_type for n in grafted.graph.node]
    assert ops.count("RotaryEmbedding") == 4 and "Neg" not in ops
    domains = {n.domain for n in grafted.graph.node if n.op_type == "RotaryEmbedding"}
    assert domains == ({"com.microsoft"} if lowering == "ort" else {""})
    _check_equal(family, path, out, lowered=True)


@pytest.mark.parametrize("family", sorted(FOUND))
def test_optimum_config_json_checks_the_pe_found(family, tmp_path):
    """``--from-hf-config`` with the ``config.json`` Optimum writes beside ``model.onnx``
    (transformers 4.x's ``rope_scaling``): the PE found is the config's scheme, RoPE's
    ``inv_freq`` equals edgepe's ``rope`` for it bit for bit (linear/llama3/yarn scaling
    included), and the table rows follow ``max_position_embeddings`` (OPT: the model's own 258
    rows, 256 plus its offset 2)."""
    path = DATA / family / "model.onnx"
    config = json.loads((DATA / family / "config.json").read_text())
    out = tmp_path / "out.onnx"
    report = edgepe.graft(path, out=out, hf_config=config,
                          **({"max_len": 256} if family == "bloom" else {}))
    assert report and all(c.passed for c in report.checks), str(report)
    record = next(json.loads(p.value) for p in onnx.load(out).metadata_props
                  if p.key == "edgepe.graft.0")
    assert record["hf_config"]["model_type"] == config["model_type"]
    assert record["max_len"] == {"opt": 258}.get(family, 256)
    if family in HALF_ROPE:
        assert record["hf_config"]["inv_freq"].startswith("equal to edgepe's rope scheme")
