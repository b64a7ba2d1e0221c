"""Is this file the export it claims to be? The file streamed against the bytes a ``Prepared``
writes, then its manifest against the rebuilt one (issue 23).

``check_replace`` decides whether ``edgepe export`` may keep or replace what is at PATH;
``edgepe.rebuild`` compares an artifact with its rebuild through ``compare``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgepe.contract.config import Prepared
from edgepe.contract.errors import ArtifactError, OutputPathError
from edgepe.contract.manifest import dumps, open_regular, read


def check_replace(out: Path, prepared: Prepared, force: bool) -> bool:
    """Whether ``out`` already holds this exact export (then exporting again is a no-op).

    "This exact export": the file's bytes AND its manifest equal what ``prepared`` builds now
    (``compare``), so a tampered file whose manifest was edited back to the
    command's inputs is not kept (issue 23). ``force`` always writes (an export is
    deterministic: the same bytes again, or the new ones). An existing file made from other
    inputs, or that is not an edgepe artifact, is only replaced with ``force``.
    """
    if not out.exists() or force:
        return False
    try:
        existing = read(out)
    except ArtifactError:
        existing = None
    if existing is not None:
        with open(open_regular(out, "artifact"), "rb", closefd=True) as f:
            if compare(f, out, existing, prepared)[0] is None:
                return True
    what = "an artifact made from other inputs" if existing else "a file edgepe did not write"
    raise OutputPathError(f"{str(out)!r} exists and is {what}; pass --force to replace it")


def compare(f, path: Path, manifest: dict[str, Any], prepared, ignore_paths: bool = False):
    """``(difference or None, rebuilt manifest)``: the open file ``f`` (at its start) against the
    bytes ``prepared`` writes, then ``manifest`` against the rebuilt one (``ignore_paths``: but
    ``checkpoint.path``). The file is streamed, never held whole."""
    sink = _CompareWriter(f)
    prepared.write(sink)
    offset = sink.finish()
    rebuilt = json.loads(_dumps({**prepared.manifest, "sha256": sink.hexdigest()}))
    if offset is not None:
        where = _onnx_difference(path, prepared) if rebuilt["format"] == "onnx" else None
        return (f"the file differs from the rebuild at byte {offset}"
                + (f" ({where})" if where else "")), rebuilt
    clean = _comparable if ignore_paths else dict
    field = first_difference(clean(manifest), clean(rebuilt))
    if field is not None:
        return f"the manifest differs from the rebuilt one at {field}", rebuilt
    return None, rebuilt


def _dumps(manifest: dict[str, Any]) -> bytes:
    return dumps(manifest)


def _comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without its path-dependent field (``checkpoint.path``)."""
    out = {k: v for k, v in manifest.items() if k != "manifest_source"}
    if isinstance(out.get("checkpoint"), dict):
        out["checkpoint"] = {k: v for k, v in out["checkpoint"].items() if k != "path"}
    return out


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The dotted name of the first field (in sorted order) where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            name = f"{where}.{key}" if where else key
            if key not in a or key not in b:
                return f"{name} ({'missing' if key not in a else 'extra'} in the file's manifest)"
            found = first_difference(a[key], b[key], name)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if a == b and type(a) is type(b):
        return None
    return f"{where or 'the top level'}: {_short(a)} != rebuilt {_short(b)}"


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _CompareWriter:
    """A binary sink that compares what is written with the file ``f``, block by block, and
    hashes it; ``finish`` gives the first differing byte offset (or ``None``)."""

    def __init__(self, f) -> None:
        import hashlib

        self._f = f
        self._hash = hashlib.sha256()
        self._pos = 0
        self.offset: int | None = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        if self.offset is None:
            theirs = self._f.read(len(view))
            if theirs != view:
                same = next((i for i, (x, y) in enumerate(zip(theirs, view, strict=False))
                             if x != y), min(len(theirs), len(view)))
                self.offset = self._pos + same
        self._pos += len(view)
        return len(view)

    def finish(self) -> int | None:
        if self.offset is None and self._f.read(1):
            self.offset = self._pos  # the file is longer than the rebuild
        return self.offset

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _onnx_difference(path: Path, prepared) -> str | None:
    """The first graph input/output, initializer or node where the file's ONNX graph differs
    from the rebuilt one; ``None`` when the file does not parse as ONNX."""
    import io

    import onnx

    buffer = io.BytesIO()
    prepared.write(buffer)
    ours = onnx.load_from_string(buffer.getvalue())
    try:
        theirs = onnx.load_from_string(path.read_bytes())
    except Exception:  # noqa: BLE001 - not ONNX at all: the byte offset says enough
        return None
    for what, a, b in (("input", theirs.graph.input, ours.graph.input),
                       ("output", theirs.graph.output, ours.graph.output),
                       ("initializer", theirs.graph.initializer, ours.graph.initializer),
                       ("node", theirs.graph.node, ours.graph.node)):
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b) or a[i] != b[i]:
                item = a[i] if i < len(a) else b[i]
                name = getattr(item, "name", "") or getattr(item, "op_type", "")
                return f"{what} {i} {name!r}"
    if theirs.metadata_props != ours.metadata_props:
        return "metadata_props (the embedded manifest)"
    return None
