"""How an artifact and its manifest land on disk: a per-target lock, short temporary names, a
two-rename commit with a journal, and the roll-forward that finishes (or undoes) a killed one.

The protocol (docs/readme/export.md, "Writing safely"), for a target ``PATH``:

1. Take ``.edgepe-lock-H`` in PATH's folder with ``fcntl.flock`` (``H``: 16 hex digits of the
   sha256 of PATH's file name). A second export of the same PATH finds it held and exits 2
   ("another export is writing PATH") instead of racing the first; the kernel drops the lock when
   its holder dies, so a killed export never blocks the next one.
2. Under the lock: finish what a killed export left (step 5), remove its temporary files
   (``.edgepe-tmp-H-*``, only ever created under the lock, so none belongs to a live writer).
3. Write the artifact and the manifest (with the artifact's sha256) to temporary files, fsync'd.
4. Commit: rename the manifest's temporary file to the journal ``.edgepe-tmp-H-commit``, rename
   the artifact's temporary file to PATH, rename the journal to PATH.json. A kill anywhere leaves
   either the old pair (plus temporaries), or the new artifact and the journal holding its
   manifest.
5. Roll forward: when the journal exists and its sha256 is PATH's, the artifact rename happened:
   the journal becomes PATH.json (forward); otherwise PATH is still the old artifact (or absent)
   and the journal is dropped (back). Either way the pair is a matching one. The next export,
   ``edgepe verify`` and ``edgepe.load`` of PATH run this step first (``recover``).

Temporary names are derived from a hash, not from PATH's name, so a legal 240-byte file name
still has room for them (a name is at most 255 bytes).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from edgepe.contract.errors import OutputPathError

TMP_MARK = ".edgepe-tmp-"
LOCK_MARK = ".edgepe-lock-"
JOURNAL_READ_CAP = 1 << 20  # bytes of a journal read back; edgepe's manifests are a few KiB
_HELD: set[Path] = set()  # lock files this process holds (the lock is re-entrant within it)


def _stem(out: Path) -> str:
    # os.fsencode keeps a non-UTF-8 name (surrogate-escaped by Python) hashable and distinct.
    return hashlib.sha256(os.fsencode(out.name)).hexdigest()[:16]


def temp_prefix(out: Path) -> str:
    """The prefix of every temporary file written for ``out`` (short whatever ``out``'s name)."""
    return f"{TMP_MARK}{_stem(out)}-"


def journal_path(out: Path) -> Path:
    return out.parent / f"{temp_prefix(out)}commit"


def lock_path(out: Path) -> Path:
    return out.parent / f"{LOCK_MARK}{_stem(out)}"


def manifest_of(out: Path) -> Path:
    return Path(str(out) + ".json")


@contextlib.contextmanager
def target_lock(out: Path, who: str = "export") -> Iterator[None]:
    """Hold the lock of ``out`` (non-blocking: a held lock is ``OutputPathError``, exit 2,
    "another ``who`` is writing OUT").

    The lock file is removed on release; a waiter that opened the old file sees its inode gone
    from the path and tries again, so two holders never coexist. Re-entrant within a process
    (``export`` holds it around ``write_artifact``, which takes it too).
    """
    import fcntl

    path = lock_path(out)
    if path in _HELD:
        yield
        return
    while True:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise cannot_write(out, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise OutputPathError(
                    f"another {who} is writing {str(out)!r}; try again when it has finished"
                ) from None
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file we locked: take the new one
    _HELD.add(path)
    try:
        _settle(out)
        yield
    finally:
        _HELD.discard(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _journal_sha(journal: Path) -> str | None:
    """The sha256 the journal's manifest records, or ``None`` for an unreadable journal."""
    try:
        with open(journal, "rb") as f:
            data = json.loads(f.read(JOURNAL_READ_CAP + 1)[: JOURNAL_READ_CAP])
    except (OSError, ValueError):
        return None
    sha = data.get("sha256") if isinstance(data, dict) else None
    return sha if isinstance(sha, str) else None


def _file_sha(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _settle(out: Path) -> None:
    """Step 5 and the cleanup of step 2; the caller holds the lock."""
    journal = journal_path(out)
    if journal.is_file():
        sha = _journal_sha(journal)
        if sha is not None and sha == _file_sha(out):
            os.replace(journal, manifest_of(out))  # the artifact rename happened: forward
        else:
            journal.unlink()  # it did not: the old pair stands
    for stale in out.parent.glob(f"{temp_prefix(out)}*"):
        stale.unlink(missing_ok=True)


def recover(out: str | Path) -> None:
    """Finish or undo an export of ``out`` that was killed between its two renames.

    Cheap when there is nothing to do (one ``stat``); readers (``verify``, ``load``) call it
    before reading. While another export holds the lock, that export is mid-commit: refused.
    """
    out = Path(out)
    if not journal_path(out).exists():
        return
    with target_lock(out):
        pass  # taking the lock settles the journal


def write_pair(out: Path, write: Callable[[BinaryIO], str],
               manifest_bytes: Callable[[str], bytes]) -> None:
    """Steps 3-4 for ``out``; the caller holds ``target_lock(out)`` (which did step 2).

    ``write(f)`` writes the artifact to ``f`` and returns its sha256; ``manifest_bytes(sha)`` is
    the manifest to commit with it. An ``OSError`` (disk full, a place that refuses files) is
    ``OutputPathError``.
    """
    tmp_artifact = write_temp(out, write)
    try:
        text = manifest_bytes(tmp_artifact[1])
        tmp_manifest = write_temp(out, lambda f: f.write(text))[0]
        os.replace(tmp_manifest, journal_path(out))
    except BaseException:
        Path(tmp_artifact[0]).unlink(missing_ok=True)
        raise
    try:
        os.replace(tmp_artifact[0], out)
        os.replace(journal_path(out), manifest_of(out))
    except OSError as exc:
        _settle(out)  # back to a matching pair
        raise cannot_write(out, exc) from None


def write_temp(out: Path, write: Callable[[BinaryIO], object]) -> tuple[str, object]:
    """A new temporary file beside ``out`` holding what ``write`` wrote (fsync'd, the usual
    mode); returns its path and ``write``'s result. Removed again if ``write`` fails."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(out), dir=out.parent)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; artifacts get the usual mode
        with os.fdopen(fd, "wb") as raw:
            result = write(raw)
            raw.flush()
            os.fsync(raw.fileno())
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise cannot_write(out, exc) from None
        raise
    return tmp, result


def cannot_write(out: Path, exc: OSError) -> OutputPathError:
    """The one-line error for an ``OSError`` met while writing ``out``."""
    return OutputPathError(f"cannot write {str(out)!r}: {exc.strerror or exc}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(out: Path, write: Callable[[BinaryIO], None]) -> str:
    """Write ``out`` via a temporary file and a rename; returns the sha256 of what was written."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    tmp, digest = write_temp(out, hashed(write))
    try:
        os.replace(tmp, out)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise cannot_write(out, exc) from None
    return digest


def hashed(write: Callable[[BinaryIO], None]) -> Callable[[BinaryIO], str]:
    """``write`` through a hashing wrapper; the result returns the sha256 of what it wrote."""

    def run(raw: BinaryIO) -> str:
        hashing = _HashingWriter(raw)
        write(hashing)
        return hashing.hexdigest()

    return run


class _HashingWriter:
    """A binary file wrapper that hashes what passes through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        return self._raw.write(view)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
