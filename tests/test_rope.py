"""rope's exported graphs: encode (``[cos | sin]``), apply in plain ONNX ops, and the lowerings
to onnxruntime's ``com.microsoft.RotaryEmbedding`` and to ONNX opset 23's ``RotaryEmbedding``,
against ``Rope.encode`` / ``Rope.apply``.

``x`` is drawn from ``[-1, 1]``, so a rotated value's error is at most the cos/sin error
(``spec.tolerance``) times ``|x_2i| + |x_2i+1| <= 2``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator
from test_export_float_graphs import LIMIT, make, positions, reference, session

from edgepe.contract.config import ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.export import export
from edgepe.graphs._common import read_manifest_prop
from edgepe.schemes import resolve

LOWERINGS = ("onnx", "ort", "rotary23")
OPSET = {"rotary23": 23}  # the standard RotaryEmbedding exists from opset 23 on
SIZES = [(1, 2), (16, 6), (255, 10), (512, 34), (1024, 64)]


def apply_graph(max_len: int, d_model: int, lowering: str, **options):
    options.setdefault("opset", OPSET.get(lowering, 18))
    return make("rope", max_len, d_model, extra={"rope_graph": "apply", "rope_lowering": lowering},
                **options)


def rotate(module, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.apply(torch.from_numpy(x), torch.from_numpy(p)).numpy()


def uniform(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def atol(config) -> float:
    rtol, atol = config.scheme.spec.tolerance
    assert rtol == 0
    return 2 * atol


@pytest.mark.parametrize("max_len,d_model", SIZES, ids=[f"L{n}-d{d}" for n, d in SIZES])
@pytest.mark.parametrize("lowering", LOWERINGS)
def test_apply_graph_matches_module_apply(lowering, max_len, d_model):
    config, module, model = apply_graph(max_len, d_model, lowering)
    p = positions(max_len)
    x = uniform((3, len(p), d_model))
    y = session(model).run(["y"], {"x": x, "positions": p})[0]
    assert y.shape == x.shape
    np.testing.assert_allclose(y, rotate(module, x, p), rtol=0, atol=atol(config))


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_apply_graph_takes_heads_folded_into_the_batch(lowering):
    """``[B, H, N, d]`` reshaped to ``[B * H, N, d]`` is rotated like the 4-D tensor."""
    config, module, model = apply_graph(64, 10, lowering)
    p = np.array([5, 0, -9, 70, LIMIT], dtype=np.int64)
    x = uniform((2, 3, len(p), 10), seed=1)
    y = session(model).run(None, {"x": x.reshape(6, len(p), 10), "positions": p})[0]
    np.testing.assert_allclose(y.reshape(x.shape), rotate(module, x, p), atol=atol(config))


def test_encode_graph_is_cos_then_sin_and_rotates_like_apply():
    """``pe = [cos | sin]``; rotating with those columns by hand is ``module.apply``."""
    config, module, model = make("rope", 100, 34)
    p = positions(100)
    pe = session(model).run(["pe"], {"positions": p})[0]
    np.testing.assert_allclose(pe, reference(module, p), atol=config.scheme.spec.tolerance[1])
    cos, sin = pe[:, :17], pe[:, 17:]
    x = uniform((len(p), 34), seed=2)
    even, odd = x[:, 0::2], x[:, 1::2]
    y = np.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)
    np.testing.assert_allclose(y, rotate(module, x, p), atol=atol(config))


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_scores_through_the_graph_depend_only_on_the_offset(lowering):
    """``apply(q, t) . apply(k, u)`` is the same for every (t, u) with the same ``u - t``.

    The float32 angle ``t w_i`` rounds to within ``ulp(t) / 2`` rad, so scores at positions up
    to ``P`` agree within ``|q| |k| (ulp(P) + tolerance)``; one step of ``u - t`` moves them by
    far more, which the test checks too (it would fail for a position-blind graph).
    """
    d = 34
    config, _, model = apply_graph(64, d, lowering)
    s = session(model)
    q, k = uniform((d,), seed=3), uniform((d,), seed=4)
    offsets = np.arange(-20, 21)
    scores = []
    for shift in (0, 1, 37, 1000, -500, 4095):
        t = np.full(len(offsets), shift, dtype=np.int64)
        u = t + offsets
        rq = s.run(None, {"x": np.tile(q, (1, len(t), 1)), "positions": t})[0][0]
        rk = s.run(None, {"x": np.tile(k, (1, len(u), 1)), "positions": u})[0][0]
        scores.append(np.einsum("nd,nd->n", rq.astype(np.float64), rk.astype(np.float64)))
    scores = np.array(scores)
    scale = np.linalg.norm(q) * np.linalg.norm(k)
    tol = scale * (float(np.spacing(np.float32(4095 + 20))) + 4 * config.scheme.spec.tolerance[1])
    assert np.abs(scores - scores[0]).max() <= tol
    assert np.abs(np.diff(scores[0])).max() > 100 * tol  # another offset, another score


def test_ort_lowering_is_one_fused_rotary_node_without_a_position_table():
    config, _, model = apply_graph(512, 64, "ort")
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == 1 and rotary[0].domain == "com.microsoft"
    assert onnx.helper.get_node_attr_value(rotary[0], "interleaved") == 1
    assert {"Slice", "Sub", "Add"}.isdisjoint(n.op_type for n in model.graph.node)
    assert {o.domain: o.version for o in model.opset_import} == {"": 18, "com.microsoft": 1}
    # Its caches are cos/sin of the requested positions, computed in the graph: no [L, d/2] rows.
    assert all(512 not in t.dims for t in model.graph.initializer)


@pytest.mark.parametrize("lowering", ["onnx", "rotary23"])
def test_apply_graph_on_the_reference_evaluator(lowering):
    config, module, model = apply_graph(16, 6, lowering)
    p = np.array([0, 15, 16, -1, LIMIT, 123456], dtype=np.int64)
    x = uniform((2, len(p), 6), seed=5)
    y = ReferenceEvaluator(model).run(None, {"x": x, "positions": p})[0]
    np.testing.assert_allclose(y, rotate(module, x, p), atol=atol(config))


def test_standard_lowering_is_one_rotary_node_and_needs_opset_23():
    _, _, model = apply_graph(512, 64, "rotary23")
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == 1 and rotary[0].domain == ""
    assert onnx.helper.get_node_attr_value(rotary[0], "interleaved") == 1
    assert all(512 not in t.dims for t in model.graph.initializer)
    with pytest.raises(BadParameterError, match="RotaryEmbedding needs opset 23"):
        apply_graph(16, 6, "rotary23", opset=18)


def test_apply_graph_io_and_manifest(tmp_path):
    config, _, model = apply_graph(32, 10, "ort")
    assert [i.name for i in model.graph.input] == ["x", "positions"]
    assert [o.name for o in model.graph.output] == ["y"]
    stored = read_manifest_prop(model)
    assert stored["shape"] == ["B", "N", 10]
    assert "inputs" not in stored and "onnx" not in stored  # the graph says them itself
    sidecar = export(config.with_out(tmp_path / "r.onnx")).manifest
    assert sidecar["inputs"]["rope_graph"] == "apply"
    assert sidecar["inputs"]["rope_lowering"] == "ort"
    assert [i["name"] for i in sidecar["onnx"]["inputs"]] == ["x", "positions"]


@pytest.mark.parametrize("extra,message", [
    ({"rope_graph": "rotate"}, "--rope-graph 'rotate' is not one of: encode, cache, apply"),
    ({"rope_graph": "apply", "rope_lowering": "trt"}, "--rope-lowering 'trt' is not one of"),
    ({"rope_lowering": "ort"}, "add --rope-graph apply"),
    ({"rope_lowering": "rotary23"}, "add --rope-graph apply"),
])
def test_bad_rope_choices_are_refused(extra, message):
    with pytest.raises(BadParameterError, match=message):
        make("rope", 16, 6, extra=extra)


@pytest.mark.parametrize("lowering", LOWERINGS)
def test_export_and_quick_verify_the_apply_graph(tmp_path, lowering):
    """Through the exporter and the verifier, as ``edgepe export --rope-graph apply`` runs."""
    from edgepe import api

    config = ExportConfig(scheme=resolve("rope", 64, 10), mode="compute",
                          opset=OPSET.get(lowering, 18),
                          extra={"rope_graph": "apply", "rope_lowering": lowering})
    result, report = api.export(config.with_out(tmp_path / "rope.onnx"))
    assert report, str(report)
    again = export(config.with_out(tmp_path / "again.onnx"))
    assert again.path.read_bytes() == result.path.read_bytes()


def test_cli_exports_each_rope_graph_to_its_own_default_file(tmp_path, monkeypatch):
    """``edgepe export --scheme rope [--rope-graph apply [--rope-lowering L]]``: one file each."""
    from typer.testing import CliRunner

    from edgepe.cli import app

    monkeypatch.chdir(tmp_path)
    base = ["export", "--scheme", "rope", "--max-len", "64", "--d-model", "10"]
    for flags, name, inputs in (
        ([], "rope-compute-L64-d10.onnx", ["positions"]),
        (["--rope-graph", "encode"], "rope-compute-L64-d10.onnx", ["positions"]),
        (["--rope-graph", "apply"], "rope-compute-L64-d10-apply.onnx", ["x", "positions"]),
        (["--rope-graph", "apply", "--rope-lowering", "ort"],
         "rope-compute-L64-d10-apply-ort.onnx", ["x", "positions"]),
        (["--rope-graph", "apply", "--rope-lowering", "rotary23", "--opset", "23"],
         "rope-compute-L64-d10-apply-rotary23.onnx", ["x", "positions"]),
    ):
        result = CliRunner().invoke(app, base + flags)
        assert result.exit_code == 0, result.output
        assert "parity PASSED" in result.output
        model = onnx.load(tmp_path / "models" / name)
        assert [i.name for i in model.graph.input] == inputs
    assert len(list((tmp_path / "models").glob("*.onnx"))) == 4  # explicit encode = default


@pytest.mark.parametrize("args,words", [
    (["--scheme", "sinusoidal", "--rope-graph", "apply"], ["--rope-graph", "rope only"]),
    (["--scheme", "rope", "--mode", "table", "--rope-graph", "apply"], ["--mode table"]),
    (["--scheme", "rope", "--rope-graph", "rotate"], ["'rotate'", "encode, cache, apply"]),
    (["--scheme", "rope", "--rope-lowering", "ort"], ["--rope-graph apply"]),
    (["--scheme", "rope", "--rope-graph", "apply", "--rope-lowering", "rotary23"],
     ["--opset 18", "RotaryEmbedding needs opset 23"]),
])
def test_cli_refuses_bad_rope_options_in_one_line(tmp_path, args, words):
    from typer.testing import CliRunner

    from edgepe.cli import app

    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(app, ["export", "--max-len", "16", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert not out.exists()
