"""Reading the user's model and an artifact as untrusted input: bounded, no external data,
the artifact checked against its manifest (``runtime.read_artifact_manifest``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgepe.errors import ArtifactError, BadParameterError

# protobuf refuses messages of 2 GiB and more: no ONNX file without external data is bigger.
MODEL_BYTES_LIMIT = 2**31 - 1



def _bounded_bytes(path: Path, what: str) -> bytes:
    from edgepe.errors import EdgepeError

    error = ArtifactError if what == "artifact" else BadParameterError
    if not path.exists():
        raise error(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise error(f"{what} {str(path)!r} is not a regular file")
    size = path.stat().st_size
    if size > MODEL_BYTES_LIMIT:
        raise error(f"{what} {str(path)!r} is {size:,} B; ONNX files stop at 2 GiB (protobuf)")
    try:
        with path.open("rb") as f:
            return f.read(MODEL_BYTES_LIMIT + 1)
    except OSError as exc:
        raise EdgepeError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None


def parse_model(data: bytes, where: str, error: type[Exception] = BadParameterError):
    """An ``onnx.ModelProto`` from ``data``, or one line naming why it is not an ONNX model.

    A model whose tensors live in external files is refused: their paths are never opened.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where} is not an ONNX model: {first}") from None
    if not model.HasField("graph") or not model.opset_import:
        raise error(f"{where} is not an ONNX model: it has no graph or no opset")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_initializers(model.graph)):
        raise error(f"{where} keeps tensors in external files; graft reads self-contained models "
                    "only (onnx.save without save_as_external_data)")
    return model


def _all_initializers(graph) -> Iterable[Any]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _all_initializers(sub)


def load_model(path: str | Path):
    """The user's model at ``path`` (bounded read, no external data) and its size in bytes."""
    path = Path(path)
    data = _bounded_bytes(path, "model")
    return parse_model(data, f"model {str(path)!r}"), len(data)


def _read_artifact(path: Path) -> dict[str, Any]:
    """The artifact's checked manifest: the one safe-reader call site (see the module doc)."""
    from edgepe.runtime import read_artifact_manifest

    return read_artifact_manifest(path)


def load_pe(path: str | Path):
    """``(ModelProto, manifest)`` of an edgepe ONNX ``pe`` artifact, checked as untrusted."""
    path = Path(path)
    manifest = _read_artifact(path)
    if manifest["format"] != "onnx":
        raise ArtifactError(f"{str(path)!r} is a {manifest['format']} artifact; graft takes an "
                            "ONNX one (edgepe export --format onnx)")
    data = _bounded_bytes(path, "artifact")
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:  # changed since it was checked
        raise ArtifactError(f"{str(path)!r} does not match its manifest (sha256 differs)")
    model = parse_model(data, f"artifact {str(path)!r}", ArtifactError)
    # The proof runs the grafted model: the PE may hold only what edgepe's builders emit (no
    # Loop/If/Scan, no external data), as edgepe.load requires of any artifact (issue 23).
    from edgepe.audit import check_untrusted

    check_untrusted(model, str(path))
    return model, manifest
