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

from pathlib import Path

from edgepe.contract.config import ExportConfig, ExportResult
from edgepe.export import export as export_artifact
from edgepe.export.options import default_mode as default_mode  # the API's, built one layer down
from edgepe.export.options import make_config as make_config


def export(config: ExportConfig, force: bool = False, verify: bool = True):
    """Write the artifact for ``config``; then, unless ``verify=False``, check its parity.

    Returns ``(ExportResult, report)``: the report of a quick check on onnxruntime CPU (tables:
    their own reader; C headers: the compiler) over positions ``0 .. min(L, 4096) - 1`` and an
    extrapolation probe, truthy when it passed, one line as ``str``; ``None`` when not verified.
    """
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


def patch(model, **options):
    """Make a transformers model's PE trig-free in place, proven (``edgepe.patch.patch``)."""
    from edgepe.patch import patch as run

    return run(model, **options)
