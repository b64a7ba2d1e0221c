"""Compute graphs of the attention-bias schemes, alibi, gaussian and t5-bias: integer differences.

``bias [H, N, M]`` from ``positions [N]`` and ``key_positions [M]`` (int64): the distance
``t - u`` is an exact int64 ``Sub`` (broadcast ``[N, 1] - [M]``), cast to float32 once, then the
reference's float ops in the reference's order (``edgepe/schemes/alibi.py``, ``gaussian.py``), so
the result is bitwise the reference's. No trig, no Exp, no position-indexed table: the only
constants are the per-head slopes (alibi) or ``2 sigma^2`` (gaussian), and the schemes
extrapolate to every position. t5-bias is integer up to its learned embedding: the bucket of
``u - t`` from a small lookup of distances (T5's logarithm precomputed), then the embedding's row.
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


def t5_bias(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N], key_positions [M] int64 -> bias [H, N, M] = E[bucket(u - t)]``, no Log.

    T5's logarithmic buckets are a non-decreasing step function of the distance ``a``, constant
    from ``C`` on (``T5Bias.magnitude_buckets``), so the bucket is a ``Gather`` of the integer
    lookup ``lut [C + 1]`` at ``min(a, C)``, the lookup computed by the reference's own float32
    bucket function (issue 40: targets without Log; tests/test_t5_mrope.py proves it equal to
    transformers' at every distance up to 2^25). ``a = |u - t|`` plus ``num_buckets // 2`` where
    ``u > t`` (bidirectional), or ``a = max(t - u, 0)`` (causal); then ``Gather`` of the
    embedding's rows and ``Transpose`` to ``[H, N, M]``.
    """
    g = Graph("edgepe_t5_bias")
    relative = g.op("Neg", _difference(g))  # u - t, as T5's memory - query
    bucket = t5_bucket(g, relative, module.magnitude_buckets().numpy(), module.bidirectional,
                       config.scheme.params["num_buckets"] // 2)
    table = module.relative_attention_bias.weight.detach().numpy()  # [num_buckets, H]
    rows = g.op("Gather", g.const(table, np.float32, name="relative_attention_bias"), bucket,
                axis=0)  # [N, M, H]
    return _bias_model(config, g, g.op("Transpose", rows, perm=[2, 0, 1]), manifest)


def t5_bucket(g: Graph, relative: str, lut: np.ndarray, bidirectional: bool, later: int) -> str:
    """int64 ``relative`` (``u - t``, any shape) -> T5's int64 bucket of it, same shape, no Log:
    ``lut[min(a, C)]`` (``lut [C + 1]``, ``T5Bias.magnitude_buckets``) with ``a = |u - t|`` plus
    ``later`` (``num_buckets // 2``) where ``u > t`` (bidirectional), or ``a = max(t - u, 0)``
    (causal). ``t5_bias`` reads its embedding's rows by it; ``edgepe graft`` puts it in place of
    a T5 export's own float32 bucket computation (``edgepe/graft/t5.py``, issue 40)."""
    zero = g.const(0, np.int64, "zero")
    if bidirectional:
        magnitude = g.op("Abs", relative)
    else:  # Where, not Max: onnxruntime's int64 Max is wrong past 2^31 (clamp_int64)
        magnitude = g.op("Where", g.op("Less", relative, zero), g.op("Neg", relative), zero)
    last = g.const(len(lut) - 1, np.int64, "last_distance")
    clipped = g.op("Where", g.op("Greater", magnitude, last), last, magnitude)
    bucket = g.op("Gather", g.const(lut, np.int64, name="distance_buckets"), clipped, axis=0)
    if bidirectional:
        half = g.const(later, np.int64, "later_offset")
        bucket = g.op("Where", g.op("Greater", relative, zero), g.op("Add", bucket, half), bucket)
    return bucket
