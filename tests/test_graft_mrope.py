"""graft on multimodal RoPE (Qwen2-VL's mrope, issue 40 point 3): found by its values (the
angle over three position streams, each cos/sin column's stream and slot read off the model's own
selection), spliced with no Sin/Cos, proven with the streams distinct.

The default suite builds the model by hand (no torch export): Qwen2-VL's recomposition as its
dynamo export writes it (``Split`` of the last axis by ``mrope_section``, a ``Gather`` of stream
``j mod 3`` per part, ``Concat``, the halves concatenated) in front of a rotate-half rotation, for
sections nobody tuned graft to; a stream or section read wrong fails the proof. ``slow``: a tiny
Qwen2-VL text model (transformers 5.24, random weights, head_dim 32, mrope_section [4, 6, 6])
exported once with its ``position_ids [3, B, S]`` input, grafted, and run against the original
ONNX and torch with vision-like positions.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

import _hf_models as hf  # noqa: E402

from edgepe.contract.errors import BadParameterError  # noqa: E402
from edgepe.graft import graft_found  # noqa: E402
from edgepe.graft.discover import discover  # noqa: E402
from edgepe.graft.mrope import build, prove_streams, section  # noqa: E402
from edgepe.graft.prove import prove_found  # noqa: E402
from edgepe.graft.splice import splice_found  # noqa: E402

# Grafted against the original: the same graph but for cos/sin, which graft's tables hold
# correctly rounded from the model's own float32 angle (onnxruntime's Cos/Sin: within 1-2 ulp of
# that), times q: a few ulp of the output; 64 ulp of the largest, graft's own proof's FLOAT_ULPS.
ULPS = 64


def _model(mrope_section, positions_input: bool = True, mix: bool = False,
           cast_first: bool = False, interleave: bool = False,
           shift: bool = False) -> onnx.ModelProto:
    """``x [B, S, R], (position_ids [3, B, S]) -> y``: rotate-half RoPE of ``x`` (the input
    ``inputs_embeds``: a name graft's proof sizes as ``[batch, seq, ..]``) by Qwen2-VL's
    cos/sin (module doc). Without ``positions_input`` the positions are ``Range`` of ``x``'s
    length, the same in all three streams (a text-only export); ``mix``: the sin's streams added
    instead of selected (no mrope); ``cast_first``: the positions cast to float before their
    trailing axis is added (the angle's integer positions are ``[3, B, S]`` then);
    ``interleave``: Qwen3-VL's ``apply_interleaved_mrope`` instead (stream 0's columns, then
    ``freqs[..., d:3 n_d:3] = freq[d, ..., d:3 n_d:3]`` for d = 1, 2 by ``ScatterElements`` of
    indices expanded to the rows' shape, as torch's export writes a slice assignment);
    ``shift``: the angle ``p w + 1/4`` (no product of positions)."""
    import torch

    k = sum(mrope_section)
    r = 2 * k
    # transformers' compute_default_rope_parameters, on float32 tensors (torch's pow)
    w = (1.0 / (10000.0 ** (torch.arange(0, r, 2, dtype=torch.float) / r))).numpy()
    inits = [numpy_helper.from_array(w, "inv_freq"),
             numpy_helper.from_array(np.asarray(mrope_section, np.int64), "sections"),
             numpy_helper.from_array(np.asarray([-1], np.int64), "last"),
             numpy_helper.from_array(np.asarray([0], np.int64), "first"),
             numpy_helper.from_array(np.asarray([3], np.int64), "three"),
             numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray(1, np.int64), "one"),
             numpy_helper.from_array(np.asarray([k], np.int64), "k"),
             numpy_helper.from_array(np.asarray([r], np.int64), "r")]
    inits += [numpy_helper.from_array(np.asarray(j % 3, np.int64), f"stream{j}")
              for j in range(len(mrope_section))]
    x = helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "seq", r])
    inputs, nodes = [x], []
    if positions_input:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                    [3, "batch", "seq"]))
    else:
        nodes += [helper.make_node("Shape", ["inputs_embeds"], ["batch_1"], start=0, end=1),
                  helper.make_node("Shape", ["inputs_embeds"], ["seq_1"], start=1, end=2),
                  helper.make_node("Squeeze", ["seq_1", "first"], ["seq"]),
                  helper.make_node("Range", ["zero", "seq", "one"], ["arange"]),
                  helper.make_node("Concat", ["three", "batch_1", "seq_1"], ["streams_shape"],
                                   axis=0),
                  helper.make_node("Expand", ["arange", "streams_shape"], ["position_ids"])]
    if cast_first:
        nodes += [helper.make_node("Cast", ["position_ids"], ["p_flat"], to=TensorProto.FLOAT),
                  helper.make_node("Unsqueeze", ["p_flat", "last"], ["p_float"])]
    else:
        nodes += [helper.make_node("Unsqueeze", ["position_ids", "last"], ["p"]),
                  helper.make_node("Cast", ["p"], ["p_float"], to=TensorProto.FLOAT)]
    inits.append(numpy_helper.from_array(np.asarray(0.25 if shift else 0.0, np.float32),
                                         "angle_shift"))
    nodes += [helper.make_node("Mul", ["p_float", "inv_freq"], ["angle_raw"]),
              helper.make_node("Add", ["angle_raw", "angle_shift"], ["angle"]),
              helper.make_node("Cos", ["angle"], ["cos3"]),
              helper.make_node("Sin", ["angle"], ["sin3"])]
    for t in ("cos", "sin"):
        parts = [f"{t}_part{j}" for j in range(len(mrope_section))]
        if interleave:
            nodes.append(helper.make_node("Gather", [f"{t}3", "zero"], [f"{t}_t"], axis=0))
            sel = f"{t}_t"
            for d in (1, 2):
                cols = f"{t}_cols{d}"
                inits.append(numpy_helper.from_array(
                    np.arange(d, 3 * mrope_section[d], 3, dtype=np.int64), cols))
                nodes += [helper.make_node("Gather", [f"{t}3", f"stream{d}"], [f"{t}_s{d}"],
                                           axis=0),
                          helper.make_node("Gather", [f"{t}_s{d}", cols], [f"{t}_u{d}"], axis=-1),
                          helper.make_node("Shape", [f"{t}_u{d}"], [f"{t}_u{d}_shape"]),
                          helper.make_node("Expand", [cols, f"{t}_u{d}_shape"], [f"{t}_i{d}"]),
                          helper.make_node("ScatterElements", [sel, f"{t}_i{d}", f"{t}_u{d}"],
                                           [f"{t}_w{d}"], axis=-1)]
                sel = f"{t}_w{d}"
        elif mix and t == "sin":
            nodes.append(helper.make_node("ReduceSum", [f"{t}3", "first"], [f"{t}_sel"],
                                          keepdims=0))
            nodes.append(helper.make_node("Slice", [f"{t}_sel", "first", "k", "last"],
                                          [f"{t}_sel_k"]))
            sel = f"{t}_sel_k"
        else:
            nodes.append(helper.make_node("Split", [f"{t}3", "sections"], parts, axis=-1))
            nodes += [helper.make_node("Gather", [part, f"stream{j}"], [f"{t}_pick{j}"], axis=0)
                      for j, part in enumerate(parts)]
            nodes.append(helper.make_node("Concat", [f"{t}_pick{j}" for j in range(len(parts))],
                                          [f"{t}_sel"], axis=-1))
            sel = f"{t}_sel"
        nodes.append(helper.make_node("Concat", [sel, sel], [t], axis=-1))
    nodes += [helper.make_node("Identity", ["inputs_embeds"], ["x"]),
              helper.make_node("Slice", ["x", "first", "k", "last"], ["x1"]),
              helper.make_node("Slice", ["x", "k", "r", "last"], ["x2"]),
              helper.make_node("Neg", ["x2"], ["neg_x2"]),
              helper.make_node("Concat", ["neg_x2", "x1"], ["rotated"], axis=-1),
              helper.make_node("Mul", ["x", "cos"], ["x_cos"]),
              helper.make_node("Mul", ["rotated", "sin"], ["x_sin"]),
              helper.make_node("Add", ["x_cos", "x_sin"], ["y"])]
    graph = helper.make_graph(nodes, "mrope", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             ["batch", "seq", r])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("mrope_section, words", [
    ((2, 1, 3), "mrope_section [2, 1, 3]"),
    ((1, 2, 1, 2), "4 sections cycling t, h, w, [3, 2, 1] slots each"),
    ((4, 6, 6), "mrope_section [4, 6, 6]")], ids=["2-1-3", "four-sections", "4-6-6"])
def test_mrope_found_with_its_section_and_grafted_without_trig(tmp_path, mrope_section, words):
    path = tmp_path / "model.onnx"
    onnx.save(_model(mrope_section), path)
    report = graft_found(path, tmp_path / "out.onnx", max_len=32)
    assert report, report.checks
    assert report.found.startswith(f"found mrope ({words}, R={2 * sum(mrope_section)}, angle "
                                   "'angle'"), report.found
    assert "distinct, and equal, position streams at every position 0..31" in str(report)
    grafted = onnx.load(str(tmp_path / "out.onnx"))
    assert not {"Cos", "Sin"} & {n.op_type for n in grafted.graph.node}
    original, mine = (ort.InferenceSession(m.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
                      for m in (_model(mrope_section), grafted))
    rng = np.random.default_rng(1)
    for batch, seq in [(1, 1), (3, 9), (2, 32)]:
        x = rng.standard_normal((batch, seq, 2 * sum(mrope_section))).astype(np.float32)
        positions = rng.integers(0, 32, size=(3, batch, seq))  # three streams, every one differs
        feeds = {"inputs_embeds": x, "position_ids": positions}
        want, got = original.run(None, feeds)[0], mine.run(None, feeds)[0]
        peak = float(np.abs(want).max())
        assert np.abs(got - want).max() <= ULPS * np.spacing(np.float32(peak)), (batch, seq)


def test_the_default_4096_positions_are_proven_stream_by_stream(tmp_path):
    """No --max-len: graft's default 4096 positions, every one in the distinct-streams proof (its
    runs once sized every axis of the positions tensor by the length: 4096^4 int64, a
    MemoryError)."""
    path = tmp_path / "model.onnx"
    onnx.save(_model((2, 1, 3), positions_input=False), path)
    report = graft_found(path, tmp_path / "out.onnx")
    assert report, report.checks
    assert "three distinct, and equal, position streams at every position 0..4095" in \
        str(report)


def _wrong(found, streams):
    """``found`` with its columns' streams replaced: what a misread selection would splice."""
    params = {**found.params, "streams": np.asarray(streams, np.int64)}
    return dataclasses.replace(found, params=params)


