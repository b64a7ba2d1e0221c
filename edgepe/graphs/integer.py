"""Compute graphs of the integer family: the position cast to float once, then affine constants.

Each graph does what the reference does, op for op (integer-and-binary-pe-guide sections
2.1-2.4): ``Cast(int64 -> float32)``, ``Div`` by the float32 constant ``C`` or ``L - 1``, then
``Mul``/``Add`` by the module's float32 buffers, so each output is the same correctly rounded
float32 as the reference's. Positions are exact in float32 up to ``|pos| = 2^24``, the schemes'
documented domain; beyond it both round the same way but the scheme is undefined.
"""

from __future__ import annotations

import numpy as np

from edgepe.contract.config import ExportConfig
from edgepe.graphs._common import POSITIONS, Graph, output, positions_input


def _affine_model(config: ExportConfig, manifest: dict, name: str, divisor: float,
                  scale=None, shift=None):
    """``positions [N] -> pe [N, d]``: ``Cast``, ``Div divisor``, then ``* scale``, ``+ shift``.

    Without ``scale`` the ``[N, 1]`` value is expanded to ``d`` columns (the reference's
    ``expand``), so every column holds the same float.
    """
    g = Graph(name)
    d = config.scheme.d_model
    x = g.op("Unsqueeze", POSITIONS, g.const([-1], np.int64, "last_axis"))  # [N, 1]
    y = g.op("Div", g.cast(x, "float32"), g.const(divisor, np.float32, "divisor"))
    if scale is None:
        y = g.op("Expand", y, g.const([1, d], np.int64, "width"))
    else:
        y = g.op("Mul", y, g.const(scale, np.float32, "scale"))
    if shift is not None:
        y = g.op("Add", y, g.const(shift, np.float32, "bias"))
    g.finish(y, config.dtype)
    return g.model([positions_input(None)], [output("pe", config.dtype, ["N", d])],
                   config.opset, manifest)


def _f32(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy().astype(np.float32)


def _l_minus_1(config: ExportConfig) -> float:
    return float(max(config.scheme.max_len - 1, 1))  # L = 1 divides by 1, as the reference


def integer(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``pos / C`` in every column."""
    return _affine_model(config, manifest, "integer", config.scheme.params["C"])


def integer_norm(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``pos / (L - 1)`` in every column."""
    return _affine_model(config, manifest, "integer_norm", _l_minus_1(config))


def integer_multiscale(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``pos / (L - 1) * s_i`` (the module's scale)."""
    return _affine_model(config, manifest, "integer_multiscale", _l_minus_1(config),
                         scale=_f32(module.scale))


def integer_learnable(config: ExportConfig, module, manifest: dict):
    """``positions [N] int64 -> pe [N, d_model]``: ``w_i pos / (L - 1) + b_i``."""
    return _affine_model(config, manifest, "integer_learnable", _l_minus_1(config),
                         scale=_f32(module.weight), shift=_f32(module.bias))
