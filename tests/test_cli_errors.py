"""The CLI's one error path: bugs are reported briefly, identical re-exports write nothing."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import edgepe.export
from edgepe.cli import BUG_EXIT, PIPE_EXIT, app


def test_an_unexpected_exception_is_a_short_bug_report(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(edgepe.export, "prepare", broken)
    args = ["export", "--scheme", "gray", "--max-len", "16", "--out", str(tmp_path / "g.onnx")]

    result = CliRunner().invoke(app, args)
    assert result.exit_code == BUG_EXIT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "simulated bug" in lines[0] and "report" in lines[0]
    assert shlex.join(["edgepe", "--verbose", *args]) in lines[0]  # the command to rerun, whole
    assert list(tmp_path.iterdir()) == []

    verbose = CliRunner().invoke(app, ["--verbose", *args])
    assert verbose.exit_code == BUG_EXIT
    assert "Traceback" in verbose.stderr and "ZeroDivisionError" in verbose.stderr


def test_identical_reexport_is_a_noop(tmp_path):
    out = tmp_path / "g.onnx"
    args = ["export", "--scheme", "gray", "--max-len", "16", "--out", str(out)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    before = (os.stat(out).st_mtime_ns, os.stat(str(out) + ".json").st_mtime_ns)

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "unchanged" in again.stdout
    assert (os.stat(out).st_mtime_ns, os.stat(str(out) + ".json").st_mtime_ns) == before
    first_bytes = out.read_bytes()

    # --force always writes: an export is deterministic, so the same bytes come back
    forced_same = CliRunner().invoke(app, [*args, "--force"])
    assert forced_same.exit_code == 0 and "unchanged" not in forced_same.stdout
    assert out.read_bytes() == first_bytes

    # another edgepe version wrote it: not "this exact export", so --force is needed
    manifest = json.loads(Path(str(out) + ".json").read_text())
    manifest["edgepe_version"] = "0.0.1"
    Path(str(out) + ".json").write_text(json.dumps(manifest))
    older = CliRunner().invoke(app, args)
    assert older.exit_code == 2 and "--force" in older.stderr
    before = (os.stat(out).st_mtime_ns, os.stat(str(out) + ".json").st_mtime_ns)

    other = CliRunner().invoke(app, [*args[:-4], "--max-len", "32", "--out", str(out)])
    assert other.exit_code == 2 and "--force" in other.stderr
    forced = CliRunner().invoke(app, [*args[:-4], "--max-len", "32", "--out", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    assert os.stat(out).st_mtime_ns != before[0]


def test_a_reader_that_leaves_early_is_not_a_bug():
    """``edgepe list | head -0``: a closed pipe ends the command quietly with 141 (a shell's
    code for SIGPIPE), never 1 (a failed verification), for a command and for ``--help``."""
    for args in (["list"], ["export", "--help"], ["--help"], ["--version"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader has left before the first write: EPIPE, every time
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "edgepe", *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                timeout=120,
            )
        finally:
            os.close(write_end)
        stderr = proc.stderr.decode()
        assert proc.returncode == PIPE_EXIT == 141, (args, stderr)
        assert stderr == "", (args, stderr)
