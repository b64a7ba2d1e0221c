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
import itertools
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
                folder: Path | None = None, files: list[Path] | None = None):
    """An ``onnx.ModelProto`` from ``data``, or one line naming why it is not an ONNX model.

    A model whose tensors live in external files is refused, their paths never opened, unless
    ``folder`` (the model's own) is given: then they are read from there (``_inline_external``;
    each file read is appended to ``files``). Refused too (issue 41: each was an internal
    error): an ONNX opset newer than this onnx knows, and a tensor whose data does not hold
    what its dims and type declare (``check_tensor_data``)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where} is not an ONNX model: {first}") from None
    if not model.HasField("graph") or not model.opset_import:
        raise error(f"{where} is not an ONNX model: it has no graph or no opset")
    check_opset(model, where, error)
    external = [t for t in _all_initializers(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and folder is not None:
        for tensor in external:
            _check_external(tensor, where)
        _inline_external(external, folder, where, files)
    elif external:
        raise error(f"{where} keeps tensors in external files; graft reads self-contained models "
                    "only (onnx.save without save_as_external_data)")
    for tensor in _all_initializers(model.graph):
        check_tensor_data(tensor, where, error)
    return model


def check_opset(model, where: str, error: type[Exception] = BadParameterError) -> None:
    """Refuse a default-domain opset this onnx does not know (opset 99 was an internal error in
    the version converter)."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not 1 <= entry.version <= newest:
            raise error(f"{where} imports ONNX opset {entry.version}; this onnx "
                        f"{onnx.__version__} knows opsets 1 to {newest}")


# Bits per element of the sub-byte types (packed in raw_data, two or four to a byte).
_SUB_BYTE = {"UINT4": 4, "INT4": 4, "FLOAT4E2M1": 4, "UINT2": 2, "INT2": 2, "FLOAT6E2M3": 6,
             "FLOAT6E3M2": 6}


