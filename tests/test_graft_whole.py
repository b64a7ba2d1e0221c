"""Issue 40 point 2: Whisper's encoder sinusoidal table, a constant ``[L, D]`` added whole to the
encoder's embeddings (no positions gather it), found by its values (``discover.whole_sinusoids``)
and replaced by edgepe's ``sinusoidal`` (base 10000, frequencies fairseq, layout half, float32
recipe), as a table or ``--mode sliced``, beside the decoder's PE.

Hand-built ONNX models (no torch export): the table is transformers' own ``sinusoids(L, D)``; the
tiny Whisper export (``tests/_hf_models.py``) is ``test_graft_families.py``'s, in the slow suite,
and (hgr) the table gathered by an unfolded ``Range`` of constants: hand-built here, and a real
TorchScript export with that Range put back (slow, at the end).
"""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.graft import graft_found
from edgepe.graft.discover import WHISPER_PARAMS, _is_whisper_sinusoidal, whole_sinusoids
from edgepe.schemes import build, resolve

discover = importlib.import_module("edgepe.graft.discover")


def _sinusoids(length: int, width: int) -> np.ndarray:
    """Whisper's encoder table, float32: transformers 5.24's ``modeling_whisper.sinusoids``
    line for line (importing it takes ~6 s; ``test_edgepe_sinusoidal_is_transformers_sinusoids
    _bit_for_bit`` requires the two equal)."""
    log_timescale_increment = math.log(10000) / (width // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(width // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1).numpy()


def _marian(length: int, width: int) -> np.ndarray:
    """The near miss: ``[sin | cos]`` with Marian's ``w_i = 10000^(-2i/D)`` (a ``D/2``
    denominator where Whisper's is ``D/2 - 1``)."""
    w = 10000.0 ** (-2.0 * np.arange(width // 2) / width)
    angle = np.arange(length)[:, None] * w[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def _encoder(table: np.ndarray, form: str = "constant") -> onnx.ModelProto:
    """``y = MatMul(x + T, W)``, ``x [b, L, D]`` an input: ``T`` the constant itself, or
    (``form``) ``Gather(T, 0 .. L - 1)`` as a dynamo export keeps a large one, or ``Slice(T, 0,
    L)``."""
    length, width = table.shape
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(table, "T"),
             numpy_helper.from_array(rng.standard_normal((width, 4)).astype(np.float32), "W")]
    nodes = [helper.make_node("Add", ["x", "pe"], ["h"]),
             helper.make_node("MatMul", ["h", "W"], ["y"])]
    if form == "constant":
        nodes[0].input[1] = "T"
    elif form == "gather":
        inits.append(numpy_helper.from_array(np.arange(length, dtype=np.int64), "arange"))
        nodes.insert(0, helper.make_node("Gather", ["T", "arange"], ["pe"], axis=0))
    else:
        inits += [numpy_helper.from_array(np.asarray([v], np.int64), n)
                  for n, v in (("zero", 0), ("end", length))]
        nodes.insert(0, helper.make_node("Slice", ["T", "zero", "end", "zero"], ["pe"]))
    graph = helper.make_graph(
        nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["batch", length, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", length, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _ranged(limit: int, start: int = 0, delta: int = 1, domain: str = "") -> list:
    """``arange = Range(start, limit, delta)`` of ``Constant`` nodes, as an export that does not
    fold ``torch.arange(L)`` writes it (hgr)."""
    consts = [helper.make_node("Constant", [], [f"arange_{k}"],
                               value=numpy_helper.from_array(np.asarray(v, np.int64)))
              for k, v in (("start", start), ("limit", limit), ("delta", delta))]
    return [*consts, helper.make_node("Range", [c.output[0] for c in consts], ["arange"],
                                      domain=domain)]


def _encoder_decoder(table: np.ndarray, ranged: dict | None = None) -> onnx.ModelProto:
    """Whisper's two stacks in miniature: the encoder's ``x + T`` (``T`` added whole) and the
    decoder's ``E[input_ids] + P[arange(S)]`` (a learned table gathered by positions from the
    ids' length), joined: ``y = MatMul(dec + mean over L of enc, W)``. ``ranged``: the encoder
    adds ``T[arange]`` instead, ``arange = _ranged(**ranged)`` (an unfolded
    ``embed_positions(torch.arange(L))``)."""
    length, width = table.shape
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(table, "T"),
             numpy_helper.from_array(rng.standard_normal((8, width)).astype(np.float32), "E"),
             numpy_helper.from_array(rng.standard_normal((24, width)).astype(np.float32), "P"),
             numpy_helper.from_array(rng.standard_normal((width, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray(1, np.int64), "one"),
             numpy_helper.from_array(np.asarray([0], np.int64), "axis0"),
             numpy_helper.from_array(np.asarray([1], np.int64), "axis1")]
    nodes = [helper.make_node("Add", ["x", "T"], ["enc"]),
             helper.make_node("ReduceMean", ["enc", "axis1"], ["ctx"], keepdims=1),
             helper.make_node("Gather", ["E", "input_ids"], ["tok"]),
             helper.make_node("Shape", ["input_ids"], ["seq1"], start=1, end=2),
             helper.make_node("Squeeze", ["seq1", "axis0"], ["seq"]),
             helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
             helper.make_node("Gather", ["P", "positions"], ["pos"]),
             helper.make_node("Add", ["tok", "pos"], ["dec"]),
             helper.make_node("Add", ["dec", "ctx"], ["h"]),
             helper.make_node("MatMul", ["h", "W"], ["logits"])]
    if ranged is not None:
        nodes[0].input[1] = "rows"
        nodes[:0] = [*_ranged(**ranged), helper.make_node("Gather", ["T", "arange"], ["rows"])]
    graph = helper.make_graph(
        nodes, "whisper", [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", length, width]),
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 8])],
        inits)
    domain = (ranged or {}).get("domain")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)] + (
        [helper.make_opsetid(domain, 1)] if domain else []))
    model.ir_version = 8
    return model


def _save(model, tmp_path, name="model.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _records(path) -> dict:
    model = onnx.load(str(path))
    return {p.key: json.loads(p.value) for p in model.metadata_props
            if p.key.startswith("edgepe.graft.")}


def _run(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("length, width", [(12, 8), (16, 32), (1500, 384)])
def test_edgepe_sinusoidal_is_transformers_sinusoids_bit_for_bit(length, width):
    """The parameters graft records (fairseq's ``D/2 - 1`` denominator, [sin | cos] halves,
    float32 recipe) rebuild Whisper's table exactly, up to whisper-tiny's 1500 x 384; with
    Marian's ``D/2`` denominator it is not Whisper's."""
    from transformers.models.whisper.modeling_whisper import sinusoids

    theirs = sinusoids(length, width).numpy()
    assert np.array_equal(_sinusoids(length, width), theirs)  # the tests' copy of it
    mine = build(resolve("sinusoidal", length, d_model=width, params=WHISPER_PARAMS)).encode(
        torch.arange(length)).numpy()
    assert mine.dtype == np.float32 and np.array_equal(mine, theirs)
    assert _is_whisper_sinusoidal(theirs)
    assert not _is_whisper_sinusoidal(_marian(length, width))


@pytest.mark.parametrize("form", ["constant", "gather", "slice"])
def test_a_whisper_table_added_whole_is_found_with_edgepe_params(form):
    table = _sinusoids(12, 8)
    found, seen = whole_sinusoids(_encoder(table, form))
    assert seen == [] and len(found) == 1
    f = found[0]
    assert (f.family, f.positions, f.replaces) == ("sinusoidal", "", ["T" if form == "constant"
                                                                      else "pe"])
    assert {k: f.params[k] for k in WHISPER_PARAMS} == {
        "base": 10000.0, "layout": "half", "frequencies": "fairseq", "freq_dtype": "float32"}
    assert f.params["whole"] and f.params["table_name"] == "T" and f.params["add"] == "h"
    assert np.array_equal(f.params["table"], table)
    assert f.where.startswith("(Whisper's encoder sinusoidal table 'T' [12, 8], " + (
        "a constant" if form == "constant" else "gathered by the constant 0..11 'arange'"
        if form == "gather" else "sliced to its rows 0..11 by 'pe'"))
    assert f.where.endswith("at Add 'h', positions 0..11 (its rows)")


def test_graft_replaces_the_table_by_an_equal_one_edgepe_rebuilt(tmp_path):
    path = _save(_encoder(_sinusoids(12, 8), "gather"), tmp_path)
    out = tmp_path / "out.onnx"
    report = graft_found(path, out)
    assert report and report.found == (
        "found sinusoidal (Whisper's encoder sinusoidal table 'T' [12, 8], gathered by the "
        "constant 0..11 'arange' added whole: base 10000, frequencies fairseq, layout half) at "
        "Add 'h', positions 0..11 (its rows)")
    assert report.artifact == "sinusoidal (table, float32, 12 positions)"
    assert report.positions == "none (a Range inside the PE)"
    assert report.lengths[-1] == "every position 0..11 (the replaced tensors)"
    assert [(c.name, c.max_abs_err) for c in report.checks] == [("y", 0.0), ("pe", 0.0)]
    grafted = onnx.load(str(out))
    assert not {"T", "arange"} & {t.name for t in grafted.graph.initializer}
    record = _records(out)["edgepe.graft.0"]
    assert {k: record[k] for k in (*WHISPER_PARAMS, "scheme", "mode", "max_len", "table",
                                   "table_distance", "proof_bound", "replaces")} == {
        **WHISPER_PARAMS, "scheme": "sinusoidal", "mode": "table", "max_len": 12, "table": "T",
        "table_distance": 0.0, "proof_bound": 0.0, "replaces": ["pe"]}
    assert (record["manifest"]["scheme"], record["manifest"]["params"]) == (
        "sinusoidal", WHISPER_PARAMS)
    x = np.random.default_rng(2).standard_normal((3, 12, 8)).astype(np.float32)
    assert np.array_equal(_run(out, {"x": x}), _run(path, {"x": x}))


@pytest.mark.parametrize("opset, lowering", [(18, "bitwise"), (17, "trunc")])
def test_sliced_leaves_no_table_of_positions_and_no_trig(tmp_path, opset, lowering):
    """128 positions, sliced 4,3: 16 + 8 rows of cos/sin per slot instead of 128 rows; within
    the sliced bound of the float64 definition plus the model's own distance from it. Below
    opset 18 (no BitShift) the slices come from float arithmetic, the model's opset kept."""
    table = _sinusoids(128, 16)
    model = _encoder(table)
    model.opset_import[0].version = opset
    path = _save(model, tmp_path)
    out = tmp_path / "out.onnx"
    report = graft_found(path, out, mode="sliced")
    assert report and report.artifact == "sinusoidal (sliced 4,3, float32, 128 positions)"
    grafted = onnx.load(str(out))
    assert not any(n.op_type in ("Sin", "Cos") for n in grafted.graph.node)
    sizes = [int(np.prod(t.dims)) for t in grafted.graph.initializer]
    assert max(sizes) < table.size // 4, sizes
    assert grafted.opset_import[0].version == opset
    record = _records(out)["edgepe.graft.0"]
    assert record["manifest"]["lowering"] == lowering
    assert record["slices"] == [4, 3] and record["proof_bound"] == pytest.approx(
        record["bound"] + record["definition_distance"], rel=1e-12)
    assert 0 < record["definition_distance"] < 128 * 2.0**-23
    check = {c.name: c for c in report.checks}["T"]
    assert 0 < check.max_abs_err <= record["proof_bound"]


def test_a_table_added_whole_that_is_not_whispers_is_kept_and_named(tmp_path):
    path = _save(_encoder(_marian(12, 8)), tmp_path)
    with pytest.raises(BadParameterError) as err:
        graft_found(path, tmp_path / "never.onnx")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"no PE found in {str(path)!r}: ")
    assert "; saw a constant table 'T' [12, 8] added whole at Add 'h', not Whisper's " \
           "sinusoids (kept); " in line, line
    assert not (tmp_path / "never.onnx").exists()
    # an additive mask added whole is neither found nor said
    mask = np.where(np.tril(np.ones((12, 8))) > 0, 0.0, -1e9).astype(np.float32)
    assert whole_sinusoids(_encoder(mask)) == ([], [])


def test_the_encoders_table_and_the_decoders_are_both_replaced(tmp_path):
    path = _save(_encoder_decoder(_sinusoids(12, 8)), tmp_path)
    out = tmp_path / "out.onnx"
    report = graft_found(path, out, mode="sliced")
    assert report, str(report)
    assert report.found.startswith("found learned (table 'P' [24, 8]) at Gather 'pos'")
    assert report.found.endswith(
        "; and sinusoidal (Whisper's encoder sinusoidal table 'T' [12, 8], a constant added "
        "whole: base 10000, frequencies fairseq, layout half) at Add 'enc', positions 0..11 "
        "(its rows)")
    # --mode sliced slices the encoder's sinusoids; the decoder's learned rows stay a table
    assert report.artifact == ("learned (table, float32, 24 positions) and sinusoidal "
                               "(sliced 4, float32, 12 positions, added whole)")
    assert report.at == "pos; T"
    assert report.positions == "positions, 0..11 (a Range inside the PE)"
    # the decoder's rows proven at all its 24 positions (the encoder's 12 rows bound nothing:
    # they are all compared whatever the sequence), each held to its own bound: the decoder's
    # exact table to 4 ulp, the encoder's sliced sinusoids to the sliced bound on top
    assert "every position 0..23 (the replaced tensors)" in report.lengths
    checks = {c.name: c for c in report.checks}
    table = next(numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
                 if t.name == "P")
    assert checks["pos"].max_abs_err == 0
    assert checks["pos"].tolerance == 4 * float(np.spacing(np.float32(np.abs(table).max())))
    assert checks["T"].tolerance > _records(out)["edgepe.graft.1"]["proof_bound"] > 0
    records = _records(out)
    assert [records[k]["scheme"] for k in sorted(records)] == ["learned", "sinusoidal"]
    assert sorted(records) == ["edgepe.graft.0", "edgepe.graft.1"]
    assert [c.name for c in report.checks] == ["logits", "pos", "T"]
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 12, 8)).astype(np.float32),
             "input_ids": rng.integers(0, 8, (2, 5))}
    want = _run(path, feeds)
    assert np.allclose(_run(out, feeds), want, rtol=0, atol=report.checks[0].tolerance)
    with pytest.raises(BadParameterError, match="--rope-lowering fuses one RoPE; "):
        graft_found(path, tmp_path / "never.onnx", rope_lowering="ort")


