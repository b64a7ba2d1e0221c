"""graft with no PE given, on issue 40's families exported the simplest way: the PE found by what it
computes (``edgepe.graft.discover``), whatever builds its positions inside the graph.

Each family is a tiny random-weight model from a transformers 5.24 config object
(``tests/_hf_models.py``: ``config``, ``export_simple``), exported once per session
(``torch.onnx.export(model, (input_ids,), path, dynamo=True)``, ``use_cache=False``, a dynamic
batch and length; ``dynamo=False`` for the TorchScript form), grafted, then run against the original
ONNX and against torch at several batch sizes, lengths and (where the family counts pad tokens)
left padding. The default suite holds one family per discovery path (a table gathered by a
``Range`` of ``input_ids``' length: GPT-2; by a ``CumSum`` of the non-pad mask plus an offset:
RoBERTa; ALiBi's slopes ``[H, 1, 1]`` times a ``Range``: Bloom); the rest is ``slow``.

The synthetic models at the end hold the value checks to their contract (no export) and
detection to linear time at issue 41's 15,000 Gathers.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

import _hf_models as hf  # noqa: E402

from edgepe.contract.errors import BadParameterError  # noqa: E402
from edgepe.graft import find_pe, graft_found  # noqa: E402

discover = importlib.import_module("edgepe.graft.discover")

# Grafted against the original ONNX: the same float32 graph but for the PE's nodes, which graft's
# tables reproduce bit for bit (cos/sin of the model's own float32 angle, correctly rounded;
# onnxruntime's Cos/Sin are within 1-2 ulp of that) -- 64 ulp of the largest logit, graft's own
# proof's FLOAT_ULPS, holds every family here (measured: 0 for tables and ALiBi).
ULPS = 64
# Against torch: onnxruntime's fused kernels sum in another order than torch's (measured on these
# models up to 3e-6 of logits of size ~1); 1e-4 relative is far below any PE error (a wrong row
# moves logits by ~1e-1).
TORCH_RTOL = 1e-4


def _session(model):
    import onnxruntime as ort

    data = model if isinstance(model, bytes) else (
        model.SerializeToString() if isinstance(model, onnx.ModelProto) else
        onnx.load(str(model)).SerializeToString())
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


_CACHE: dict = {}


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """``(family, dynamo) -> (model.onnx, torch module, grafted report)``, each made once."""

    def get(family: str, dynamo: bool = True):
        key = (family, dynamo)
        if key not in _CACHE:
            folder = tmp_path_factory.mktemp(f"{family}-{'dynamo' if dynamo else 'ts'}")
            path, module = hf.export_simple(family, folder, dynamo=dynamo)
            _CACHE[key] = (path, module, folder)
        return _CACHE[key]

    return get


def _ids(batch: int, seq: int, pad: int = 0, pad_id: int = 1, seed: int = 0):
    ids = np.random.default_rng(seed).integers(3, hf.VOCAB, size=(batch, seq)).astype(np.int64)
    ids[-1, :pad] = pad_id  # left padding in the last row
    return ids


def _compare(path: Path, grafted: Path, module, cases, pad_id: int = 1) -> None:
    """The grafted model against the original ONNX (``ULPS``) and torch (``TORCH_RTOL``) on
    ``(batch, seq, pad)`` cases."""
    import torch

    original, mine = _session(path), _session(grafted)
    for batch, seq, pad in cases:
        ids = _ids(batch, seq, pad, pad_id)
        want = original.run(None, {"input_ids": ids})[0]
        got = mine.run(None, {"input_ids": ids})[0]
        peak = float(np.abs(want).max())
        assert np.abs(got - want).max() <= ULPS * np.spacing(np.float32(peak)), (batch, seq, pad)
        with torch.no_grad():
            ref = module(torch.from_numpy(ids)).numpy()
        assert np.abs(got - ref).max() <= TORCH_RTOL * max(1.0, peak), (batch, seq, pad)


def _graft(path: Path, **options):
    out = path.with_name("grafted.onnx")
    report = graft_found(path, out, force=True, **options)
    assert report.checks and all(c.passed for c in report.checks), report.checks
    return report, out


def test_gpt2_exported_with_input_ids_alone_grafts_its_table_gathered_by_a_range(exported):
    """find_pe's shape rule refused this one (its Range is of input_ids' length)."""
    path, module, _ = exported("gpt2")
    assert not discover.confirm(onnx.load(str(path)), find_pe(onnx.load(str(path))))[0]
    report, out = _graft(path)
    assert report.found.startswith("found learned (table 'lm.transformer.wpe.weight' [256, 32])")
    assert "by Range" in report.found
    _compare(path, out, module, [(1, 1, 0), (3, 5, 0), (2, 17, 0)])


def test_roberta_positions_cumsum_of_the_non_pad_mask_plus_padding_idx(exported):
    path, module, _ = exported("roberta")
    report, out = _graft(path)
    assert report.found.startswith(
        "found learned (table 'lm.embeddings.position_embeddings.weight' [128, 32], positions "
        "+ offset 2)"), report.found
    assert "by CumSum" in report.found
    # RoBERTa's positions count the non-pad tokens: left padding moves them, in both models
    _compare(path, out, module, [(1, 4, 0), (3, 9, 0), (2, 9, 3)], pad_id=1)


def test_bloom_alibi_of_slopes_h11_times_a_range_grafts(exported):
    path, module, _ = exported("bloom")
    report, out = _graft(path)
    assert report.found.startswith("found alibi (slopes 'unsqueeze_1' [4, 1, 1]) at Mul"), \
        report.found
    _compare(path, out, module, [(1, 1, 0), (3, 6, 0), (2, 13, 0)])


@pytest.mark.slow
@pytest.mark.parametrize("family, start", [
    ("gptj", "found rope (GPT-J [sin | cos] table 'val_"),
    ("xglm", "found sinusoidal (fairseq/XGLM sinusoidal [sin | cos] table "
             "'lm.model.embed_positions.weights' [258, 32], positions + offset 2)"),
    ("bert", "found learned (table 'lm.embeddings.position_embeddings.weight' [128, 32]) at "
             "Gather 'embedding_2', positions 'slice_1'"),
    ("cohere", "found rope (interleaved layout, R=8, angle 'repeat_interleave' = float32(p) * w"),
    ("gemma3", "found rope x2, each replaced: (half layout, R=8, angle 'cat_"),
    ("modernbert", "found rope x2, each replaced: (half layout, R=8, angle 'cat"),
    ("whisper", "found learned (table 'val_160' [32, 32]) at GatherND"),
    ("qwen2_vl", "found mrope (mrope_section [1, 1, 2], R=8, angle 'mul_49' = float32(p) * w "
                 "over three position streams"),  # (issue 40 point 3: tests/test_graft_mrope.py)
])
def test_family_exported_with_input_ids_alone_grafts(exported, family, start):
    path, module, _ = exported(family)
    report, out = _graft(path, max_len=64 if family in ("cohere", "gemma3", "modernbert",
                                                        "qwen2_vl") else None)
    assert report.found.startswith(start), report.found
    if family in ("gemma3", "modernbert"):  # both bases (in either order), each replaced
        other = "base 1e+06)" if family == "gemma3" else "base 160000)"
        assert "base 10000)" in report.found and other in report.found, report.found
    if family == "whisper":  # the encoder's constant table replaced too (issue 40 point 2)
        assert report.found.endswith(
            "; and sinusoidal (Whisper's encoder sinusoidal table 'embedding' [16, 32], a "
            "constant added whole: base 10000, frequencies fairseq, layout half) at Add "
            "'add_28', positions 0..15 (its rows)"), report.found
        assert {c.name for c in report.checks} >= {"logits", "embedding"}
        assert "embedding" not in {t.name for t in onnx.load(str(out)).graph.initializer}
    model = onnx.load(str(out))
    assert not any(n.op_type in ("Cos", "Sin") for n in model.graph.node)
    longest = 31 if family == "whisper" else 40
    _compare(path, out, module, [(1, 1, 0), (3, 7, 0), (2, longest, 0)],
             pad_id=0 if family == "bert" else 1)


@pytest.mark.slow
@pytest.mark.parametrize("family, words", [
    ("falcon-alibi", "ALiBi (slopes times positions; MPT's constant bias) and T5's relative "
                     "position bias (a table gathered by buckets of k - q); saw ALiBi-like slopes "
                     "'_to_copy' [4, 1] in bfloat16"),
])
def test_family_refused_in_one_line_naming_what_was_seen(exported, family, words):
    path, _, _ = exported(family)
    with pytest.raises(BadParameterError) as err:
        graft_found(path, path.with_name("never.onnx"))
    line = str(err.value)
    assert "\n" not in line and words in line, line
    assert not path.with_name("never.onnx").exists()


@pytest.mark.slow
def test_t5_relative_bias_grafts_as_t5_bias_not_read_as_learned(exported):
    """Before issue 40 find_pe took T5's bucket ids for positions ("learned", 8 rows); now each
    stack's bias is found by its values as t5-bias and its buckets replaced by edgepe's integer
    ones, no Log (issue 40 point 3; tests/test_graft_t5.py holds the fit to its contract)."""
    path, module, _ = exported("t5", dynamo=False)  # (torch 2.13's dynamo fails on T5)
    report, out = _graft(path)
    assert report.found.startswith(
        "found t5-bias x2, each replaced: (bidirectional, num_buckets 8, max_distance 16 "
        "(13..18 give these buckets); "), report.found
    assert "; (causal, num_buckets 8, max_distance 16; " in report.found
    assert not any(n.op_type == "Log" for n in onnx.load(str(out)).graph.node)
    _compare(path, out, module, [(1, 1, 0), (3, 7, 0), (2, 40, 0)])


@pytest.mark.slow
def test_torchscript_form_with_input_ids_alone_grafts(exported):
    """BERT by TorchScript (``dynamo=False``) with ``input_ids`` alone: its positions buffer's
    Slice as the TorchScript exporter writes it. (GPT-2 and Cohere do not export so: transformers
    5.24's mask code calls ``aten::diff``, which TorchScript has no ONNX for; they are exported
    with a mask and positions below.)"""
    path, module, _ = exported("bert", dynamo=False)
    report, out = _graft(path)
    assert report.found.startswith("found learned (table 'lm.embeddings.position_embeddings."
                                   "weight' [128, 32]) at Gather"), report.found
    _compare(path, out, module, [(1, 1, 0), (2, 9, 0)], pad_id=0)


@pytest.mark.slow
@pytest.mark.parametrize("family, start", [
    ("gpt2", "found learned (table 'lm.transformer.wpe.weight' [256, 32])"),
])
def test_torchscript_form_with_mask_and_positions_grafts(tmp_path, family, start):
    """``hf.export_torchscript`` (input_ids, attention_mask, position_ids), grafted, against the
    original ONNX and torch with left padding and positions at an offset. (Cohere's TorchScript
    export does not run at another length than its example's: a Reshape of the trace's shapes.)"""
    import torch

    path = hf.export_torchscript(family, tmp_path)
    report, out = _graft(path)
    assert report.found.startswith(start), report.found
    original, mine = _session(path), _session(out)
    lm = hf.model(family)
    for batch, seq, pad, shift in [(1, 1, 0, 5), (3, 7, 0, 0), (2, 9, 3, 0), (2, 6, 0, 40)]:
        ids = _ids(batch, seq)
        mask = np.ones((batch, seq), np.int64)
        mask[-1, :pad] = 0
        positions = np.broadcast_to(np.arange(seq) + shift, (batch, seq)).copy()
        positions[-1] = np.maximum(np.cumsum(mask[-1]) - 1, 0) + shift
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        want, got = original.run(None, feeds)[0], mine.run(None, feeds)[0]
        peak = float(np.abs(want).max())
        assert np.abs(got - want).max() <= ULPS * np.spacing(np.float32(peak))
        with torch.no_grad():
            ref = lm(**{k: torch.from_numpy(v) for k, v in feeds.items()},
                     use_cache=False).logits.numpy()
        rows = mask.astype(bool)  # padded tokens' logits are the model's own business
        assert np.abs(got - ref)[rows].max() <= TORCH_RTOL * max(1.0, peak)


# --- the value checks, on hand-built graphs -------------------------------------------------


def _rope_model(w: np.ndarray, offset: int = 0, positions_input: bool = False):
    """``logits = x * cos(float32(p) * w) + x * sin(..)``, ``p`` a Range of ``input_ids``' length
    (plus ``offset``) or the ``position_ids`` input, ``x`` the token embedding."""
    k = w.size
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"])]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 64 * k, dtype=np.float32)
                                     .reshape(64, k), "emb"),
             numpy_helper.from_array(w.astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"])]
    if positions_input:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                    ["B", "S"]))
        nodes.append(helper.make_node("Unsqueeze", ["position_ids", "last"], ["p"]))
    else:
        inits += [numpy_helper.from_array(np.array(offset, np.int64), "start"),
                  numpy_helper.from_array(np.array(1, np.int64), "one"),
                  numpy_helper.from_array(np.array([1], np.int64), "axis1")]
        nodes += [helper.make_node("Shape", ["input_ids"], ["shape"], start=1, end=2),
                  helper.make_node("Squeeze", ["shape"], ["length"]),
                  helper.make_node("Add", ["length", "start"], ["end"]),
                  helper.make_node("Range", ["start", "end", "one"], ["r"]),
                  helper.make_node("Unsqueeze", ["r", "last"], ["p"])]
    nodes += [helper.make_node("Cast", ["p"], ["pf"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["pf", "w"], ["angle"]),
              helper.make_node("Cos", ["angle"], ["cos"]),
              helper.make_node("Sin", ["angle"], ["sin"]),
              helper.make_node("Mul", ["x", "cos"], ["xc"]),
              helper.make_node("Mul", ["x", "sin"], ["xs"]),
              helper.make_node("Add", ["xc", "xs"], ["logits"])]
    graph = helper.make_graph(nodes, "rope", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                             ["B", "S", k])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("layout", ["half", "interleaved", "caches"])
def test_rope_angle_fitted_from_values_any_layout_and_rotary_dim(layout):
    h = (10000.0 ** (-np.arange(3) / 3)).astype(np.float32)  # R = 6: no power-of-two width
    w = {"half": np.concatenate([h, h]), "interleaved": np.repeat(h, 2), "caches": h}[layout]
    found, seen = discover.discover(_rope_model(w))
    assert not seen and len(found) == 1
    f = found[0]
    assert (f.family, f.params["layout"], f.params["rotary_dim"]) == ("rope", layout, 6)
    assert f.replaces == ["cos", "sin"] and f.positions == "p"
    # half: the halves stored once; else the angle's own columns
    assert np.array_equal(f.params["inv_freq"], h if layout == "half" else w)
    assert ("columns" in f.params) == (layout != "half")
    assert "base 10000" in f.where


def test_rope_angle_that_is_no_product_of_positions_is_seen_not_found():
    model = _rope_model(np.array([1.0, 0.5], np.float32))
    for node in model.graph.node:  # angle = p * w + 0.25: a shifted angle is no RoPE
        if node.op_type == "Mul" and list(node.input) == ["pf", "w"]:
            node.output[0] = "angle0"
    at = [n.output[0] for n in model.graph.node].index("angle0") + 1
    model.graph.node.insert(at, helper.make_node("Add", ["angle0", "quarter"], ["angle"]))
    model.graph.initializer.append(numpy_helper.from_array(np.float32(0.25), "quarter"))
    found, seen = discover.discover(model)
    assert not found
    assert seen == ["a Cos/Sin of 'angle' [6, 2] that is no single product float32(p) * w of "
                    "a positions tensor"]


def test_rope_from_position_ids_input_is_checked_at_shifted_positions():
    w = np.array([1.0, 0.1], np.float32)
    found, _ = discover.discover(_rope_model(w, positions_input=True))
    assert [f.positions for f in found] == ["p"] and found[0].params["layout"] == "caches"


def test_start_of_consecutive_rows_flattened_or_not():
    assert discover._start(np.array([[2, 3, 4], [2, 3, 4]]), 3) == 2
    assert discover._start(np.array([2, 3, 4, 2, 3, 4]), 3) == 2  # XGLM's flat [B * S]
    assert discover._start(np.array([[[5], [6], [7]]]), 3) == 5  # GatherND's [.., 1]
    assert discover._start(np.array([[0, 1, 2, 3, 4, 5, 6, 7]]), 3) == 0  # an encoder's [P + S]
    assert discover._start(np.array([[0, 1, 2], [0, 1, 3]]), 3) is None
    assert discover._start(np.array([[0, 2, 4], [0, 2, 4]]), 3) is None  # step 2
    assert discover._start(np.array([[4, 3, 2]]), 3) is None  # step -1
    assert discover._start(np.array([[1, 1, 1]]), 3) is None  # BERT's token types
    assert discover._start(np.array([[0.0, 1, 2]]), 3) is None  # floats index nothing
    assert discover._start(np.array([7]), 1) is None  # one value proves nothing


def test_encoder_and_decoder_tables_of_marian_are_both_positions():
    """confirm() keeps each stack's table: the encoder's positions span ``past + seq`` tokens,
    the decoder's the ``seq`` new ones after ``past``."""
    runs = [({"enc": np.arange(6)[None].repeat(2, 0), "dec": np.arange(6)[None].repeat(2, 0)},
             {}, np.arange(6)[None].repeat(2, 0))] * 2 + [
        ({"enc": np.arange(8)[None].repeat(2, 0), "dec": np.arange(5, 8)[None].repeat(2, 0) + 2},
         {}, np.arange(5, 8)[None].repeat(2, 0))]
    assert discover._positions_offset("enc", runs) == 0
    assert discover._positions_offset("dec", runs) == 0
    shifted = [({"p": e + 2}, {}, e) for (_, _, e) in runs]
    assert discover._positions_offset("p", shifted) == 2
    moved = [({"p": runs[0][2]}, {}, runs[0][2]), ({"p": runs[0][2] + 1}, {}, runs[0][2]),
             runs[2]]
    assert discover._positions_offset("p", moved) is None  # changed with the token ids


