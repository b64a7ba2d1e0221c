"""``--int8-runtime fold|live`` (issue 19): how an int8 graph's stored int8 lives at run time.

fold: onnxruntime constant-folds the ``Cast(q) * s`` in front at session load, so the session's
optimised graph is the float32 graph (no int8 left, no dequantise per call); live: the session
keeps the int8 tensor. The manifest and ``edgepe inspect`` say which and what RAM it takes.
Errors within the proven bound on onnxruntime, for both, are in test_quant.py.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.contract.config import ExportConfig, base_manifest
from edgepe.formats.onnx import output_shape
from edgepe.graphs.int8 import build_int8
from edgepe.schemes import build, resolve

L = 512
STORED = [("binary", "compute"), ("fourier-binary", "compute"), ("sinusoidal", "table"),
          ("alibi", "table"), ("sinusoidal-learned", "compute"), ("learned", "table")]
IDS = [f"{s}-{m}" for s, m in STORED]


def _model(scheme: str, mode: str, quantize: str = "int8", runtime: str = "fold"):
    cfg = resolve(scheme, L)
    config = ExportConfig(scheme=cfg, mode=mode, quantize=quantize, int8_runtime=runtime)
    manifest = base_manifest(config, output_shape(config), "float32")
    if quantize == "none":
        from edgepe.graphs import builder

        return manifest, builder(scheme, mode)(config, build(cfg), manifest)
    return manifest, build_int8(config, build(cfg), manifest)


def _session_graph(model: onnx.ModelProto, tmp_path) -> onnx.GraphProto:
    """The graph onnxruntime runs after its load-time optimisations (basic level: constant
    folding; the level every edgepe session uses is at least this)."""
    path = tmp_path / "optimised.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(path)).graph


@pytest.mark.parametrize(("scheme", "mode"), STORED, ids=IDS)
def test_fold_runs_the_float32_graph_after_session_load(tmp_path, scheme, mode):
    manifest, model = _model(scheme, mode)
    stored = {t.name: t.data_type for t in model.graph.initializer}
    assert stored[manifest["quant"]["tensor"]] == onnx.TensorProto.INT8  # the file holds int8
    folded = _session_graph(model, tmp_path)
    assert onnx.TensorProto.INT8 not in {t.data_type for t in folded.initializer}
    _, plain = _model(scheme, mode, quantize="none")
    ops = sorted(n.op_type for n in folded.node)
    assert ops == sorted(n.op_type for n in _session_graph(plain, tmp_path).node)
    assert manifest["quant"]["runtime"] == "fold"
    assert manifest["quant"]["ram_bytes"] == manifest["quant"]["bytes"]["float32"]


@pytest.mark.parametrize(("scheme", "mode"), STORED, ids=IDS)
def test_live_keeps_int8_in_the_session(tmp_path, scheme, mode):
    manifest, model = _model(scheme, mode, runtime="live")
    quant = manifest["quant"]
    session = {t.name: t for t in _session_graph(model, tmp_path).initializer}
    assert session[quant["tensor"]].data_type == onnx.TensorProto.INT8
    assert onnx.TensorProto.FLOAT not in {t.data_type for t in session.values()
                                          if len(t.dims) == 2 and np.prod(t.dims) > 64}
    assert quant["runtime"] == "live"
    assert quant["ram_bytes"] == quant["bytes"]["int8"] + (  # float16 scales held as float32
        2 * len(quant["scale"]) if quant.get("scale_storage") == "float16" else 0)


def test_fold_and_live_agree_with_each_other_bit_for_bit_on_tables():
    """Both dequantise the same int8 table to the same float32 (Cast * s, one rounding)."""
    pos = np.array([-(2**63), -1, 0, 7, L - 1, L, 2**31, 2**32 - 1, 2**32, 2**63 - 1], np.int64)
    outs = []
    for runtime in ("fold", "live"):
        session = ort.InferenceSession(_model("sinusoidal", "table", runtime=runtime)[1]
                                       .SerializeToString(), providers=["CPUExecutionProvider"])
        outs.append(session.run(None, {"positions": pos})[0])
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_cli_choice_default_name_inspect_and_refusal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["export", "--scheme", "binary", "--max-len", "512",
                                 "--quantize", "int8", "--int8-runtime", "live", "--no-verify"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "models" / "binary-compute-L512-d64-int8-live.onnx"
    manifest = json.loads(path.with_name(path.name + ".json").read_text())
    assert manifest["inputs"]["int8_runtime"] == "live" and manifest["quant"]["runtime"] == "live"
    shown = runner.invoke(app, ["inspect", str(path)]).stdout
    assert f"runtime live: kept int8 in RAM, {manifest['quant']['ram_bytes']} B" in shown
    bad = runner.invoke(app, ["export", "--scheme", "binary", "--max-len", "512", "--quantize",
                              "int8", "--int8-runtime", "lazy", "--out", str(tmp_path / "x.onnx")])
    assert bad.exit_code == 2
    assert "--int8-runtime 'lazy' is not one of: fold, live" in bad.output
    assert not (tmp_path / "x.onnx").exists()
    assert "Traceback" not in bad.output


@pytest.mark.parametrize(("scheme", "mode", "runtime", "given", "expected"), [
    ("sinusoidal", "table", "live", None, "tensor"),  # one DequantizeLinear after the Gather
    ("sinusoidal-learned", "compute", "live", None, "tensor"),  # its int8 residual table
    ("alibi", "table", "live", None, "tensor"),
    ("sinusoidal", "table", "live", "channel", "channel"),  # asked for: the slower per column
    ("sinusoidal", "table", "fold", None, "channel"),  # folded: per column costs nothing
    ("binary", "compute", "live", None, "channel"),  # weights: a scale per bit, off the hot axis
])
def test_live_tables_default_to_one_scale(scheme, mode, runtime, given, expected):
    """A live table's per-column scales would run on the hot last axis of every call's rows
    (issue 19: 1.9-3.4x the float32 Gather): with --int8-runtime live and no
    --quant-granularity, tables take one scale, and their Gather is followed by one
    per-tensor DequantizeLinear."""
    from edgepe.api import make_config
    from edgepe.graphs.int8 import build_int8 as build_graph

    config = make_config(scheme, L, mode=mode, quantize="int8", int8_runtime=runtime,
                         quant_granularity=given)
    assert config.quant_granularity == expected
    manifest = base_manifest(config, output_shape(config), "float32")
    model = build_graph(config, build(config.scheme), manifest)
    assert manifest["quant"]["granularity"] == expected
    if expected == "tensor":
        made_by = {out: n for n in model.graph.node for out in n.output}
        dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
        assert dq and all(not n.attribute for n in dq)  # per tensor: no axis
        for node in dq:  # each right after a Gather of the int8 table
            gather = made_by[node.input[0]]
            assert gather.op_type == "Gather" and gather.input[0] == manifest["quant"]["tensor"]
