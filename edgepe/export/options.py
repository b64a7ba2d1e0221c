"""User values -> a validated ``ExportConfig``: what ``edgepe.api.make_config`` (and so every
command and ``edgepe.graft``'s splice) calls before anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgepe.contract.checkpoint import sha256_file
from edgepe.contract.config import (
    DEFAULT_TABLE_CAP,
    ExportConfig,
    default_granularity,
    validate_choices,
)
from edgepe.contract.errors import BadParameterError, CheckpointError


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
