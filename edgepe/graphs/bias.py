"""Compute graphs of the attention-bias schemes, alibi and gaussian: integer differences.

``bias [H, N, M]`` from ``positions [N]`` and ``key_positions [M]`` (int64): the distance
``t - u`` is an exact int64 ``Sub`` (broadcast ``[N, 1] - [M]``), cast to float32 once, then the
reference's float ops in the reference's order (``edgepe/schemes/alibi.py``, ``gaussian.py``), so
the result is bitwise the reference's. No trig, no Exp, no position-indexed table: the only
constants are the per-head slopes (alibi) or ``2 sigma^2`` (gaussian), and the schemes
extrapolate to every position.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from edgepe.contract.config import ExportConfig
from edgepe.graphs._common import (
    BIAS,
    KEY_POSITIONS,
    POSITIONS,
    Graph,
    output,
    positions_input,
)


def _difference(g: Graph) -> str:
    """``[N, M]`` int64 ``t - u``."""
    column = g.op("Unsqueeze", POSITIONS, g.const([-1], np.int64))
    return g.op("Sub", column, KEY_POSITIONS)


def _bias_model(config: ExportConfig, g: Graph, bias: str, manifest: dict) -> onnx.ModelProto:
    g.finish(bias, config.dtype, name=BIAS)
    keys = helper.make_tensor_value_info(KEY_POSITIONS, TensorProto.INT64, ["M"])
    out = output(BIAS, config.dtype, [config.scheme.heads, "N", "M"])
    return g.model([positions_input(None), keys], [out], config.opset, manifest)


def alibi(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N], key_positions [M] int64 -> bias [H, N, M] = -m_h |t - u|``.

    ``-(m_h * d)`` is computed as ``(-m_h) * d``: negation is exact and commutes with the
    product's rounding (the same bits, signed zeros included).
    """
    g = Graph("edgepe_alibi")
    distance = g.cast(g.op("Abs", _difference(g)), "float32")
    neg_slopes = -module.slopes.detach().numpy().reshape(-1, 1, 1)
    return _bias_model(config, g, g.op("Mul", g.const(neg_slopes, np.float32, name="neg_slopes"),
                                       distance), manifest)


def gaussian(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N], key_positions [M] int64 -> bias [H, N, M] = -(d * d) / (2 sigma^2)``."""
    g = Graph("edgepe_gaussian")
    d = g.cast(_difference(g), "float32")
    two_sigma_sq = g.const(module.two_sigma_sq.detach().numpy(), np.float32, name="two_sigma_sq")
    bias = g.op("Neg", g.op("Div", g.op("Mul", d, d), two_sigma_sq))
    heads = g.const([config.scheme.heads, 1, 1], np.int64)
    return _bias_model(config, g, g.op("Expand", bias, heads), manifest)
