"""One root exception and a few typed leaves (STYLE 7).

Every user-facing failure is an ``EdgepeError``; the CLI renders it as one line on stderr and
exits 2. ``ParityError`` is the exception to that rule: a failed verification exits 1.
Messages name the bad value and what is allowed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class EdgepeError(Exception):
    """Root of every error edgepe raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 2


class UnknownSchemeError(EdgepeError):
    """A scheme id that is not registered."""


class BadParameterError(EdgepeError):
    """A size, parameter or option value outside what the scheme or mode allows."""


class CheckpointError(EdgepeError):
    """A checkpoint that cannot be read, or does not fit the scheme it is loaded into."""


class ArtifactError(EdgepeError):
    """A file that is not an edgepe artifact, or whose manifest does not describe it."""


class OutputPathError(EdgepeError):
    """An output path that cannot be written, or would replace an artifact without --force."""


class PositionError(EdgepeError):
    """Positions of the wrong dtype or shape, or outside the scheme's documented domain."""


class ParityError(EdgepeError):
    """An artifact that does not match its reference. The CLI exits 1 for it."""

    exit_code = 1


def did_you_mean(value: str, allowed: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` when a close match exists, else ''."""
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
