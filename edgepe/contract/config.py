"""What every layer shares about an export: ``ExportConfig``, the option values and their checks,
``base_manifest``, ``Prepared``, and the checks and writing of an output path.

An artifact is one file plus its manifest at ``PATH + ".json"``. Both are written to temporary
files in the target directory, under a per-target lock, and committed by renames with a journal
(``edgepe.contract.commit``), so a failure or a kill leaves the old pair or the new one, never
half of one, and concurrent exports of one PATH never clobber each other's files.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from edgepe.contract.commit import TMP_MARK as TMP_MARK  # where tests and tools look for it
from edgepe.contract.commit import atomic_write, hashed, target_lock, write_pair
from edgepe.contract.errors import BadParameterError, OutputPathError
from edgepe.contract.manifest import dumps as dumps_manifest
from edgepe.contract.manifest import path_for as manifest_path
from edgepe.contract.version import __version__

if TYPE_CHECKING:  # the contract names the scheme layer's config, never imports it
    from edgepe.schemes._registry import SchemeConfig

FORMATS = ("onnx", "npy", "bin", "c", "pte", "tflite")
DTYPES = ("float32", "float16", "uint8", "bit")
QUANTIZE = ("none", "int8")
LOWERINGS = ("bitwise", "arith", "arith32", "float", "trunc", "clip32")
# |position| up to which the int32 and float32 lowerings are exact (graphs/lowerings.py
# proves it): the manifest's positions.limit, which edgepe.load and verify honour.
LOWERING_LIMITS = {"arith32": 2**31 - 1, "float": 2**24, "trunc": 2**24, "clip32": 2**24}
# Modes whose graph has a --lowering (how positions become bits or slices).
LOWERED_MODES = ("compute", "sliced")
# How an int8 ONNX graph's stored int8 lives at run time (edgepe.graphs.int8): folded to float32
# at session load (fast, float32 RAM), or kept int8 and dequantised per call (int8 RAM).
INT8_RUNTIMES = ("fold", "live")
EXTENSIONS = {"onnx": ".onnx", "npy": ".npy", "bin": ".bin", "c": ".h", "pte": ".pte",
              "tflite": ".tflite"}
DEFAULT_OPSET = 18
# int8 graphs dequantise per channel (DequantizeLinear with ``axis``), which onnx's reference
# evaluator, a verification runtime, implements from opset 19 on (onnx 1.23: versions 19, 21, 23,
# 25): their default opset, and the lowest they accept (issue 18: never raised silently).
INT8_OPSET = 19
DEFAULT_TABLE_CAP = 256 * 2**20  # bytes; --max-table-bytes raises it
SEED_MAX = 2**63 - 1  # torch.manual_seed takes 64 bits; the manifest's JSON keeps an int64 exact
C_ALIGN_MAX = 8192  # the most MSVC's __declspec(align(N)) takes (GCC: 2^28 in ELF objects)


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
    int8_runtime: str = "fold"  # or "live"; int8 ONNX graphs only
    seed: int = 0
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    checkpoint_key: str | None = None  # prefix of the module's entries in a model's state_dict
    checkpoint_param: str | None = None  # the one tensor to load (transformer.wpe.weight)
    opset: int | None = None  # None: DEFAULT_OPSET, or INT8_OPSET for an int8 ONNX graph
    c_prefix: str = "edgepe"
    c_align: int = 16
    max_table_bytes: int = DEFAULT_TABLE_CAP
    out: Path | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.opset is None:
            int8_graph = self.quantize == "int8" and self.format == "onnx"
            object.__setattr__(self, "opset", INT8_OPSET if int8_graph else DEFAULT_OPSET)

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
            "lowering": self.lowering if self.mode in LOWERED_MODES else None,
            "seed": self.seed,
            "checkpoint_sha256": self.checkpoint_sha256,
            "opset": self.opset if self.format == "onnx" else None,
            "c_prefix": self.c_prefix if self.format == "c" else None,
            "c_align": self.c_align if self.format == "c" else None,
            # only when given, so every manifest made without it keeps its bytes
            **({"checkpoint_key": self.checkpoint_key} if self.checkpoint_key else {}),
            **({"checkpoint_param": self.checkpoint_param} if self.checkpoint_param else {}),
            # recorded for int8 ONNX graphs only, so no other artifact's manifest changes
            **({"int8_runtime": self.int8_runtime} if self.int8_graph else {}),
            **dict(self.extra),
        }

    @property
    def int8_graph(self) -> bool:
        """An int8 ONNX graph: the artifacts ``int8_runtime`` applies to."""
        return self.quantize == "int8" and self.format == "onnx"


def default_granularity(scheme: str, mode: str, format: str, quantize: str,
                        int8_runtime: str) -> str:
    """``--quant-granularity`` when not given: ``channel`` (one scale per column), except for an
    int8 ONNX graph that keeps a gathered table int8 at run time (``--int8-runtime live`` with
    ``--mode table``, or sinusoidal-learned's residual table): there ``tensor``.

    A live table dequantises the ``[N, cols]`` rows each call reads. One scale is one vectorised
    ``DequantizeLinear`` pass (0.92-1.55x the float32 Gather on onnxruntime's CPU provider);
    per-column scales run on that hot last axis, as a ``Cast`` and a broadcast ``Mul`` (two
    passes, 1.9-3.4x) or a per-axis ``DequantizeLinear`` (a scalar loop, 6-12x): issue 19,
    docs/readme/int8-speed.md. ``--quant-granularity channel`` still gives the per-column form.
    """
    live_table = mode == "table" or scheme == "sinusoidal-learned"
    live = quantize == "int8" and format == "onnx" and int8_runtime == "live"
    return "tensor" if live and live_table else "channel"


def default_out(config: ExportConfig, root: Path = Path("models")) -> Path:
    """``models/{scheme}-{mode}-L{max_len}[-d{d}|-h{H}][-int8[-live]][-{dtype}][-{lowering}][-{extra}].{ext}``.

    ``extra`` values in key order, e.g. ``rope-compute-L512-d64-apply-ort.onnx``.
    """
    s = config.scheme
    parts = [s.scheme, config.mode, f"L{s.max_len}"]
    parts.append(f"h{s.heads}" if s.d_model is None else f"d{s.d_model}")
    if config.quantize != "none":
        parts.append(config.quantize)
    if config.int8_graph and config.int8_runtime != "fold":
        parts.append(config.int8_runtime)
    if config.dtype != "float32":
        parts.append(config.dtype)
    if config.mode in LOWERED_MODES and config.lowering != "bitwise":
        parts.append(config.lowering)
    # Scheme-specific choices (rope's apply graph and its lowering) name a different graph.
    # (--slices 8,7 names the file ...-8-7: no comma in a default name)
    parts += [str(value).replace(",", "-") for _, value in sorted(config.extra.items())]
    return root / ("-".join(parts) + EXTENSIONS[config.format])


def infer_format(out: Path | None, given: str | None) -> str:
    """``--format``: as given, else the one ``out``'s extension names (``EXTENSIONS``), else
    onnx. ``out``'s extension must name a format and agree with a given one: a contradiction
    (``--format c --out g.onnx``), an unknown extension (``pe.c``, ``pe.npz``) or none (``pe``)
    is refused, so a file's name never hides what it holds."""
    if out is None:
        return given or "onnx"
    suffix = out.suffix.lower()
    implied = next((f for f, ext in EXTENSIONS.items() if ext == suffix), None)
    if implied is None:
        known = ", ".join(f"{ext} ({f})" for f, ext in EXTENSIONS.items())
        what = f"ends in {out.suffix!r}" if out.suffix else "has no extension"
        hint = " (--format c writes a header: name it .h)" if suffix == ".c" else ""
        raise BadParameterError(
            f"--out {str(out)!r} {what}, which names no format edgepe writes{hint}; use one of "
            f"{known}, or --out FOLDER/ for the default name"
        )
    if given is None:
        return implied
    if given in EXTENSIONS and implied != given:
        raise BadParameterError(
            f"--format {given} writes {EXTENSIONS[given]} files, but --out {str(out)!r} ends in "
            f"{out.suffix} (--format {implied}); drop --format or rename the output"
        )
    return given


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
        "lowering": config.lowering if config.mode in LOWERED_MODES else None,
        "seed": config.seed,
        "checkpoint": (
            None
            if config.checkpoint is None
            else {"path": str(config.checkpoint), "sha256": config.checkpoint_sha256,
                  **({"key": config.checkpoint_key} if config.checkpoint_key else {}),
                  **({"param": config.checkpoint_param} if config.checkpoint_param else {})}
        ),
        "positions": {
            "arity": s.arity,
            "out_of_range": "clamp" if config.mode == "table" else spec.oob,
            "limit": position_limit(config),
        },
        "tolerance": {"rtol": spec.tolerance[0], "atol": spec.tolerance[1]},
        "inputs": config.inputs(),
    }
    return manifest


def position_limit(config: ExportConfig) -> int | None:
    """``|position|`` up to which the artifact is defined: the scheme's own limit, lowered to
    what the compute graph's lowering computes exactly (``LOWERING_LIMITS``)."""
    limits = [config.scheme.spec.position_limit]
    if config.mode in LOWERED_MODES and config.format == "onnx":
        limits.append(LOWERING_LIMITS.get(config.lowering))
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def check_writable(out: Path, option: str = "--out") -> None:
    """Refuse an output path that cannot be written, before any work is done: a folder, a
    non-regular file (device, FIFO, socket: refused even with ``--force``), a place under a
    file or not writable, a name that is not UTF-8 or too long."""
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:
        raise OutputPathError(f"{option} {str(out)!r}: the name is not valid UTF-8; "
                              "choose a UTF-8 file name") from None
    probe = _existing_ancestor(out)
    if not probe.is_dir():
        raise OutputPathError(f"cannot write {str(out)!r}: {str(probe)!r} is a file, not a folder")
    # before anything stats PATH: a name over NAME_MAX makes stat itself fail (ENAMETOOLONG)
    room = _name_max(probe)
    if len(os.fsencode(out.name)) > room:
        raise OutputPathError(f"cannot write {str(out)!r}: the file name is longer than {room} "
                              "bytes")
    if out.exists() and out.is_dir():
        raise OutputPathError(f"cannot write {str(out)!r}: it is a folder")
    _check_regular(out)
    if not os.access(probe, os.W_OK):
        raise OutputPathError(f"cannot write {str(out)!r}: {str(probe)!r} is not writable")


def check_manifest_slot(out: Path, force: bool) -> None:
    """Refuse to touch ``PATH.json`` unless it is edgepe's to replace (and a name with no room
    for it): a folder or non-regular file there is refused always; a file there beside no
    artifact (a manifest of nothing, or a file edgepe did not write) only goes with ``force``.
    (A ``PATH.json`` beside an existing ``PATH`` is judged with the artifact, by
    ``check_replace``.)"""
    mpath = manifest_path(out)
    room = _name_max(_existing_ancestor(out)) - len(".json")
    if len(os.fsencode(out.name)) > room:
        raise OutputPathError(f"cannot write {str(out)!r}: the file name is longer than {room} "
                              "bytes (its manifest adds '.json')")
    if mpath.is_dir():
        raise OutputPathError(f"cannot write {str(mpath)!r}, the manifest of {str(out)!r}: "
                              "it is a folder")
    _check_regular(mpath)
    if mpath.exists() and not out.exists() and not force:
        raise OutputPathError(f"{str(mpath)!r} exists and is not the manifest of an artifact at "
                              f"{str(out)!r}; pass --force to replace it")


def check_not_input(out: Path, inputs: list[Path], option: str = "--out") -> None:
    """Refuse an output that is one of the command's inputs or an input's manifest."""
    for given in inputs:
        for source in (Path(given), manifest_path(given)):
            if _same_file(out, source):
                raise OutputPathError(f"{option} {str(out)!r} is the input {str(source)!r}; "
                                      "write somewhere else")


def check_output(out: Path, inputs: list[Path], force: bool, option: str = "--out") -> None:
    """The one output rule for a command's file that is not an artifact (a JSON report, run's
    values, a plot, a grafted model), checked before any work: writable (``check_writable``),
    never one of the command's ``inputs`` or their manifests, ``--force`` or not (a symlink to
    one counts as it), and an existing file (or symlink, dangling or not) only replaced with
    ``force``. The write itself (``write_output``) is atomic and replaces a symlink, never what
    it points to."""
    check_writable(out, option)
    check_not_input(out, inputs, option)
    if os.path.lexists(out) and not force:
        what = "is a symlink" if os.path.islink(out) else "exists"
        raise OutputPathError(f"{option} {str(out)!r} {what}; pass --force to replace it")


def write_output(out: Path, data: bytes | Callable[[BinaryIO], None], inputs: list[Path],
                 force: bool, option: str = "--out") -> str:
    """``check_output`` again (the place may have changed since), then ``atomic_write``: a
    temporary file beside ``out`` renamed over it. Returns the sha256 written."""
    check_output(out, inputs, force, option)
    write = data if callable(data) else (lambda f: f.write(data))
    return atomic_write(out, write)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _check_regular(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (or a dangling link, which a rename replaces)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise OutputPathError(f"cannot write {str(path)!r}: it is not a regular file "
                              "(a device, FIFO or socket); edgepe never writes into one")


def _existing_ancestor(path: Path) -> Path:
    """The nearest of ``path``'s parents that exists (where a write would create folders)."""
    probe = path.parent
    while not probe.exists():
        probe = probe.parent
    return probe


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def write_artifact(
    out: Path, write: Callable[[BinaryIO], None], manifest: dict[str, Any]
) -> dict[str, Any]:
    """Write the artifact, then its manifest (with ``sha256``), under the target's lock (taken
    here unless the caller holds it), committed as ``edgepe.contract.commit`` says. Returns the
    manifest."""
    written: dict[str, Any] = {}

    def manifest_bytes(digest: str) -> bytes:
        written.update(manifest, sha256=digest)
        return dumps_manifest(written)

    with target_lock(out):
        write_pair(out, hashed(write), manifest_bytes)
    return written


def validate_choices(config: ExportConfig) -> None:
    """Refuse option values and combinations the contract does not allow."""
    spec = config.scheme.spec
    for name, value, allowed in (
        ("--format", config.format, FORMATS),
        ("--dtype", config.dtype, DTYPES),
        ("--quantize", config.quantize, QUANTIZE),
        ("--lowering", config.lowering, LOWERINGS),
        ("--int8-runtime", config.int8_runtime, INT8_RUNTIMES),
        ("--mode", config.mode, ("compute", "table", "sliced")),
        ("--quant-granularity", config.quant_granularity, ("channel", "tensor")),
    ):
        if value not in allowed:
            raise BadParameterError(f"{name} {value!r} is not one of: {', '.join(allowed)}")
    if config.mode not in spec.modes:
        raise BadParameterError(
            f"scheme '{spec.id}' has no {config.mode} mode; it has: {', '.join(spec.modes)}"
        )
    if config.checkpoint_key is not None and config.checkpoint is None:
        raise BadParameterError("--checkpoint-key names a prefix inside --checkpoint FILE; "
                                "give --checkpoint too")
    if config.checkpoint_param is not None and config.checkpoint is None:
        raise BadParameterError("--checkpoint-param names a tensor inside --checkpoint FILE; "
                                "give --checkpoint too")
    if config.checkpoint_param is not None and config.checkpoint_key is not None:
        raise BadParameterError("--checkpoint-param names one tensor by its full name; "
                                "--checkpoint-key (a prefix) does not apply with it")
    if config.checkpoint is not None and not spec.learnable:
        raise BadParameterError(
            f"scheme '{spec.id}' has no learned weights: --checkpoint does not apply"
        )
    if not 0 <= config.seed <= SEED_MAX:
        raise BadParameterError(f"--seed must be between 0 and {SEED_MAX}, got {config.seed}")
    if not (1 <= config.c_align <= C_ALIGN_MAX and config.c_align & (config.c_align - 1) == 0):
        raise BadParameterError(f"--c-align must be a power of two from 1 to {C_ALIGN_MAX} "
                                f"bytes, got {config.c_align}")
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
