"""edgepe: positional encodings for small devices.

Importing ``edgepe`` is light (no torch, onnx or onnxruntime); they load when first used.
"""

from __future__ import annotations

from edgepe.contract.errors import EdgepeError
from edgepe.contract.version import __version__

__all__ = ["EdgepeError", "__version__", "graft", "load"]


def load(path, providers=None, check="sha256", checkpoint=None):
    """Open an artifact for encoding: ``edgepe.load(path).encode(positions) -> np.ndarray``.

    ``check="rebuild"`` also requires the artifact byte-identical to its rebuild
    (``edgepe.runtime.load``; ``checkpoint``: the file a checkpoint-based artifact came from)."""
    from edgepe.runtime import load as _load

    return _load(path, providers=providers, check=check, checkpoint=checkpoint)


# ``edgepe.graft(...)``: the function shadows its module's name here on purpose (the module stays
# importable: ``from edgepe.graft import graft_model``); the module imports nothing heavy.
from edgepe.graft import graft  # noqa: E402
