"""int8 ONNX graphs (``--quantize int8``), both modes, each with its proven bound in the manifest.

Four constructions, chosen per scheme (all output float32 ``pe``/``bias``: a drop-in). Where a
graph stores an int8 constant (1-3), ``--int8-runtime`` chooses how it lives at run time
(manifest ``quant.runtime``, ``quant.ram_bytes``; ``edgepe inspect`` prints both):

- ``fold`` (default): the int8 tensor is dequantised IN FRONT of the float32 graph, as
  ``Cast(q) * scale`` on initializers only. onnxruntime constant-folds Cast and Mul on
  initializers at session load (ORT_ENABLE_BASIC and up), so the session runs the float32 graph
  at float32 speed and holds the float32 tensor in RAM; the file stays int8. It never folds
  ``DequantizeLinear`` (unless ``session.disable_quant_qdq``), hence no DequantizeLinear here.
- ``live``: the session keeps the int8 tensor and each call dequantises what it reads. Tables
  (and sinusoidal-learned's residual): the gathered rows, by a per-tensor ``DequantizeLinear``
  (one fused pass, 0.92-1.55x the float32 Gather: the default granularity of a live table,
  ``artifact.default_granularity``) or, for per-column scales asked for with
  ``--quant-granularity channel``, a ``Cast`` and a ``Mul`` whose ``[cols]`` scale broadcasts
  over the last axis (two passes, 1.9-3.4x). Projections: the ``n x d`` weights, not the
  ``N x d`` output (off the hot axis), with one scale per row (bit) and ONE
  ``DequantizeLinear(q, s_k 2^-k, axis=0)``, which onnxruntime does not fold: the session holds
  ``n d`` int8 and ``n`` float32 scales, 0.27x the float32 weights (``_projection``). Never a
  per-axis ``DequantizeLinear`` on the last axis: onnxruntime's
  CPU kernel runs it as a scalar loop over N x cols one-element blocks (6.3-16x the float32
  Gather measured here; 65-91% of the old int8 graphs' time, issue 19). ``Cast(q) * s`` is
  ``DequantizeLinear`` (zero point 0) bit for bit: an exact cast and one rounded product.

1. **Tables** (``--mode table``, every float scheme): the float table graph of
   ``edgepe.graphs.table`` with its table initializer replaced by the int8 table (fold:
   dequantised in front; live: each ``Gather`` reads int8 rows, then dequantises). Bound: half
   a step (``edgepe.graphs.quant``), the same for both (the same float32 values come out).
2. **Int8 weights** (``--mode compute``, ``binary`` and ``fourier-binary``, the schemes whose
   float step is ``bits @ W``): the float32 mask-form graph of ``graphs.bits`` with
   ``W' = q * s`` (times the masks' ``2^-k``) dequantised in front, folded or live as above.
   fold: a scale per output column ``s_j``, in float16 (rounded up) where they fit and save
   more than their Cast costs, float32 otherwise; live: a float32 scale per row ``s_k``.
   (Until issue 19 this was ``MatMulInteger`` of uint8 bits by int8 weights with a per-axis
   ``DequantizeLinear`` of the int32 sum: 3.5x the float32 graph's time.)
3. **Int8 constant** (``--mode compute``, ``sinusoidal-learned``): its learned residual table
   ``[L, d]`` is the graph's only large constant; it is stored int8, folded or gathered as in (1).
4. **Quantised output** (``--mode compute``, every other float scheme: integer*, hybrid, gated,
   smooth, sinusoidal, rope, alibi, gaussian): their float graph has no constant worth
   quantising (a few numbers per channel), so what becomes int8 is the tensor the device
   receives: the float graph's output goes through ``QuantizeLinear`` -> int8 -> dequantise
   (``Cast * s`` for per-channel scales on the last axis) with static per-channel scales
   ``max|x| / 127``; ``--int8-runtime`` changes nothing (no int8 is stored). The scale must cover
   every position the graph accepts (``_output_range``): sin/cos stay within +-1 (extrapolation
   kept), wrapped bits take at most ``2^n <= 2L`` patterns (wrap kept); the others grow without
   bound outside the table (``pos / (L - 1)``, distances), so their int8 graph clamps positions to
   ``[0, L - 1]`` as tables do (manifest ``positions.out_of_range = "clamp"``; alibi and
   gaussian clamp the distance ``t - u`` to ``[-(L - 1), L - 1]``, as bias tables do). Bound: half a
   step, plus the float graph's own tolerance (``spec.tolerance``), plus the two float32
   roundings of Q/DQ. The Q/DQ pair makes such a graph larger than its float one (nothing was
   stored to shrink); ``edgepe export`` says so and points to the int8 table
   (``int8.export_note``).

The manifest's ``bound`` holds at every position the artifact accepts; ``max_abs_err`` is
measured over every position ``0 .. L-1`` (every distance for bias schemes) by replaying the
graph's arithmetic in numpy (the exporter never runs a runtime; the tests run onnxruntime).

Proof for (2). For a position with active bit set ``A`` (``P = |A|`` ones), against the float32
reference ``ref_j = fl(sum_{k in A} W_kj)`` (any summation order: ``|ref_j - sum W_kj| <=
gamma_n sum |W_kj|``, ``gamma_n = n u / (1 - n u)``, ``u = 2^-24``, ``|W_kj| <= 127 s_j (1 + u)``):
each dequantised weight ``W'_kj = fl(s_j q_kj)`` is within ``s_j / 2 + 127 u s_j`` of ``W_kj``
(half a step, one rounded product); the graph's products ``bit * W'`` are exact (the mask form's
power-of-two scaling is undone exactly) and its float32 sum rounds by
``<= gamma_n sum_{k in A} |W'_kj|`` with ``|W'_kj| <= 127 s_j (1 + u)``: one more term of the
reference's size (the term issue 19 added with the float32 sum of dequantised weights). So

    |out_j - ref_j| <= P s_j (1/2 + 127 u + 2 x 127 (1 + u) gamma_n)

With the live graph's row scales the same holds with ``s_k`` (row ``k``'s scale bounds each
``|W_kj|``) summed over the active bits ``k in A``: ``sum_{k in A} s_k (1/2 + ...)``, the same for
every column; ``bound`` takes the ``n`` terms, ``bound_in_range`` the largest ``P`` of them.

The manifest's ``bound`` (per channel in ``bound_per_channel``, the worst channel in ``bound``)
takes ``P = n``: every int64 position wraps to ``pos mod 2^n``, so it holds wherever the graph
is defined; ``bound_in_range`` takes ``P = max popcount over positions 0 .. L-1`` (``<= n - 1``,
since ``2^n - 1 >= L``), strictly below the theoretical ``n s_j / 2``.

Why not ``onnxruntime.quantization``: ``quantize_static`` needs a float-input graph and a
calibration reader, quantises the activation (the 0/1 bits) with a calibrated float scale
and requantises the output, adding roundings we could not bound exactly; ``quantize_dynamic``
picks the activation scale at run time, so no bound is known before deployment. Its scalar
helpers (``quant_utils.compute_scale_zp``) work one tensor at a time, not chunk-wise per channel.
Their conventions (symmetric int8 ``[-127, 127]``, zero point 0, ``scale = 2 max|x| / 254``,
per-axis ``DequantizeLinear``) are followed, and the tests check our scales against
``compute_scale_zp``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.config import INT8_OPSET, ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.graphs import builder
from edgepe.graphs._common import (
    Graph,
    embedded_manifest,
    make_model,
    require_opset,
)
from edgepe.graphs.quant import (
    OUTPUT_ROW,
    QMAX,
    U32,
    TableQuant,
    absmax,
    check_quantizable,
    dequantize,
    half_scales,
    measure_table,
    quant_section,
    quantize,
    scales,
)
from edgepe.graphs.table_values import (
    BIAS_SATURATION,
    CHUNK_ROWS,
    iter_table,
    table_rows,
    table_shape,
)

# Schemes whose compute graph is ``bits @ M`` (M the module's buffer): int8 MatMulInteger.
PROJECTIONS = {"binary": "projection", "fourier-binary": "basis"}
# QuantizeLinear/DequantizeLinear take ``axis`` from opset 13, but onnx's reference evaluator
# (a verification runtime) implements them from 19 on: int8 graphs need --opset 19 or later.
QDQ_OPSET = INT8_OPSET
# Outputs within +-1 at every position (see ``_output_range``).
UNIT_RANGE = ("sinusoidal", "rope", "mrope")
# What a Cast node and its output name cost in a graph (48 + 8 bytes, measured): float16 scales
# save 2 bytes each, so they pay from 29 channels on.
CAST_NODE_BYTES = 56
# The quant fields a graph carries in its own metadata (the rest is in the sidecar JSON).
EMBEDDED_QUANT = ("granularity", "zero_point", "axis", "max_abs_err", "bound", "tensor",
                  "scale_tensor", "runtime")


def build_int8(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """``positions [N] int64 -> pe [N, D] float32`` (bias ``[H, N, M]``), through int8.

    Fills ``manifest["quant"]`` (scale, zero_point, axis, max_abs_err over every in-range
    position, bound) and returns the checked model carrying that manifest. Refuses exact schemes
    and ``--dtype`` other than float32 (``check_quantizable``).
    """
    check_quantizable(config)
    require_opset(config.opset, QDQ_OPSET, "--quantize int8 (DequantizeLinear per channel, "
                  "which onnx's reference evaluator implements from opset 19)")
    if config.extra.get("rope_graph", "encode") != "encode":
        raise BadParameterError(
            "--quantize int8 applies to rope's encode graph (cos/sin) and tables; the apply "
            "graph's output depends on x, which no static int8 scale covers"
        )
    if config.mode == "table":
        return _table(config, module, manifest)
    if config.mode == "sliced" and config.scheme.scheme not in UNIT_RANGE:
        raise BadParameterError(
            f"--mode sliced --quantize int8 for '{config.scheme.scheme}' is a C header (--format "
            "c: int16 sums of the int8 projection); its int8 ONNX graph is --mode compute"
        )
    check_measurable(config)
    if config.scheme.scheme in PROJECTIONS:
        return _projection(config, module, manifest)
    if config.scheme.scheme == "sinusoidal-learned":
        return _residual(config, module, manifest)
    return _quantised_output(config, module, manifest)


def check_measurable(config: ExportConfig) -> None:
    """Refuse a compute graph whose error measurement over every in-range value would pass
    ``--max-table-bytes`` of float32."""
    rows, cols = table_shape(config.scheme)
    if 4 * rows * cols > config.max_table_bytes:
        raise BadParameterError(
            f"--quantize int8 measures the error over all {rows} x {cols} in-range values "
            f"({4 * rows * cols} bytes of float32, past --max-table-bytes "
            f"{config.max_table_bytes}): raise --max-table-bytes or lower --max-len"
        )


def _float_model(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """The scheme's float32 graph in ``config.mode``, as ``--quantize none`` would export it
    (the builder writes into ``manifest``: pass a copy)."""
    plain = replace(config, quantize="none")
    return builder(config.scheme.scheme, config.mode)(plain, module, manifest)


def _rebuild(config: ExportConfig, float_model: onnx.ModelProto, nodes, initializers,
             manifest: dict[str, Any]) -> onnx.ModelProto:
    graph = float_model.graph
    extra = {o.domain: o.version for o in float_model.opset_import if o.domain not in ("",
                                                                                      "ai.onnx")}
    return make_model(nodes, graph.input, graph.output, initializers, config.opset,
                      embedded(manifest), f"{graph.name}_int8", extra_opsets=extra or None)


def embedded(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest stored in the int8 graph's ``metadata_props``: what every graph stores
    (``embedded_manifest``), with only the ``EMBEDDED_QUANT`` fields of ``quant``; the sidecar JSON
    keeps the rest (``formats.onnx.prepare`` writes the full manifest there). The graph holds the
    scales as an initializer (``quant.scale_tensor``); on the demo's small graph repeating them
    as JSON would cost more bytes than int8 saves (docs/readme/quant.md has the figures)."""
    quant = {k: v for k, v in manifest["quant"].items() if k in EMBEDDED_QUANT}
    return {**embedded_manifest(manifest), "quant": quant}


