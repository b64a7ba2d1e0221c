"""Compute graphs of the trig schemes: sinusoidal, sinusoidal-learned, rope and mrope.

Every graph recomputes the reference's float32 angle op for op, ``Cast(positions) * inv_freq``
with the module's own ``inv_freq`` buffer (``edgepe.schemes.sinusoidal.angles``), so the angle is
bitwise the reference's and only the Sin/Cos kernels differ (measured gap: each scheme's
``tolerance_why``). The schemes extrapolate, so the graphs hold no position-indexed table, except
the learned residual of sinusoidal-learned, which is zero outside ``0 .. max_len - 1``.

rope has these graphs, chosen by ``config.extra`` (``--rope-graph``, ``--rope-lowering``), each
in the scheme's ``layout`` (pairs ``(2i, 2i+1)`` or ``(i, i + R/2)``), ``rotary_dim`` and
frequency scaling (``edgepe.schemes.rope``):

- ``rope_graph="encode"`` (default): ``positions [N] -> pe [N, d] = [cos(theta) | sin(theta)]``;
- ``rope_graph="cache"``: the encode graph plus ``cos_cache``, ``sin_cache`` ``[N, R/2]``, the
  caches onnxruntime's ``com.microsoft.RotaryEmbedding`` and ONNX opset 23's
  ``RotaryEmbedding`` take (``[max_position, rotary_dim / 2]``; feed ``positions 0 .. L-1``);
- ``rope_graph="apply"``: ``x [B, N, d], positions [N] -> y [B, N, d]``, rotated with plain ONNX
  ops, as ``Rope.apply``;
- ``rope_graph="apply-4d"``: ``x [B, H, S, d], positions [B, S] -> y [B, H, S, d]``, the tensor
  attention code holds, each batch row at its own positions (padding, packed sequences), with
  any of the three lowerings below;
- ``rope_graph="apply", rope_lowering="ort"``: the same rotation by onnxruntime's fused
  ``com.microsoft.RotaryEmbedding`` kernel (CPU and CUDA providers);
- ``rope_graph="apply", rope_lowering="rotary23"``: by the standard ``RotaryEmbedding`` of ONNX
  opset 23 (``--opset 23`` or later), which the ONNX reference evaluator runs too.

With ``--mode sliced`` the encode graph takes ``ort``/``rotary23`` as well: there the op does the
sliced graph's angle additions (``graphs.sliced.rotary_columns``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from edgepe.contract.config import ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.graphs._common import (
    POSITIONS,
    Graph,
    clamp_int64,
    make_model,
    output,
    positions_input,
)

X = "x"
Y = "y"
ROPE_GRAPHS = ("encode", "cache", "apply", "apply-4d")
ROPE_LOWERINGS = ("onnx", "ort", "rotary23")
MS_DOMAIN = "com.microsoft"


def _angles(g: Graph, module, width: int | None = None) -> str:
    """``theta [N, width]`` float32 ``= Cast(positions) * inv_freq[:width]`` (default all
    ``d/2``), as ``sinusoidal.angles``; sinusoidal's ``offset`` is added to the int64 positions
    first, as the reference does."""
    positions = POSITIONS
    if getattr(module, "offset", 0):
        positions = g.op("Add", positions, g.const(np.int64(module.offset), np.int64,
                                                   name="offset"))
    column = g.op("Unsqueeze", g.cast(positions, "float32"), g.const([-1], np.int64))
    inv_freq = module.inv_freq.detach().numpy()[:width].reshape(1, -1)
    return g.op("Mul", column, g.const(inv_freq, np.float32, name="inv_freq"), out="theta")


def _sin_cos(g: Graph, module, width: int | None = None) -> tuple[str, str]:
    """``sin``, ``cos`` of the angles; rope with an attention factor (yarn) multiplies both by
    its ``scale`` buffer, as ``Rope.encode`` does (no Mul otherwise: the same graph as before)."""
    theta = _angles(g, module, width)
    sin, cos = g.op("Sin", theta, out="sin"), g.op("Cos", theta, out="cos")
    if getattr(module, "scaled", False):
        scale = g.const(module.scale.detach().numpy()[:width].reshape(1, -1), np.float32,
                        name="attention_factor")
        sin, cos = g.op("Mul", sin, scale), g.op("Mul", cos, scale)
    return sin, cos


def _interleaved(g: Graph, module) -> str:
    """``[N, d]`` float32 with ``sin`` in the even columns and ``cos`` in the odd ones."""
    sin, cos = _sin_cos(g, module)
    last = g.const([-1], np.int64)
    pairs = g.op("Concat", g.op("Unsqueeze", sin, last), g.op("Unsqueeze", cos, last), axis=-1)
    return g.op("Reshape", pairs, g.const([-1, 2 * module.inv_freq.numel()], np.int64))


def _pe_model(config: ExportConfig, g: Graph, pe: str, manifest: dict) -> onnx.ModelProto:
    g.finish(pe, config.dtype)
    out = output("pe", config.dtype, ["N", config.scheme.d_model])
    return g.model([positions_input(None)], [out], config.opset, manifest)


def sinusoidal(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N] int64 -> pe [N, d]``: Cast, Mul by ``inv_freq``, Sin/Cos, interleave
    (``layout=half``: Concat ``[sin | cos]``)."""
    g = Graph("edgepe_sinusoidal")
    if getattr(module, "layout", "interleaved") == "half":
        sin, cos = _sin_cos(g, module)
        return _pe_model(config, g, g.op("Concat", sin, cos, axis=-1), manifest)
    return _pe_model(config, g, _interleaved(g, module), manifest)


