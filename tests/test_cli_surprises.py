"""Issue 21, the CLI tried as a new user would: each surprise the issue lists, through the CLI.

(The C-header points of that list are tested with the C headers.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgepe.cli import app

REPO = Path(__file__).resolve().parents[1]
GRAY = ["--scheme", "gray", "--max-len", "16"]


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def gray(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gray") / "g.onnx"
    assert _invoke("export", *GRAY, "--out", str(out), "--no-verify").exit_code == 0
    return out


def test_plot_without_matplotlib_names_the_install_command(monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an absent package raises
    result = _invoke("plot", *GRAY, "--out", str(tmp_path / "p.png"))
    assert result.exit_code == 2, result.output
    line = _one_line(result.stderr)
    assert "matplotlib" in line and "pip install 'edgepe[plot]'" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name,fmt", [("t.npy", "npy"), ("t.bin", "bin"), ("t.h", "c"),
                                      ("t.onnx", "onnx")])
def test_format_follows_the_out_extension(tmp_path, name, fmt):
    out = tmp_path / name
    result = _invoke("export", *GRAY, "--out", str(out), "--no-verify")
    assert result.exit_code == 0, result.output
    assert json.loads(Path(str(out) + ".json").read_text())["format"] == fmt
    if fmt == "onnx":
        assert out.read_bytes()[:2] != b"\x93N"  # not an npy file
    if fmt == "npy":
        assert out.read_bytes()[:6] == b"\x93NUMPY"


@pytest.mark.parametrize("fmt,name", [("c", "g.onnx"), ("onnx", "t.npy"), ("npy", "t.h")])
def test_a_format_contradicting_the_extension_is_refused(tmp_path, fmt, name):
    result = _invoke("export", *GRAY, "--format", fmt, "--out", str(tmp_path / name))
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert f"--format {fmt}" in line and name in line
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_place_is_exit_2(tmp_path):
    result = _invoke("export", *GRAY, "--out", "/proc/x.onnx")
    assert result.exit_code == 2, result.output
    assert "/proc/x.onnx" in _one_line(result.stderr)
    assert not Path("/proc/x.onnx").exists()


@pytest.mark.parametrize("exists", [True, False])
def test_out_folder_slash_writes_the_default_name_inside(tmp_path, exists):
    folder = tmp_path / "arts"
    if exists:
        folder.mkdir()
    result = _invoke("export", *GRAY, "--out", f"{folder}/", "--no-verify")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == [
        "gray-compute-L16-d5.onnx", "gray-compute-L16-d5.onnx.json"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    import torch

    from edgepe.schemes import build, resolve

    d = tmp_path_factory.mktemp("ckpt")
    state = build(resolve("binary", 512, d_model=64), seed=3).state_dict()
    whole = {f"encoder.pos.{k}": v for k, v in state.items()}
    whole["head.weight"] = torch.zeros(2, 2)
    torch.save(whole, d / "whole.pt")
    torch.save(build(resolve("binary", 512, d_model=32)).state_dict(), d / "d32.pt")
    return d


def test_a_whole_model_checkpoint_names_its_prefix(checkpoints, tmp_path):
    base = ["export", "--scheme", "binary", "--max-len", "512", "--checkpoint",
            str(checkpoints / "whole.pt")]
    refused = _invoke(*base, "--out", str(tmp_path / "a.onnx"))
    assert refused.exit_code == 2
    assert "--checkpoint-key 'encoder.pos'" in _one_line(refused.stderr)

    wrong = _invoke(*base, "--checkpoint-key", "pos", "--out", str(tmp_path / "a.onnx"))
    assert wrong.exit_code == 2
    assert "prefixes: encoder, head" in _one_line(wrong.stderr)
    assert list(tmp_path.iterdir()) == []

    out = tmp_path / "b.onnx"
    done = _invoke(*base, "--checkpoint-key", "encoder.pos", "--out", str(out))
    assert done.exit_code == 0, done.output
    manifest = json.loads(Path(str(out) + ".json").read_text())
    assert manifest["checkpoint"]["key"] == "encoder.pos"
    assert manifest["inputs"]["checkpoint_key"] == "encoder.pos"
    # the weights are the checkpoint's (the seed-3 init), not the default init (seed 0)
    import edgepe

    seeded = tmp_path / "seed3.onnx"
    assert _invoke("export", "--scheme", "binary", "--max-len", "512", "--seed", "3", "--out",
                   str(seeded), "--no-verify").exit_code == 0
    positions = list(range(0, 512, 7))
    assert (edgepe.load(out).encode(positions) == edgepe.load(seeded).encode(positions)).all()
    # verify opens no path a manifest names: the checkpoint comes from the user (issue 23), and
    # the key recorded in the manifest picks its entries again
    assert _invoke("verify", str(out)).exit_code == 2
    assert _invoke("verify", str(out), "--checkpoint", str(checkpoints / "whole.pt")).exit_code == 0
    # plot takes the same option
    png = tmp_path / "w.png"
    plotted = _invoke("plot", *base[1:], "--checkpoint-key", "encoder.pos", "--out", str(png))
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_d_model_mismatch_suggests_the_checkpoints_width(checkpoints, tmp_path):
    result = _invoke("export", "--scheme", "binary", "--max-len", "512", "--checkpoint",
                     str(checkpoints / "d32.pt"), "--out", str(tmp_path / "a.onnx"))
    assert result.exit_code == 2
    assert "--d-model 32" in _one_line(result.stderr)


def test_version():
    result = _invoke("--version")
    from edgepe import __version__

    assert result.exit_code == 0 and result.stdout.strip() == f"edgepe {__version__}"


@pytest.mark.parametrize("argv", [["--bogus"], ["nosuch"], ["-x", "list"]])
def test_root_usage_errors_are_one_line(argv):
    proc = subprocess.run([sys.executable, "-m", "edgepe", *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "edgepe --help" in _one_line(proc.stderr)


def test_quiet_after_the_command(tmp_path):
    for flag in ("-q", "--quiet"):
        out = tmp_path / f"g{flag}.onnx"
        result = _invoke("export", *GRAY, "--out", str(out), flag)
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and out.exists()


def test_help_shows_flags_as_flags_and_path_as_path():
    export_help = _invoke("export", "--help")
    assert "--force" in export_help.stdout and "<bool>" not in export_help.stdout
    verify_help = _invoke("verify", "--help").stdout
    usage = next(line for line in verify_help.splitlines() if "Usage:" in line)
    assert usage.split() == ["Usage:", "edgepe", "verify", "[OPTIONS]", "PATH"]
    refused = _invoke("export", *GRAY, "--force", "true")
    assert refused.exit_code == 2 and "true" in _one_line(refused.stderr)


def test_verify_json_dash_writes_stdout(gray, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _invoke("verify", str(gray), "--json", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] is True and report["results"]
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("extra", [["--format", "npy"], ["--out", "{d}/r.npy"],
                                   ["--format", "bin", "--out", "{d}/r.bin"]])
def test_rope_graph_off_onnx_is_refused(tmp_path, extra):
    extra = [a.replace("{d}", str(tmp_path)) for a in extra]
    result = _invoke("export", "--scheme", "rope", "--max-len", "16", "--rope-graph", "apply",
                     *extra)
    assert result.exit_code == 2
    assert "--rope-graph" in _one_line(result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_inspect_shows_lowering_only_for_bit_front_ends(gray, tmp_path):
    sin = tmp_path / "s.onnx"
    assert _invoke("export", "--scheme", "sinusoidal", "--max-len", "16", "--out", str(sin),
                   "--no-verify").exit_code == 0
    assert not re.search(r"lowering (bitwise|arith)", _invoke("inspect", str(sin)).stdout)
    assert "lowering bitwise" in _invoke("inspect", str(gray)).stdout


@pytest.mark.parametrize("argv", [
    ["export", "--scheme", "grey", "--max-len", "16"],
    ["export", *GRAY, "--bogus"],
    ["run", "{g}", "-p", "0:4", "--providers", "gpu"],
    ["export", *GRAY, "--format", "xyz"],
])
def test_error_lines_start_lower_case(gray, argv):
    result = _invoke(*[a.replace("{g}", str(gray)) for a in argv])
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert re.match(r"error: [a-z'\-]", line), line


def test_readme_synopsis_lists_every_export_option():
    import typer

    command = typer.main.get_command(app).commands["export"]
    options = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}
    for doc in (REPO / "README.md", REPO / "docs" / "readme" / "export.md"):
        text = doc.read_text()
        synopsis = text[text.index("edgepe export --scheme ID"):]
        synopsis = synopsis[: synopsis.index("```")]
        missing = sorted(o for o in options if o not in synopsis)
        assert missing == [], (doc.name, missing)


def test_quiet_run_prints_no_onnxruntime_warnings(gray, tmp_path):
    """A graph with an unused initializer makes onnxruntime warn at load; under -q nothing
    reaches stderr (edgepe sets its logger and the session's severity to errors)."""
    import numpy as np
    import onnx

    model = onnx.load(gray)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(3, "float32"), "spare"))
    noisy = tmp_path / "noisy.onnx"
    onnx.save(model, noisy)
    manifest = json.loads(Path(str(gray) + ".json").read_text())
    manifest["sha256"] = hashlib.sha256(noisy.read_bytes()).hexdigest()
    Path(str(noisy) + ".json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "edgepe", "-q", "run", str(noisy), "-p", "0:4",
                           "--out", str(tmp_path / "v.npy")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode in (0, 2), proc.stderr
    assert "onnxruntime" not in proc.stderr.lower() or proc.stderr.startswith("error: ")
    if proc.returncode == 0:
        assert proc.stderr == ""


def test_plot_with_an_unwritable_home_is_quiet(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = "/dev/null"  # no config folder can be made under it, root or not
    out = tmp_path / "p.png"
    proc = subprocess.run([sys.executable, "-m", "edgepe", "plot", *GRAY, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"wrote {out} ({out.stat().st_size} bytes)"]