def test_int8_rows_are_held_to_their_quantisation_bound(tmp_path):
    """edgepe's int8 graph (per-channel DequantizeLinear) from opset 19; below it one line."""
    model = _encoder(_sinusoids(12, 8))
    model.opset_import[0].version = 18
    with pytest.raises(BadParameterError, match=r"^--quantize int8: edgepe's int8 sinusoidal "
                       r"graph for Whisper's encoder table 'T' needs opset 19, the model is opset "
                       r"18; graft it without --quantize \(or --mode sliced: no table\)$"):
        graft_found(_save(model, tmp_path, "m18.onnx"), tmp_path / "never.onnx",
                    quantize="int8")
    assert not (tmp_path / "never.onnx").exists()
    model.opset_import[0].version = 19
    path = _save(model, tmp_path)
    report = graft_found(path, tmp_path / "out.onnx", quantize="int8")
    record = _records(tmp_path / "out.onnx")["edgepe.graft.0"]
    assert report.artifact == "sinusoidal (table, int8, 12 positions)"
    assert record["quantize"] == "int8" and record["table_distance"] == 0.0
    assert 0 < record["quant"]["bound"] == record["proof_bound"] < 2.0**-7
    check = {c.name: c for c in report.checks}["T"]
    assert 0 < check.max_abs_err <= record["proof_bound"] < check.tolerance


