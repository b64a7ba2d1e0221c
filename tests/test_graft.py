"""``edgepe graft`` (issue 18): a PE put inside a user's ONNX model, the model proven unchanged.

The model is the demo notebook's module (``tests/demo_notebook.py``, verbatim) followed by two
``nn.TransformerEncoderLayer``s, trained a few steps here so its projection is not the init, and
exported by both torch.onnx exporters once per module (they are slow). The TorchScript exporter
fixes the sequence length inside attention (a Reshape to ``[S, B*H, d/H]`` of constants), so that
export is made at ``S = max_len`` and checked at that length, which reaches position max_len - 1.
Equivalence is asserted by graft's own proof and again here by running both files.
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from edgepe.graft import detect, load_model

L, D, HEADS, FFN, VOCAB = 512, 16, 2, 32, 50
N_BITS = 10  # ceil(log2(513))
EXPORTERS = ("torchscript", "dynamo")


def _demo_pe():
    from demo_notebook import BinaryPositionalEncoding

    with contextlib.redirect_stdout(io.StringIO()):  # the notebook's constructor prints
        return BinaryPositionalEncoding(D, L, dropout=0.0)


def _layers() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D, HEADS, FFN, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


class Tiny(nn.Module):
    """``layers(pe(x))``: the demo's PE on features x ``[B, S, D]``."""

    def __init__(self) -> None:
        super().__init__()
        self.pe, self.layers = _demo_pe(), _layers()

    def forward(self, x):
        return self.layers(self.pe(x))


class TwoPE(nn.Module):
    """Two demo PEs (two tables, two projections): auto-detect must refuse to pick one."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = _demo_pe(), _demo_pe()

    def forward(self, x):
        return self.b(self.a(x))


class EdgepeOwn(nn.Module):
    """edgepe's own ``binary`` reference module (the demo's class, vectorised) before the layers."""

    def __init__(self) -> None:
        super().__init__()
        from edgepe.schemes import build, resolve

        self.pe, self.layers = build(resolve("binary", L, d_model=D), seed=3), _layers()

    def forward(self, x):
        return self.layers(self.pe(x))


class NoPE(nn.Module):
    """Token ids ``[B, S]`` -> embedding -> layers: a model without a PE."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.layers = nn.Embedding(VOCAB, D), _layers()

    def forward(self, ids):
        return self.layers(self.embed(ids))


def _train(model: nn.Module, steps: int = 5) -> nn.Module:
    """A few Adam steps on a toy target, so the projection is a trained one (not its init)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(4, 32, D)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = (model(x) - x.roll(1, dims=1)).pow(2).mean()
        loss.backward()
        optimizer.step()
    return model.eval()


def _export(model: nn.Module, example: torch.Tensor, path, exporter: str, name: str = "x"):
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=18,
                              input_names=[name], output_names=["y"],
                              dynamic_axes={name: {0: "batch", 1: "seq"}})
        else:
            dims = {0: torch.export.Dim("B", min=1, max=64), 1: torch.export.Dim("S", min=2,
                                                                                 max=L)}
            torch.onnx.export(model, (example,), dynamo=True, opset_version=18,
                              input_names=[name], output_names=["y"], dynamic_shapes=(dims,),
                              verbose=False).save(str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The trained demo transformer exported both ways, its PE checkpoint, and the others."""
    folder = tmp_path_factory.mktemp("graft")
    torch.manual_seed(0)
    tiny = _train(Tiny())
    files = {exporter: _export(tiny, torch.randn(2, L, D), folder / f"{exporter}.onnx", exporter)
             for exporter in EXPORTERS}
    torch.save(tiny.pe.state_dict(), folder / "demo-pe.pt")
    files["two"] = _export(TwoPE().eval(), torch.randn(1, L, D), folder / "two.onnx",
                           "torchscript")
    own = EdgepeOwn().eval()
    files["own"] = _export(own, torch.randn(2, L, D), folder / "own.onnx", "torchscript")
    nope = NoPE().eval()
    files["nope"] = _export(nope, torch.randint(0, VOCAB, (2, L)), folder / "nope.onnx",
                            "torchscript", name="ids")
    return {"dir": folder, "tiny": tiny, "own_module": own, "nope_module": nope, **files}


def _lengths(exporter: str) -> list[str]:
    return ["--lengths", str(L)] if exporter == "torchscript" else []


