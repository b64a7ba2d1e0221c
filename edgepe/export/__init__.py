"""Exporters: a scheme's reference module -> an artifact file and its manifest.

``export(config)`` validates, builds the reference module, hands it to the format's
``prepare`` (ONNX graph, npy/bin table, C header) and writes the result safely. It never runs
a runtime: checking parity is the verifier's job (``edgepe.api.export`` does both).
"""

from __future__ import annotations

from pathlib import Path

from edgepe.contract.config import (
    ExportConfig,
    ExportResult,
    Prepared,
    check_manifest_slot,
    check_not_input,
    check_writable,
    default_out,
    target_lock,
    validate_choices,
    write_artifact,
)
from edgepe.contract.manifest import read
from edgepe.export.compare import check_replace

__all__ = ["ExportConfig", "ExportResult", "Prepared", "export", "prepare"]


def prepare(config: ExportConfig, module=None) -> Prepared:
    """The artifact for ``config`` in memory (manifest + writer), without touching the disk."""
    from edgepe.schemes import build

    validate_choices(config)
    if module is None:
        module = build(config.scheme, seed=config.seed, checkpoint=config.checkpoint,
                       checkpoint_key=config.checkpoint_key,
                       checkpoint_param=config.checkpoint_param)
    if config.format == "onnx":
        from edgepe.formats.onnx import prepare as prepare_format
    elif config.format == "npy":
        from edgepe.formats.npy import prepare as prepare_format
    elif config.format == "bin":
        from edgepe.formats.bin import prepare as prepare_format
    elif config.format == "pte":
        from edgepe.formats.pte import prepare as prepare_format
    elif config.format == "tflite":
        from edgepe.formats.tflite import prepare as prepare_format
    elif config.mode == "sliced":  # a C row from bit slices and small tables
        from edgepe.formats.c_sliced import prepare as prepare_format
    else:
        from edgepe.formats.c import prepare as prepare_format
    return prepare_format(config, module)


def export(config: ExportConfig, force: bool = False) -> ExportResult:
    """Write the artifact for ``config`` (to ``config.out`` or under ``models/``)."""
    validate_choices(config)
    out = Path(config.out) if config.out is not None else default_out(config)
    check_writable(out)
    check_manifest_slot(out, force)
    check_not_input(out, [Path(config.checkpoint)] if config.checkpoint else [])
    # Build before looking at what is on disk, so every bad input is named as such (not as a
    # file in the way); an identical artifact already there is then left untouched.
    prepared = prepare(config)
    # One export of a PATH at a time; it also finishes one that was killed mid-commit.
    with target_lock(out):
        if check_replace(out, prepared, force):
            return ExportResult(out, read(out), unchanged=True)
        manifest = write_artifact(out, prepared.write, prepared.manifest)
    return ExportResult(out, manifest)
