"""``graft``'s whole command (edgepe/graft/__init__.py) on small models: each refusal of its
options, the ``--scheme`` path on a hand-built demo model, the found-PE path on the committed
Optimum Llama and GPT-2 fixtures at 16 positions, the report lines each path writes and the
output files (issue 33: the mutation run of that module runs these first; under a second each).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import onnx
import pytest
from _graft_models import demo, exported
from onnx import numpy_helper

from edgepe.contract.errors import BadParameterError, OutputPathError
from edgepe.graft import graft, write_model

DATA = Path(__file__).resolve().parent / "data" / "optimum"
LLAMA, GPT2 = DATA / "llama" / "model.onnx", DATA / "gpt2" / "model.onnx"
FAST = {"lengths": [1, 3]}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pe": "a.onnx", "scheme": "binary", "at": "t"},
     "graft takes --pe ARTIFACT --at TENSOR, or --scheme ID, or neither (it finds the PE), not "
     "both"),
    ({"pe": "a.onnx"}, "--pe needs --at TENSOR: the tensor the PE replaces"),
    ({"pe": "a.onnx", "at": ""}, "--pe needs --at TENSOR: the tensor the PE replaces"),
    ({"scheme": "binary", "hf_config": {}},
     "--from-hf-config goes with a PE graft finds itself (no --pe, no --scheme)"),
    ({"checkpoint": "w.pt"},
     "--checkpoint goes with --pe (the weights an int8 artifact was exported from)"),
    ({"scheme": "binary", "max_len": 8},
     "--max-len goes with a PE graft finds itself (no --pe, no --scheme)"),
    ({"pe": "a.onnx", "at": "t", "quantize": "int8", "lowering": "arith"},
     "lowering, quantize: export options go with --scheme (an artifact given with --pe is "
     "already exported)"),
    ({"quantize": "int4"}, "--quantize 'int4': choose none or int8"),
    ({"rope_lowering": "cuda"}, "--rope-lowering 'cuda': choose ort "
     "(com.microsoft.RotaryEmbedding) or rotary23 (the ONNX opset 23 RotaryEmbedding)"),
    *[({"max_len": n}, "--max-len must be 1 .. 16,777,216 (2^24: past it float32 positions "
       "are not whole numbers, and the tables' checks take time linear in it), got " + str(n))
      for n in (0, 2**24 + 1, 2**63)],
    ({"lowering": "arith", "dtype": "uint8"}, "dtype, lowering: not an option of a PE graft "
     "finds itself (it takes --max-len, --mode, --quantize, --rope-lowering)"),
])
def test_option_refusals_are_one_line_before_reading_anything(tmp_path, kwargs, message):
    with pytest.raises(BadParameterError) as info:
        graft(tmp_path / "missing.onnx", **kwargs)
    assert str(info.value) == message


def test_max_len_1_is_accepted_as_an_option(tmp_path):
    with pytest.raises(BadParameterError, match="does not exist"):  # past the option checks
        graft(tmp_path / "missing.onnx", max_len=1)


def test_scheme_graft_of_the_demo_model(tmp_path):
    model = demo(tmp_path)
    out = tmp_path / "out.onnx"
    report = graft(model, scheme="binary", out=out, **FAST)
    assert report and report.out == out and out.is_file()
    assert report.artifact == "binary (compute, float32) built from 'table0' and 'w0'"
    assert (report.at, report.positions) == ("pe0", "arange:x:1")
    assert report.converted is None and report.found is None
    assert [c.name for c in report.checks] == ["y"] and report.checks[0].max_abs_err == 0
    assert report.bytes_before == model.stat().st_size
    assert report.bytes_after == len(out.read_bytes())
    grafted = onnx.load(out)
    (entry,) = [p for p in grafted.metadata_props if p.key.startswith("edgepe.graft.")]
    record = json.loads(entry.value)
    assert (record["at"], record["add"]) == ("pe0", False)
    assert (record["manifest"]["scheme"], record["manifest"]["max_len"]) == ("binary", 5)


def test_scheme_graft_int8_names_int8_and_no_check_writes_unproven(tmp_path):
    model = demo(tmp_path)
    report = graft(model, scheme="binary", quantize="int8", check=False,
                   out=tmp_path / "o.onnx")
    assert report.artifact == "binary (compute, int8) built from 'table0' and 'w0'"
    assert report.checks is None and report.lengths == [] and report.out == tmp_path / "o.onnx"
    assert "equivalence not checked (--no-check)" in str(report)


def test_scheme_graft_at_picks_one_of_several_and_refuses_a_wrong_one(tmp_path):
    model = demo(tmp_path, copies=2)
    with pytest.raises(BadParameterError) as info:
        graft(model, scheme="binary", check=False)
    assert str(info.value) == (f"2 'binary' PE subgraphs found in {str(model)!r} (at 'pe0', "
                               "'pe1'); graft one with --at TENSOR")
    with pytest.raises(BadParameterError) as info:
        graft(model, scheme="binary", at="y", check=False)
    assert str(info.value) == "no 'binary' PE makes tensor 'y'; found at 'pe0', 'pe1'"
    report = graft(model, scheme="binary", at="pe1", **FAST)
    assert report.at == "pe1" and report.artifact.endswith("from 'table1' and 'w1'")
    assert report and report.out is None  # no out: nothing written, the report says so


def test_scheme_graft_of_a_model_without_the_pe(tmp_path):
    model = tmp_path / "none.onnx"
    onnx.save(onnx.load(LLAMA), model)
    with pytest.raises(BadParameterError) as info:
        graft(model, scheme="binary")
    assert str(info.value) == (
        f"no 'binary' PE found in {str(model)!r}: looked for a constant bit table [.., L, "
        "n_bits(L)] sliced or gathered by position, then MatMul by a constant [n_bits, D] "
        "weight; pass --pe ARTIFACT --at TENSOR instead")


def test_an_existing_out_needs_force_and_the_model_is_never_replaced(tmp_path):
    model = demo(tmp_path)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old")
    with pytest.raises(OutputPathError):
        graft(model, scheme="binary", out=out, **FAST)
    assert out.read_bytes() == b"old"
    assert graft(model, scheme="binary", out=out, force=True, **FAST).out == out
    before = model.read_bytes()
    with pytest.raises(OutputPathError):
        graft(model, scheme="binary", out=model, force=True, **FAST)
    assert model.read_bytes() == before


def test_found_rope_report_and_its_record(tmp_path):
    out = tmp_path / "out.onnx"
    report = graft(LLAMA, max_len=16, out=out, **FAST)
    assert report.found.startswith("found rope (half layout, R=8, ")
    assert report.artifact == "rope (table, float32, 16 positions)"
    assert report.positions == "position_ids" and report.prefix == "edgepe_pe0/"
    assert report.lengths == ["1", "3", "3 (left pad 2)", "3+5", "1+8 (positions 15..15)",
                              "every position 0..15 (the replaced tensors)",
                              "positions 16, 17, 35, -1, -2, -16 (the grafted model refuses "
                              "them)"]
    assert all(report.checks) and len(report.checks) == 7
    record = json.loads(onnx.load(out).metadata_props[-1].value)
    assert record["max_len"] == 16 and "rope_lowering" not in record
    assert report.bytes_after == onnx.load(out).ByteSize()


@pytest.mark.parametrize(("lowering", "text", "op", "opset"), [
    ("ort", ", rotations fused into RotaryEmbedding x4", "com.microsoft.RotaryEmbedding", None),
    # the fixture is opset 18: the grafted model is converted up to 23
    ("rotary23", ", rotations fused into RotaryEmbedding (ONNX opset 23) x4, opset 18 -> 23",
     "RotaryEmbedding (ONNX opset 23)", "18 -> 23"),
])
def test_found_rope_lowered_names_the_op_count_and_opset(tmp_path, lowering, text, op, opset):
    out = tmp_path / "out.onnx"
    report = graft(LLAMA, max_len=16, rope_lowering=lowering, out=out, **FAST)
    assert report.artifact == f"rope (table, float32, 16 positions{text})"
    assert report.removed_nodes > 33  # the rotations' nodes too
    record = json.loads(onnx.load(out).metadata_props[-1].value)
    assert record["rope_lowering"] == {"op": op, "fused": 4, **({"opset": opset} if opset else {})}


def test_found_rope_sliced_names_its_slices():
    report = graft(LLAMA, max_len=16, mode="sliced", check=False)
    assert report.artifact.startswith("rope (sliced ") and "16 positions" in report.artifact
    assert report.artifact.split("(sliced ")[1].split(",")[0] == "4" or "," in report.artifact


def test_rope_lowering_of_a_model_whose_pe_is_not_rope():
    with pytest.raises(BadParameterError) as info:
        graft(GPT2, rope_lowering="ort", check=False)
    assert str(info.value) == ("--rope-lowering: the PE found is learned (table "
                               "'transformer.wpe.weight' [256, 32]), not RoPE")


def test_no_pe_found(tmp_path):
    model = demo(tmp_path)
    with pytest.raises(BadParameterError) as info:
        graft(model)
    assert str(info.value) == (
        f"no PE found in {str(model)!r}: looked for RoPE (Cos/Sin of float32(p) * w, any "
        "layout, one per base; or GPT-J's [sin | cos] table gathered by positions), multimodal "
        "RoPE (Qwen2-VL's three position streams), a position table (a constant [L, D] gathered "
        "by positions), a sinusoidal table (fairseq's or Marian's gathered by positions; "
        "Whisper's encoder's added whole), ALiBi (slopes times positions; MPT's constant bias) "
        "and T5's relative position bias (a table gathered by buckets of k - q); pass --pe "
        "ARTIFACT --at TENSOR or --scheme ID instead")


def test_no_pe_found_names_the_nodes_named_like_onnx_ops_of_another_domain(tmp_path):
    """(hgr) An op is (domain, op_type): graft reads no node of another domain as ONNX's op, and
    says so where it finds nothing."""
    model = onnx.load(demo(tmp_path))
    model.graph.node[-1].domain = "evil"  # the Identity making y
    path = tmp_path / "evil.onnx"
    onnx.save(model, path)
    with pytest.raises(BadParameterError) as info:
        graft(path)
    assert str(info.value).endswith(
        "(a table gathered by buckets of k - q); saw evil.Identity at 'y' (domain 'evil', another "
        "op than ONNX's Identity, not read as it); pass --pe ARTIFACT --at TENSOR or --scheme ID "
        "instead")


def test_a_model_with_data_beside_it_is_written_with_data_beside(tmp_path):
    model = tmp_path / "model.onnx"
    shutil.copyfile(GPT2, model)
    (tmp_path / "model.onnx.data").write_bytes(b"")  # came with external data: so does out
    out = tmp_path / "o" / "out.onnx"
    report = graft(model, check=False, out=out)
    data, = (tmp_path / "o").glob("out.onnx.*.data")  # OUT.<16 hex of its sha256>.data
    assert report.out == out and data.stat().st_size > 0
    assert data.name == f"out.onnx.{hashlib.sha256(data.read_bytes()).hexdigest()[:16]}.data"
    loaded = onnx.load(out)  # the data are found beside it
    assert loaded.graph.initializer and report.model.graph.node == loaded.graph.node
    with pytest.raises(OutputPathError):  # OUT exists now: only with force
        graft(model, check=False, out=tmp_path / "o" / "sub" / ".." / "out.onnx")


def test_write_model_inline_and_external_with_the_umask(tmp_path):
    model = onnx.load(GPT2)
    write_model(model, tmp_path / "a.onnx", external=False)
    assert onnx.load(tmp_path / "a.onnx") == model
    assert not (tmp_path / "a.onnx.data").exists()
    old = os.umask(0o027)
    try:
        write_model(model, tmp_path / "sub" / "b.onnx", external=True)
    finally:
        os.umask(old)
    data, = (tmp_path / "sub").glob("b.onnx.*.data")
    for name in ("b.onnx", data.name):
        assert (tmp_path / "sub" / name).stat().st_mode & 0o777 == 0o640
    # tensors of 1 kB and more are outside
    assert (tmp_path / "sub" / "b.onnx").stat().st_size < model.ByteSize() / 2
    loaded = onnx.load(tmp_path / "sub" / "b.onnx")  # reads OUT.data back in
    assert loaded.graph.node == model.graph.node
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in loaded.graph.initializer} == {
        t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["b.onnx", data.name]


def test_write_model_into_a_path_below_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError) as info:
        write_model(onnx.load(GPT2), tmp_path / "file" / "b.onnx", external=True)
    assert "\n" not in str(info.value) and "file" in str(info.value)


def _artifact(tmp_path):
    return exported(tmp_path / "pe.onnx")


def _demo_with(tmp_path, weight) -> Path:
    return demo(tmp_path, weight=weight)


def test_pe_graft_of_an_exported_artifact(tmp_path):
    pe, weight = _artifact(tmp_path)
    model = _demo_with(tmp_path, weight)
    out = tmp_path / "out.onnx"
    report = graft(model, pe=pe, at="pe0", positions="arange:x", out=out, **FAST)
    assert report and report.out == out
    assert report.artifact == f"binary (compute) from {str(pe)!r}"
    assert (report.at, report.positions, report.prefix) == ("pe0", "arange:x:1", "edgepe_pe0/")
    assert report.removed_nodes == 3 and report.converted is None  # Shape, Slice, MatMul
    assert report.bytes_before == model.stat().st_size and report.bytes_after == len(
        out.read_bytes())
    assert report.checks[0].max_abs_err == 0.0


def test_pe_graft_that_changes_the_outputs_writes_nothing(tmp_path):
    pe, weight = _artifact(tmp_path)
    model = _demo_with(tmp_path, weight + 1.0)  # not the artifact's projection
    out = tmp_path / "out.onnx"
    report = graft(model, pe=pe, at="pe0", positions="arange:x", out=out, **FAST)
    assert not report and report.out is None and not out.exists()
    assert report.checks[0].max_abs_err > report.checks[0].tolerance


def test_pe_graft_into_an_opset_17_model_names_the_conversion(tmp_path):
    pe, weight = _artifact(tmp_path)
    model = onnx.load(_demo_with(tmp_path, weight))
    model.opset_import[0].version = 17
    path = tmp_path / "m17.onnx"
    onnx.save(model, path)
    report = graft(path, pe=pe, at="pe0", positions="arange:x", **FAST)
    assert report.converted == "opset 17 -> 18" and report
    assert "the model was converted opset 17 -> 18" in str(report)


def test_found_graft_passes_check_config_quantize_and_mode_through(tmp_path):
    config = json.loads((DATA / "llama" / "config.json").read_text())
    unchecked = graft(LLAMA, max_len=16, check=False, hf_config=config)
    assert unchecked.checks is None and unchecked.lengths == []
    record = json.loads(unchecked.model.metadata_props[-1].value)
    assert record["hf_config"]["model_type"] == "llama" and record["max_len"] == 16
    # without --max-len the config's max_position_embeddings is the table's length
    assert json.loads(graft(LLAMA, check=False, hf_config=config).model.metadata_props[-1]
                      .value)["max_len"] == 256
    wrong = {**config, "rope_theta": 500000.0}
    with pytest.raises(BadParameterError, match="differs from edgepe's rope for this config"):
        graft(LLAMA, max_len=16, check=False, hf_config=wrong)
    int8 = graft(LLAMA, max_len=16, quantize="int8", mode="table", **FAST)
    assert int8.artifact == "rope (table, int8, 16 positions)" and int8
    assert json.loads(int8.model.metadata_props[-1].value)["quantize"] == "int8"


def test_pe_and_scheme_grafts_pass_their_lengths_and_never_replace_the_pe(tmp_path):
    pe, weight = _artifact(tmp_path)
    model = _demo_with(tmp_path, weight)
    report = graft(model, pe=pe, at="pe0", positions="arange:x", lengths=[2, 4])
    assert report.lengths[:2] == [2, 4]  # (prove lists the lengths it ran)
    assert graft(model, scheme="binary", lengths=[3]).lengths[0] == 3
    before = pe.read_bytes()
    with pytest.raises(OutputPathError):
        graft(model, pe=pe, at="pe0", positions="arange:x", out=pe, force=True, **FAST)
    assert pe.read_bytes() == before
