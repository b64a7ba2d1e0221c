"""What every exporter shares: the export configuration, the manifest and safe file writing.

An artifact is one file plus its manifest at ``PATH + ".json"``. Both are written to a temporary
file in the target directory and renamed into place, artifact first, manifest last (it carries
the artifact's sha256), so a failure or a kill leaves the old artifact or the new one, never
half of one. Stale temporary files of the same target are removed by the next export.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from edgepe import __version__
from edgepe.errors import BadParameterError, OutputPathError
from edgepe.manifest import path_for as manifest_path
from edgepe.manifest import write as write_manifest
from edgepe.schemes._registry import SchemeConfig

FORMATS = ("onnx", "npy", "bin", "c")
DTYPES = ("float32", "float16", "uint8", "bit")
QUANTIZE = ("none", "int8")
LOWERINGS = ("bitwise", "arith")
EXTENSIONS = {"onnx": ".onnx", "npy": ".npy", "bin": ".bin", "c": ".h"}
DEFAULT_OPSET = 18
DEFAULT_TABLE_CAP = 256 * 2**20  # bytes; --max-table-bytes raises it
TMP_MARK = ".edgepe-tmp-"


@dataclass(frozen=True)
class ExportConfig:
    """Everything that determines an artifact's bytes (and nothing that does not)."""

    scheme: SchemeConfig
    mode: str = "compute"
    format: str = "onnx"
    dtype: str = "float32"
    quantize: str = "none"
    quant_granularity: str = "channel"  # or "tensor"
    lowering: str = "bitwise"
    seed: int = 0
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    opset: int = DEFAULT_OPSET
    c_prefix: str = "edgepe"
    c_align: int = 16
    max_table_bytes: int = DEFAULT_TABLE_CAP
    out: Path | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def with_out(self, out: Path) -> ExportConfig:
        return replace(self, out=Path(out))

    def inputs(self) -> dict[str, Any]:
        """The manifest's record of what made the artifact (compared to decide --force)."""
        return {
            **self.scheme.as_dict(),
            "mode": self.mode,
            "format": self.format,
            "dtype": self.dtype,
            "quantize": self.quantize,
            "quant_granularity": self.quant_granularity if self.quantize != "none" else None,
            "lowering": self.lowering if self.mode == "compute" else None,
            "seed": self.seed,
            "checkpoint_sha256": self.checkpoint_sha256,
            "opset": self.opset if self.format == "onnx" else None,
            "c_prefix": self.c_prefix if self.format == "c" else None,
            "c_align": self.c_align if self.format == "c" else None,
            **dict(self.extra),
        }


def default_out(config: ExportConfig, root: Path = Path("models")) -> Path:
    """``models/{scheme}-{mode}-L{max_len}[-d{d}|-h{H}][-int8][-{dtype}][-{lowering}][-{extra}].{ext}``.

    ``extra`` values in key order, e.g. ``rope-compute-L512-d64-apply-ort.onnx``.
    """
    s = config.scheme
    parts = [s.scheme, config.mode, f"L{s.max_len}"]
    parts.append(f"h{s.heads}" if s.d_model is None else f"d{s.d_model}")
    if config.quantize != "none":
        parts.append(config.quantize)
    if config.dtype != "float32":
        parts.append(config.dtype)
    if config.mode == "compute" and config.lowering != "bitwise":
        parts.append(config.lowering)
    # Scheme-specific choices (rope's apply graph and its lowering) name a different graph.
    parts += [str(value) for _, value in sorted(config.extra.items())]
    return root / ("-".join(parts) + EXTENSIONS[config.format])


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def base_manifest(config: ExportConfig, shape: list[int], dtype: str) -> dict[str, Any]:
    """The contract's manifest fields except ``sha256`` (added when the file is written)."""
    s = config.scheme
    spec = s.spec
    manifest: dict[str, Any] = {
        "edgepe_version": __version__,
        "scheme": s.scheme,
        "params": s.as_dict()["params"],
        "max_len": s.max_len,
        "d_model": s.d_model,
        "heads": s.heads,
        "kind": spec.kind,
        "format": config.format,
        "mode": config.mode,
        "dtype": dtype,
        "shape": list(shape),
        "quant": None,
        "lowering": config.lowering if config.mode == "compute" else None,
        "seed": config.seed,
        "checkpoint": (
            None
            if config.checkpoint is None
            else {"path": str(config.checkpoint), "sha256": config.checkpoint_sha256}
        ),
        "positions": {
            "arity": s.arity,
            "out_of_range": "clamp" if config.mode == "table" else spec.oob,
            "limit": spec.position_limit,
        },
        "tolerance": {"rtol": spec.tolerance[0], "atol": spec.tolerance[1]},
        "inputs": config.inputs(),
    }
    return manifest


