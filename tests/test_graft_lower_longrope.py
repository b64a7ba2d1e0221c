"""``graft --rope-lowering ort|rotary23`` on Phi-3 longrope (issue 40 point 6).

Phi-3's longrope picks its frequencies at run time (the long factors once the sequence passes
``original_max_position_embeddings``), so graft puts in two tables and a ``Where`` on the model's
condition; the fused rotations read their caches as that choice (``graft.lower._caches``). Before,
they read the short table only and graft's proof failed at the long positions (q off by 0.47 at
position 4199; "off by 0.26" in the issue) and nothing was written. The model here has an
attention factor that is not 1 (``rope_parameters["factor"] = 4``: transformers' attention_scaling
1.0801, multiplied into cos and sin), which the tables carry (``find_hf``'s attention factor), so
the caches are the scaled tables. A tiny random-weight Phi-3 built from its config object, exported
as tests/_hf_models.py exports the others (dynamo, a cache, ``position_ids``); one export shared
by the module (about 25 s on 2 cores: marked slow).
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

from edgepe.cli import app
from edgepe.graft.prove import hf_feeds

pytest.importorskip("transformers", reason="the Phi-3 model needs transformers")
import _hf_models  # noqa: E402 - after the skip

pytestmark = pytest.mark.slow
# Rows past the long branch's threshold (4095 in this export: graft's proof steps to position 4199).
MAX_LEN = 4200


def _phi3():
    import torch
    import transformers as tf

    config = tf.Phi3Config(
        vocab_size=_hf_models.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0,
            "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 2.5, 3.0, 4.0],
            "original_max_position_embeddings": 64})
    torch.manual_seed(_hf_models.SEED)
    return tf.AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def phi3(tmp_path_factory):
    """``(lm, model.onnx)``: the model and its dynamo export (external data beside it)."""
    import torch

    lm = _phi3()
    assert lm.model.rotary_emb.attention_scaling == pytest.approx(1.0801234497346435)
    folder = tmp_path_factory.mktemp("phi3")
    args, names = _hf_models.example_inputs(lm, with_positions=True)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    past, total = torch.export.Dim("past"), torch.export.Dim("total")
    layers = lm.config.num_hidden_layers
    shapes = ({0: batch, 1: seq}, {0: batch, 1: total},
              ({0: batch, 1: seq}, *[{0: batch, 2: past}] * (2 * layers)))
    outputs = ["logits", *[f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]]
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(_hf_models.wrap(lm, True), args, folder / "model.onnx", dynamo=True,
                          dynamic_shapes=shapes, input_names=names, output_names=outputs,
                          verbose=False)
    return lm, folder / "model.onnx"


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
def test_longrope_with_an_attention_factor_grafts_fused(phi3, tmp_path, lowering):
    """The graft with every rotation fused passes its own proof (exit 0, the long branch's
    decode step included), holds one choice of caches per cos/sin and no Sin/Cos/Neg, and its
    outputs equal the original ONNX model's and torch's at a long position too."""
    import torch

    lm, path = phi3
    out = tmp_path / "out.onnx"
    done = CliRunner().invoke(app, ["graft", str(path), "--out", str(out), "--max-len",
                                    str(MAX_LEN), "--rope-lowering", lowering])
    assert done.exit_code == 0, (done.stdout, done.stderr)
    assert "attention factor 1.08012" in done.stdout and "MISMATCH" not in done.stdout
    assert "1+8 (positions 4199..4199)" in done.stdout
    assert "rotations fused into RotaryEmbedding" in done.stdout
    grafted = onnx.load(out)
    ops = [n.op_type for n in grafted.graph.node]
    assert ops.count("RotaryEmbedding") == 4 and not {"Sin", "Cos", "Neg"} & set(ops)
    chosen = [n for n in grafted.graph.node if n.name.endswith("_cache_chosen/where")]
    assert len(chosen) == 2
    record = next(json.loads(p.value) for p in grafted.metadata_props
                  if p.key == "edgepe.graft.0")
    assert record["attention_factor"] == pytest.approx(1.0801234, rel=1e-6)
    mine = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in theirs.get_outputs()]
    rng = np.random.default_rng(3)
    for seq, past in ((5, 0), (1, 4150)):  # the short branch, then the long one
        feeds = hf_feeds(theirs, seq, past, 0, MAX_LEN, rng)
        want, got = theirs.run(names, feeds), mine.run(names, feeds)
        for name, w, g in zip(names, want, got, strict=True):
            # onnxruntime's fused kernel and the model's Mul/Add round the same products:
            # measured <= 6e-8 here; 64 ulp of the output's scale as test_graft_hf allows
            scale = float(np.abs(w).max())
            assert np.abs(g - w).max() <= 64 * np.spacing(np.float32(scale)), (name, seq, past)
        if past:  # graft keeps the ONNX graph's long branch; torch's is not what was exported
            continue
        with torch.no_grad():
            ref = _hf_models.wrap(lm, True)(*[torch.from_numpy(feeds[n]) for n in feeds])
        # torch and onnxruntime order float32 attention differently (test_graft_hf: <= 2e-6)
        np.testing.assert_allclose(got[0], ref[0].numpy(), rtol=0, atol=1e-5)
