"""Helpers the hostile-input suites share (tests/test_trust.py, tests/test_trust_round2.py): make a
small artifact, read and rewrite its manifest as a forger would, re-route a graph's output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx

from edgepe.api import make_config
from edgepe.contract.manifest import path_for
from edgepe.export import export


def export_to(folder: Path, name: str, scheme: str, max_len: int, **kw) -> Path:
    out = folder / name
    export(make_config(scheme, max_len, out=out, **kw))
    return out


def manifest_of(path: Path) -> dict:
    return json.loads(path_for(path).read_text())


def write_manifest(path: Path, manifest: dict) -> None:
    path_for(path).write_text(json.dumps(manifest))


def binary(folder: Path, max_len: int = 37, name: str = "b.onnx") -> Path:
    return export_to(folder, name, "binary", max_len, d_model=8)


def rerouted(folder: Path):
    """``(path, model, graph, out)`` of an exported binary graph whose output is renamed
    ``{out}_raw``: the caller adds the nodes that produce ``out`` from it."""
    path = binary(folder)
    model = onnx.load(path)
    graph = model.graph
    out = graph.output[0].name
    for node in graph.node:
        node.output[:] = [f"{o}_raw" if o == out else o for o in node.output]
    return path, model, graph, out


def run_plan(base: Path, cases) -> dict:
    """Run ``cases`` (each with ``id`` and ``make(folder) -> argv``) in one process of
    tests/_trust_driver.py, each in its own folder under ``base``, with HOME, TMPDIR and
    matplotlib's cache inside ``base``; the driver's results by case id."""
    plan = []
    for case in cases:
        folder = base / case.id
        folder.mkdir()
        plan.append({"id": case.id, "folder": str(folder), "argv": case.make(folder)})
    (base / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "MPLCONFIGDIR": str(base / "mpl"), "HOME": str(base / "home"),
           "TMPDIR": str(base / "tmp")}
    for name in ("mpl", "home", "tmp"):
        (base / name).mkdir()
    subprocess.run([sys.executable, str(Path(__file__).parent / "_trust_driver.py"),
                    str(base / "plan.json"), str(base / "results.json")],
                   check=True, timeout=600, env=env, cwd=base)
    return json.loads((base / "results.json").read_text())


def check_outcome(got: dict, case) -> None:
    """A hostile case's result: its exit code; exit 0 prints nothing on stderr and its last
    stdout line matches ``case.says``, any other exit ONE stderr line (``error: `` for exit 2)
    that matches it; under a minute; the case's folder untouched."""
    assert got["exit"] == case.exit, (got["stdout"], got["stderr"])
    if case.exit == 0:
        assert got["stderr"] == ""
        line = got["stdout"].strip().splitlines()[-1]
    else:
        lines = got["stderr"].strip().splitlines()
        assert len(lines) == 1, got["stderr"]  # one line, no traceback
        line = lines[0]
        if case.exit == 2:
            assert line.startswith("error: "), line
    assert re.search(case.says, line), line
    assert got["seconds"] < 60, got["seconds"]
    # nothing written, removed or changed: names, sizes, mtimes and sha256 of every file
    assert got["after"] == got["before"]