def check_writable(out: Path) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    parent = out.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputPathError(f"cannot write {str(out)!r}: {str(probe)!r} is a file, not a folder")
    if out.exists() and out.is_dir():
        raise OutputPathError(f"cannot write {str(out)!r}: it is a folder")
    if not os.access(probe, os.W_OK):
        raise OutputPathError(f"cannot write {str(out)!r}: {str(probe)!r} is not writable")


def check_replace(out: Path, prepared: Prepared, force: bool) -> bool:
    """Whether ``out`` already holds this exact export (then exporting again is a no-op).

    "This exact export": the file's bytes AND its manifest equal what ``prepared`` builds now
    (``edgepe.rebuild.compare``), so a tampered file whose manifest was edited back to the
    command's inputs is not kept (issue 23). ``force`` always writes (an export is
    deterministic: the same bytes again, or the new ones). An existing file made from other
    inputs, or that is not an edgepe artifact, is only replaced with ``force``.
    """
    if not out.exists() or force:
        return False
    from edgepe.errors import ArtifactError
    from edgepe.manifest import open_regular, read
    from edgepe.rebuild import compare

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


def clean_stale(out: Path) -> None:
    """Remove temporary files a killed export of ``out`` left behind."""
    if out.parent.is_dir():
        for stale in out.parent.glob(f".{out.name}*{TMP_MARK}*"):
            stale.unlink(missing_ok=True)


def atomic_write(out: Path, write: Callable[[BinaryIO], None]) -> str:
    """Write ``out`` via a temporary file and a rename; returns the sha256 of what was written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}{TMP_MARK}", dir=out.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; artifacts get the usual mode
        with os.fdopen(fd, "wb") as raw:
            hashing = _HashingWriter(raw)
            write(hashing)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return hashing.hexdigest()


def write_artifact(
    out: Path, write: Callable[[BinaryIO], None], manifest: dict[str, Any]
) -> dict[str, Any]:
    """Write the artifact, then its manifest (with ``sha256``) last. Returns the manifest."""
    clean_stale(out)
    clean_stale(manifest_path(out))
    digest = atomic_write(out, write)
    manifest = {**manifest, "sha256": digest}
    write_manifest(out, manifest)
    return manifest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def validate_choices(config: ExportConfig) -> None:
    """Refuse option values and combinations the contract does not allow."""
    spec = config.scheme.spec
    for name, value, allowed in (
        ("--format", config.format, FORMATS),
        ("--dtype", config.dtype, DTYPES),
        ("--quantize", config.quantize, QUANTIZE),
        ("--lowering", config.lowering, LOWERINGS),
        ("--mode", config.mode, ("compute", "table")),
        ("--quant-granularity", config.quant_granularity, ("channel", "tensor")),
    ):
        if value not in allowed:
            raise BadParameterError(f"{name} {value!r} is not one of: {', '.join(allowed)}")
    if config.mode not in spec.modes:
        raise BadParameterError(
            f"scheme '{spec.id}' has no {config.mode} mode; it has: {', '.join(spec.modes)}"
        )
    if config.checkpoint is not None and not spec.learnable:
        raise BadParameterError(
            f"scheme '{spec.id}' has no learned weights: --checkpoint does not apply"
        )
    if not 1 <= config.opset <= 30:
        raise BadParameterError(f"--opset must be between 1 and 30, got {config.opset}")
    if config.max_table_bytes < 1:
        raise BadParameterError(f"--max-table-bytes must be positive, got {config.max_table_bytes}")


@dataclass
class Prepared:
    """An artifact ready to write: its manifest (all but ``sha256``) and a writer.

    Each format module's ``prepare(config, module) -> Prepared`` builds one; ``write`` streams the
    bytes into a binary file object (tables are written in chunks, never built twice).
    """

    manifest: dict[str, Any]
    write: Callable[[BinaryIO], None]


@dataclass
class ExportResult:
    path: Path
    manifest: dict[str, Any]
    unchanged: bool = False  # an identical artifact was already there: nothing was written