def test_a_mode_the_table_cannot_take_is_refused_in_one_line(tmp_path):
    path = _save(_encoder(_sinusoids(12, 8)), tmp_path)
    with pytest.raises(BadParameterError, match=r"^--mode 'compute': Whisper's encoder table "
                       r"goes in as a table or sliced$"):
        graft_found(path, tmp_path / "never.onnx", mode="compute")
    assert not (tmp_path / "never.onnx").exists()


# --- the table gathered by an unfolded Range of constants (hgr) --------------------------------


def test_a_table_gathered_by_an_unfolded_range_of_constants_is_added_whole(tmp_path):
    """Before hgr both tables were candidates, the encoder's a "learned" one gathered by
    positions from no input ("2 PE candidates ..."; with the decoder's own read another way,
    the encoder's table alone was grafted as learned and the decoder's left). The Range of
    constants is the table's rows 0..L-1: Whisper's table, added whole, replaced by edgepe's
    sinusoidal beside the decoder's learned rows, both proven exact, the Range gone with it."""
    path = _save(_encoder_decoder(_sinusoids(12, 8), {"limit": 12}), tmp_path)
    out = tmp_path / "out.onnx"
    report = graft_found(path, out)
    assert report.found == (
        "found learned (table 'P' [24, 8]) at Gather 'pos', positions 'positions' (from "
        "'input_ids' by Range); and sinusoidal (Whisper's encoder sinusoidal table 'T' [12, 8], "
        "gathered by Range 0..11 'arange' added whole: base 10000, frequencies fairseq, layout "
        "half) at Add 'enc', positions 0..11 (its rows)"), report.found
    assert report.artifact == ("learned (table, float32, 24 positions) and sinusoidal (table, "
                               "float32, 12 positions, added whole)")
    assert report.at == "pos; rows"
    assert [(c.name, c.max_abs_err) for c in report.checks] == [
        ("logits", 0.0), ("pos", 0.0), ("rows", 0.0)]
    grafted = onnx.load(str(out))
    assert not {"T", "P"} & {t.name for t in grafted.graph.initializer}
    assert not {"arange", "arange_limit"} & {o for n in grafted.graph.node for o in n.output}
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 12, 8)).astype(np.float32),
             "input_ids": rng.integers(0, 8, (2, 5))}
    assert np.array_equal(_run(out, feeds), _run(path, feeds))