def _cli(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _run(path, feeds) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["y"], feeds)[0]


def _table_bytes() -> int:
    return L * N_BITS * 4  # the demo's float32 bit table [1, L, n_bits]


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_detect_finds_the_demo_pe_and_reads_the_trained_projection(models, exporter):
    (found,) = detect(load_model(models[exporter])[0], "binary")
    weight = models["tiny"].pe.projection.weight.detach().numpy().T
    assert found.max_len == L
    np.testing.assert_array_equal(found.weight, weight)  # the checkpoint, read from the model
    assert (found.positions.kind, found.positions.name, found.positions.axis) == ("arange", "x", 1)


def test_detect_finds_edgepes_own_binary_module(models, tmp_path):
    (found,) = detect(load_model(models["own"])[0], "binary")
    weight = models["own_module"].pe.projection.weight.detach().numpy().T
    np.testing.assert_array_equal(found.weight, weight)
    report = edgepe.graft(models["own"], scheme="binary", lengths=[L], out=tmp_path / "o.onnx")
    assert report and report.saved > 0, str(report)


@pytest.mark.parametrize("quantize", ["none", "int8"])
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_graft_scheme_cli_keeps_the_outputs_and_drops_the_table(models, exporter, quantize,
                                                                tmp_path):
    out = tmp_path / "grafted.onnx"
    code, stdout, stderr = _cli("graft", models[exporter], "--scheme", "binary", "--quantize",
                                quantize, "--out", out, *_lengths(exporter))
    assert code == 0, stderr
    assert "y: max abs err" in stdout and " ok" in stdout and f"wrote {out}" in stdout

    grafted = onnx.load(out)
    onnx.checker.check_model(grafted, full_check=True)
    tables = [t for t in grafted.graph.initializer if list(t.dims)[-2:] == [L, N_BITS]]
    assert not tables, "the float bit table is still in the grafted model"
    assert any(p.key == "edgepe.graft.0" for p in grafted.metadata_props)

    # independent of graft's own proof: both files on onnxruntime, positions up to L - 1
    x = np.random.default_rng(1).standard_normal((2, L, D)).astype(np.float32)
    err = np.abs(_run(out, {"x": x}) - _run(models[exporter], {"x": x})).max()
    # float: the same bits @ W in another graph (measured 0); int8: the PE's proven bound 0.0104
    # through two layers (measured 0.002-0.007)
    assert err <= (1e-5 if quantize == "none" else 0.05)

    report = edgepe.graft(models[exporter], scheme="binary", quantize=quantize,
                          lengths=[L] if exporter == "torchscript" else None)
    assert report and report.bytes_after == out.stat().st_size
    # smaller by the table's bytes, less what the PE graph and its manifest add
    assert report.saved >= _table_bytes() - report.pe_bytes - report.metadata_bytes
    assert report.saved > 0


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_graft_artifact_from_the_demo_checkpoint_python_api(models, quantize, tmp_path):
    """``--pe ARTIFACT --at TENSOR``: the artifact exported from the demo's own state_dict."""
    from edgepe import api

    config = api.make_config("binary", L, d_model=D, quantize=quantize,
                             checkpoint=models["dir"] / "demo-pe.pt", out=tmp_path / "pe.onnx")
    artifact = api.export(config, verify=False)[0].path
    (found,) = detect(load_model(models["dynamo"])[0], "binary")
    report = edgepe.graft(models["dynamo"], pe=artifact, at=found.at, positions="arange:x",
                          out=tmp_path / "out.onnx", checkpoint=models["dir"] / "demo-pe.pt")
    assert report, str(report)
    assert [c.name for c in report.checks] == ["y"] and report.lengths[-1] == L
    assert report.checks[0].max_abs_err <= report.checks[0].tolerance
    assert report.saved >= _table_bytes() - report.pe_bytes - report.metadata_bytes > 0