def test_layout_names_half_interleaved_and_caches():
    h = np.array([1.0, 0.5], np.float32)
    assert discover._layout(np.concatenate([h, h])) == ("half", 4)
    assert discover._layout(np.repeat(h, 2)) == ("interleaved", 4)
    assert discover._layout(h) == ("caches", 4)
    assert discover._layout(np.array([1.0, 1.0], np.float32)) == ("half", 2)


def test_base_read_off_the_frequencies():
    h = (500000.0 ** (-2 * np.arange(4) / 8)).astype(np.float32).astype(np.float64)
    assert discover._base(h, 8) == pytest.approx(500000.0, rel=1e-5)
    assert discover._base(h * 2, 8) is None  # scaled: no base^(-2i/R)
    assert discover._base(h[:1], 2) is None


def _gathers_model(count: int, by_positions: bool):
    """``count`` Gathers of constant ``[8, 4]`` tables (issue 41's 15,000), each by the token
    ids (or by a Range of their length: positions), summed."""
    inits = [numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4) / 32, "t")]
    nodes = []
    index = "input_ids"
    if by_positions:
        inits += [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                  numpy_helper.from_array(np.array(1, np.int64), "one")]
        nodes += [helper.make_node("Shape", ["input_ids"], ["shape"], start=1, end=2),
                  helper.make_node("Squeeze", ["shape"], ["length"]),
                  helper.make_node("Range", ["zero", "length", "one"], ["index"])]
        index = "index"
    total = None
    for i in range(count):
        nodes.append(helper.make_node("Gather", ["t", index], [f"g{i}"]))
        if total is not None:
            nodes.append(helper.make_node("Add", [total, f"g{i}"], [f"s{i}"]))
        total = f"s{i}" if total is not None else f"g{i}"
    graph = helper.make_graph(
        nodes, "gathers", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                         ["B", "S"])],
        [helper.make_tensor_value_info(total, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_detection_is_linear_at_15000_gathers():
    """Issue 41: 15,000 Gathers made detection quadratic (> 90 s). 15,000 take at most 40x the
    time of 1,500 (linear: 10x; quadratic: 100x), measured in the same process after a warm-up
    (the first search imports onnx's helpers and onnxruntime)."""
    from edgepe.graft import detect

    def search(count):
        model = _gathers_model(count, by_positions=False)
        start = time.perf_counter()
        assert not find_pe(model)
        found, _ = discover.discover(model)
        assert detect(model, "binary") == [] and found == []
        return time.perf_counter() - start

    search(100)
    small, large = search(1500), search(15000)
    assert large < 30 and large < 40 * max(small, 0.02), (small, large)


def test_tables_gathered_by_positions_are_each_found():
    found, seen = discover.discover(_gathers_model(3, by_positions=True))
    assert [f.replaces for f in found] == [["g0"], ["g1"], ["g2"]] and not seen
    assert all(f.family == "learned" and f.params["offset"] == 0 for f in found)
    assert not discover.accepted_together(found)  # tables on one stream: not all the model's


def _two_ropes(w1: np.ndarray, w2: np.ndarray):
    """``_rope_model(w1)`` with a second rotation of the same positions by ``w2`` added in."""
    model = _rope_model(w1)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(w2.astype(np.float32), "w2"))
    graph.output[0].name = "logits2"
    for node in graph.node:
        if node.output[0] == "logits":
            node.output[0] = "first"
    graph.node.extend([helper.make_node("Mul", ["pf", "w2"], ["angle2"]),
                       helper.make_node("Cos", ["angle2"], ["cos2"]),
                       helper.make_node("Sin", ["angle2"], ["sin2"]),
                       helper.make_node("Mul", ["first", "cos2"], ["fc"]),
                       helper.make_node("Mul", ["first", "sin2"], ["fs"]),
                       helper.make_node("Add", ["fc", "fs"], ["logits2"])])
    return model


def test_two_ropes_of_different_bases_are_each_replaced(tmp_path):
    """Gemma3's and ModernBERT's local and global RoPE, in small: graft replaces both."""
    h = np.array([1.0, 0.1], np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_two_ropes(np.concatenate([h, h]), np.repeat(h / 4, 2)), path)
    report = graft_found(path, tmp_path / "out.onnx", max_len=32)
    assert report.found.startswith("found rope x2, each replaced: (half layout, R=4")
    assert "(interleaved layout, R=4" in report.found
    assert all(c.passed for c in report.checks) and len(report.checks) == 5
    assert not any(n.op_type in ("Cos", "Sin") for n in onnx.load(tmp_path / "out.onnx").graph.node)


def test_two_ropes_of_the_same_frequencies_are_refused(tmp_path):
    h = np.array([1.0, 0.1], np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_two_ropes(h, h), path)
    with pytest.raises(BadParameterError, match=r"^2 PE candidates in .*: rope \(caches layout"):
        graft_found(path, tmp_path / "out.onnx", max_len=32)
    assert not (tmp_path / "out.onnx").exists()


def test_rope_columns_table_size_and_sliced_mode():
    """An interleaved angle goes in as its own columns: both tables' K values per position
    count against the size limit, and --mode sliced (half-layout cos/sin) is refused."""
    from edgepe.graft import build_found

    h = np.array([1.0, 0.1], np.float32)
    model = _rope_model(np.repeat(h, 2))
    (found,), _ = discover.discover(model)
    limit = 16 * 2 * 4 * 4  # 16 positions, two tables of K = 4 float32 columns
    pe, record = build_found(model, found, 16, table_bytes_limit=limit)
    assert record["layout"] == "interleaved" and record["rotary_dim"] == 4
    out = _session(pe).run(None, {pe.graph.input[0].name: np.arange(16)[:, None]})
    angle = np.arange(16, dtype=np.float32)[:, None] * np.repeat(h, 2)
    assert np.array_equal(out[0], np.cos(angle.astype(np.float64)).astype(np.float32))
    with pytest.raises(BadParameterError, match="over graft's 511 B limit"):
        build_found(model, found, 16, table_bytes_limit=limit - 1)
    with pytest.raises(BadParameterError, match="this model's angle is interleaved: it goes in "
                                                "as tables"):
        build_found(model, found, 16, mode="sliced")


def test_alibi_with_the_models_own_slopes_shape():
    """Bloom without a mask input: slopes [H, 1, 1] times positions [S] is [H, 1, S]."""
    from edgepe.graft.find_hf import _alibi_shaped
    from edgepe.schemes.alibi import slopes

    mine = slopes(4).numpy().reshape(4, 1, 1)
    pe = _alibi_shaped(mine, 18, ["seq"], TensorProto.INT64)
    dims = [d.dim_value or d.dim_param for d in pe.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [4, 1, "seq"]
    (bias,) = _session(pe).run(None, {"positions": np.arange(5)})
    assert np.array_equal(bias, mine * np.arange(5, dtype=np.float32))
    pe = _alibi_shaped(mine.reshape(4, 1), 18, ["batch", 1, "seq"], TensorProto.INT32)
    dims = [d.dim_value or d.dim_param for d in pe.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 4, "seq"]


def test_a_table_find_pe_matched_is_dropped_when_its_index_is_no_positions():
    """confirm(): find_pe takes a table gathered by anything made of ``position_ids`` for a
    position table; ``position_ids // 2`` is not positions by its values."""
    inits = [numpy_helper.from_array(np.ones((8, 4), np.float32), "table"),
             numpy_helper.from_array(np.array(2, np.int64), "two")]
    nodes = [helper.make_node("Div", ["position_ids", "two"], ["half"]),
             helper.make_node("Gather", ["table", "half"], ["rows"])]
    graph = helper.make_graph(
        nodes, "halves", [helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                        ["B", "S"])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["B", "S", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    found = find_pe(model)
    assert [f.family for f in found] == ["learned"]
    kept, seen = discover.confirm(model, found)
    assert kept == [] and seen == ["a constant table 'table' [8, 4] gathered by 'half' [2, 6], "
                                   "not positions (values [0, 1, 2])"]
    model.graph.node[0].op_type = "Identity"  # positions themselves: kept
    del model.graph.node[0].input[1]
    kept, seen = discover.confirm(model, find_pe(model))
    assert [f.replaces for f in kept] == [["rows"]] and seen == []
