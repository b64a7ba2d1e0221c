"""graft on T5's relative position bias (issue 40 point 3): found by its values, spliced as
edgepe's integer buckets (no Log), the model's own rows gathered by them, outputs bit-identical.

The default suite grafts hand-built ONNX models that compute T5's bucket op for op as transformers'
``T5Attention._relative_position_bucket`` exports (float32 ``Log``, ``Div``, truncating ``Cast``,
``Min``, ``Where``) for a direction, num_buckets and max_distance, so a wrong fit of any of them
fails, and Optimum's own decoder_with_past of a tiny T5 (a committed file). The slow suite grafts
a tiny transformers T5 exported by TorchScript (torch 2.13's dynamo export fails on T5's SDPA
attention with a view error; with eager attention it exports) of other num_buckets/max_distance,
and that T5's decoder step exported with its KV cache (relative positions from the cache's
length, no position input), checked against the original ONNX model and torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _t5_models import HEADS, T5_CONFIG, export_t5_decoder, t5_decoder_inputs, t5_like

from edgepe.contract.errors import BadParameterError
from edgepe.graft import graft_found


def _records(model) -> list[dict]:
    return [json.loads(p.value) for p in model.metadata_props if p.key.startswith("edgepe.graft")]


def _ops(model) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _same_outputs(original: onnx.ModelProto, grafted: onnx.ModelProto, shapes) -> None:
    """Every output bit for bit at ``shapes`` (``{input: (batch, length)}`` each)."""
    a = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(grafted.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for case in shapes:
        feeds = {name: rng.integers(0, 50, size=shape).astype(np.int64)
                 for name, shape in case.items()}
        for want, got in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            assert want.shape == got.shape and np.array_equal(want, got), case


# the fit: direction, num_buckets, max_distance (lo .. hi: every value giving the same buckets)
CASES = [
    # T5's own (32 buckets, 128) in both directions: max_distance one value
    ((("bidirectional", 32, 128), ("causal", 32, 128)),
     [("bidirectional", 32, 128, [128, 128]), ("causal", 32, 128, [128, 128])]),
    # nobody's configs, each max_distance the one value giving its buckets
    ((("bidirectional", 24, 100),), [("bidirectional", 24, 100, [100, 100])]),
    ((("causal", 24, 96),), [("causal", 24, 96, [96, 96])]),
    # 40 and 41 give the same buckets: no power of two between, the lower taken
    ((("causal", 12, 40),), [("causal", 12, 40, [40, 41])]),
    # T5's tiny test config, the encoder alone: 13..18, 16 taken (a power of two)
    ((("bidirectional", 8, 16),), [("bidirectional", 8, 16, [13, 18])]),
]


@pytest.mark.parametrize(("stacks", "want"), CASES,
                         ids=["t5-32-128-two-stacks", "bidirectional-24-100", "causal-24-96",
                              "causal-12-40", "bidirectional-8-16"])
def test_a_hand_built_t5_bias_is_fitted_and_grafted_bit_for_bit(tmp_path, stacks, want):
    original = t5_like(*stacks)
    path = tmp_path / "t5.onnx"
    onnx.save(original, path)
    report = graft_found(path, tmp_path / "out.onnx")
    assert report, report
    grafted = onnx.load(tmp_path / "out.onnx")
    got = [(r["direction"], r["num_buckets"], r["max_distance"], r["max_distance_range"])
           for r in _records(grafted)]
    assert got == want
    assert "Log" in _ops(original) and "Log" not in _ops(grafted)
    # positions: 4 x max_distance, so the proof's distances pass the last bucket's
    assert report.max_len_from.startswith(f"4 x T5's max_distance {max(w[2] for w in want)} ")
    assert report.found.startswith("found t5-bias")
    assert [c.max_abs_err for c in report.checks] == [0.0] * len(report.checks)
    # any batch, any lengths (the decoder's its own), past the proof's 4 x max_distance
    names = ["input_ids", "decoder_input_ids"][:len(stacks)]
    _same_outputs(original, grafted, [{n: (b, s + k) for k, n in enumerate(names)}
                                      for b, s in ((1, 1), (3, 9), (2, 700))])


def test_the_range_of_max_distance_is_said_and_a_power_of_two_taken(tmp_path):
    path = tmp_path / "t5.onnx"
    onnx.save(t5_like(("bidirectional", 8, 16), ("causal", 8, 16)), path)
    report = graft_found(path, tmp_path / "out.onnx")
    records = _records(onnx.load(tmp_path / "out.onnx"))
    # the decoder pins 16: the encoder's 13..18 takes it too
    assert [(r["max_distance"], r["max_distance_range"]) for r in records] == [
        (16, [13, 18]), (16, [16, 16])]
    assert "(bidirectional, num_buckets 8, max_distance 16 (13..18 give these buckets); " \
        "the model's buckets of k - q equal edgepe's at every |k - q| <= 2^20) at Gather " \
        in report.found
    assert "(causal, num_buckets 8, max_distance 16; the model's buckets" in report.found


def test_a_decoder_after_a_cache_is_fitted_from_k_minus_q_at_an_offset(tmp_path):
    """The decoder's relative positions after P cached tokens are ``k - (P + q)``: found all
    the same, and proven with graft's decode steps (3 after 5; 1 after max_len - 1 in the
    buckets' cone, 1 after 8 in the whole model)."""
    original = t5_like(("bidirectional", 8, 16), ("causal", 8, 16), past=True)
    path = tmp_path / "t5.onnx"
    onnx.save(original, path)
    report = graft_found(path, tmp_path / "out.onnx")
    # the step at the last position in the buckets' cone, the cache fed as its shape (issue 41)
    assert "3+5" in report.lengths and "1+63 (the replaced tensors)" in report.lengths, \
        report.lengths
    assert [c.max_abs_err for c in report.checks] == [0.0] * len(report.checks)
    grafted = onnx.load(tmp_path / "out.onnx")
    assert [(r["direction"], r["max_distance"]) for r in _records(grafted)] == [
        ("bidirectional", 16), ("causal", 16)]
    a = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(grafted.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, source, target, cached in ((1, 3, 1, 700), (2, 9, 4, 20)):
        feeds = {"input_ids": np.full((batch, source), 3, np.int64),
                 "decoder_input_ids": np.full((batch, target), 5, np.int64),
                 "past_key_values.0.key": np.zeros((batch, HEADS, cached, 4), np.float32)}
        for want, got in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            assert got.shape == (batch, HEADS, target, cached + target) or got.shape == (
                batch, HEADS, source, source)
            assert np.array_equal(want, got)


def test_a_square_index_that_is_no_t5_bucket_is_refused_naming_it(tmp_path):
    """A clipped distance ``min(|k - q|, 7)`` (a relative table that is not T5's): the same
    for later and earlier keys, so neither direction fits; nothing written."""
    path = tmp_path / "t5.onnx"
    onnx.save(t5_like((None, 8, 16)), path)
    with pytest.raises(BadParameterError) as info:
        graft_found(path, tmp_path / "out.onnx")
    message = str(info.value)
    assert message.startswith("no PE found in ")
    assert "gathered by 'enc_min" in message and ", a square index as T5's relative-position " \
        "buckets are, but its values are not T5's buckets of the relative positions 'enc_sub" \
        in message and "for any direction, num_buckets and max_distance;" in message
    assert not (tmp_path / "out.onnx").exists()


def test_a_t5_config_must_give_the_models_buckets_and_names_its_max_distance(tmp_path):
    """--from-hf-config: the config's num_buckets, heads and max_distance must give the buckets
    fitted (8 bidirectional: 13..18); the one recorded is then the config's own."""
    path = tmp_path / "t5.onnx"
    onnx.save(t5_like(("bidirectional", 8, 16)), path)
    config = {"model_type": "t5", "relative_attention_num_buckets": 8, "num_heads": HEADS}
    graft_found(path, tmp_path / "out.onnx", hf_config={**config,
                                                         "relative_attention_max_distance": 13})
    (record,) = _records(onnx.load(tmp_path / "out.onnx"))
    assert (record["max_distance"], record["max_distance_range"]) == (13, [13, 18])
    assert record["hf_config"]["params"]["max_distance"] == 13
    for bad in ({"relative_attention_max_distance": 19},
                {"relative_attention_max_distance": 12},
                {"relative_attention_max_distance": 16, "relative_attention_num_buckets": 16},
                {"relative_attention_max_distance": 16, "num_heads": HEADS + 1}):
        with pytest.raises(BadParameterError, match=r"^--from-hf-config describes T5's bias "
                           r".*; the model's bidirectional buckets 'enc_.*' are those of "
                           r"num_buckets 8, max_distance 13\.\.18, gathering 2 heads: the "
                           r"config is not this model's$"):
            graft_found(path, tmp_path / "never.onnx", hf_config={**config, **bad})
    assert not (tmp_path / "never.onnx").exists()


def test_t5_bias_takes_no_quantize_and_mode_compute_alone(tmp_path):
    """Its bucket graph is the compute mode (a lookup of the clamped distance already): --mode
    compute is that graph, table and sliced are refused naming it; nothing written."""
    path = tmp_path / "t5.onnx"
    onnx.save(t5_like(("causal", 8, 16)), path)
    with pytest.raises(BadParameterError, match=r"^--quantize int8: T5's bias goes in as "
                                                r"integer buckets"):
        graft_found(path, tmp_path / "out.onnx", quantize="int8")
    for mode in ("sliced", "table"):
        with pytest.raises(BadParameterError, match=rf"^--mode {mode}: T5's bias goes in as "
                           r"its integer bucket graph \(--mode compute: a lookup of each "
                           r"clamped distance's bucket, no Log\), the model's own rows"):
            graft_found(path, tmp_path / "out.onnx", mode=mode)
    assert not (tmp_path / "out.onnx").exists()
    report = graft_found(path, tmp_path / "out.onnx", mode="compute")
    assert report.artifact == "t5-bias (compute, int64, 64 positions)"
    (record,) = _records(onnx.load(tmp_path / "out.onnx"))
    assert (record["mode"], record["direction"], record["max_distance"]) == (
        "compute", "causal", 16)


# ---- a transformers T5, exported by TorchScript (slow: two exports) -------------------------


def _export_t5(folder: Path, num_buckets: int, max_distance: int):
    """A tiny seeded T5ForConditionalGeneration (tests/_hf_models.py's sizes) exported with
    ``input_ids`` and ``decoder_input_ids`` of their own dynamic lengths, no cache."""
    import torch
    import transformers as tf

    sys.path.insert(0, str(Path(__file__).parent))
    import _hf_models as hf

    torch.manual_seed(hf.SEED)
    cfg = tf.T5Config(vocab_size=hf.VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_heads=4, relative_attention_num_buckets=num_buckets,
                      relative_attention_max_distance=max_distance, decoder_start_token_id=0)
    lm = tf.T5ForConditionalGeneration(cfg).eval()

    class Seq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, decoder_input_ids):
            return self.lm(input_ids=input_ids, decoder_input_ids=decoder_input_ids,
                           use_cache=False).logits

    ids = torch.randint(3, hf.VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    path = folder / "model.onnx"
    torch.onnx.export(Seq2Seq().eval(), (ids, ids[:, :5]), str(path), dynamo=False,
                      opset_version=18, input_names=["input_ids", "decoder_input_ids"],
                      output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "source"},
                                    "decoder_input_ids": {0: "batch", 1: "target"}})
    return path, hf.VOCAB