def test_graft_twice_with_different_pes_never_collides(models, tmp_path):
    from edgepe import api

    first, second = tmp_path / "one.onnx", tmp_path / "two.onnx"
    assert edgepe.graft(models["dynamo"], scheme="binary", out=first)
    sinusoidal = api.export(api.make_config("sinusoidal", L, d_model=D,
                                            out=tmp_path / "sin.onnx"), verify=False)[0].path
    report = edgepe.graft(first, pe=sinusoidal, at="x", add=True, out=second)
    assert report, str(report)
    grafted = onnx.load(second)
    keys = sorted(p.key for p in grafted.metadata_props if p.key.startswith("edgepe.graft."))
    assert keys == ["edgepe.graft.0", "edgepe.graft.1"]
    names = [o for n in grafted.graph.node for o in n.output]
    assert len(names) == len(set(names))
    assert {n.split("/")[0] for n in names if n.startswith("edgepe_pe")} == {"edgepe_pe0",
                                                                              "edgepe_pe1"}


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_graft_adds_a_pe_to_a_model_without_one(models, quantize, tmp_path, edgepe_exe):
    """``--at`` the embedding output with ``--add``; as a user types it (a real subprocess)."""
    from edgepe import api

    artifact = api.export(api.make_config("binary", L, d_model=D, quantize=quantize,
                                          out=tmp_path / "pe.onnx"), verify=False)[0].path
    embedding = next(n.output[0] for n in onnx.load(models["nope"]).graph.node
                     if n.op_type == "Gather")
    out = tmp_path / "with-pe.onnx"
    args = [str(models["nope"]), "--pe", str(artifact), "--at", embedding, "--add",
            "--positions", "arange:ids", "--lengths", str(L), "--out", str(out)]
    if quantize == "none":  # once as a real process, once in this one (the same command)
        done = subprocess.run([edgepe_exe, "graft", *args], capture_output=True, text=True,
                              timeout=300)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        code, stdout, stderr = _cli("graft", *args)
    assert code == 0, stderr
    assert "y: max abs err" in stdout

    ids = np.random.default_rng(2).integers(0, VOCAB, (2, L))
    with_pe, without = _run(out, {"ids": ids}), _run(models["nope"], {"ids": ids})
    assert np.abs(with_pe - without).max() > 0.1  # the PE is really added
    # and it is what adding the artifact's rows to the embedding gives, computed in torch
    nope = models["nope_module"]
    pe = edgepe.load(artifact).encode(np.arange(L))
    with torch.no_grad():
        want = nope.layers(nope.embed(torch.as_tensor(ids)) + torch.as_tensor(pe)).numpy()
    assert np.abs(with_pe - want).max() <= 1e-4  # float32 torch vs onnxruntime, 2 layers