def _splice(model, found):
    pe, record = build(model, found, 32)
    outputs = [o.name for o in pe.graph.output]
    return splice_found(model, pe, dict(zip(outputs, found.replaces, strict=True)),
                        found.positions, record)


@pytest.mark.parametrize("positions_input", [True, False], ids=["position_ids", "in-graph"])
def test_a_stream_read_wrong_fails_the_proof(positions_input):
    """The found section spliced passes; the same with two sections' streams swapped fails:
    graft's whole-model proof where position_ids is an input (fed three different streams),
    the distinct-streams proof from the positions tensor where it is not (the model's own
    positions are then equal in all streams, and only that proof sees a wrong stream)."""
    model = _model((2, 1, 3), positions_input)
    (found,), _ = discover(model)
    assert found.family == "mrope" and found.params["mrope_section"] == [2, 1, 3]
    assert found.params["streams"].tolist() == [0, 0, 1, 2, 2, 2] * 2
    assert found.params["slots"].tolist() == list(range(6)) * 2
    right = _splice(model, found)
    swapped = _wrong(found, [1, 1, 0, 2, 2, 2] * 2)
    wrong = _splice(model, swapped)
    assert all(c.passed for c in prove_streams(model, right.model, found, 32)[1])
    assert not all(c.passed for c in prove_streams(model, wrong.model, swapped, 32)[1])
    _, checks = prove_found(model, wrong, found.replaces, 32)
    assert all(c.passed for c in checks) is not positions_input, checks