@pytest.fixture(scope="module", params=[(16, 64)], ids=["t5-16-64"])
def t5_export(request, tmp_path_factory):
    """A T5 of a config nobody tuned graft to (16 buckets, 64); T5's test config (8, 16) is
    tests/test_graft_families.py's, exported with input_ids alone."""
    folder = tmp_path_factory.mktemp("t5")
    path, vocab = _export_t5(folder, *request.param)
    report = graft_found(path, folder / "grafted.onnx")
    return request.param, path, folder / "grafted.onnx", report, vocab


@pytest.mark.slow
def test_a_transformers_t5_grafts_both_stacks_bit_for_bit(t5_export):
    (num_buckets, max_distance), path, out, report, vocab = t5_export
    assert report, report
    original, grafted = onnx.load(path), onnx.load(out)
    records = _records(grafted)
    assert [(r["direction"], r["num_buckets"], r["max_distance"]) for r in records] == [
        ("bidirectional", num_buckets, max_distance), ("causal", num_buckets, max_distance)]
    assert [r["table"] for r in records] == [
        f"lm.{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        for stack in ("encoder", "decoder")]
    # both Logs gone (one per stack: the later layers reuse the first's bias), the model's own
    # relative_attention_bias Gathers kept
    assert sum(n.op_type == "Log" for n in original.graph.node) == 2
    assert "Log" not in _ops(grafted)
    kept = {n.input[0] for n in grafted.graph.node if n.op_type == "Gather"}
    assert {r["table"] for r in records} <= kept
    assert report.found.startswith("found t5-bias x2, each replaced: (bidirectional, ")
    assert [c.max_abs_err for c in report.checks] == [0.0] * len(report.checks)
    # logits equal to the original's: batch sizes, the decoder's own lengths, distances past
    # max_distance and past graft's proof (4 x max_distance)
    a = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch, source, target in ((1, 1, 1), (3, 9, 4), (2, 5, 17), (1, 4 * max_distance + 30,
                                                                     2 * max_distance + 3)):
        feeds = {"input_ids": rng.integers(0, vocab, (batch, source)),
                 "decoder_input_ids": rng.integers(0, vocab, (batch, target))}
        want, got = a.run(None, feeds)[0], b.run(None, feeds)[0]
        assert np.array_equal(want, got), (batch, source, target)


# ---- Optimum's own T5 decoder with past (a committed file: scripts/optimum_t5_fixture.py) -----

OPTIMUM_T5 = Path(__file__).resolve().parent / "data" / "optimum_t5"


def _optimum_feeds(session, batch: int, seq: int, past: int, source: int, rng) -> dict:
    """Inputs of Optimum's decoder_with_past: token ids, an encoder mask of ones but the last
    key of row 0, the decoder's ``past`` cached keys/values and the encoder's ``source``."""
    feeds = {}
    for value in session.get_inputs():
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, T5_CONFIG["vocab_size"], (batch, seq))
        elif value.name == "encoder_attention_mask":
            feeds[value.name] = np.ones((batch, source), np.int64)
            feeds[value.name][0, -1] = 0
        else:
            length = source if ".encoder." in value.name else past
            feeds[value.name] = rng.standard_normal((batch, 4, length, 8)).astype(np.float32)
    return feeds


