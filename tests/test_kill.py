"""An export killed midway (SIGKILL while writing a large table) leaves the old artifact intact.

The temporary file it leaves behind is removed by the next export of the same target.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgepe.contract.config import TMP_MARK

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX-only")


def _edgepe(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("edgepe")
    return [str(script), *args]


def _export(out: Path, max_len: int, d_model: int) -> list[str]:
    return _edgepe(
        "export", "--scheme", "sinusoidal", "--max-len", str(max_len), "--d-model", str(d_model),
        "--mode", "table", "--format", "npy", "--out", str(out), "--force", "--no-verify",
    )


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if TMP_MARK in p.name]


def test_sigkill_while_writing_keeps_the_old_artifact(tmp_path):
    out = tmp_path / "table.npy"
    subprocess.run(_export(out, 64, 8), check=True, capture_output=True)
    old_bytes = out.read_bytes()
    old_manifest = json.loads(Path(str(out) + ".json").read_text())
    assert old_manifest["sha256"] == hashlib.sha256(old_bytes).hexdigest()

    # 65536 x 512 float32 = 128 MiB, written in chunks: long enough to be caught midway.
    big = subprocess.Popen(_export(out, 65536, 512), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            partial = _temporaries(tmp_path)
            if partial and partial[0].stat().st_size > 4 * 2**20:
                break
            if big.poll() is not None:
                pytest.fail("the large export finished before it could be killed")
            time.sleep(0.01)
        else:
            pytest.fail("the large export never started writing")
        os.kill(big.pid, signal.SIGKILL)
        big.wait()
    finally:
        if big.poll() is None:
            big.kill()
    assert big.returncode == -signal.SIGKILL

    assert out.read_bytes() == old_bytes
    assert json.loads(Path(str(out) + ".json").read_text()) == old_manifest
    stray = _temporaries(tmp_path)
    assert stray, "the kill should have left a partial temporary file to clean"

    # The next export of the same target cleans what the killed one left.
    subprocess.run(_export(out, 32, 8), check=True, capture_output=True)
    assert _temporaries(tmp_path) == []
    manifest = json.loads(Path(str(out) + ".json").read_text())
    assert manifest["shape"] == [32, 8]
    assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