def test_mrope_text_only_positions_made_in_the_graph_graft(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_model((1, 1, 2), positions_input=False), path)
    report = graft_found(path, tmp_path / "out.onnx", max_len=16, mode="sliced")
    assert report and report.found.startswith("found mrope (mrope_section [1, 1, 2], R=8")
    assert "positions 'p' (from 'inputs_embeds' by Range)" in report.found, report.found
    assert report.artifact.startswith("mrope (sliced")
    grafted = onnx.load(str(tmp_path / "out.onnx"))
    assert not {"Cos", "Sin"} & {n.op_type for n in grafted.graph.node}


def test_qwen3_vl_interleaved_streams_by_scatter_graft(tmp_path):
    """Qwen3-VL's interleaved mrope (sections 6, 5, 5: t h w t h w .. t), written by scatters
    over stream 0's columns: the same selection read column by column (a tiny Qwen3-VL text
    export grafts so too: 7.15e-7 of logits, measured)."""
    path = tmp_path / "model.onnx"
    onnx.save(_model((6, 5, 5), interleave=True), path)
    (found,), _ = discover(onnx.load(str(path)))
    assert found.params["streams"].tolist() == ([0, 1, 2] * 5 + [0]) * 2
    report = graft_found(path, tmp_path / "out.onnx", max_len=32)
    assert report, report.checks
    assert report.found.startswith("found mrope (16 sections cycling t, h, w, [6, 5, 5] slots "
                                   "each, R=32"), report.found
    grafted = onnx.load(str(tmp_path / "out.onnx"))
    assert not {"Cos", "Sin"} & {n.op_type for n in grafted.graph.node}


