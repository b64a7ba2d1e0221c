"""scripts/mutants.py's list stays runnable: every planted bug still matches the code exactly once.

The mutation run itself (minutes) is in ``.ci/run``; this is the cheap part of it, in the default
suite, so a change that moves a mutant's snippet fails here at once with the mutant's name.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
mutants = importlib.util.module_from_spec(_spec)
sys.modules["mutants"] = mutants  # dataclasses look their module up while the class is made
_spec.loader.exec_module(mutants)


def test_the_list_is_curated_and_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) >= 25 and len(set(names)) == len(names)
    # the bugs issue 24 found surviving or caught by one test only
    assert {"smooth-c-default", "gaussian-sigma-default", "multiscale-alpha-default",
            "bias-table-shifted-row", "alibi-slope-off-by-one-head",
            "sinusoidal-base-1000"} <= set(names)


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_snippet_matches_exactly_once_and_its_tests_exist(mutant):
    text = (ROOT / mutant.file).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: snippet drifted in {mutant.file}"
    assert mutant.new != mutant.old and mutant.tests
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), test


def test_unknown_mutant_is_a_one_line_error(capsys):
    assert mutants.main(["--only", "no-such-mutant"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown mutant(s) no-such-mutant") and err.count("\n") == 1
