"""edgepe: positional encodings for small devices.

Importing ``edgepe`` is light (no torch, onnx or onnxruntime); they load when first used.
"""

from __future__ import annotations

from edgepe.contract.errors import EdgepeError
from edgepe.contract.version import __version__

__all__ = ["EdgepeError", "__version__", "graft", "load", "patch"]


def load(path, providers=None, check="sha256", checkpoint=None):
    """Open an artifact for encoding: ``edgepe.load(path).encode(positions) -> np.ndarray``.

    ``check="rebuild"`` also requires the artifact byte-identical to its rebuild
    (``edgepe.runtime.load``; ``checkpoint``: the file a checkpoint-based artifact came from)."""
    from edgepe.runtime import load as _load

    return _load(path, providers=providers, check=check, checkpoint=checkpoint)


def patch(model, mode="table", max_len=None, quantize="none", check=True):
    """Replace a transformers model's rotary modules in place by trig-free edgepe ones, proven
    per module and on the logits (``edgepe.patch.patch``; loads torch)."""
    from edgepe.patch import patch as _patch

    return _patch(model, mode=mode, max_len=max_len, quantize=quantize, check=check)


# ``edgepe.graft(...)``: the function shadows its module's name here on purpose (the module stays
# importable: ``from edgepe.graft import graft_model``); the module imports nothing heavy.
from edgepe.graft import graft  # noqa: E402
