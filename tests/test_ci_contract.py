"""The README's test command runs what CI runs (issue 33), and the mutation script's data holds.

The pte tests all skipped under the README's command because it did not install the
``[executorch]`` extra: a planted bug in formats/pte.py survived there. Now the command installs
every extra the project's tests import, and ``.ci/run`` calls that command verbatim.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")


def _test_command() -> str:
    text = (ROOT / "README.md").read_text()
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip().endswith(".venv/bin/python -m pytest -n auto") and "pip install" in ln]
    assert len(lines) == 1, lines  # one test command, in the quick start
    return lines[0]


def test_the_readme_command_installs_every_extra_but_the_gpu_wheel():
    command = _test_command()
    extras = set(re.search(r'-e "\.\[([a-z0-9,]+)\]"', command).group(1).split(","))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(project["optional-dependencies"])
    # gpu replaces the onnxruntime wheel (README: uninstall the CPU wheel first); plot's
    # matplotlib is in dev. litert (litert-torch, issue 42) is in: its xdsl moves
    # typing-extensions and pydantic down, with which the suite passes (issue 42's figures)
    assert extras == declared - {"gpu", "plot"}
    dev = " ".join(project["optional-dependencies"]["dev"])
    for requirement in project["optional-dependencies"]["plot"]:
        assert requirement in dev
    assert "-c constraints.txt" in command  # the torch pin


def test_every_package_a_test_skips_without_is_in_an_installed_extra():
    """No test skips for a missing Python package the command's extras provide."""
    command = _test_command()
    extras = re.search(r'-e "\.\[([a-z0-9,]+)\]"', command).group(1).split(",")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = " ".join(r for e in extras for r in project["optional-dependencies"][e])
    skipped = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        skipped |= set(re.findall(r'importorskip\(\s*"([a-z_]+)[."]', path.read_text()))
    skipped -= {"tomllib"}  # the standard library's
    assert {"openvino", "executorch"} <= skipped
    for module in skipped:  # a module's distribution spells "_" as "-" (ai_edge_litert)
        assert module.replace("_", "-") in installed.replace("_", "-"), module


def test_ci_runs_the_readme_command_verbatim_then_the_mutants():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _test_command() in ci.splitlines()
    assert ".venv/bin/python -m pytest -m slow" in ci
    assert ".venv/bin/python scripts/mutants.py" in ci
    assert re.search(r"^\.venv/bin/python scripts/mutation\.py --changed( \S+)? --budget-s \d+$",
                     ci, re.M)


def _mutation():
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation"] = module
    spec.loader.exec_module(module)
    return module


def test_mutation_modules_and_tests_exist():
    mutation = _mutation()
    for module, tests in mutation.MODULES.items():
        assert (ROOT / module).is_file(), module
        assert tests, module
        for test in tests:
            assert (ROOT / test.split("::")[0]).is_file(), test
    # a package's __init__.py is named by the package (edgepe.verify.x_...)
    dotted = {m.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
              for m in mutation.MODULES}
    for name in mutation.EQUIVALENT:
        assert name.split(".x")[0] in dotted, name


def test_mutation_docs_are_rendered_from_the_recorded_scores():
    mutation = _mutation()
    recorded = mutation.load_recorded()
    assert recorded, "docs/mutation.json holds the scores of the modules run"
    assert (ROOT / "docs" / "mutation.md").read_text() == mutation.render(recorded)
    for module in recorded:
        assert module in mutation.MODULES


def test_mutation_unknown_module_is_a_one_line_error(capsys):
    assert _mutation().main(["--modules", "edgepe/nope.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: not in MODULES: edgepe/nope.py") and err.count("\n") == 1


def test_changed_reruns_the_recorded_modules_whose_source_is_not_the_one_recorded():
    mutation = _mutation()
    module = "edgepe/rebuild.py"
    now = mutation.source_sha256(module)
    assert now == hashlib.sha256((ROOT / module).read_bytes()).hexdigest()
    assert mutation.stale_modules({module: {"source_sha256": now}}) == []
    assert mutation.stale_modules({module: {"source_sha256": now[:-1] + "x"}}) == [module]
    assert mutation.stale_modules({module: {}}) == [module]  # a record from before the hashes
    assert mutation.stale_modules({}) == []  # a module never run is listed, not rerun


def test_a_failed_clean_run_is_noted_with_the_failing_test():
    """mutmut's own last line says only "Failed to run clean test": the note keeps pytest's
    FAILED line too (the tail of tests/test_lowerings.py's clean run before its fix)."""
    tail = ("    graph(scheme, options.pop('max_len'), lowering=lowering, **options)\n"
            "KeyError: 'max_len'\n"
            "=========================== short test summary info ===========================\n"
            "FAILED tests/test_lowerings.py::test_widths_past_the_exact_range_are_refused[a]\n"
            "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            "Failed to run clean test\n")
    assert _mutation()._failure_note(tail) == [
        "FAILED tests/test_lowerings.py::test_widths_past_the_exact_range_are_refused[a]",
        "Failed to run clean test"]
    assert _mutation()._failure_note("timed out after 900 s") == ["timed out after 900 s"]


def test_a_budgeted_run_skips_the_modules_whose_last_run_cannot_finish_in_what_is_left():
    fits = _mutation().fits
    assert fits({"seconds": 150}, 150.0) and not fits({"seconds": 151}, 150.0)
    assert fits(None, 0.0) and fits({}, 0.0)  # never run, or no time recorded: tried


def test_an_equivalent_whose_mutant_changed_counts_as_a_survivor_until_rerun():
    """EQUIVALENT is keyed by mutmut's numbers, which move when a function changes: a key whose
    diff is not the one recorded excuses nothing that run (hmut4: untrusted.py's keys were off by
    2, one excusing a real survivor); the new diff is recorded, and rescore leaves it."""
    mutation = _mutation()
    name = next(iter(mutation.EQUIVALENT))
    old_diff, new_diff = ["-    a = 1", "+    a = 2"], ["-    b < c", "+    b <= c"]
    old = {"equivalent_marks": {name: mutation.diff_mark(old_diff)}}

    def run(diff):
        return {"mutants": 10, "killed": 8, "equivalent": 2, "score": 100.0, "survivors": {},
                "equivalent_diffs": {name: diff, "other": ["-x", "+y"]},
                "equivalent_marks": {name: mutation.diff_mark(diff), "other": "0"}}

    assert mutation.moved_keys(old, run(old_diff)) == run(old_diff)  # the same mutant
    assert mutation.moved_keys({}, run(new_diff)) == run(new_diff)  # nothing recorded yet
    moved = mutation.moved_keys(old, run(new_diff))
    assert moved["survivors"] == {name: {"status": mutation.MOVED, "diff": new_diff}}
    assert moved["equivalent"] == 1 and moved["score"] == 88.9  # 8 / (10 - 1)
    assert list(moved["equivalent_diffs"]) == ["other"]
    assert moved["equivalent_marks"][name] == mutation.diff_mark(new_diff)  # recorded for next
    assert mutation.rescore(moved) == moved  # its key is in EQUIVALENT, still not excused
    assert mutation.diff_mark(old_diff) != mutation.diff_mark(new_diff)
