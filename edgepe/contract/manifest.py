"""The manifest: the one place that knows its schema, reads it safely, validates and writes it.

Every artifact ``PATH`` has its manifest at ``PATH + ".json"`` (``path_for``). ``SCHEMA`` declares
every field edgepe reads (type, whether it is required or may be null, allowed values, range);
``validate`` checks a manifest against it plus the few rules that tie fields together (a table
file's ``shape`` is ``[rows, cols]``, npy/bin hold tables, a bias scheme has ``heads``).

``read(artifact)`` treats the manifest as untrusted input (issue 23): it opens only a regular file
(a symlink to ``/dev/zero`` or a FIFO is refused before it is opened, and checked again on the
open descriptor), reads at most ``MAX_BYTES``, refuses JSON nested deeper than ``MAX_DEPTH``
before parsing it (no recursion on a 100000-deep document), duplicate keys (parsers disagree on
which one wins), ``NaN``/``Infinity``, integers longer than ``MAX_INT_DIGITS`` digits and numbers
that overflow float64; ``validate`` checks the recorded ``inputs`` (types and ranges) too. Every
refusal is one ``ArtifactError`` line (exit 2).

``dumps`` is the canonical text (sorted keys, no timestamps: exports are byte-identical) and
``write`` puts it next to its artifact.
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepe.contract.commit import atomic_write
from edgepe.contract.errors import ArtifactError, BadParameterError

MAX_BYTES = 1 << 20  # edgepe's largest manifests (int8 scales of d_model 4096) are ~200 KiB
MAX_DEPTH = 16  # edgepe writes 4 levels (layout, onnx inputs); 16 leaves room, bounds parsing
# The longest integer a manifest may spell (int64's 19 digits and a sign; a 4000-digit integer
# used to overflow float conversions deep inside a command: issue 30), and the longest number
# with a fraction or exponent (a float64 needs 17 significant digits and an exponent).
MAX_INT_DIGITS = 20
MAX_FLOAT_CHARS = 40
FORMATS = ("onnx", "npy", "bin", "c", "pte", "tflite")
TABLE_FORMATS = ("npy", "bin")
TABLE_FILES = ("npy", "bin", "c")  # formats whose table mode stores [rows, cols] as such
MODES = ("compute", "table", "sliced")
KINDS = ("pe", "rope", "bias")
DTYPES = ("float32", "float16", "uint8", "int8", "bit")  # int8: quantised table files
# Positions and sizes are int64 in every artifact; a table or a bit width past 2^40 rows is
# never what a user of a small device meant, and keeps every derived width (n <= 41) small.
# (``edgepe.schemes`` refuses configurations past them; a manifest may not record more.)
MAX_LEN_LIMIT = 2**40
D_MODEL_LIMIT = 65536
HEADS_LIMIT = 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Field:
    """One manifest field: ``name`` (dotted inside an object), its JSON type (``str``, ``int``,
    ``number``, ``object``, ``list``, ``numbers``: a number or a list of them, ``ints``: an
    integer or a list of them), ``required``, ``null`` allowed, ``choices``, ``low``/``high``."""

    name: str
    type: str
    required: bool = False
    null: bool = False
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None

    def want(self) -> str:
        kinds = {"str": "a string", "int": "an integer", "number": "a finite number",
                 "object": "an object", "list": "a list",
                 "numbers": "a number or a list of numbers",
                 "ints": "an integer or a list of integers"}
        text = kinds[self.type]
        if self.choices:
            text = " or ".join(str(c) for c in self.choices)
        elif self.low is not None and self.high is not None:
            text += f" from {self.low:g} to {self.high:g}"
        elif self.low is not None:
            text += f" >= {self.low:g}"
        return ("null or " if self.null else "") + text


def _schema() -> tuple[Field, ...]:
    return (
        Field("edgepe_version", "str"),
        Field("scheme", "str", required=True),
        Field("params", "object", null=True),
        Field("max_len", "int", required=True, low=1, high=MAX_LEN_LIMIT),
        Field("d_model", "int", null=True, low=1, high=D_MODEL_LIMIT),
        Field("heads", "int", null=True, low=1, high=HEADS_LIMIT),
        Field("kind", "str", required=True, choices=KINDS),
        Field("format", "str", required=True, choices=FORMATS),
        Field("mode", "str", required=True, choices=MODES),
        Field("dtype", "str", required=True, choices=DTYPES),
        Field("shape", "list", required=True),
        Field("lowering", "str", null=True),
        Field("seed", "int", null=True),
        Field("inputs", "object", null=True),
        Field("sha256", "str", required=True),
        Field("positions", "object", required=True),
        Field("positions.arity", "int", null=True, low=1, high=64),
        Field("positions.limit", "int", null=True, low=0),
        Field("positions.out_of_range", "str", null=True),
        Field("tolerance", "object", null=True),
        Field("tolerance.rtol", "number", null=True, low=0),
        Field("tolerance.atol", "number", null=True, low=0),
        Field("quant", "object", null=True),
        Field("quant.scale", "numbers", required=True),
        Field("quant.zero_point", "ints"),
        Field("quant.axis", "int", null=True),
        Field("quant.bound", "number", null=True, low=0),
        Field("quant.bound_all_positions", "number", null=True, low=0),
        Field("checkpoint", "object", null=True),
        Field("checkpoint.path", "str", required=True),
        Field("checkpoint.sha256", "str", required=True),
        Field("numpy_dtype", "str", null=True),
        Field("bitorder", "str", null=True, choices=("little", "big")),
        Field("symbol", "str", null=True),
        Field("pte", "object", null=True),  # ExecuTorch programs (edgepe.formats.pte)
        Field("tflite", "object", null=True),  # TFLite models (edgepe.formats.tflite)
        Field("pte.max_n", "int", required=True, low=1, high=4096),
        Field("pte.operators", "list", required=True),
        # The recorded inputs a rebuild (verify, graft's proof, load check="rebuild") derives
        # everything from: each of the JSON type and range it must have (issue 30), so a list,
        # string, bool or number where an object or scheme id goes is one line, exit 2, in
        # every reader, not an internal error in the one that rebuilds.
        Field("inputs.scheme", "str"),
        Field("inputs.params", "object", null=True),
        Field("inputs.max_len", "int", low=1, high=MAX_LEN_LIMIT),
        Field("inputs.d_model", "int", null=True, low=1, high=D_MODEL_LIMIT),
        Field("inputs.heads", "int", null=True, low=1, high=HEADS_LIMIT),
        Field("inputs.mode", "str", choices=MODES),
        Field("inputs.format", "str", choices=FORMATS),
        Field("inputs.dtype", "str", choices=DTYPES),
        Field("inputs.quantize", "str", null=True),
        Field("inputs.quant_granularity", "str", null=True),
        Field("inputs.lowering", "str", null=True),
        Field("inputs.int8_runtime", "str", null=True),
        Field("inputs.seed", "int", null=True, low=0, high=2**63 - 1),
        Field("inputs.opset", "int", null=True, low=1, high=30),
        Field("inputs.c_prefix", "str", null=True),
        Field("inputs.c_align", "int", null=True, low=1, high=8192),
        Field("inputs.checkpoint_sha256", "str", null=True),
        Field("inputs.checkpoint_key", "str", null=True),
    )


SCHEMA: tuple[Field, ...] = _schema()


def path_for(artifact: str | Path) -> Path:
    """Where the manifest of ``artifact`` lives: ``PATH + ".json"``."""
    return Path(str(artifact) + ".json")


def open_regular(path: str | Path, what: str, max_bytes: int | None = None) -> int:
    """A read-only descriptor on ``path``, refused unless it is a regular file (``what`` names it
    in the error). A symlink is followed only to a regular file: its target is checked with
    ``stat`` before the open, so ``/dev/zero`` or a FIFO is never opened; the open itself does not
    block (``O_NONBLOCK``) and the descriptor is checked again (the path may change in between).
    ``max_bytes``: refuse a larger file."""
    where = str(path)
    try:
        info = os.stat(where)
    except FileNotFoundError:
        raise ArtifactError(f"{where!r} does not exist") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {what} {where!r}: {exc.strerror}") from None
    _check_regular(info, where, what, max_bytes)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ArtifactError(f"cannot read {what} {where!r}: {exc.strerror}") from None
    try:
        _check_regular(os.fstat(fd), where, what, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_regular(info: os.stat_result, where: str, what: str, max_bytes: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = ("a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO"
                if stat.S_ISFIFO(info.st_mode) else "a device or socket")
        raise ArtifactError(f"{what} {where!r} is not a file (it is {kind}): edgepe reads "
                            "regular files only")
    if max_bytes is not None and info.st_size > max_bytes:
        raise ArtifactError(f"{what} {where!r} is {info.st_size} bytes; edgepe reads at most "
                            f"{max_bytes} (a manifest is a few KiB): refused")


def read_bytes(path: str | Path, what: str, max_bytes: int) -> bytes:
    """All of a regular file of at most ``max_bytes`` bytes (``open_regular``'s rules)."""
    fd = open_regular(path, what, max_bytes)
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)  # the size may have grown since fstat
    if len(data) > max_bytes:
        raise ArtifactError(f"{what} {str(path)!r} is over {max_bytes} bytes: refused")
    return data


