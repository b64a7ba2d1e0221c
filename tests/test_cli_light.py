"""The CLI stays light: ``edgepe --help`` imports no torch, onnx or onnxruntime (STYLE 8), and
``edgepe list`` prints the whole catalogue, in process (CliRunner) and as the real console script.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.schemes import scheme_ids

HEAVY = ("torch", "onnx", "onnxruntime")

# Runs the real entry point (edgepe.cli:main, which calls sys.exit(app())) once per argument
# list, in one fresh interpreter, and reports after each run its exit code and which heavy
# packages are in sys.modules by then (so the first command that loads one is named).
PROBE = f"""
import json, sys
from edgepe.cli import main
for args in json.loads(sys.argv[1]):
    sys.argv = ["edgepe", *args]
    try:
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in {set(HEAVY)!r})
    print("PROBE " + json.dumps({{"args": args, "code": code, "heavy": heavy}}), flush=True)
"""


def probe(runs: list[list[str]]) -> tuple[list[dict], str]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs)], capture_output=True,
                          text=True, timeout=120)
    results = [json.loads(line[len("PROBE "):]) for line in done.stdout.splitlines()
               if line.startswith("PROBE ")]
    assert len(results) == len(runs), done.stdout + done.stderr
    return results, done.stdout


def command_names() -> list[str]:
    return sorted(c.name for c in app.registered_commands)


def test_help_imports_no_heavy_package():
    """``edgepe``, ``edgepe --help`` and ``edgepe CMD --help`` for every command."""
    runs = [["--help"], []] + [[name, "--help"] for name in command_names()]
    results, out = probe(runs)
    for result in results:
        shown = " ".join(result["args"])
        assert result["heavy"] == [], f"edgepe {shown} imported {result['heavy'][:5]}"
        assert result["code"] in (0, 2), shown  # typer's bare `edgepe` shows help, exit 2
    assert results[0]["code"] == 0 and out.count("Usage") >= len(runs)
    assert all(name in out for name in command_names())


def test_the_probe_sees_heavy_imports():
    """Guard for the test above: running `edgepe list` does import torch, and the probe says so."""
    (result,), _ = probe([["list"]])
    assert result["code"] == 0 and "torch" in result["heavy"]


def test_console_script_help_imports_no_torch(edgepe_exe):
    """The installed script itself, under ``python -X importtime``: no heavy module loads."""
    done = subprocess.run([sys.executable, "-X", "importtime", edgepe_exe, "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "edgepe.cli" in imported  # the log really covers the CLI's imports
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


def listed_ids(text: str) -> list[str]:
    """The first column of `edgepe list`'s rows: the 80-column listing (an id at the start of a
    line, then its width) or the --wide table (rich box or ASCII borders)."""
    narrow = re.findall(r"^([a-z0-9-]+)  +(?:derived|heads \d+|\d+)  ", text, flags=re.MULTILINE)
    return narrow or re.findall(r"^\s*[│|]\s*([a-z0-9-]+)\s*[│|]", text, flags=re.MULTILINE)


def test_list_in_process_names_every_scheme_in_catalogue_order():
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    assert listed_ids(result.output) == scheme_ids()
    assert len(scheme_ids()) == 23


def test_list_as_a_subprocess(edgepe_exe):
    done = subprocess.run([edgepe_exe, "list", "--wide"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert listed_ids(done.stdout) == scheme_ids()
    for row in ("binary-multilevel", "guide 3.7", "groups (3)"):
        assert row in done.stdout