@pytest.mark.parametrize("ranged, why", [
    ({"start": 1, "limit": 13}, "rows 1..12, not 0..11"),
    ({"limit": 24, "delta": 2}, "every second row"),
    ({"limit": 12, "domain": "com.microsoft"}, "com.microsoft's Range, not read as ONNX's"),
])
def test_a_range_that_is_not_the_tables_rows_from_0_is_no_whole_table(ranged, why):
    assert whole_sinusoids(_encoder_decoder(_sinusoids(12, 8), ranged)) == ([], []), why


def test_another_table_gathered_by_a_range_of_constants_is_left_to_the_gathered_search():
    """Not Whisper's, a table added whole is said and kept; gathered by a Range, its rows are
    positions by their values, the table a learned one for find_pe and discover (not "kept")."""
    assert whole_sinusoids(_encoder_decoder(_marian(12, 8))) == ([], [
        "a constant table 'T' [12, 8] added whole at Add 'enc', not Whisper's sinusoids (kept)"])
    assert whole_sinusoids(_encoder_decoder(_marian(12, 8), {"limit": 12})) == ([], [])


@pytest.mark.parametrize("ends, values", [
    ((0, 12, 1), list(range(12))),
    ((3, 0, -1), [3, 2, 1]),
    ((0, 13, 1), None),        # more rows than the table's 12
    ((0, 2**62, 1), None),     # counted, never made
    ((0, 12, 0), None),
    ((5, 5, 1), None),
])
def test_a_constant_range_is_counted_before_it_is_made(ends, values):
    nodes = _ranged(ends[1], ends[0], ends[2])
    consts = discover._constants(helper.make_graph(nodes, "r", [], []))
    makers = {o: n for n in nodes for o in n.output}
    got = discover._constant_range("arange", makers, consts, 12)
    assert (None if got is None else got.tolist()) == values
    assert discover._constant_range("arange_limit", makers, consts, 12) is None  # no Range
    assert discover._constant_range("arange", makers, {}, 12) is None  # ends not constant


