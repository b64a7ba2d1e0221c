"""Reading the user's model and an artifact as untrusted input, bounded; the artifact checked
against its manifest (``runtime.read_artifact_manifest``) and never with external data.

A model may keep its tensors in external data (torch 2.13's ``torch.onnx.export(..., dynamo=True)``
writes ``model.onnx.data`` beside ``model.onnx``): ``load_model`` reads them itself, confined to
the model's folder (a relative ``location`` that resolves inside it, a regular file, ``offset``
and ``length`` inside the file, ``EXTERNAL_BYTES_LIMIT`` bytes in all), and puts them inline;
onnx's loader, which would open any path the file names, is not used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgepe.contract.errors import ArtifactError, BadParameterError, EdgepeError
from edgepe.graphs.untrusted import check_untrusted

# protobuf refuses messages of 2 GiB and more: no ONNX file without external data is bigger.
MODEL_BYTES_LIMIT = 2**31 - 1
# What a model's external data may add, in all (a 7B-parameter float16 model is 14 GB; the proof
# runs the model in memory, so this also bounds the memory graft uses).
EXTERNAL_BYTES_LIMIT = 2**35



def _bounded_bytes(path: Path, what: str) -> bytes:
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


def parse_model(data: bytes, where: str, error: type[Exception] = BadParameterError,
                folder: Path | None = None):
    """An ``onnx.ModelProto`` from ``data``, or one line naming why it is not an ONNX model.

    A model whose tensors live in external files is refused, their paths never opened, unless
    ``folder`` (the model's own) is given: then they are read from there (``_inline_external``).
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
    external = [t for t in _all_initializers(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and folder is not None:
        _inline_external(external, folder, where)
    elif external:
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


def _inline_external(tensors: list, folder: Path, where: str) -> None:
    """Read each external tensor's bytes from ``folder`` (see the module doc) into ``raw_data``."""
    import onnx

    root = folder.resolve()
    total = 0
    for tensor in tensors:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        try:
            offset, length = int(info.get("offset", 0)), int(info["length"])
        except (KeyError, ValueError):
            raise BadParameterError(f"{where}: tensor {tensor.name!r} names external data without "
                                    "a valid length") from None
        target = (root / location).resolve()
        if not location or Path(location).is_absolute() or root not in target.parents:
            raise BadParameterError(f"{where}: tensor {tensor.name!r} names external data "
                                    f"{location!r} outside the model's folder; refused")
        if not target.is_file():
            raise BadParameterError(f"{where}: external data {location!r} of tensor "
                                    f"{tensor.name!r} is not a regular file beside the model")
        size = target.stat().st_size
        total += length
        if offset < 0 or length < 0 or offset + length > size:
            raise BadParameterError(f"{where}: tensor {tensor.name!r} reads bytes {offset}.."
                                    f"{offset + length} of {location!r}, which has {size:,} B")
        if total > EXTERNAL_BYTES_LIMIT:
            raise BadParameterError(f"{where}: its external data exceed "
                                    f"{EXTERNAL_BYTES_LIMIT:,} B; refused")
        with target.open("rb") as f:
            f.seek(offset)
            raw = f.read(length)
        if len(raw) != length:
            raise BadParameterError(f"{where}: {location!r} ended early (tensor {tensor.name!r})")
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def load_model(path: str | Path):
    """The user's model at ``path`` (bounded read; external data read from its folder only, see
    the module doc) and its size in bytes (external data included)."""
    path = Path(path)
    data = _bounded_bytes(path, "model")
    model = parse_model(data, f"model {str(path)!r}", folder=path.parent)
    return model, max(len(data), model.ByteSize())


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
    check_untrusted(model, str(path))
    return model, manifest
