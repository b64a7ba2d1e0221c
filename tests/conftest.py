"""Fixtures every test file may use. Kept minimal and generic on purpose."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def edgepe_exe() -> str:
    """Path of the installed ``edgepe`` console script, the one next to this interpreter.

    It is part of the package (``[project.scripts]``): when it is missing the install is
    broken, so this fails rather than skips.
    """
    exe = shutil.which("edgepe", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail(
            f"the edgepe console script is not installed next to {sys.executable}; "
            "run: pip install -c constraints.txt -e '.[dev]'"
        )
    return exe