# --- the real thing: a tiny Whisper exported by TorchScript, its Range put back ----------------


@pytest.mark.slow
def test_a_whisper_export_with_its_encoder_range_unfolded_grafts_both_tables(tmp_path):
    """WhisperForConditionalGeneration (tests/_hf_models.py's tiny config, random weights)
    exported by TorchScript (``dynamo=False``; with ``decoder_attention_mask`` given, so that
    transformers' packed-sequence check, ``aten::diff``, which TorchScript cannot export, is not
    traced; ``do_constant_folding=False`` so that ``Gather(T, arange)`` stays). No exporter keeps
    ``torch.arange(16)`` a Range (TorchScript traces it as a Constant, dynamo folds the whole
    Gather), so that Constant is turned back into ``Range(0, 16, 1)`` of Constants with
    onnx.helper: the form an unfolded export has. graft finds the decoder's learned table and
    the encoder's sinusoids, replaces both, proves them, and the logits match the original
    ONNX (64 ulp) and torch (1e-4 relative) at several batch sizes and lengths."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import _hf_models as hf

    torch.manual_seed(hf.SEED)
    import transformers as tf

    lm = tf.WhisperForConditionalGeneration(hf.config("whisper")).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask):
            features = torch.ones(input_ids.shape[0], 8, 32) * 0.5
            return self.lm(input_features=features, decoder_input_ids=input_ids,
                           decoder_attention_mask=attention_mask, use_cache=False).logits

    module = Logits().eval()
    ids = torch.randint(3, hf.VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "model.onnx"
    torch.onnx.export(module, (ids, torch.ones_like(ids)), str(path), dynamo=False,
                      opset_version=18, do_constant_folding=False,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_axes={n: {0: "batch", 1: "seq"}
                                    for n in ("input_ids", "attention_mask")})
    model = onnx.load(str(path))
    table = "lm.model.encoder.embed_positions.weight"
    (gather,) = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] == table]
    index = gather.input[1]
    (constant,) = [n for n in model.graph.node if list(n.output) == [index]]
    assert np.array_equal(numpy_helper.to_array(constant.attribute[0].t), np.arange(16))
    at = list(model.graph.node).index(constant)
    model.graph.node.remove(constant)
    for k, node in enumerate(_ranged(16)):
        node.output[:] = [index if o == "arange" else o for o in node.output]
        model.graph.node.insert(at + k, node)
    onnx.checker.check_model(model, full_check=True)
    path = _save(model, tmp_path, "ranged.onnx")
    out = tmp_path / "out.onnx"
    report = graft_found(path, out)
    assert report and report.found.startswith(
        "found learned (table 'lm.model.decoder.embed_positions.weight' [32, 32]) at Gather "), \
        report.found
    assert report.found.endswith(
        f"; and sinusoidal (Whisper's encoder sinusoidal table '{table}' [16, 32], gathered by "
        f"Range 0..15 {index!r} added whole: base 10000, frequencies fairseq, layout half) at "
        "Add '/lm/model/encoder/Add_2_output_0', positions 0..15 (its rows)"), report.found
    assert {c.name for c in report.checks} >= {"logits", gather.output[0]}
    assert all(c.passed for c in report.checks)
    assert not {table, "lm.model.decoder.embed_positions.weight"} & {
        t.name for t in onnx.load(str(out)).graph.initializer}
    record = json.loads(next(p.value for p in onnx.load(str(out)).metadata_props
                             if p.key == "edgepe.graft.1"))
    assert (record["scheme"], record["table_distance"]) == ("sinusoidal", 0.0)
    for batch, seq in ((1, 1), (3, 7), (2, 31)):
        ids = np.random.default_rng(seq).integers(3, hf.VOCAB, (batch, seq))
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        want, got = _run(path, feeds), _run(out, feeds)
        peak = float(np.abs(want).max())
        assert np.abs(got - want).max() <= 64 * np.spacing(np.float32(peak)), (batch, seq)
        with torch.no_grad():
            ref = module(*(torch.from_numpy(v) for v in feeds.values())).numpy()
        assert np.abs(got - ref).max() <= 1e-4 * max(1.0, peak), (batch, seq)