def _bad(args, tmp_path):
    """Run a graft that must fail: exit 2, one ``error:`` line, nothing written or damaged."""
    fresh, kept = tmp_path / "fresh.onnx", tmp_path / "kept.onnx"
    kept.write_bytes(b"precious")
    results = []
    for out, extra in ((fresh, []), (kept, ["--force"])):
        code, stdout, stderr = _cli("graft", *args, "--out", out, *extra)
        results.append((code, stderr))
        assert code == 2, (stdout, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert not fresh.exists() and kept.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.onnx"]
    return results[0][1]


@pytest.fixture(scope="module")
def float_pe(tmp_path_factory):
    from edgepe import api

    folder = tmp_path_factory.mktemp("pe")
    made = {d: api.export(api.make_config("binary", L, d_model=d, out=folder / f"pe{d}.onnx"),
                          verify=False)[0].path for d in (D, 8)}
    return made


def test_bad_tensor_not_found(models, float_pe, tmp_path):
    stderr = _bad([models["dynamo"], "--pe", float_pe[D], "--at", "linearr"], tmp_path)
    assert "tensor 'linearr' is not in the model" in stderr and "'linear'" in stderr


def test_bad_shape_mismatch(models, float_pe, tmp_path):
    stderr = _bad([models["dynamo"], "--pe", float_pe[8], "--at", "linear"], tmp_path)
    assert "shape mismatch" in stderr and "[N, 8]" in stderr


def test_bad_dtype_mismatch(models, tmp_path_factory, tmp_path):
    from edgepe import api

    folder = tmp_path_factory.mktemp("u8")
    bits = api.export(api.make_config("binary-bits", L, d_model=D, dtype="uint8",
                                      out=folder / "bits.onnx"), verify=False)[0].path
    stderr = _bad([models["dynamo"], "--pe", bits, "--at", "linear"], tmp_path)
    assert "tensor 'linear' is float32; the PE outputs uint8" in stderr


def test_bad_two_candidate_subgraphs(models, tmp_path):
    stderr = _bad([models["two"], "--scheme", "binary"], tmp_path)
    assert "2 'binary' PE subgraphs found" in stderr and "--at" in stderr


def test_bad_no_candidate(models, tmp_path):
    stderr = _bad([models["nope"], "--scheme", "binary"], tmp_path)
    assert "no 'binary' PE found" in stderr


def test_bad_model_is_not_onnx(float_pe, tmp_path):
    text = tmp_path.parent / f"{tmp_path.name}-notes.txt"
    text.write_text("not a model\n" * 10)
    stderr = _bad([text, "--scheme", "binary"], tmp_path)
    assert "is not an ONNX model" in stderr


def test_bad_artifact_changed_after_export(models, float_pe, tmp_path):
    tampered = tmp_path.parent / f"{tmp_path.name}-pe.onnx"
    tampered.write_bytes(float_pe[D].read_bytes()[:-1] + b"\x00")
    (tampered.parent / (tampered.name + ".json")).write_bytes(
        (float_pe[D].parent / (float_pe[D].name + ".json")).read_bytes())
    stderr = _bad([models["dynamo"], "--pe", tampered, "--at", "linear"], tmp_path)
    assert "sha256" in stderr


@pytest.mark.parametrize("dtype", [onnx.TensorProto.INT64, onnx.TensorProto.INT32])
def test_positions_from_an_existing_rank_2_input(float_pe, dtype, tmp_path):
    """``position_ids [B, S]`` (HF style, int64 or int32): flattened for the PE, the encodings
    shaped back to ``[B, S, D]``; the proof feeds random positions ending at max_len - 1."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", D]),
         helper.make_tensor_value_info("position_ids", dtype, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", D])])
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), model)
    report = edgepe.graft(model, pe=float_pe[D], at="h", add=True, out=tmp_path / "out.onnx")
    assert report and report.positions == "position_ids", str(report)
    ids = np.random.default_rng(3).integers(0, L, (2, 7)).astype(
        np.int64 if dtype == onnx.TensorProto.INT64 else np.int32)
    x = np.random.default_rng(4).standard_normal((2, 7, D)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["y"], {"x": x, "position_ids": ids})[0]
    pe = edgepe.load(float_pe[D]).encode(ids.reshape(-1).astype(np.int64)).reshape(2, 7, D)
    np.testing.assert_allclose(got, np.tanh(np.maximum(x, 0) + pe), rtol=0, atol=1e-6)


def test_a_pe_that_changes_the_outputs_fails_the_proof_and_writes_nothing(models, float_pe,
                                                                           tmp_path):
    """The proof can fail: the seeded-init artifact is not the trained projection."""
    out = tmp_path / "wrong.onnx"
    code, stdout, stderr = _cli("graft", models["dynamo"], "--pe", float_pe[D], "--at", "linear",
                                "--out", out)
    assert code == 1, (stdout, stderr)
    assert "y: max abs err" in stdout and "MISMATCH" in stdout
    assert stderr.strip().splitlines() == [
        f"error: the grafted model's outputs differ from the original's beyond tolerance (y); "
        f"{str(out)!r} was not written"]
    assert not out.exists()
    code, stdout, _ = _cli("graft", models["dynamo"], "--pe", float_pe[D], "--at", "linear",
                           "--out", out, "--no-check")
    assert code == 0 and "equivalence not checked (--no-check)" in stdout and out.exists()


def test_gray_artifact_with_default_arange_positions(tmp_path):
    """A gray artifact (compute mode holds an int64 constant 'one', as graft's own arange did)
    grafts with the default ``arange`` positions: graft's own names live under their own
    sub-prefix, so nothing collides after renaming (issue 29)."""
    from onnx import TensorProto, helper

    from edgepe import api

    pe = api.export(api.make_config("gray", 16, d_model=8, out=tmp_path / "gray.onnx"),
                    verify=False)[0].path
    names = {t.name for t in onnx.load(pe).graph.initializer}
    assert "one" in names  # the collision this test is about
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 8])])
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), model)
    report = edgepe.graft(model, pe=pe, at="h", add=True, out=tmp_path / "out.onnx")
    assert report and report.positions == "arange:x:1", str(report)
    x = np.random.default_rng(5).standard_normal((2, 16, 8)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["y"], {"x": x})[0]
    pe_rows = edgepe.load(pe).encode(np.arange(16, dtype=np.int64))
    np.testing.assert_allclose(got, np.tanh(np.maximum(x, 0) + pe_rows), rtol=0, atol=1e-6)
