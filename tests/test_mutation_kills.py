"""Tests that kill survivors of the library mutation run (scripts/mutation.py, docs/mutation.md).

Each test names the behaviour it pins; the survivors they were written against are listed in
docs/mutation.md's history (git log of docs/mutation.json).
"""

from __future__ import annotations

import pytest

from edgepe import errors


def test_exit_codes_of_each_error_class():
    assert errors.EdgepeError.exit_code == 2
    for cls in (errors.UnknownSchemeError, errors.BadParameterError, errors.CheckpointError,
                errors.ArtifactError, errors.OutputPathError, errors.PositionError):
        assert issubclass(cls, errors.EdgepeError) and cls.exit_code == 2
    assert errors.ParityError.exit_code == 1


@pytest.mark.parametrize(("value", "allowed", "hint"), [
    ("binray", ["binary", "gray"], " Did you mean 'binary'?"),
    ("gary", ["binary", "gray"], " Did you mean 'gray'?"),
    ("zzzzzz", ["binary", "gray"], ""),
    ("x", [], ""),
    # the cutoff is 0.6: 'abcd' vs 'abxy' has ratio 0.5 (no hint), 'abcd' vs 'abcx' 0.75
    ("abcd", ["abxy"], ""),
    ("abcd", ["abcx"], " Did you mean 'abcx'?"),
    # one suggestion, the closest
    ("alibi", ("alibis", "alibi-x", "alibi"), " Did you mean 'alibi'?"),
])
def test_did_you_mean(value, allowed, hint):
    assert errors.did_you_mean(value, allowed) == hint