def test_optimums_t5_decoder_with_past_grafts_bit_for_bit(tmp_path):
    """The decoder Optimum exports for generation (``--task text2text-generation-with-past``,
    transformers 4.57): no position input, the queries at ``P ..`` from the cache's length.
    Found (causal, 16 buckets, 32), proven at graft's decode steps with every output held to 0,
    and equal to the original at caches of 0, 1 and past max_distance (buckets saturated), past
    the proof's 128 positions too; its own config.json names the same bias."""
    path = OPTIMUM_T5 / "decoder_with_past_model.onnx"
    assert path.stat().st_size < 200_000 and "optimum-onnx==0.1.0" in (
        OPTIMUM_T5 / "VERSIONS.txt").read_text()
    report = graft_found(path, tmp_path / "out.onnx")
    assert report.found.startswith(
        "found t5-bias (causal, num_buckets 16, max_distance 32; the model's buckets of k - q "
        "equal edgepe's at every |k - q| <= 2^20) at Gather '/decoder/block.0/layer.0/"
        "SelfAttention/relative_attention_bias/Gather_output_0' of 'decoder.block.0.layer.0."
        "SelfAttention.relative_attention_bias.weight' [16, 4], relative positions '/decoder/"
        "block.0/layer.0/SelfAttention/Sub_output_0' (from 'input_ids', "
        "'past_key_values.0.decoder.key' by Range)"), report.found
    assert report.lengths[:5] == ["1", "7", "16", "3+5", "1+127"], report.lengths
    assert [c.name for c in report.checks][:5] == [
        "logits", *[f"present.{i}.decoder.{k}" for i in range(2) for k in ("key", "value")]]
    assert [(c.max_abs_err, c.tolerance) for c in report.checks] == [(0.0, 0.0)] * 6
    grafted = onnx.load(tmp_path / "out.onnx")
    assert "Log" in _ops(onnx.load(path)) and "Log" not in _ops(grafted)
    a = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(grafted.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for batch, seq, past, source in ((1, 1, 0, 3), (2, 4, 0, 6), (2, 1, 1, 5), (1, 2, 40, 2),
                                     (2, 1, 300, 4)):
        feeds = _optimum_feeds(a, batch, seq, past, source, rng)
        for want, got in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            assert want.shape == got.shape and np.array_equal(want, got), (batch, seq, past)
    config = json.loads((OPTIMUM_T5 / "config.json").read_text())
    graft_found(path, tmp_path / "config.onnx", hf_config=config, check=False)  # (proven above)
    (record,) = _records(onnx.load(tmp_path / "config.onnx"))
    assert (record["direction"], record["max_distance"]) == ("causal", 32)
    assert record["hf_config"]["params"]["max_distance"] == 32


# ---- a transformers T5 decoder with its KV cache, as Optimum's decoder_with_past -------------


@pytest.fixture(scope="module", params=[True, False], ids=["cross-cache", "encoder-states"])
def t5_decoder_graft(request, tmp_path_factory):
    """The decoder step of a tiny T5 (``_t5_models.t5_decoder``: 16 causal buckets,
    max_distance 32) exported by TorchScript with its cache, no position input, grafted with
    no PE given: with Optimum's cross-attention cache and encoder mask, or with the encoder's
    states."""
    folder = tmp_path_factory.mktemp("t5dec")
    module, names = export_t5_decoder(folder / "model.onnx", cross_cache=request.param)
    report = graft_found(folder / "model.onnx", folder / "grafted.onnx")
    return module, names, folder / "model.onnx", folder / "grafted.onnx", report


@pytest.mark.slow
def test_a_t5_decoder_with_past_grafts_bit_for_bit_at_every_cache_length(t5_decoder_graft):
    """The relative positions come from the cache's length (``k - (P + q)``), found and proven
    at graft's decode steps; the grafted logits and present.* equal the original ONNX model's
    bit for bit (the proof holds them to 0) and torch's, at caches of 0, 1 and past
    max_distance (the buckets saturated), batch 1 and 2, one and several new tokens."""
    import torch

    module, names, path, out, report = t5_decoder_graft
    assert report, report
    (record,) = _records(onnx.load(out))
    assert (record["direction"], record["num_buckets"], record["max_distance"]) == (
        "causal", T5_CONFIG["relative_attention_num_buckets"],
        T5_CONFIG["relative_attention_max_distance"])
    assert record["table"] == \
        "lm.decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    assert "relative positions '/lm/decoder/block.0/layer.0/SelfAttention/Sub_output_0' (from " \
        "'input_ids', 'past_key_values.0.decoder.key' by Range)" in report.found
    assert sum(n.op_type == "Log" for n in onnx.load(path).graph.node) == 1
    assert "Log" not in _ops(onnx.load(out))
    # the decode step after max_len - 1 = 127 cached tokens (4 x max_distance), every output
    # held to 0: integer buckets, the same float nodes after them
    assert "3+5" in report.lengths and "1+127" in report.lengths, report.lengths
    assert [c.name for c in report.checks][:5] == [
        "logits", *[f"present.{i}.decoder.{k}" for i in range(2) for k in ("key", "value")]]
    assert [(c.max_abs_err, c.tolerance) for c in report.checks] == [(0.0, 0.0)] * 6
    a = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch, seq, past, source in ((1, 1, 0, 4), (2, 3, 0, 5), (2, 1, 1, 3), (1, 2, 1, 6),
                                     (2, 1, 40, 3), (1, 3, 300, 2)):
        args = t5_decoder_inputs(names, batch, seq, past, source, seed=past)
        feeds = {n: x.numpy() for n, x in zip(names, args, strict=True)}
        with torch.no_grad():
            ref = module(*args)
        for want, got, theirs in zip(a.run(None, feeds), b.run(None, feeds), ref, strict=True):
            assert got.shape == want.shape and np.array_equal(got, want), (batch, seq, past)
            # against torch: onnxruntime sums in another order (measured at most 1.4e-6 on
            # logits of magnitude ~1e-1 to 1)
            assert np.abs(got - theirs.numpy()).max() <= 1e-5, (batch, seq, past)