@pytest.mark.parametrize("mode, quantize, tolerance", [
    ("table", "int8", 0.035), ("sliced", "none", 1e-5)])
def test_positions_without_a_trailing_axis_graft_in_every_mode(tmp_path, mode, quantize,
                                                               tolerance):
    """The angle's integer positions ``position_ids [3, B, S]`` itself (cast, then unsqueezed):
    the PE takes them as they are; int8 tables and sliced cos/sin each within the proof's
    tolerance of ``y`` (int8: twice the measured gain times the tables' bound; sliced: its
    bound), so a wrong slot or stream (errors ~1) fails."""
    path = tmp_path / "model.onnx"
    onnx.save(_model((2, 1, 3), cast_first=True), path)
    report = graft_found(path, tmp_path / "out.onnx", max_len=32, mode=mode, quantize=quantize)
    assert report, report.checks
    assert report.found.endswith("positions from input 'position_ids'"), report.found
    assert report.artifact.startswith(f"mrope ({mode}")
    assert "int8" in report.artifact if quantize == "int8" else "float32" in report.artifact
    y = next(c for c in report.checks if c.name == "y")
    assert y.tolerance <= tolerance, y


def test_from_hf_config_must_be_the_models_section_and_frequencies(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_model((2, 1, 3)), path)
    config = {"model_type": "qwen2_vl", "hidden_size": 24, "num_attention_heads": 2,
              "max_position_embeddings": 32,
              "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                  "mrope_section": [2, 1, 3]}}
    report = graft_found(path, tmp_path / "out.onnx", hf_config=config)
    assert report and "32 positions" in report.artifact
    for bad, words in [({"mrope_section": [1, 2, 3]}, "--from-hf-config's mrope_section "
                        "[1, 2, 3] is not the model's: graft read [2, 1, 3] off its selection"),
                       ({"rope_theta": 20000.0}, "the model's inv_freq 'angle' [6] differs from "
                        "edgepe's mrope for this config ([6])")]:
        other = {**config, "rope_parameters": {**config["rope_parameters"], **bad}}
        with pytest.raises(BadParameterError) as err:
            graft_found(path, tmp_path / "never.onnx", hf_config=other)
        assert words in str(err.value), err.value
    assert not (tmp_path / "never.onnx").exists()


@pytest.mark.parametrize("how, words", [
    ("mix", "a RoPE angle 'angle' [3, 2, 6, 4] over three position streams 'p' [3, 2, 6, 1] "
            "(multimodal RoPE), but 'sin3' is read by ReduceSum 'sin_sel', not only selected "
            "from"),
    ("shift", "a Cos/Sin of 'angle' [3, 2, 6, 4] that is no single product float32(p) * w of a "
              "positions tensor (positions 'p' hold three streams: multimodal RoPE, mrope, which "
              "graft splices where its angle is float32(p) * w of them)")])
def test_what_is_not_mrope_s_selection_is_refused_naming_multimodal_rope(tmp_path, how, words):
    path = tmp_path / "model.onnx"
    onnx.save(_model((1, 1, 2), **{how: True}), path)
    with pytest.raises(BadParameterError) as err:
        graft_found(path, tmp_path / "never.onnx", max_len=16)
    line = str(err.value)
    assert "\n" not in line and words in line, line
    assert not (tmp_path / "never.onnx").exists()


@pytest.mark.parametrize("streams, slots, expected", [
    ([0, 1, 2, 2] * 2, [0, 1, 2, 3] * 2, [1, 1, 2]),  # the tests' tiny Qwen2-VL
    ([0] * 16 + [1] * 24 + [2] * 24, list(range(64)), None),  # not [sel | sel]
    (([0] * 16 + [1] * 24 + [2] * 24) * 2, list(range(64)) * 2, [16, 24, 24]),  # Qwen2-VL's
    ([0, 2, 2, 0] * 2, [0, 1, 2, 3] * 2, [1, 0, 2, 1]),  # a stream skipped: a section of 0
    ([0, 1, 2, 0, 1, 2] * 2, list(range(6)) * 2, [1, 1, 1, 1, 1, 1]),  # Qwen3-VL's interleave
    ([0, 1] * 2, [1, 0] * 2, None),  # slots out of order
    ([0, 1, 0, 0], [0, 1, 0, 1], None),  # halves with different streams
])
def test_section_is_transformers_split_of_the_slots(streams, slots, expected):
    assert section(np.asarray(streams), np.asarray(slots)) == expected


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    """A tiny Qwen2-VL text model (head_dim 32, mrope_section [4, 6, 6]) exported by dynamo with
    ``input_ids`` and ``position_ids [3, B, S]`` (dynamic batch and length), and the module."""
    import torch
    import transformers as tf

    torch.manual_seed(hf.SEED)
    config = tf.Qwen2VLTextConfig(
        vocab_size=hf.VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "mrope_section": [4, 6, 6]})
    lm = tf.Qwen2VLTextModel(config).eval()

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, position_ids):
            return self.lm(input_ids=input_ids, position_ids=position_ids).last_hidden_state

    module = Text().eval()
    ids = torch.randint(3, hf.VOCAB, (2, 8))
    positions = torch.stack([torch.arange(8).expand(2, 8)] * 3)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=32)
    path = tmp_path_factory.mktemp("qwen2_vl") / "model.onnx"
    torch.onnx.export(module, (ids, positions), path, dynamo=True,
                      dynamic_shapes=({0: batch, 1: seq}, {1: batch, 2: seq}),
                      input_names=["input_ids", "position_ids"], output_names=["logits"])
    return path, module


