"""A patched model exported by each exporter, proven on its runtime (issue 42).

One saved tiny Llama (random weights, seeded) for the file. The default suite runs the ONNX
exporter once (sliced mode: the lowering with floor division, the one litert-torch needs too)
and the cheap refusals of ``--verify``; ExecuTorch's portable program and LiteRT are slow
(each exports the model twice: patched and unpatched); the README's slow runs cover
``--exporter pte-xnnpack`` and the byte-identical rebuild of ``--verify``. The checks read
the written program themselves: no Sin/Cos op in it.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _hf_models  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("patch-export") / "llama"
    _hf_models.model("llama").save_pretrained(path)
    return path


def _cli(*args):
    from typer.testing import CliRunner

    from edgepe.cli import app

    return CliRunner().invoke(app, list(map(str, args)))


@pytest.fixture(scope="module")
def onnx_program(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "llama.onnx"
    result = _cli("patch", folder, "--mode", "sliced", "--out", out)
    assert result.exit_code == 0, result.output
    return out, result.stdout


def _manifest(path):
    return json.loads((path.parent / (path.name + ".json")).read_text())


def test_onnx_export_matches_the_unpatched_program_on_onnxruntime(onnx_program):
    import onnx

    out, stdout = onnx_program
    lines = stdout.splitlines()
    assert lines[-2].startswith(f"wrote {out} (")
    assert lines[-1].startswith("parity PASSED on onnxruntime CPU against the unpatched model's "
                                "onnx program")
    model = onnx.load(out)
    ops = {n.op_type for n in model.graph.node} | {n.op_type for f in model.functions
                                                   for n in f.node}
    assert not ops & {"Sin", "Cos"} and "Gather" in ops
    assert not ops & {"BitShift", "BitwiseAnd"}  # floor division and remainder instead
    manifest = _manifest(out)
    assert manifest["kind"] == "patched-model" and manifest["exporter"] == "onnx"
    assert manifest["trig_ops"] == {"patched": [0, 0], "unpatched": [2, 2]}
    assert 0 <= manifest["parity"]["max_abs_err"] <= manifest["parity"]["tolerance"] == 1e-5
    assert set(manifest["source"]) == {"config.json", "model.safetensors"}


def test_verify_refuses_a_changed_program_or_another_model(onnx_program, folder, tmp_path):
    import shutil

    out, _ = onnx_program
    copy = tmp_path / "copy.onnx"
    shutil.copy(out, copy)
    shutil.copy(str(out) + ".json", str(copy) + ".json")
    other = tmp_path / "other"
    _hf_models.model("mistral").save_pretrained(other)
    result = _cli("patch", other, "--verify", copy)
    assert result.exit_code == 2 and "is not the model" in result.stderr
    with open(copy, "ab") as f:
        f.write(b"\0")
    result = _cli("patch", folder, "--verify", copy)
    assert result.exit_code == 2 and "does not match its manifest's sha256" in result.stderr
    result = _cli("patch", folder, "--verify", folder / "config.json")
    assert result.exit_code == 2


@pytest.mark.slow
def test_executorch_export_matches_the_unpatched_program(folder, tmp_path):
    pytest.importorskip("executorch", reason="pip install -c constraints.txt -e '.[executorch]'")
    from executorch.exir._serialize._program import deserialize_pte_binary

    out = tmp_path / "llama.pte"
    result = _cli("patch", folder, "--out", out)  # portable kernels (XNNPACK: README's run)
    assert result.exit_code == 0, result.output
    program = deserialize_pte_binary(out.read_bytes()).program
    ops = {op.name for plan in program.execution_plan for op in plan.operators}
    assert not {"aten::sin", "aten::cos"} & ops
    manifest = _manifest(out)
    assert manifest["trig_ops"]["patched"] == [0, 0] and manifest["trig_ops"]["unpatched"][0] == 2
    assert manifest["parity"]["max_abs_err"] <= 1e-5


@pytest.mark.slow
def test_litert_export_matches_the_unpatched_program(folder, tmp_path):
    pytest.importorskip("litert_torch", reason="pip install -c constraints.txt -e '.[litert]'")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    out = tmp_path / "llama.tflite"
    result = _cli("patch", folder, "--mode", "sliced", "--out", out)
    assert result.exit_code == 0, result.output
    interpreter = Interpreter(model_path=str(out), experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    ops = {d["op_name"] for d in interpreter._get_ops_details()}
    assert not {"SIN", "COS"} & ops and "FLOOR_MOD" in ops
    manifest = _manifest(out)
    assert manifest["trig_ops"]["unpatched"][1] == 2
    assert manifest["parity"]["max_abs_err"] <= 1e-5


@pytest.mark.slow
def test_an_executorch_program_runs_after_its_bytes_are_dropped():
    """ExecuTorch's runtime reads the program's bytes in place: ``program``'s runner keeps them
    alive (the benchmark kept only their length, and the freed buffer crashed the runtime)."""
    pytest.importorskip("executorch", reason="pip install -c constraints.txt -e '.[executorch]'")
    import gc

    import edgepe.patch as patching
    from edgepe.patch.export import inputs, program

    model = _hf_models.model("llama")
    patching.patch(model, mode="sliced")
    ids, pos = inputs(model, 256)[0]
    data, _, run = program(model, "pte", (ids, pos))
    with torch.no_grad():
        want = model(input_ids=ids, position_ids=pos).logits.numpy()
    # the runner holds the very bytes the runtime reads (a copy would not keep them alive)
    assert any(data is kept for kept in gc.get_referents(*run.__defaults__))
    del data
    gc.collect()
    for _ in range(3):
        assert abs(run(ids, pos) - want).max() <= 1e-5
