"""``edgepe export`` and ``edgepe inspect`` through typer's CliRunner and as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from edgepe.cli import app

EDGEPE = str(Path(sys.executable).with_name("edgepe"))


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_canonical_export_writes_under_models_and_reports_parity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _invoke("export", "--scheme", "binary", "--max-len", "512")
    assert result.exit_code == 0, result.output
    out = tmp_path / "models" / "binary-compute-L512-d64.onnx"
    lines = _lines(result.stdout)
    assert len(lines) == 2, lines
    assert lines[0].startswith("wrote models/binary-compute-L512-d64.onnx (")
    assert f"({out.stat().st_size} bytes" in lines[0]
    assert lines[1].startswith("parity PASSED") and "cpu ok" in lines[1]
    manifest = json.loads(Path(f"{out}.json").read_text())
    assert manifest["scheme"] == "binary" and manifest["d_model"] == 64
    assert manifest["mode"] == "compute" and manifest["format"] == "onnx"
    assert manifest["onnx"]["inputs"][0]["name"] == "positions"

    again = _invoke("export", "--scheme", "binary", "--max-len", "512")
    assert again.exit_code == 0 and _lines(again.stdout)[0].startswith("unchanged ")


def test_export_options_reach_the_artifact(tmp_path):
    out = tmp_path / "g.onnx"
    result = _invoke("export", "--scheme", "binary-smooth", "--max-len", "100", "--d-model", "9",
                     "--param", "c=2.5", "--lowering", "arith", "--opset", "13", "--out",
                     str(out), "--no-verify")
    assert result.exit_code == 0, result.output
    assert len(_lines(result.stdout)) == 1  # no parity line with --no-verify
    manifest = json.loads(Path(f"{out}.json").read_text())
    assert manifest["params"] == {"c": 2.5} and manifest["d_model"] == 9
    assert manifest["lowering"] == "arith" and manifest["onnx"]["opset"] == 13
    model = onnx.load(str(out))
    assert model.opset_import[0].version == 13
    assert not {n.op_type for n in model.graph.node} & {"BitShift", "BitwiseAnd"}


def test_table_and_dtype_options(tmp_path):
    out = tmp_path / "t.onnx"
    result = _invoke("export", "--scheme", "gray", "--max-len", "50", "--mode", "table",
                     "--dtype", "uint8", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.stdout
    table = {t.name: t for t in onnx.load(str(out)).graph.initializer}["table"]
    assert list(table.dims) == [50, 6] and table.data_type == onnx.TensorProto.UINT8


def test_existing_artifact_needs_force_and_is_kept(tmp_path):
    out = tmp_path / "a.onnx"
    assert _invoke("export", "--scheme", "gray", "--max-len", "16", "--out", str(out),
                   "--no-verify").exit_code == 0
    before = out.read_bytes()
    result = _invoke("export", "--scheme", "gray", "--max-len", "32", "--out", str(out),
                     "--no-verify")
    assert result.exit_code == 2 and "--force" in result.stderr
    assert out.read_bytes() == before
    forced = _invoke("export", "--scheme", "gray", "--max-len", "32", "--out", str(out),
                     "--no-verify", "--force")
    assert forced.exit_code == 0 and out.read_bytes() != before


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--scheme", "grey", "--max-len", "16"], ["Did you mean 'gray'"]),
     (["--scheme", "gray", "--max-len", "16", "--param", "=3"], ["KEY=VALUE"]),
     (["--scheme", "binary-smooth", "--max-len", "16", "--param", "c=1", "--param", "c=2"],
      ["twice"]),
     (["--scheme", "gray", "--max-len", "16", "--dtype", "bit"], ["--format npy"]),
     (["--scheme", "gray", "--max-len", "16", "--opset", "17"], ["BitwiseAnd", "18"]),
     (["--scheme", "gray", "--max-len", "16", "--opset", "x"], ["--opset", "'x'"]),
     (["--scheme", "alibi", "--max-len", "16", "--lowering", "arith"], ["bit family"]),
     (["--scheme", "gray", "--max-len", "16", "--lowering", "fast"], ["fast", "arith"])],
)
def test_bad_export_options_are_one_line_exit_2(tmp_path, args, words):
    out = tmp_path / "x.onnx"
    result = _invoke("export", *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = _lines(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], lines[0]
    assert not out.exists() and not Path(f"{out}.json").exists()


def test_failed_parity_exits_1(tmp_path, monkeypatch):
    """The exit-code plumbing: a falsy report from the verifier makes ``export`` exit 1.

    A real export cannot fail its own parity check, so the verifier's answer is replaced by a
    failing report here; the parity checks themselves are tested against real runtimes.
    """
    from edgepe import api

    class Failed:
        def __bool__(self):
            return False

        def __str__(self):
            return "parity FAILED for x: cpu FAILED: 3 of 64 elements beyond tolerance"

    monkeypatch.setattr(api, "verify_artifact",
                        lambda path, quick=False, **options: Failed())
    result = _invoke("export", "--scheme", "gray", "--max-len", "16", "--out",
                     str(tmp_path / "x.onnx"))
    assert result.exit_code == 1
    assert _lines(result.stderr) == [str(Failed())]


def test_inspect_audits_a_compute_graph(tmp_path):
    out = tmp_path / "b.onnx"
    assert _invoke("export", "--scheme", "binary", "--max-len", "512", "--out", str(out),
                   "--no-verify").exit_code == 0
    result = _invoke("inspect", str(out))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "matches the manifest" in text
    assert "scheme binary" in text and "max_len 512" in text and "d_model 64" in text
    assert "IR version 8" in text and "ai.onnx 18" in text
    for op in ("BitwiseAnd", "Gemm", "Cast"):
        assert op in text
    assert "projection_scaled" in text and "[10, 64]" in text
    assert "integer-only up to the first float cast: yes" in text
    assert "trig-free: yes" in text
    assert "position-indexed tables: none" in text


def test_inspect_reports_a_table_and_trig(tmp_path):
    table = tmp_path / "t.onnx"
    trig = tmp_path / "s.onnx"
    assert _invoke("export", "--scheme", "learned", "--max-len", "40", "--d-model", "6",
                   "--out", str(table), "--no-verify").exit_code == 0
    assert _invoke("export", "--scheme", "sinusoidal", "--max-len", "40", "--d-model", "6",
                   "--out", str(trig), "--no-verify").exit_code == 0
    text = _invoke("inspect", str(table)).stdout
    assert "position-indexed tables: table [40, 6]" in text
    assert "integer-only up to the first float cast: no" in text
    text = _invoke("inspect", str(trig)).stdout
    assert "trig-free: no" in text and "Sin" in text


def test_inspect_non_onnx_artifact_and_non_artifact(tmp_path):
    npy = tmp_path / "g.npy"
    result = _invoke("export", "--scheme", "gray", "--max-len", "20", "--format", "npy",
                     "--out", str(npy), "--no-verify")
    assert result.exit_code == 0, result.output
    text = _invoke("inspect", str(npy)).stdout
    assert f"{npy.stat().st_size} bytes" in text and "format npy" in text
    assert "mode table" in text and "audit" not in text
    np.testing.assert_array_equal(np.load(npy)[3], [0, 1, 0, 0, 0])  # gray(3) = 0b10, LSB first

    junk = tmp_path / "notes.txt"
    junk.write_text("hello")
    result = _invoke("inspect", str(junk))
    assert result.exit_code == 2
    assert len(_lines(result.stderr)) == 1 and "not an edgepe artifact" in result.stderr


def test_tampered_artifact_is_flagged_by_inspect(tmp_path):
    out = tmp_path / "g.onnx"
    assert _invoke("export", "--scheme", "gray", "--max-len", "16", "--out", str(out),
                   "--no-verify").exit_code == 0
    model = onnx.load(str(out))
    model.producer_version = "tampered"
    onnx.save(model, str(out))
    assert "DIFFERS from the manifest" in _invoke("inspect", str(out)).stdout


@pytest.mark.parametrize("scheme,noted", [("sinusoidal", True), ("integer", True),
                                           ("binary", False), ("sinusoidal-learned", False)])
def test_int8_export_says_when_the_graph_only_quantises_its_output(tmp_path, scheme, noted):
    """A weightless compute graph grows under int8 (its output is quantised, nothing is stored
    int8): export says so and names the small artifact; a graph with int8 constants does not."""
    out = tmp_path / "q.onnx"
    result = _invoke("export", "--scheme", scheme, "--max-len", "64", "--quantize", "int8",
                     "--out", str(out), "--no-verify")
    assert result.exit_code == 0, result.output
    notes = [line for line in _lines(result.stdout) if line.startswith("note:")]
    assert len(notes) == (1 if noted else 0)
    if noted:
        assert f"{scheme}'s compute graph stores no weights" in notes[0]
        assert "--mode table --quantize int8" in notes[0]
        plain = tmp_path / "f.onnx"
        assert _invoke("export", "--scheme", scheme, "--max-len", "64", "--out", str(plain),
                       "--no-verify").exit_code == 0
        assert out.stat().st_size > plain.stat().st_size  # what the note says


@pytest.mark.parametrize("args,bytes_line", [
    (("binary", "--max-len", "512"),
     "projection weights: 2560 B float32 -> 768 B int8 (saves 1792 B, 70%)"),
    (("sinusoidal", "--max-len", "64", "--d-model", "8", "--mode", "table", "--format", "npy"),
     "table (entries + scales): 2048 B float32 -> 544 B int8 (saves 1504 B, 73%)"),
    (("sinusoidal", "--max-len", "64", "--d-model", "8"),
     "int8 output only: a row is 8 B int8 instead of 32 B at the device boundary"),
])
def test_inspect_shows_the_quantisation_and_the_bytes_saved(tmp_path, args, bytes_line):
    scheme, *rest = args
    out = tmp_path / ("q.npy" if "npy" in rest else "q.onnx")  # --out's extension names it
    assert _invoke("export", "--scheme", scheme, *rest, "--quantize", "int8", "--out", str(out),
                   "--no-verify").exit_code == 0
    manifest = json.loads((tmp_path / f"{out.name}.json").read_text())
    quant = [line for line in _lines(_invoke("inspect", str(out)).stdout)
             if line.startswith("quant:")]
    assert len(quant) == 1
    scales = len(manifest["quant"]["scale"])
    assert quant[0].startswith(f"quant: int8 symmetric [-127, 127] per channel (axis "
                               f"{manifest['quant']['axis']}, {scales} scales), zero point 0; ")
    assert (f"max abs err {manifest['quant']['max_abs_err']:.3g} <= bound "
            f"{manifest['quant']['bound']:.3g}") in quant[0]
    assert bytes_line in quant[0]


@pytest.mark.parametrize("edit", ["onnx", "params"])
def test_inspect_checks_the_sidecar_against_the_graph(tmp_path, edit):
    """The graph's header (the sidecar's ``onnx``) and its embedded manifest agree with the
    sidecar, field by field, even where the file's sha256 still matches."""
    out = tmp_path / "g.onnx"
    assert _invoke("export", "--scheme", "binary-smooth", "--max-len", "16", "--out", str(out),
                   "--no-verify").exit_code == 0
    assert "metadata_props: matches" in _invoke("inspect", str(out)).stdout
    sidecar = tmp_path / "g.onnx.json"
    manifest = json.loads(sidecar.read_text())
    if edit == "onnx":
        manifest["onnx"]["opset"] = 17
    else:
        manifest["params"]["c"] = 4.0
    sidecar.write_text(json.dumps(manifest))
    text = _invoke("inspect", str(out)).stdout
    assert "matches the manifest" in text  # the sha256 of the file
    assert "metadata_props: DIFFERS" in text