def _vision_positions(batch: int, text: int, grid: tuple[int, int, int]):
    """Qwen2-VL's ``get_rope_index`` for ``text`` tokens, an image of ``grid`` (t, h, w) and
    ``text`` more tokens: the image's streams are its grid indices after the text, the text
    after it continues from their largest plus 1 (all three streams equal)."""
    t, h, w = grid
    first = np.broadcast_to(np.arange(text), (3, text))
    image = np.stack(np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"))
    image = image.reshape(3, -1) + text
    after = np.broadcast_to(np.arange(text) + image.max() + 1, (3, text))
    one = np.concatenate([first, image, after], axis=1)
    return np.ascontiguousarray(np.broadcast_to(one[:, None], (3, batch, one.shape[1])))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["table", "sliced"])
def test_tiny_qwen2_vl_grafts_with_its_section_against_onnx_and_torch(qwen2_vl, tmp_path, mode):
    import torch

    path, module = qwen2_vl
    out = tmp_path / "grafted.onnx"
    report = graft_found(path, out, max_len=64, mode=mode)
    assert report, report.checks
    assert report.found.startswith("found mrope (mrope_section [4, 6, 6], R=32, angle "), \
        report.found
    assert "positions from input 'position_ids'" in report.found
    grafted = onnx.load(str(out))
    assert not {"Cos", "Sin"} & {n.op_type for n in grafted.graph.node}
    original, mine = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
                      for p in (path, out))
    rng = np.random.default_rng(0)
    cases = [np.broadcast_to(np.arange(seq), (3, batch, seq)) for batch, seq in ((1, 1), (3, 7))]
    cases += [_vision_positions(2, 3, (1, 2, 3)), _vision_positions(1, 4, (2, 2, 2))]
    for positions in cases:
        positions = np.array(positions, np.int64)  # (a writable copy: torch.from_numpy)
        ids = rng.integers(3, hf.VOCAB, size=positions.shape[1:]).astype(np.int64)
        feeds = {"input_ids": ids, "position_ids": positions}
        want, got = original.run(None, feeds)[0], mine.run(None, feeds)[0]
        peak = float(np.abs(want).max())
        # sliced cos/sin are within graft's sliced bound of the model's (1.6e-6 measured): the
        # attention carries that to 7.2e-7 of logits of size ~4, inside the same 64 ulp
        assert np.abs(got - want).max() <= ULPS * np.spacing(np.float32(peak)), positions.shape
        with torch.no_grad():
            ref = module(torch.from_numpy(ids), torch.from_numpy(positions)).numpy()
        # against torch: onnxruntime's kernels sum in another order (test_graft_families)
        assert np.abs(got - ref).max() <= 1e-4 * max(1.0, peak), positions.shape