def sinusoidal_learned(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N] int64 -> pe [N, d]``: sinusoidal + residual row, zero outside the table.

    As the reference: ``fixed + residual[clip(pos, 0, L - 1)] * inside``, where ``inside`` is
    ``clip(pos) == pos`` as 0/1, so the fixed part extrapolates and the residual switches off.
    """
    g = Graph("edgepe_sinusoidal_learned")
    fixed = _interleaved(g, module)
    # Where/Less/Greater, not Clip: onnxruntime's int64 Clip is wrong past 2^31 (clamp_int64).
    row = clamp_int64(g, POSITIONS, 0, config.scheme.max_len - 1, "row")
    residual = g.const(module.residual.detach().numpy(), np.float32, name="residual")
    rows = g.op("Gather", residual, row, axis=0)
    inside = g.cast(g.op("Equal", row, POSITIONS), "float32")
    kept = g.op("Mul", rows, g.op("Unsqueeze", inside, g.const([-1], np.int64)))
    return _pe_model(config, g, g.op("Add", fixed, kept), manifest)


def mrope(config: ExportConfig, module, manifest: dict) -> onnx.ModelProto:
    """``positions [N, 3] int64 -> pe [N, d] = [cos(theta) | sin(theta)]``: Cast, ``Gather`` of
    each slot's stream (``MRope.streams``), Mul by ``inv_freq``, Cos/Sin, Concat; the float32
    angle is the reference's op for op (issue 40: Qwen2-VL's multimodal RoPE)."""
    g = Graph("edgepe_mrope")
    coordinates = g.cast(POSITIONS, "float32")  # [N, 3]
    streams = g.const(module.streams.numpy(), np.int64, name="streams")
    chosen = g.op("Gather", coordinates, streams, axis=1)  # [N, d/2]
    inv_freq = g.const(module.inv_freq.detach().numpy().reshape(1, -1), np.float32,
                       name="inv_freq")
    theta = g.op("Mul", chosen, inv_freq, out="theta")
    pe = g.op("Concat", g.op("Cos", theta, out="cos"), g.op("Sin", theta, out="sin"), axis=1)
    g.finish(pe, config.dtype)
    out = output("pe", config.dtype, ["N", config.scheme.d_model])
    return g.model([positions_input(config.scheme.arity)], [out], config.opset, manifest)


def rope_choice(config: ExportConfig) -> tuple[str, str]:
    """``(graph, lowering)`` from ``config.extra``, validated (defaults: encode, onnx)."""
    graph = config.extra.get("rope_graph", "encode")
    lowering = config.extra.get("rope_lowering", "onnx")
    if graph not in ROPE_GRAPHS:
        raise BadParameterError(f"--rope-graph {graph!r} is not one of: {', '.join(ROPE_GRAPHS)}")
    if lowering not in ROPE_LOWERINGS:
        raise BadParameterError(
            f"--rope-lowering {lowering!r} is not one of: {', '.join(ROPE_LOWERINGS)}"
        )
    if lowering != "onnx" and not graph.startswith("apply") and not (
            graph == "encode" and config.mode == "sliced"):
        raise BadParameterError(
            f"--rope-lowering {lowering} lowers the rotation: add --rope-graph apply (or "
            "--mode sliced, whose angle additions it fuses)"
        )
    return graph, lowering


def rope(config: ExportConfig, module, manifest: dict, sin_cos=None) -> onnx.ModelProto:
    """``positions [N] int64 -> pe [N, d] = [cos | sin]``; apply: ``x [B, N, d], positions -> y``.

    ``sin_cos(g, module, width)`` makes the ``(sin, cos)`` tensors (default: the Sin/Cos of the
    float32 angle; ``--mode sliced``: ``graphs.sliced``).

    The apply graphs take float32 ``x`` and give ``y`` of ``x``'s shape (in ``--dtype``); a
    ``[B, H, N, d]`` tensor goes in reshaped to ``[B * H, N, d]`` (the rotation depends only on
    the position and the pair). ``manifest["shape"]`` becomes ``["B", "N", d]`` for them.
    """
    graph, lowering = rope_choice(config)
    sin_cos = sin_cos or _sin_cos
    d = config.scheme.d_model
    if graph == "encode":
        g = Graph("edgepe_rope")
        sin, cos = sin_cos(g, module)
        return _pe_model(config, g, g.op("Concat", cos, sin, axis=1), manifest)
    if graph == "cache":
        return _cache_model(config, module, manifest, sin_cos)
    layout, r = module.layout, module.rotary_dim
    four = graph == "apply-4d"
    g = Graph(f"edgepe_rope_{graph.replace('-', '_')}_{lowering}")
    # the fused ops and the half layout take the R/2 rotated slots; interleaved ONNX ops all d/2
    sin, cos = sin_cos(g, module, None if (lowering, layout) == ("onnx", "interleaved")
                        else r // 2)  # [N, k], or [B, S, k] from positions [B, S]
    interleaved = int(layout == "interleaved")
    if lowering == "onnx":
        if four:  # [B, S, k] -> [B, 1, S, k]: the same rotation for every head
            one = g.const([1], np.int64, name="heads_axis")
            sin, cos = g.op("Unsqueeze", sin, one), g.op("Unsqueeze", cos, one)
        y = (_onnx_rotary if interleaved else _onnx_rotary_half)(g, d, sin, cos, r)
    elif four:
        y = {"ort": _ort_rotary_4d, "rotary23": _standard_rotary_4d}[lowering](
            g, d, sin, cos, r, interleaved)
    else:
        rotate = {"ort": _ort_rotary, "rotary23": _standard_rotary}[lowering]
        y = rotate(g, d, sin, cos, r, interleaved)
    g.finish(y, config.dtype, name=Y)
    shape = ["B", "H", "S", d] if four else ["B", "N", d]
    x_in = output(X, "float32", shape)
    p_in = (helper.make_tensor_value_info(POSITIONS, TensorProto.INT64, ["B", "S"]) if four
            else positions_input(None))
    extra = {MS_DOMAIN: 1} if lowering == "ort" else None
    return make_model(g.nodes, [x_in, p_in], [output(Y, config.dtype, shape)],
                      g.initializers, config.opset, {**manifest, "shape": shape}, g.name,
                      extra_opsets=extra)


def _ort_rotary_4d(g: Graph, d: int, sin: str, cos: str, r: int, interleaved: int) -> str:
    """``com.microsoft.RotaryEmbedding`` on ``x [B, H, S, d]`` with per-row positions.

    The kernel reads cache row ``position_ids[b, s]`` and does not bounds-check it (see
    ``_ort_rotary``), so the caches are the cos/sin of exactly the requested positions,
    flattened to ``[B S, R/2]``, and the ids are ``b S + s``: every id lies inside the cache.
    The heads are folded into the batch (``[B H, 1, S, d]``, ids repeated per head) because the
    CPU kernel needs a fixed ``num_heads`` attribute with ``rotary_embedding_dim``, and the
    artifact does not fix ``H``; the reshapes are views.
    """
    flat = g.const([-1, r // 2], np.int64, name="cache_shape")
    caches = [g.op("Reshape", c, flat) for c in (cos, sin)]
    ids = g.op("Range", g.const(0, np.int64, name="id_start"), g.op("Size", POSITIONS),
               g.const(1, np.int64, name="id_step"))
    ids = g.op("Reshape", ids, g.op("Shape", POSITIONS))  # [B, S]: b S + s
    ids = g.op("Expand", g.op("Unsqueeze", ids, g.const([1], np.int64, name="heads_axis")),
               g.op("Shape", X, end=3))  # [B, H, S]
    rows = g.op("Concat", g.const([-1], np.int64, name="fold"),
                g.op("Shape", POSITIONS, start=1), axis=0)
    ids = g.op("Reshape", ids, rows)  # [B H, S]
    folded = g.op("Reshape", X, g.const([-1, 1, 0, 0], np.int64, name="one_head"))
    partial = {"rotary_embedding_dim": r} if r < d else {}
    y = g.op("RotaryEmbedding", folded, ids, *caches, domain=MS_DOMAIN, interleaved=interleaved,
             num_heads=1, **partial)
    return g.op("Reshape", y, g.op("Shape", X))


def _standard_rotary_4d(g: Graph, d: int, sin: str, cos: str, r: int, interleaved: int) -> str:
    """ONNX opset 23 ``RotaryEmbedding`` on ``x [B, H, S, d]`` without ``position_ids``: the op
    takes caches ``[B, S, R/2]`` then, the cos/sin of ``positions [B, S]`` as computed."""
    partial = {"rotary_embedding_dim": r} if r < d else {}
    return g.op("RotaryEmbedding", X, cos, sin, interleaved=interleaved, **partial)


def _cache_model(config: ExportConfig, module, manifest: dict,
                 sin_cos=_sin_cos) -> onnx.ModelProto:
    """``positions [N] -> pe [N, d], cos_cache [N, R/2], sin_cache [N, R/2]``.

    ``pe`` is the encode graph's output (what ``edgepe verify`` and ``edgepe.load`` check and
    read); the caches are its first ``R/2`` cos and sin columns (``Slice``: the same values), in
    the shape the ``RotaryEmbedding`` ops take for ``cos_cache``/``sin_cache``.
    """
    g = Graph("edgepe_rope_cache")
    sin, cos = sin_cos(g, module)
    g.finish(g.op("Concat", cos, sin, axis=1), config.dtype)
    half = module.rotary_dim // 2
    axis = g.const([1], np.int64, name="column_axis")
    start, stop = g.const([0], np.int64, name="first_slot"), g.const([half], np.int64,
                                                                       name="rotated_slots")
    for name, value in (("cos_cache", cos), ("sin_cache", sin)):
        g.finish(g.op("Slice", value, start, stop, axis), config.dtype, name=name)
    d = config.scheme.d_model
    outputs = [output("pe", config.dtype, ["N", d]), output("cos_cache", config.dtype, ["N", half]),
               output("sin_cache", config.dtype, ["N", half])]
    return g.model([positions_input(None)], outputs, config.opset, manifest)


def _onnx_rotary_half(g: Graph, d: int, sin: str, cos: str, r: int) -> str:
    """``x`` with pairs ``(x_i, x_{i+R/2})``, ``i < R/2``, rotated and ``x_R ..`` copied, op for
    op as ``Rope.apply`` in the half layout (Hugging Face's ``rotate_half``)."""
    last = g.const([-1], np.int64)
    start, middle, end = (g.const([v], np.int64) for v in (0, r // 2, r))
    first = g.op("Slice", X, start, middle, last)
    second = g.op("Slice", X, middle, end, last)
    parts = [g.op("Sub", g.op("Mul", first, cos), g.op("Mul", second, sin)),
             g.op("Add", g.op("Mul", first, sin), g.op("Mul", second, cos))]
    if r < d:
        parts.append(g.op("Slice", X, end, g.const([d], np.int64), last))
    return g.op("Concat", *parts, axis=-1)


def _onnx_rotary(g: Graph, d: int, sin: str, cos: str, r: int) -> str:
    """``x`` with pairs ``(x_2i, x_2i+1)`` rotated by ``theta_i``, op for op as ``Rope.apply``."""
    last = g.const([-1], np.int64)
    end, step = g.const([d], np.int64), g.const([2], np.int64)
    even = g.op("Slice", X, g.const([0], np.int64), end, last, step)
    odd = g.op("Slice", X, g.const([1], np.int64), end, last, step)
    # even cos - odd sin, even sin + odd cos: the reference's order (separate roundings)
    first = g.op("Sub", g.op("Mul", even, cos), g.op("Mul", odd, sin))
    second = g.op("Add", g.op("Mul", even, sin), g.op("Mul", odd, cos))
    pairs = g.op("Concat", g.op("Unsqueeze", first, last), g.op("Unsqueeze", second, last),
                 axis=-1)
    return g.op("Reshape", pairs, g.op("Shape", X))


def _ort_rotary(g: Graph, d: int, sin: str, cos: str, r: int, interleaved: int) -> str:
    """``com.microsoft.RotaryEmbedding(x, position_ids=0, cos, sin)`` in the scheme's layout
    (``interleaved`` 1 or 0), rotating the first ``rotary_embedding_dim = R`` dimensions
    (``num_heads = 1``: a 3-D ``x`` is one head of width ``d``).

    The caches are ``cos(theta)``, ``sin(theta)`` of exactly the requested positions, computed
    in the graph, and ``position_ids`` is the scalar offset 0, so the kernel reads cache row
    ``s`` for sequence index ``s``. A constant ``[max_len, d/2]`` cache indexed by position would
    turn the artifact into a table, and onnxruntime's CPU kernel does not bounds-check the ids
    (``contrib_ops/cpu/bert/rotary_embedding.cc``: ``cache_offset = position_id * half``): an
    id past the cache reads other memory instead of extrapolating like the reference.
    """
    partial = {"rotary_embedding_dim": r, "num_heads": 1} if r < d else {}
    return g.op("RotaryEmbedding", X, g.const([0], np.int64), cos, sin, domain=MS_DOMAIN,
                interleaved=interleaved, **partial)


def _standard_rotary(g: Graph, d: int, sin: str, cos: str, r: int, interleaved: int) -> str:
    """``RotaryEmbedding(x, cos, sin)`` of ONNX opset 23 in the scheme's layout, without
    ``position_ids``, rotating the first ``rotary_embedding_dim = R`` dimensions.

    Without ids the op takes caches of shape ``[B, N, d/2]`` (onnxruntime checks them against
    ``x`` and does not broadcast), so the rows of the requested positions are expanded over the
    batch: ``Expand(cos [N, d/2], [B, 1, 1])``. ``num_heads = 1``: a 3-D ``x`` is one head of
    width ``d``.
    """
    batch = g.op("Shape", X, end=1)
    shape = g.op("Concat", batch, g.const([1, 1], np.int64), axis=0)
    caches = [g.op("Expand", cache, shape) for cache in (cos, sin)]
    partial = {"rotary_embedding_dim": r} if r < d else {}
    return g.op("RotaryEmbedding", X, *caches, interleaved=interleaved, num_heads=1, **partial)