def test_real_subprocess_export_and_inspect(tmp_path):
    proc = subprocess.run([EDGEPE, "export", "--scheme", "gray", "--max-len", "100"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stdout)
    assert lines[0].startswith("wrote models/gray-compute-L100-d7.onnx")
    assert lines[1].startswith("parity PASSED")
    proc = subprocess.run([EDGEPE, "inspect", "models/gray-compute-L100-d7.onnx"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "BitwiseXor" in proc.stdout and "trig-free: yes" in proc.stdout
    proc = subprocess.run([EDGEPE, "export", "--scheme", "gray", "--max-len", "100",
                           "--param", "oops"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and len(_lines(proc.stderr)) == 1


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from edgepe.cli import app\n"
        "for cmd in (['export', '--help'], ['inspect', '--help']):\n"
        "    assert CliRunner().invoke(app, cmd).exit_code == 0\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_exports_in_separate_processes_are_byte_identical(tmp_path):
    """Same command, fresh interpreters with different hash seeds: the same bytes."""
    import os

    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"h{seed}.onnx"
        proc = subprocess.run(
            [EDGEPE, "-q", "export", "--scheme", "hierarchical", "--max-len", "64", "--param",
             "widths=3,5,2", "--no-verify", "--out", str(out)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append((out.read_bytes(), Path(f"{out}.json").read_bytes()))
    assert outputs[0] == outputs[1]