def path_arg(value, what: str) -> Path:
    """``value`` as a ``Path`` when it is a ``str`` or ``os.PathLike``; anything else (the Python
    API given ``123``, ``None``, bytes, a list) is a ``BadParameterError`` naming ``what``, not
    a TypeError (issue 41)."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise BadParameterError(f"{what} must be a str or os.PathLike, got "
                                f"{type(value).__name__} {reprlib.repr(value)}")
    try:
        return Path(value)
    except TypeError:  # an os.PathLike whose __fspath__ gives bytes
        raise BadParameterError(f"{what} must be a str or os.PathLike of str, got "
                                f"{reprlib.repr(value)}") from None


def artifact_for(path: str | Path) -> Path:
    """The artifact a command was given: ``path`` itself, or for a manifest's path
    (``X.onnx.json``, as a shell's completion offers it) the artifact beside it (``X.onnx``).
    No artifact format ends in ``.json``, so the name alone decides."""
    path = path_arg(path, "the artifact path")
    if path.name.endswith(".json") and len(path.name) > len(".json"):
        artifact = path.with_name(path.name[: -len(".json")])
        if not os.path.lexists(artifact):
            raise ArtifactError(f"{str(path)!r} is a manifest; the artifact it describes, "
                                f"{str(artifact)!r}, does not exist")
        return artifact
    return path


# The manifest key a graph stores its manifest under (edgepe.graphs._common.MANIFEST_KEY).
EMBEDDED_KEY = "edgepe.manifest"
# Bound on an ONNX file read for its embedded manifest alone: a lone artifact (no sidecar) larger
# than this is refused rather than parsed (tables stream after the graph and can be GBs).
MAX_LONE_ONNX_BYTES = 256 * 1024 * 1024


def read(artifact: str | Path) -> dict[str, Any]:
    """The validated manifest of ``artifact`` (the file itself must be a regular file too).

    Raises ``ArtifactError`` (one line) for anything that is not a readable, valid manifest.
    An ONNX artifact moved without its sidecar still holds a copy (``read_embedded``); the
    readers that accept such a lone file go through ``edgepe.rebuild.read_manifest``.
    """
    artifact = Path(artifact)
    os.close(open_regular(artifact, "artifact"))
    mpath = path_for(artifact)
    if not os.path.lexists(mpath):
        raise ArtifactError(
            f"{str(artifact)!r} is not an edgepe artifact: no readable manifest at "
            f"{str(mpath)!r} (artifacts come from 'edgepe export')"
        )
    manifest = loads(read_bytes(mpath, "manifest", MAX_BYTES), str(mpath))
    validate(manifest, str(mpath))
    return manifest


def has_sidecar(artifact: str | Path) -> bool:
    """Whether ``artifact`` has a manifest beside it (``path_for``), readable or not: the readers
    then take that one (``read``), and only a graph without one is read through its embedded
    copy (``edgepe.rebuild.read_manifest``, which imports the exporter)."""
    return os.path.lexists(path_for(artifact))


def read_embedded(artifact: Path) -> tuple[dict[str, Any], int] | None:
    """``(the manifest an edgepe ONNX graph embeds in its metadata_props, the ONNX opset)``, or
    ``None`` when ``artifact`` is no ONNX file holding one. As untrusted as the file: the same
    size bounds and JSON parser as a sidecar, no external data read, and NOT validated here: the
    copy lacks the file's own sha256, the rebuild ``inputs`` and (int8) the quant lists, so
    ``edgepe.rebuild.read_manifest`` trusts it only once it rebuilds the file byte for byte."""
    if artifact.suffix.lower() != ".onnx":
        return None
    data = read_bytes(artifact, "artifact", MAX_LONE_ONNX_BYTES)
    import onnx  # heavy third-party: only for a lone ONNX file

    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - not ONNX: no embedded manifest either
        return None
    text = next((p.value for p in model.metadata_props if p.key == EMBEDDED_KEY), None)
    if text is None:
        return None
    where = f"{artifact}'s embedded manifest"
    if len(text) > MAX_BYTES:
        raise ArtifactError(f"{where} is {len(text)} bytes; edgepe reads at most {MAX_BYTES}: "
                            "refused")
    opsets = {o.domain: o.version for o in model.opset_import}
    return loads(text.encode("utf-8"), where), opsets.get("", opsets.get("ai.onnx"))


def loads(data: bytes, where: str) -> dict[str, Any]:
    """Parse manifest bytes: UTF-8 JSON, one object, depth <= ``MAX_DEPTH``, no duplicate keys,
    no ``NaN``/``Infinity``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactError(f"manifest {where!r} is not UTF-8 text") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise ArtifactError(f"manifest {where!r} nests {depth} levels deep; edgepe reads at most "
                            f"{MAX_DEPTH}: refused")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            seen = [k for i, (k, _) in enumerate(items) if k in dict(items[:i])]
            raise ValueError(f"duplicate key {seen[0]!r}")
        return obj

    def constant(name: str):
        raise ValueError(f"{name} is not a number JSON allows")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits (at most "
                             f"{MAX_INT_DIGITS})")
        return int(digits)

    def number(digits: str) -> float:
        value = float(digits)
        if len(digits) > MAX_FLOAT_CHARS or not math.isfinite(value):
            raise ValueError(f"the number {digits[:24]}{'...' if len(digits) > 24 else ''} "
                             f"(at most {MAX_FLOAT_CHARS} characters, finite)")
        return value

    try:
        manifest = json.loads(text, object_pairs_hook=pairs, parse_constant=constant,
                              parse_int=integer, parse_float=number)
    except (ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArtifactError(f"manifest {where!r} is not valid JSON ({first})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"manifest {where!r} is not a JSON object")
    return manifest


def nesting_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting of JSON ``text``, counted without parsing (strings are
    cut out first, so brackets inside them do not count)."""
    import numpy as np

    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", text)
    steps = np.frombuffer(bare.encode("ascii", errors="replace"), dtype=np.uint8)
    delta = (np.isin(steps, (ord("["), ord("{"))).astype(np.int64)
             - np.isin(steps, (ord("]"), ord("}"))))
    return int(np.cumsum(delta).max(initial=0))


def validate(manifest: Mapping[str, Any], where: str) -> None:
    """Refuse a manifest that does not fit ``SCHEMA`` or the rules tying its fields together;
    the ``ArtifactError`` names the field, what it must be and what it is."""
    for spec in SCHEMA:
        parent_name, _, key = spec.name.rpartition(".")
        parent = manifest.get(parent_name) if parent_name else manifest
        if parent_name and not isinstance(parent, dict):
            continue  # the object itself is absent or null (checked as its own field)
        if key not in parent:
            if spec.required:
                raise ArtifactError(f"manifest {where!r} is not an edgepe manifest: it lacks "
                                    f"{spec.name}")
            continue
        if not _fits(spec, parent[key]):
            raise ArtifactError(f"manifest {where!r}: {spec.name} must be {spec.want()}, "
                                f"got {_short(parent[key])}")
    _check_rules(manifest, where)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value: Any, integer: bool = False) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def _fits(spec: Field, value: Any) -> bool:
    if value is None:
        return spec.null
    kind = spec.type
    if kind in ("numbers", "ints"):
        items = value if isinstance(value, list) else [value]
        return bool(items) and all(_is_number(v, kind == "ints") for v in items)
    ok = {"str": isinstance(value, str), "object": isinstance(value, dict),
          "list": isinstance(value, list), "int": _is_number(value, integer=True),
          "number": _is_number(value)}[kind]
    if not ok:
        return False
    if spec.choices is not None and value not in spec.choices:
        return False
    if spec.low is not None and value < spec.low:
        return False
    return spec.high is None or value <= spec.high


def _check_rules(m: Mapping[str, Any], where: str) -> None:
    """The rules that tie fields together."""
    width = "heads" if m["kind"] == "bias" else "d_model"
    if m.get(width) is None:
        raise ArtifactError(f"manifest {where!r}: a {m['kind']!r} artifact needs {width}")
    if m["format"] in TABLE_FORMATS and m["mode"] != "table":
        raise ArtifactError(f"manifest {where!r}: mode {m['mode']!r} does not fit format "
                            f"{m['format']!r} (npy and bin hold tables)")
    if m["format"] in TABLE_FILES and m["mode"] == "table":  # a stored table file
        shape = m["shape"]
        if not (len(shape) == 2 and all(_is_number(n, True) and n > 0 for n in shape)):
            raise ArtifactError(f"manifest {where!r}: a table's shape must be two positive "
                                f"integers [rows, cols], got {_short(shape)}")
    if not _SHA256.fullmatch(m["sha256"]):
        raise ArtifactError(f"manifest {where!r}: sha256 must be 64 lowercase hex digits")
    checkpoint = m.get("checkpoint")
    if checkpoint and not _SHA256.fullmatch(checkpoint["sha256"]):
        raise ArtifactError(f"manifest {where!r}: checkpoint.sha256 must be 64 lowercase hex "
                            "digits")


def dumps(manifest: Mapping[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, no timestamps, so exports are byte-identical."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def write(artifact: str | Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest`` (canonical text) next to ``artifact``, atomically."""
    text = dumps(manifest)
    atomic_write(path_for(artifact), lambda f: f.write(text))
