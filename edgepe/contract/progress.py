"""Progress of long work: one transient rich bar on stderr, drawn only when someone asked.

Library code reports through ``track(description, total)``, which costs nothing unless a caller
opened ``reporting(...)`` around it (the CLI does, on a terminal and without ``--quiet``); the
library itself never prints. The bar starts at the first ``track``, so short work that tracks
nothing shows nothing, not even a flash.

    with reporting(show=sys.stderr.isatty()):
        export(config)            # iter_table calls track() for a large table
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_OPEN: ContextVar[_Lazy | object | None] = ContextVar("edgepe_progress", default=None)
_OFF = object()  # an open block that shows nothing


def _bar(force: bool):
    """A transient rich ``Progress`` on stderr (``force``: even when it is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True, force_terminal=force or None),
                    transient=True)


class _Lazy:
    """The bar of a ``reporting`` block, started when the first task arrives."""

    def __init__(self, force: bool) -> None:
        self.force = force
        self.progress: Any = None

    def add(self, description: str, total: int) -> Callable[[int], None]:
        if self.progress is None:
            self.progress = _bar(self.force)
            self.progress.start()
        task = self.progress.add_task(description, total=total)
        return lambda n: self.progress.advance(task, n)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


@contextmanager
def reporting(show: bool, force: bool = False) -> Iterator[None]:
    """Within the block, ``track`` calls draw on one bar on stderr, or nowhere if not ``show``.

    The outermost block decides: nested blocks share its bar, or its silence (``--quiet`` holds
    for the verification an export runs), and rich allows one live display at a time anyway.
    """
    if _OPEN.get() is not None:
        yield
        return
    lazy = _Lazy(force) if show else _OFF
    token = _OPEN.set(lazy)
    try:
        yield
    finally:
        _OPEN.reset(token)
        if lazy is not _OFF:
            lazy.close()


def _ignore(n: int) -> None:
    pass


def track(description: str, total: int) -> Callable[[int], None]:
    """A new task of ``total`` units; returns ``advance(n)`` (a no-op when nobody listens)."""
    lazy = _OPEN.get()
    return _ignore if lazy is None or lazy is _OFF else lazy.add(description, total)