def declared_bytes(tensor) -> int:
    """The bytes ``tensor``'s dims and type declare (exact Python ints: no overflow)."""
    import math

    import onnx
    from onnx import helper

    count = math.prod(int(d) for d in tensor.dims)
    name = onnx.TensorProto.DataType.Name(tensor.data_type) \
        if tensor.data_type in onnx.TensorProto.DataType.values() else "UNDEFINED"
    if name in _SUB_BYTE:
        return (count * _SUB_BYTE[name] + 7) // 8
    if name in ("UNDEFINED", "STRING"):
        return 0  # no fixed size (strings carry their own)
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def check_tensor_data(tensor, where: str, error: type[Exception] = BadParameterError) -> None:
    """Refuse (one line) a tensor whose data is not what its dims and type declare: negative
    dims, ``raw_data`` of another length, a typed field of another count (a declared
    ``[2^20, 2^20]`` float without data was a ValueError deep in numpy, exit 3)."""
    import math

    import onnx
    from onnx import helper

    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise error(f"{where}: tensor {tensor.name!r} has negative dims {dims}")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return
    if tensor.data_type not in onnx.TensorProto.DataType.values() or \
            tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise error(f"{where}: tensor {tensor.name!r} has unknown data type {tensor.data_type}")
    count = math.prod(dims)
    name = onnx.TensorProto.DataType.Name(tensor.data_type)
    if tensor.HasField("raw_data"):
        have, want = len(tensor.raw_data), declared_bytes(tensor)
        unit = "B of raw data"
    else:
        have = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type)))
        want = 2 * count if name.startswith("COMPLEX") else count
        if name in _SUB_BYTE:  # packed in int32_data by some writers, one per element by others
            want = have if have in (count, (count * _SUB_BYTE[name] + 7) // 8) else count
        unit = "values"
    if have != want:
        raise error(f"{where}: tensor {tensor.name!r} declares {dims} {name} ({want} {unit}) "
                    f"but holds {have}; refused")


def _all_initializers(graph) -> Iterable[Any]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _all_initializers(sub)


def _check_external(tensor, where: str) -> None:
    """Refuse (one line, ``BadParameterError`` as ``_inline_external``) an external tensor it
    cannot describe: an entry that is not UTF-8 text (protobuf hands such a string field back
    as bytes) or an unknown data type (each was an internal error, found killing issue 41's
    mutants)."""
    import onnx

    if any(isinstance(text, bytes) for e in tensor.external_data for text in (e.key, e.value)):
        raise BadParameterError(f"{where}: tensor {tensor.name!r} names external data that is "
                                "not UTF-8 text; refused")
    if tensor.data_type not in onnx.TensorProto.DataType.values() or \
            tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise BadParameterError(f"{where}: tensor {tensor.name!r} has unknown data type "
                                f"{tensor.data_type}")


# The longest external-data location read (a path of PATH_MAX bytes), and of one part of it.
LOCATION_LIMIT, NAME_LIMIT = 4096, 255


def _inline_external(tensors: list, folder: Path, where: str,
                     files: list[Path] | None = None) -> None:
    """Read each external tensor's bytes from ``folder`` (see the module doc) into ``raw_data``.

    Everything is checked before the first byte is read (issue 41): each location (no NUL, at
    most ``LOCATION_LIMIT`` bytes, parts of at most ``NAME_LIMIT``, inside ``folder``, a
    regular file), each range (inside its file, exactly the bytes the tensor's dims and type
    declare), no two tensors reading overlapping bytes (no writer shares them; each tensor
    materialises its own copy, so 2,400 tensors on one 1 MiB range made 6.7 GB), and the total
    under ``EXTERNAL_BYTES_LIMIT``. Each file is then opened once."""
    import onnx

    root = folder.resolve()
    total = 0
    plan: list[tuple[Any, Path, int, int]] = []
    for tensor in tensors:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        try:
            offset, length = int(info.get("offset", 0)), int(info["length"])
        except (KeyError, ValueError):
            raise BadParameterError(f"{where}: tensor {tensor.name!r} names external data without "
                                    "a valid length") from None
        encoded = location.encode("utf-8", "surrogateescape")
        if "\0" in location or len(encoded) > LOCATION_LIMIT or any(
                len(part) > NAME_LIMIT for part in encoded.split(b"/")):
            raise BadParameterError(
                f"{where}: tensor {tensor.name!r} names an external data location of "
                f"{len(encoded)} B{' with a NUL byte' if chr(0) in location else ''}, not a file "
                f"name (at most {LOCATION_LIMIT} B, {NAME_LIMIT} B a part); refused")
        try:
            target = (root / location).resolve()
            regular = target.is_file()
            size = target.stat().st_size if regular else 0
        except (OSError, ValueError) as exc:
            raise BadParameterError(f"{where}: external data {location[:80]!r} of tensor "
                                    f"{tensor.name!r} cannot be read: "
                                    f"{getattr(exc, 'strerror', None) or exc}") from None
        if not location or Path(location).is_absolute() or root not in target.parents:
            raise BadParameterError(f"{where}: tensor {tensor.name!r} names external data "
                                    f"{location!r} outside the model's folder; refused")
        if not regular:
            raise BadParameterError(f"{where}: external data {location!r} of tensor "
                                    f"{tensor.name!r} is not a regular file beside the model")
        total += length
        if offset < 0 or length < 0 or offset + length > size:
            raise BadParameterError(f"{where}: tensor {tensor.name!r} reads bytes {offset}.."
                                    f"{offset + length} of {location!r}, which has {size:,} B")
        want = declared_bytes(tensor)
        if length != want:
            raise BadParameterError(
                f"{where}: tensor {tensor.name!r} declares {list(tensor.dims)} "
                f"{onnx.TensorProto.DataType.Name(tensor.data_type)} ({want:,} B) but names "
                f"{length:,} B of external data in {location!r}; refused")
        if total > EXTERNAL_BYTES_LIMIT:
            raise BadParameterError(f"{where}: its external data exceed "
                                    f"{EXTERNAL_BYTES_LIMIT:,} B; refused")
        plan.append((tensor, target, offset, length))
    by_file: dict[Path, list[tuple[int, int, str]]] = {}
    for tensor, target, offset, length in plan:
        ranges = by_file.setdefault(target, [])
        if length:  # (an empty tensor reads nothing, wherever its offset)
            ranges.append((offset, offset + length, tensor.name))
    for target, ranges in by_file.items():
        ranges.sort()  # by start: any two that overlap make two neighbours overlap
        for (_, end, first), (start, _, second) in itertools.pairwise(ranges):
            if start < end:
                raise BadParameterError(
                    f"{where}: tensors {first!r} and {second!r} read overlapping bytes of "
                    f"external data {target.name!r} (no writer shares bytes between tensors; "
                    "each would be materialised again); refused")
        if files is not None:
            files.append(target)
    for target in by_file:
        with target.open("rb") as f:
            for tensor, at, offset, length in plan:
                if at != target:
                    continue
                f.seek(offset)
                raw = f.read(length)
                if len(raw) != length:
                    raise BadParameterError(f"{where}: {target.name!r} ended early (tensor "
                                            f"{tensor.name!r})")
                tensor.raw_data = raw
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT


def load_model(path: str | Path, files: list[Path] | None = None):
    """The user's model at ``path`` (bounded read; external data read from its folder only, see
    the module doc) and its size in bytes (external data included); the external data files
    read are appended to ``files`` (graft's inputs: never an output)."""
    path = Path(path)
    data = _bounded_bytes(path, "model")
    model = parse_model(data, f"model {str(path)!r}", folder=path.parent, files=files)
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
