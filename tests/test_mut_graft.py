"""``graft``'s whole command (edgepe/graft/__init__.py), the parts tests/test_graft_entry.py
leaves open: one PE per input stream (a hand-built encoder-decoder: two position tables read by
two position inputs) with its report totals and its proof's bound and length, the proof's seed,
``--force`` on the found path, OPT's offset, MPT's PE without positions, GPT-J's interleaved
lowering, ``--pe`` with given positions, ``add``, a loosened manifest and a checkpoint, and
``write_model``'s folder, staging place, umask and external-data threshold (issue 33: the
mutation run of that module runs this file first; each test well under a second).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError, OutputPathError
from edgepe.graft import graft, graft_found, write_model
from edgepe.graft.find_hf import find_pe

DATA = Path(__file__).resolve().parent / "data" / "optimum"
LLAMA, OPT, MPT, GPTJ = (DATA / name / "model.onnx" for name in ("llama", "opt", "mpt", "gptj"))
ROWS = (6, 8)  # the encoder's table is the shorter one: the proof reaches its last row only


def _streams(tmp_path, second="decoder_position_ids", rows=ROWS) -> Path:
    """``y = x * (wpe_a[position_ids] + wpe_b[SECOND])``: an encoder-decoder's two position
    tables, one per input stream when ``second`` is another input than ``position_ids``."""
    rng = np.random.default_rng(0)
    tables = [numpy_helper.from_array(rng.standard_normal((r, 4)).astype(np.float32), n)
              for r, n in zip(rows, ("wpe_a", "wpe_b"), strict=True)]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["wpe_a", "position_ids"], ["a"]),
         helper.make_node("Gather", ["wpe_b", second], ["b"]),
         helper.make_node("Add", ["a", "b"], ["ab"]),
         helper.make_node("Mul", ["x", "ab"], ["y"])], "streams",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["B", "S"])
         for n in dict.fromkeys(["position_ids", second])]
        + [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 4])], tables)
    path = tmp_path / "streams.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _records(model) -> list[dict]:
    return [json.loads(p.value) for p in model.metadata_props
            if p.key.startswith("edgepe.graft.")]


# --- one PE per input stream --------------------------------------------------------------------


def test_one_pe_per_stream_each_replaced_and_the_report_sums_them(tmp_path):
    path = _streams(tmp_path)
    original = onnx.load(path)
    where = [f.where for f in find_pe(original)]
    out = tmp_path / "out.onnx"
    report = graft(path, out=out)
    assert report and report.out == out
    assert report.found == f"found learned x2, one per input stream: {where[0]}; {where[1]}"
    assert report.artifact.startswith("learned x2 (table, float32, ")
    assert (report.at, report.positions) == ("a; b", "position_ids, decoder_position_ids")
    assert report.prefix == "edgepe_pe0/, edgepe_pe1/"  # the second graft's first free prefix
    # the two Gathers and their tables go; each PE's nodes, tables and record come in
    tables = sum(t.ByteSize() for t in original.graph.initializer)
    gathers = sum(n.ByteSize() for n in original.graph.node if n.op_type == "Gather")
    assert report.removed_nodes == 2
    # (a removed node is counted with its output renamed PREFIX/replaced0: a few bytes more)
    assert tables + gathers < report.removed_bytes <= tables + gathers + 2 * 24
    grafted = onnx.load(out)
    assert report.model.SerializeToString() == grafted.SerializeToString()
    # the PEs' nodes: each output prefixed, but the two renamed to the tensors they replace
    pe = [n for n in grafted.graph.node
          if all(o.startswith("edgepe_pe") or o in ("a", "b") for o in n.output)]
    pe_inits = [t for t in grafted.graph.initializer if t.name.startswith("edgepe_pe")]
    assert {o for n in pe for o in n.output} >= {"a", "b"}
    assert {t.name.split("/")[0] for t in pe_inits} == {"edgepe_pe0", "edgepe_pe1"}
    assert report.pe_bytes == sum(n.ByteSize() for n in pe) + sum(t.ByteSize() for t in pe_inits)
    entries = [p for p in grafted.metadata_props if p.key.startswith("edgepe.graft.")]
    assert [p.key for p in entries] == ["edgepe.graft.0", "edgepe.graft.1"]
    assert report.metadata_bytes == sum(p.ByteSize() for p in entries)
    assert report.bytes_before == path.stat().st_size
    assert report.bytes_after == grafted.ByteSize()
    assert [r["table"] for r in _records(grafted)] == ["wpe_a", "wpe_b"]
    # proven up to the shorter table's last row (min over the streams), every output exact
    assert report.lengths[-1] == f"every position 0..{min(ROWS) - 1} (the replaced tensors)"
    assert [c.name for c in report.checks] == ["y", "a", "b"]
    assert all(c.max_abs_err == 0 for c in report.checks)
    # float tables: a replaced tensor is held to 4 ulp of its peak, no quantisation bound
    peak = {n: np.abs(numpy_helper.to_array(t)).max() for n, t in
            zip("ab", original.graph.initializer, strict=True)}
    for check in report.checks[1:]:
        assert check.tolerance == 4 * float(np.spacing(np.float32(peak[check.name])))


def test_one_pe_per_stream_int8_is_held_to_the_larger_bound(tmp_path):
    path = _streams(tmp_path)
    original = onnx.load(path)
    report = graft(path, quantize="int8", check=False)
    records = _records(report.model)
    assert report.artifact.startswith("learned x2 (table, int8, ")
    assert [r["quantize"] for r in records] == ["int8", "int8"]
    bound = max(r["quant"]["bound"] for r in records)
    assert bound > 0
    proven = graft(path, quantize="int8")
    assert proven
    peak = {n: np.abs(numpy_helper.to_array(t)).max() for n, t in
            zip("ab", original.graph.initializer, strict=True)}
    for check in proven.checks[1:]:  # both streams held to the larger of the two bounds
        assert check.tolerance == bound + 4 * float(np.spacing(np.float32(peak[check.name])))
        assert 0 < check.max_abs_err <= bound


def test_the_proof_draws_its_inputs_from_the_seed_default_0(tmp_path):
    """An int8 table times a random input: the output's error depends on the draw. The same seed
    gives the same errors (default 0, through ``graft`` and ``graft_found``); another, others."""
    path = _streams(tmp_path)

    def errors(**kwargs):
        return [c.max_abs_err for c in graft(path, quantize="int8", lengths=[3], **kwargs).checks]

    default = errors()
    assert default == errors(seed=0)
    assert errors(seed=1)[0] != default[0]
    assert [c.max_abs_err for c in graft_found(path, quantize="int8", lengths=[3]).checks] == \
        default


def test_two_pes_on_one_stream_or_with_a_rope_lowering_are_refused(tmp_path):
    path = _streams(tmp_path)
    where = "; ".join(f.describe() for f in find_pe(onnx.load(path)))
    with pytest.raises(BadParameterError) as info:
        graft(path, rope_lowering="ort", check=False)
    assert str(info.value) == (
        f"2 PE candidates in {str(path)!r}: {where}; graft one with --pe ARTIFACT --at TENSOR "
        "(one per input stream: graft replaces them all, without --rope-lowering)")
    one = _streams(tmp_path, second="position_ids")
    where = "; ".join(f.describe() for f in find_pe(onnx.load(one)))
    with pytest.raises(BadParameterError) as info:
        graft(one, check=False)
    assert str(info.value) == (f"2 PE candidates in {str(one)!r}: {where}; graft one with --pe "
                               "ARTIFACT --at TENSOR")


# --- the found path's options and fixtures ------------------------------------------------------


def test_found_graft_checks_by_default_and_replaces_out_only_with_force(tmp_path):
    path = _streams(tmp_path)
    out = tmp_path / "out.onnx"
    assert graft_found(path, lengths=[2]).checks is not None  # check=True unless told
    out.write_bytes(b"old")
    for call in (graft, graft_found):
        with pytest.raises(OutputPathError):
            call(path, out=out, check=False)
        assert out.read_bytes() == b"old"
    for call in (graft, graft_found):
        report = call(path, out=out, force=True, check=False)
        assert report.out == out and onnx.load(out).graph.node == report.model.graph.node
    data = tmp_path / "out.onnx.data"  # OUT's data beside it: replaced only with force too
    data.write_bytes(b"old")
    with pytest.raises(OutputPathError):
        graft(path, out=out, check=False)
    assert graft(path, out=out, force=True, check=False).out == out


@pytest.mark.parametrize("quantize", [None, "none"])
def test_found_graft_float_tables_by_default_and_with_quantize_none(quantize):
    report = graft_found(LLAMA, max_len=16, quantize=quantize, check=False)
    (record,) = _records(report.model)
    assert record["quantize"] == "none" and "quant" not in record
    assert report.artifact == "rope (table, float32, 16 positions)"


def test_found_graft_int8_through_graft_found():
    report = graft_found(LLAMA, max_len=16, quantize="int8", check=False)
    assert _records(report.model)[0]["quantize"] == "int8"
    assert report.artifact == "rope (table, int8, 16 positions)"


def test_opt_table_is_proven_up_to_its_rows_less_the_offset():
    """OPT gathers row ``position + 2`` of its 258-row table: positions reach 255, and the
    proof runs at every one of them, no further (row 258 does not exist)."""
    report = graft(OPT, lengths=[1])
    (record,) = _records(report.model)
    assert (record["max_len"], record["offset"]) == (258, 2)
    assert report and report.lengths[-1] == "every position 0..255 (the replaced tensors)"
    assert report.lengths[-2] == "1+255"  # the decode step at the last position


def test_a_pe_without_positions_is_reported_so():
    report = graft(MPT, check=False)
    assert report.positions == "none (a Range inside the PE)"
    assert report.found.startswith("found alibi (MPT bias constant ")


def test_gptj_interleaved_rotations_fused_counted_and_recorded(tmp_path):
    plain = graft(GPTJ, check=False)
    out = tmp_path / "out.onnx"
    lowered = graft(GPTJ, check=False, rope_lowering="ort", out=out)
    assert lowered.artifact == ("rope (table, float32, 256 positions, rotations fused into "
                                "RotaryEmbedding x4)")
    ops = [n.op_type for n in lowered.model.graph.node]
    assert ops.count("RotaryEmbedding") == 4 and "GatherElements" not in ops
    # the lowering's removals come on top of the PE's own: at least the net nodes it took out
    taken = len(plain.model.graph.node) - len(lowered.model.graph.node)
    assert lowered.removed_nodes - plain.removed_nodes >= taken > 0
    (entry,) = [p for p in onnx.load(out).metadata_props if p.key == "edgepe.graft.0"]
    record = json.loads(entry.value)
    assert record["rope_lowering"] == {"op": "com.microsoft.RotaryEmbedding", "fused": 4}
    assert entry.value == json.dumps(record, sort_keys=True)  # canonical, as every record


def test_llama_sliced_names_its_slice_widths():
    report = graft(LLAMA, max_len=256, mode="sliced", check=False)
    (record,) = _records(report.model)
    widths = record["slices"]
    assert len(widths) > 1 and sum(widths) == (256 - 1).bit_length()  # the bits of 0..255
    assert report.artifact == (f"rope (sliced {','.join(map(str, widths))}, float32, 256 "
                               "positions)")


def test_a_model_of_exactly_the_size_limit_is_written_inline(tmp_path, monkeypatch):
    """External data beside OUT only for a model over MODEL_BYTES_LIMIT (or one that came so)."""
    path = _streams(tmp_path, rows=(70, 80))  # tables of 1 kB and more: they go outside
    module = sys.modules["edgepe.graft"]  # (edgepe.graft is the function, edgepe's API)
    monkeypatch.setattr(module, "MODEL_BYTES_LIMIT", path.stat().st_size)
    out = tmp_path / "out.onnx"
    graft(path, out=out, check=False)
    assert not (tmp_path / "out.onnx.data").exists()
    monkeypatch.setattr(module, "MODEL_BYTES_LIMIT", path.stat().st_size - 1)
    graft(path, out=out, check=False, force=True)
    assert (tmp_path / "out.onnx.data").stat().st_size >= 70 * 4 * 4 + 80 * 4 * 4


def test_a_small_model_that_came_with_data_beside_it_is_written_whole(tmp_path):
    """No tensor of 1 kB: nothing goes outside, so no OUT.data (was an internal error: the data
    file onnx never wrote was renamed)."""
    path = _streams(tmp_path)
    (tmp_path / "streams.onnx.data").write_bytes(b"")  # came with external data
    out = tmp_path / "o" / "out.onnx"
    report = graft(path, out=out, check=False)
    assert report.out == out and sorted(p.name for p in out.parent.iterdir()) == ["out.onnx"]
    assert onnx.load(out) == report.model
