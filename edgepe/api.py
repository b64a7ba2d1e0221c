"""The Python API the CLI is a thin layer over: configure, export (+ quick parity), verify.

    from edgepe import api
    config = api.make_config("binary", 512)
    result, report = api.export(config)       # models/binary-compute-L512-d64.onnx (+ .json)
    assert report                              # truthy when the quick parity check passed
    print(result.path, report)

Every function validates its input and raises an ``EdgepeError`` naming the bad value (the CLI
turns it into one line and exit code 2); a failed parity check is a falsy report, not an
exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgepe.errors import BadParameterError, CheckpointError
from edgepe.export.artifact import (
    DEFAULT_TABLE_CAP,
    ExportConfig,
    ExportResult,
    default_granularity,
    validate_choices,
)


def default_mode(scheme: str, scheme_default: str, format: str) -> str:
    """``--mode`` when none is given: npy/bin files hold tables; a C header computes where a C
    function exists, else holds the table (issue 21); ONNX takes the scheme's default."""
    if format in ("npy", "bin"):
        return "table"
    if format == "c":
        from edgepe.formats.c import default_mode as c_default

        return c_default(scheme) if scheme_default == "compute" else "table"
    return scheme_default


def make_config(
    scheme: str,
    max_len: int,
    d_model: int | None = None,
    heads: int | None = None,
    params: Mapping[str, Any] | None = None,
    mode: str | None = None,
    format: str = "onnx",
    dtype: str = "float32",
    quantize: str = "none",
    quant_granularity: str | None = None,
    lowering: str = "bitwise",
    int8_runtime: str = "fold",
    checkpoint: str | Path | None = None,
    checkpoint_key: str | None = None,
    checkpoint_param: str | None = None,
    seed: int = 0,
    opset: int | None = None,
    c_prefix: str = "edgepe",
    c_align: int = 16,
    max_table_bytes: int = DEFAULT_TABLE_CAP,
    out: str | Path | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ExportConfig:
    """A validated ``ExportConfig`` from user values (strings from the CLI are fine).

    ``mode`` defaults to the scheme's default (compute where it has one; table for npy/bin
    files, and for C headers of schemes with no C function: ``default_mode``);
    ``quant_granularity`` to ``default_granularity`` (per tensor for a live int8 table, else per
    channel). ``opset`` (ONNX
    only; refused for other formats) defaults to 18, 19 for int8 graphs, and is written as given
    or refused with the reason. A ``checkpoint`` must
    be an existing file; its sha256 goes into the config (and so into the manifest);
    ``checkpoint_key`` picks the entries under that prefix of a whole model's state_dict,
    ``checkpoint_param`` the one named tensor (a safetensors file or a torch state_dict).
    """
    from edgepe.checkpoint import sha256_file
    from edgepe.schemes import resolve

    resolved = resolve(scheme, max_len, d_model=d_model, heads=heads, params=params)
    if opset is not None and format != "onnx":
        raise BadParameterError(f"--opset applies to ONNX graphs; --format {format} writes none")
    checkpoint_sha256 = None
    if checkpoint is not None:
        if not Path(checkpoint).is_file():
            raise CheckpointError(f"checkpoint {str(checkpoint)!r} does not exist or is not a file")
        checkpoint_sha256 = sha256_file(checkpoint)
    config_mode = mode or default_mode(resolved.scheme, resolved.spec.default_mode, format)
    config = ExportConfig(
        scheme=resolved,
        mode=config_mode,
        format=format,
        dtype=dtype,
        quantize=quantize,
        quant_granularity=quant_granularity or default_granularity(
            resolved.scheme, config_mode, format, quantize, int8_runtime),
        lowering=lowering,
        int8_runtime=int8_runtime,
        seed=int(seed),
        checkpoint=None if checkpoint is None else str(checkpoint),
        checkpoint_sha256=checkpoint_sha256,
        checkpoint_key=checkpoint_key,
        checkpoint_param=checkpoint_param,
        opset=None if opset is None else int(opset),
        c_prefix=c_prefix,
        c_align=int(c_align),
        max_table_bytes=int(max_table_bytes),
        out=None if out is None else Path(out),
        extra=dict(extra or {}),
    )
    validate_choices(config)
    if config.format == "onnx":
        from edgepe.formats.onnx import check_options

        check_options(config)  # refuse now, before a module or table is built
    elif config.format == "pte":
        from edgepe.formats.pte import check_options, require_executorch

        require_executorch()
        check_options(config)
    return config


def export(config: ExportConfig, force: bool = False, verify: bool = True):
    """Write the artifact for ``config``; then, unless ``verify=False``, check its parity.

    Returns ``(ExportResult, report)``: the report of a quick check on onnxruntime CPU (tables:
    their own reader; C headers: the compiler) over positions ``0 .. min(L, 4096) - 1`` and an
    extrapolation probe, truthy when it passed, one line as ``str``; ``None`` when not verified.
    """
    from edgepe.export import export as export_artifact

    result: ExportResult = export_artifact(config, force=force)
    if not verify:
        return result, None
    # The file was just built from these inputs: the quick check does not build it again.
    return result, verify_artifact(result.path, quick=True, checkpoint=config.checkpoint,
                                   rebuild=False)


def verify_artifact(path: str | Path, providers=None, quick: bool = False, **options):
    """Rebuild an artifact and verify it against its reference (``edgepe.verify.verify_artifact``;
    ``checkpoint=FILE`` for a checkpoint-based one)."""
    from edgepe.verify import verify_artifact as run

    return run(path, providers=providers, quick=quick, **options)


verify = verify_artifact