def _zero_points(scale: np.ndarray, per_channel: bool) -> np.ndarray:
    return np.zeros(scale.shape if per_channel else (), dtype=np.int8)


def _table(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """The table graph with an int8 table, folded in front or dequantised after the ``Gather``."""
    tq = measure_table(config.quant_granularity, lambda: iter_table(config.scheme, module))
    float_model = _float_model(config, module, dict(manifest))
    nodes, initializers, names = _int8_gathers(float_model.graph, table_shape(config.scheme), tq,
                                               config.int8_runtime)
    manifest["quant"] = {**tq.manifest(tensor=names[0]), "scale_tensor": names[1],
                         **runtime_section(config.int8_runtime, 4 * tq.rows * tq.cols,
                                           tq.rows * tq.cols + 4 * tq.scale.size)}
    return _rebuild(config, float_model, nodes, initializers, manifest)


def _dequantize(q: str, scale: str, out: str) -> list[onnx.NodeProto]:
    """``out = Cast(q, float32) * scale``: ``DequantizeLinear`` with zero point 0, bit for bit
    (an exact cast, one rounded product), as two nodes onnxruntime can constant-fold and whose
    ``Mul`` broadcasts a ``[cols]`` scale over the last axis with a vectorised kernel."""
    return [helper.make_node("Cast", [q], [f"{out}_float"], name=f"{out}_cast",
                             to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{out}_float", scale], [out], name=f"{out}_scale")]


def _int8_gathers(graph: onnx.GraphProto, shape, tq: TableQuant, runtime: str):
    """Replace the graph's float32 ``shape`` initializer by its int8 quantisation under ``tq``.

    ``fold``: the whole table is dequantised in front (``_dequantize`` on initializers, which
    onnxruntime folds to the float32 table at session load), and the float graph runs
    unchanged. ``live``: each ``Gather`` of it reads int8 rows and dequantises only those
    (per-tensor ``DequantizeLinear``, or ``Cast * s`` per column); any other consumer gets the
    whole table dequantised once, in front. Returns
    ``(nodes, initializers, (int8 name, scale name))``.
    """
    table = [t for t in graph.initializer
             if t.data_type == TensorProto.FLOAT and list(t.dims) == list(shape)]
    if len(table) != 1:
        raise RuntimeError(f"graph {graph.name}: expected one float32 {list(shape)} "
                           f"initializer, found {len(table)}")  # a builder change
    name = table[0].name
    q_name, s_name, z_name = f"{name}_int8", f"{name}_scale", f"{name}_zero_point"
    scale = tq.scale if tq.granularity == "channel" else tq.scale.reshape(())
    # Quantise the stored initializer itself (the rows iter_table measured: the same values).
    q = quantize(numpy_helper.to_array(table[0]), tq.scale)
    initializers = [t for t in graph.initializer if t.name != name] + [
        numpy_helper.from_array(q, q_name),
        numpy_helper.from_array(scale.astype(np.float32), s_name),
    ]
    if runtime == "live" and tq.granularity == "tensor":
        # An explicit int8 zero point: onnxruntime 1.32's QDQ propagation copies a
        # DequantizeLinear past a following Transpose (bias tables) as a Q/DQ pair, and
        # without one its QuantizeLinear defaults to uint8 and clips every negative to 0.
        initializers.append(numpy_helper.from_array(np.array(0, np.int8), z_name))
    nodes: list[onnx.NodeProto] = []
    whole = runtime == "fold"
    for node in graph.node:
        if (runtime == "live" and node.op_type == "Gather" and node.input[0] == name
                and _attr(node, "axis", 0) == 0):
            rows = f"{node.output[0]}_int8"
            nodes.append(helper.make_node("Gather", [q_name, node.input[1]], [rows],
                                          name=node.name, axis=0))
            if tq.granularity == "tensor":  # one fused pass: 0.92-1.39x the float32 Gather
                nodes.append(helper.make_node("DequantizeLinear", [rows, s_name, z_name],
                                              [node.output[0]], name=f"{node.name}_dq"))
            else:  # a column's scale on the last axis: Cast, then a broadcast Mul (2.1-2.4x)
                nodes += _dequantize(rows, s_name, node.output[0])
        else:
            whole = whole or name in node.input
            nodes.append(node)
    if whole:
        nodes[:0] = _dequantize(q_name, s_name, name)
    return nodes, initializers, (q_name, s_name)


def runtime_section(runtime: str, float32_bytes: int, int8_bytes: int) -> dict[str, Any]:
    """The ``quant`` fields saying how the stored int8 lives at run time and what RAM it takes
    once the session is loaded (``edgepe inspect`` prints them)."""
    fold = runtime == "fold"
    return {
        "runtime": runtime,
        "ram_bytes": float32_bytes if fold else int8_bytes,
        "ram_why": ("fold: onnxruntime constant-folds Cast(int8) * scale at session load, so "
                    "the session holds the float32 tensor (the file stays int8)" if fold else
                    "live: the session holds the int8 tensor and its scales; each call "
                    "dequantises only the rows or the sum it uses"),
    }


def _residual(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """sinusoidal-learned: the float graph with its learned residual table ``[L, d]`` in int8.

    The output stays ``fixed + residual'`` in float32 (no output quantisation: the only large
    constant is what int8 shrinks). Against the float32 reference ``fl(fixed + r)``:
    ``|fl(f' + r') - fl(f + r)| <= |f' - f| + |r' - r| + u |f' + r'| + u |f + r|`` with
    ``|f' - f| <= atol`` (the float graph's tolerance), ``|r' - r| <= s/2 + 127 u s`` (half a
    step, the dequantise's rounding) and ``|f + r| <= 1 + m`` (``m = max|r|`` per channel).
    Outside ``0 .. L-1`` the residual is switched off and the output is the float graph's.
    """
    cfg = config.scheme
    rows = module.residual.detach().numpy().astype(np.float32)
    tq = measure_table(config.quant_granularity, lambda: iter([rows]))
    float_model = _float_model(config, module, dict(manifest))
    nodes, initializers, names = _int8_gathers(float_model.graph, rows.shape, tq,
                                               config.int8_runtime)
    # Replay over every in-range position: fixed part (the reference with a zero residual: exact
    # since x + 0 = x) plus the dequantised rows, one float32 addition, as the graph adds.
    import torch

    fixed_module = copy.deepcopy(module)
    with torch.no_grad():
        fixed_module.residual.zero_()
        pos = torch.arange(cfg.max_len, dtype=torch.int64)
        fixed = fixed_module.encode(pos).numpy()
        ref = module.encode(pos).numpy()
    out = fixed + tq.dequantize(tq.quantize(rows))
    err = float(np.abs(out.astype(np.float64) - ref).max())
    rtol, atol = cfg.spec.tolerance
    s64, m = tq.scale.astype(np.float64), tq.peak
    bound = atol + rtol * (1 + m) + s64 * (0.5 + QMAX * U32) * (m > 0) + 2 * U32 * (1 + m + s64)
    manifest["quant"] = quant_section(
        config.quant_granularity, tq.scale, axis=1, max_abs_err=err, bound=bound,
        bound_why="half a step of the int8 residual table (s/2 + 127 u s), plus the float "
        "graph's tolerance for the sinusoid, plus the rounding of the final float32 addition "
        "on both sides (2 u (1 + max|r|)); u = 2^-24; positions outside the table use no "
        "residual, so the float graph's own tolerance applies there",
        measured_over=f"every position 0..{cfg.max_len - 1}, replaying the graph's addition",
        float32_bytes=4 * rows.size, int8_bytes=rows.size + 4 * tq.scale.size,
        tensor=names[0], scale_tensor=names[1], bytes_of="learned residual table",
        **runtime_section(config.int8_runtime, 4 * rows.size, rows.size + 4 * tq.scale.size),
    )
    return _rebuild(config, float_model, nodes, initializers, manifest)


def _attr(node: onnx.NodeProto, key: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == key:
            return helper.get_attribute_value(a)
    return default


def max_popcount(max_len: int) -> int:
    """The most ones of any position in ``0 .. max_len - 1`` (exact, no enumeration).

    For ``m = max_len - 1``: either ``m`` itself, or ``m`` with its top one cleared and every
    bit below it set (``bit_length(m) - 1`` ones).
    """
    m = max_len - 1
    return max(bin(m).count("1"), m.bit_length() - 1, 0)


def projection_quant(config: ExportConfig, module, summation: str, axis: int = 1):
    """The int8 projection of ``binary``/``fourier-binary``: ``(q, scale, half, quant)``.

    ``q`` the int8 weights ``[n, d]``, ``scale`` their float32 scales, ``half`` the float16
    scales stored instead (or None), ``quant`` the manifest section, its error measured and its
    bound proven for how the sum is taken: ``"float32"``, the ONNX graph's float32 sum of the
    dequantised weights (``S = 2`` in the module docstring's bound), or ``"int32"``, an exact
    integer sum then one multiply by the scale (``S = 1``; the C header's compute function).

    ``axis`` (per-channel granularity): 1 scales each output column ``j`` (``[d]`` scales; the
    int32 sum needs it, ``s_j`` factors out of a column's sum), 0 each input row, i.e. each bit
    ``k`` (``[n]`` scales; the live graph's, ``_projection``). Per tensor: one scale either way.
    """
    s = config.scheme
    n = s.n_bits
    weight = _weight(config, module)  # [n, d] float32, the reference's y = bits @ weight
    rows = axis == 0
    peak = absmax([weight.T if rows else weight], config.quant_granularity)
    # Scales stored as float16 (rounded up) where they fit and pay for the Cast to float32 they
    # need: on the demo's graph the 64 float32 scales are an eighth of the file; every proof
    # below holds for any s >= max|W| / 127. Row scales are few (n) and used as they are stored.
    half = half_scales(peak) if not rows and 2 * peak.size > CAST_NODE_BYTES else None
    scale = scales(peak) if half is None else half.astype(np.float32)
    q = quantize(weight.T, scale).T if rows else quantize(weight, scale)
    exact = summation == "int32"  # with column scales only: s_j factors out of column j
    p = max_popcount(s.max_len)
    gamma = n * U32 / (1 - n * U32)
    # Per active bit: half a step and the dequantise's rounding (s/2 + 127 u s), the float32
    # reference's own dot product (gamma_n 127 (1 + u) s), and for a float32 sum the graph's
    # own (the same again). Row k's scale s_k bounds every |W_kj|, so the same sum over the
    # active bits holds with s_k in place of s_j.
    sums = 1 if exact else 2
    per_bit = scale.astype(np.float64) * (0.5 + QMAX * U32 + sums * QMAX * (1 + U32) * gamma)
    per_bit = np.where(peak > 0, per_bit, 0.0)  # an all-zero column (row) is exact
    if rows:  # the same bound for every column: the worst n (or p) bits' terms added up
        ranked = np.sort(np.broadcast_to(per_bit, (n,)))[::-1]
        bound = np.full(weight.shape[1], ranked.sum())
        in_range, step = float(ranked[:p].sum()), "s_k"
    else:
        bound, in_range, step = n * per_bit, float((p * per_bit).max()), "s_j"
    if exact:
        why = (f"sum over the active bits of half a step, {step} (1/2 + 127u + 127(1+u) "
               "gamma_n) a bit with the float32 dequantise and the float32 reference's own dot "
               "product")
        replayed = "integer arithmetic"
    else:
        why = (f"sum over the active bits of {step} (1/2 + 127u + 2 x 127(1+u) gamma_n) a bit: "
               "half a step and the float32 dequantise, the graph's float32 sum of the "
               "dequantised weights and the float32 reference's own dot product")
        replayed = "float32 sum of the dequantised weights"
    dequantised = dequantize(q, scale[:, None] if rows and scale.size > 1 else scale)
    quant = quant_section(
        config.quant_granularity, scale, axis=axis,
        max_abs_err=_replay_projection(config, module, q, scale, dequantised, exact),
        bound=bound,
        bound_why=f"{why} (u = 2^-24): at most n = {n} active bits at any position (they wrap "
        f"mod 2^n), at most {p} at positions 0..{s.max_len - 1} (bound_in_range)",
        measured_over=f"every position 0..{s.max_len - 1}, replaying the {replayed}",
        float32_bytes=4 * weight.size,
        int8_bytes=weight.size + (4 if half is None else 2) * scale.size,
        tensor="weight_int8",
        scale_tensor="weight_scale",
        scale_storage="float32" if half is None else "float16",
        bound_in_range=in_range,
        max_popcount=p,
        bytes_of="projection weights",
    )
    return q, scale, half, quant


def _projection(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """``positions [N] int64 -> pe [N, d] float32``: the float32 mask-form graph of
    ``graphs.bits`` whose ``[n, d]`` weights are dequantised in front from int8 ``q``.

    ``fold``: per-column scales ``s_j``, ``Cast(q) * s`` (times the masks' ``2^-k`` per row) on
    initializers, folded by onnxruntime at session load. ``live``: per-row scales ``s_k`` (one per
    bit, ``projection_quant(axis=0)``), and ONE ``DequantizeLinear(q, s_k 2^-k, axis=0)``: the
    mask form's power-of-two row scaling rides in the row's scale (``fl(q s 2^-k) = fl(q s) 2^-k``
    exactly, checked here), so the session keeps ``q`` in int8 and ``n`` float32 scales (0.27x the
    float32 weights' RAM, where ``d`` column scales made it 0.31-0.35x) and dequantises the
    ``n x d`` weights, not the ``N x d`` output, per call: off the hot axis (issue 19). The
    per-axis ``DequantizeLinear`` runs along axis 0, ``d`` contiguous values a scale.
    """
    from edgepe.graphs.bits import _mask_projection_model, mask_scaling

    fold = config.int8_runtime == "fold"
    q, scale, half, quant = projection_quant(config, module, "float32", axis=1 if fold else 0)
    if fold:  # the session holds the float32 weights after folding
        rows = masked = None
        dequantised = dequantize(q, scale)
        held = 4 * q.size
    else:  # s_k per row (one scale repeated for --quant-granularity tensor)
        rows = np.broadcast_to(scale.reshape(-1), (q.shape[0],)).astype(np.float32)
        dequantised = dequantize(q, rows[:, None])
        # the mask form's 2^-k folded into the row scales, where that is bit for bit the same
        inverse = mask_scaling(config, dequantised)
        masked = None if inverse is None else (rows * inverse).astype(np.float32)
        if masked is not None and np.array_equal(
                dequantize(q, masked[:, None]).view(np.uint32),
                (dequantised * inverse[:, None]).view(np.uint32)):
            quant["scale_tensor"] = "weight_scale_masked"  # s_k 2^-k
        else:
            masked = None
        # the session holds q and its n row scales (and the n mask_inverse values where they
        # could not ride in the scales)
        held = q.size + 4 * len(rows) * (2 if inverse is not None and masked is None else 1)

    def live_node(g: Graph, inverse: np.ndarray | None) -> str:
        q_in = g.const(q, np.int8, "weight_int8")
        zero = g.const(np.zeros(len(rows), np.int8), np.int8, "zero_point")
        if inverse is not None and masked is not None:
            return g.op("DequantizeLinear", q_in, g.const(masked, np.float32,
                                                          quant["scale_tensor"]), zero, axis=0)
        w = g.op("DequantizeLinear", q_in, g.const(rows, np.float32, "weight_scale"), zero,
                 axis=0)
        return w if inverse is None else g.op(  # exact: see mask_scaling
            "Mul", w, g.const(inverse[:, None], np.float32, "mask_inverse"))

    def fold_node(g: Graph, inverse: np.ndarray | None) -> str:
        shape = scale.shape if config.quant_granularity == "channel" else ()
        w = g.cast(g.const(q, np.int8, "weight_int8"), "float32")
        if half is None:
            s_in = g.const(scale.reshape(shape), np.float32, "weight_scale")
        else:
            s_in = g.cast(g.const(half.reshape(shape), np.float16, "weight_scale"), "float32")
        w = g.op("Mul", w, s_in)  # fl(q s): DequantizeLinear's value, bit for bit
        if inverse is None:
            return w
        # times 2^-k per row (exact: _mask_projection_model checked dequantised * inverse)
        return g.op("Mul", w, g.const(inverse[:, None], np.float32, "mask_inverse"))

    manifest["quant"] = {**quant, **runtime_section(config.int8_runtime, 4 * q.size, held)}
    return _mask_projection_model(config, module, embedded(manifest),
                                  f"{config.scheme.scheme.replace('-', '_')}_int8",
                                  dequantised, fold_node if fold else live_node)


def _weight(config: ExportConfig, module) -> np.ndarray:
    if PROJECTIONS[config.scheme.scheme] == "projection":
        return module.projection.weight.detach().numpy().T.astype(np.float32)  # Linear: x W^T
    return module.basis.detach().numpy().astype(np.float32)


def _replay_projection(config: ExportConfig, module, q: np.ndarray, scale: np.ndarray,
                       dequantised: np.ndarray, exact: bool) -> float:
    """max |out - ref| over every position 0..L-1, chunk by chunk: ``ref`` the float32 reference,
    ``out`` as the artifact computes it: the exact int32 sum of the active rows of ``q`` times
    the column scales (``exact``), or the float32 sum of ``dequantised``, the weights ``fl(q s)``
    (``s`` per column or per row)."""
    n = config.scheme.n_bits
    shifts = np.arange(n, dtype=np.int64)
    q32 = q.astype(np.int32)
    err, start = 0.0, 0
    for ref in iter_table(config.scheme, module):
        pos = np.arange(start, start + len(ref), dtype=np.int64)
        bits = (pos[:, None] >> shifts) & 1
        if exact:
            out = (bits.astype(np.int32) @ q32).astype(np.float32) * scale.astype(np.float32)
        else:
            out = bits.astype(np.float32) @ dequantised
        err = max(err, float(np.abs(out.astype(np.float64) - ref).max(initial=0.0)))
        start += len(ref)
    return err


def _output_range(config: ExportConfig, module) -> tuple[np.ndarray | None, str]:
    """The per-channel peak the output's scale must cover, and the out-of-range policy.

    - outputs within +-1 at every position (sin/cos; sinusoidal-learned's residual is zero
      outside the table): ``max(in-range peak, 1)``, extrapolation kept;
    - bit schemes that wrap (``pos mod 2^n``): the peak over all ``2^n <= 2 L`` bit patterns,
      which are every position's values;
    - ``t5-bias``: every position reads a row of the embedding: the peak over all its rows;
    - the rest grow without bound outside the table (``pos / (L - 1)``, distances): no int8
      scale covers them, so the int8 graph clamps positions to ``[0, L - 1]`` as tables do.
    """
    s = config.scheme
    peak = absmax(iter_table(s, module), "channel")
    if s.scheme in UNIT_RANGE:
        return np.maximum(peak, 1.0), s.spec.oob
    if s.scheme == "t5-bias":
        # every distance reads a row of the bucket embedding: its peak covers every position,
        # extrapolation kept (issue 40; T5's bias is no monotone function of |t - u|)
        rows = np.abs(module.relative_attention_bias.weight.detach().numpy()).max(axis=0)
        return np.maximum(peak, rows), "embedding"
    if s.spec.oob == "wrap":
        stop = 1 << s.n_bits
        rows = (table_rows(s, module, a, min(a + CHUNK_ROWS, stop))
                for a in range(0, stop, CHUNK_ROWS))
        return absmax(rows, "channel"), "wrap"
    return peak, "clamp"


def _clamp_inputs(config: ExportConfig, graph: onnx.GraphProto, low: int = 0,
                  high: int | None = None) -> tuple[list, list]:
    """Nodes clamping every int64 input to ``[low, high]`` (default ``[0, L - 1]``), and the
    renamed graph nodes.

    Less/Greater + Where, not Clip/Min/Max: onnxruntime's CPU Clip, Min and Max return wrong
    int64 results for values in ``[2^31, 2^32)`` (an Eigen SSE2 bug, microsoft/onnxruntime
    PR #25280; measured here: Min(2^31, 511) = 2^31).
    """
    hi = config.scheme.max_len - 1 if high is None else high
    bounds = [numpy_helper.from_array(np.array(low, np.int64), "clamp_low"),
              numpy_helper.from_array(np.array(hi, np.int64), "clamp_high")]
    front, renamed = [], {}
    for value in graph.input:
        if value.type.tensor_type.elem_type != TensorProto.INT64:
            continue  # only positions and key_positions
        x = value.name
        renamed[x] = f"{x}_clamped"
        front += [
            helper.make_node("Less", [x, "clamp_low"], [f"{x}_below"], name=f"{x}_below"),
            helper.make_node("Where", [f"{x}_below", "clamp_low", x], [f"{x}_raised"],
                             name=f"{x}_raise"),
            helper.make_node("Greater", [f"{x}_raised", "clamp_high"], [f"{x}_above"],
                             name=f"{x}_above"),
            helper.make_node("Where", [f"{x}_above", "clamp_high", f"{x}_raised"],
                             [renamed[x]], name=f"{x}_lower"),
        ]
    nodes = []
    for node in graph.node:
        node = onnx.NodeProto.FromString(node.SerializeToString())
        node.input[:] = [renamed.get(i, i) for i in node.input]
        nodes.append(node)
    return front + nodes, bounds


def _quantised_output(config: ExportConfig, module, manifest: dict[str, Any]) -> onnx.ModelProto:
    """The float graph, its output through QuantizeLinear -> int8 -> dequantise (``Cast * s`` for
    per-channel scales on the last axis, else DequantizeLinear). Stores no int8 constant, so
    ``--int8-runtime`` changes nothing here."""
    spec = config.scheme.spec
    per_channel = config.quant_granularity == "channel"
    peak, policy = _output_range(config, module)
    peak = peak if per_channel else np.array([peak.max()])
    # --mode sliced: measured against the float64 definition, the graph's reference
    source = module
    if config.mode == "sliced":
        from edgepe.schemes.definition import Definition

        source = Definition(module)
    tq: TableQuant = measure_table(config.quant_granularity,
                                   lambda: iter_table(config.scheme, source), peak)
    float_manifest = dict(manifest)
    float_model = _float_model(config, module, float_manifest)
    rtol, atol = spec.tolerance
    if config.mode == "sliced":
        # the sliced graph's own bound against the float64 definition (graphs.sliced: its
        # manifest's tolerance), its plan and position limit
        atol = float_manifest["tolerance"]["atol"]
        manifest["sliced"] = float_manifest["sliced"]
        manifest["positions"] = float_manifest["positions"]
    graph = float_model.graph
    if len(graph.output) != 1:
        raise RuntimeError(f"{config.scheme.scheme}: expected one graph output")  # builder change
    out = graph.output[0].name
    nodes, initializers = list(graph.node), list(graph.initializer)
    if policy == "clamp" and spec.kind == "bias":
        # A bias depends on t - u alone: clamp the distance, not the positions (issue 16), as
        # bias tables do (table_values.bias_rows). Positions saturate at +-2^61 (no int64
        # overflow in the graph's Sub); both biases fall monotonically with |t - u|, so
        # clamping the distance to L - 1 is Max(bias, the bias at distance L - 1), exactly.
        nodes, bounds = _clamp_inputs(config, graph, -BIAS_SATURATION, BIAS_SATURATION)
        for node in nodes:
            node.output[:] = [f"{out}_unclamped" if o == out else o for o in node.output]
        floor = table_rows(config.scheme, module, 0, 1).reshape(-1, 1, 1)  # distance -(L - 1)
        nodes.append(helper.make_node("Max", [f"{out}_unclamped", "bias_floor"], [out],
                                      name="clamp_distance"))
        initializers += bounds + [numpy_helper.from_array(floor, "bias_floor")]
    elif policy == "clamp":
        nodes, bounds = _clamp_inputs(config, graph)
        initializers += bounds
    if policy == "clamp":
        manifest["positions"] = {**manifest["positions"], "out_of_range": "clamp",
                                 "limit": None}
    scale = tq.scale if per_channel else tq.scale.reshape(())
    axis = 0 if spec.kind == "bias" else 1  # the channel axis of [H, N, M] / [N, D]
    for node in nodes:
        node.output[:] = [f"{out}_float32" if o == out else o for o in node.output]
    attrs = {"axis": axis} if per_channel else {}
    nodes.append(
        helper.make_node("QuantizeLinear", [f"{out}_float32", "out_scale", "out_zero_point"],
                         [f"{out}_int8"], name="quantize_out", **attrs))
    if axis == 0 or not per_channel:  # per tensor, or bias heads: not the last axis
        nodes.append(helper.make_node("DequantizeLinear",
                                      [f"{out}_int8", "out_scale", "out_zero_point"], [out],
                                      name="dequantize_out", **attrs))
    else:  # the [D] scales broadcast over the last axis (per-axis DequantizeLinear: issue 19)
        nodes += _dequantize(f"{out}_int8", "out_scale", out)
    initializers += [
        numpy_helper.from_array(scale.astype(np.float32), "out_scale"),
        numpy_helper.from_array(_zero_points(scale, per_channel), "out_zero_point"),
    ]
    s64 = tq.scale.astype(np.float64)
    # Q rounds x/s in float32 (a division or a reciprocal multiply: <= 2 roundings of <= 128 in
    # q units), DQ rounds s q once (<= 127 u s): s (1/2 + 256 u + 127 u) = s (1/2 + 383 u).
    bound = np.where(tq.peak > 0, s64 * (0.5 + 383 * U32), 0.0) + atol + rtol * tq.peak
    where = {"clamp": "every position (the graph clamps positions to the table, as tables do)",
             "wrap": "every position (the scale covers all 2^n bit patterns)",
             "embedding": "every position (the scale covers every row of the embedding)"}.get(
        policy, "every position (the scale covers +-1, the range of sin/cos)")
    manifest["quant"] = quant_section(
        config.quant_granularity, tq.scale, axis=axis,
        max_abs_err=tq.max_abs_err,
        bound=bound,
        bound_why="half a step of the output's static scale, plus the float graph's tolerance "
        "atol + rtol |x| (spec.tolerance; --mode sliced: its bound against the float64 "
        "definition, graphs.sliced.tolerance), plus the float32 roundings of QuantizeLinear and "
        f"DequantizeLinear (<= 383 u s, u = 2^-24); holds for {where}",
        measured_over=f"every row of the in-range [{tq.rows}, {tq.cols}] table, quantising "
        "the reference values as the graph's Q/DQ does",
        float32_bytes=4 * tq.cols,
        int8_bytes=tq.cols,
        tensor=f"{out}_int8",
        scale_tensor="out_scale",
        bytes_of=OUTPUT_ROW,
    )
    return _rebuild(config, float_model, nodes, initializers, manifest)
