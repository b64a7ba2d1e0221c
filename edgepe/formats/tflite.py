"""TFLite models (``--format tflite``): for LiteRT (phones) and TensorFlow Lite Micro (Cortex-M).

A ``.tflite`` is a flatbuffer of builtin operators (``edgepe.graphs.tflite_graph`` writes it with
the official schema; no converter). It takes ``positions`` int32 ``[ROWS]`` (bias schemes also
``key_positions`` int32 ``[ROWS]``) and outputs ``pe`` float32 ``[ROWS, D]`` (bias ``[H, ROWS,
ROWS]``): TFLM plans its arena for fixed shapes, so every tensor's shape is static and callers
(``Program``) cut longer calls into pieces of ``ROWS``, padding the last. What the graphs hold:

- ``--mode compute`` for the bit schemes of ``BIT_SCHEMES``: column ``j`` is bit ``k_j`` (``j``;
  binary-multilevel: its ``shifts[j]``) of
  ``pos mod 2^n``, taken as ``b = (x >> k) - 2 (x >> (k+1))`` with LiteRT's ``RIGHT_SHIFT``
  (``--lowering bitwise``: int32, exact for every position since only bits ``< n <= 31`` are
  read and int64 positions reach the model wrapped to their low 32 bits), or with ``FLOOR``,
  ``MUL`` and ``SUB`` in float32 (``--lowering float``, the proof of
  ``edgepe.graphs.lowerings``: exact for ``|pos| <= 2^24``), which TFLM runs: its op resolver
  has no ``RIGHT_SHIFT`` or ``BITWISE_XOR``, and its ``FLOOR_DIV``/``FLOOR_MOD`` take float32
  only (issue 43, measured: "Type 'INT32' is not supported by FLOOR_MOD"). Gray bit ``k`` is
  ``(b_k - b_(k+1))^2`` (xor of two 0/1 values, no ``ABS``); ``binary`` and ``fourier-binary``
  (its DFT basis) project the bits with ``FULLY_CONNECTED``; ``binary-gated`` is
  ``b g + (pos / (L - 1)) (1 - g)``, the ONNX graph's MUL, DIV, MUL, ADD in its order.
- ``--mode sliced`` (``binary``, the C header's slices): one ``GATHER`` per bit slice of the
  projection rows' sums (``edgepe.graphs.sliced.binary_tables``), added; the slice index from
  the same two lowerings.
- ``--mode sliced`` (rope ``[cos | sin]``, sinusoidal): ``edgepe.graphs.sliced``'s angle
  addition with float slicing (``_trig_sliced``), bit for bit the ONNX ``--lowering trunc`` graph.
- ``--mode compute`` for the integer family (``FLOAT_COMPUTE``): the schemes' own float32 DIV,
  MUL (and ADD), bit for bit.
- ``--mode table`` (every scheme with positions ``[N]``; rope its cos/sin rows): the table of
  ``edgepe.graphs.table_values`` as a constant, rows gathered
  (``GATHER``) at positions clamped with ``MINIMUM``/``MAXIMUM`` to ``[0, max_len - 1]``; bias
  rows by the distance ``t - u`` clamped to the table, then ``TRANSPOSE`` to ``[H, N, M]``.
- ``--quantize int8``: tables store int8 rows and one float32 scale a column (``CAST`` then
  ``MUL``: the dequantise every int8 table artifact does, bit for bit); ``binary``'s
  projection is TFLite full-integer: bits as an int8 tensor (scale 1), ``FULLY_CONNECTED`` with
  per-channel int8 weights (``quantized_dimension`` 0, one scale per output channel, zero points
  0, no bias: TFLM's and CMSIS-NN's int8 fully-connected kernel) and an int8 output of one
  scale, then ``DEQUANTIZE`` (edgepe's int8 artifacts output float32: ``pe`` is output 0;
  ``pe_int8``, output 1, is the int8 row a quantised model takes, scale ``quant.output``).
  Its bound is the weights' (``projection_quant``, exact int32 sum) plus the requantisation's:
  see ``_int8_projection``. Graphs without weights (binary-gated's compute, rope's and
  sinusoidal's sliced: ``OUTPUT_QUANT``) quantise their float32 output with the ONNX int8
  graph's scales and bound (``_quantised_output``).
- mrope (positions ``[N, 3]``, compute only) is refused: see ``check_options``.

Loading: LiteRT's interpreter verifies the flatbuffer before it builds anything; TFLM reads it
unchecked, so it is given only bytes that LiteRT's verifier accepted (``verify_flatbuffer``:
``inspect``'s arena, ``verify``'s TFLM run, which also rebuilt them byte for byte first).
``read_model`` parses a file in Python (bounded: it reads the schema's tables, never a path,
and refuses custom ops, tensors past ``MAX_TENSOR_BYTES`` and buffers outside the file) for
``inspect`` and the file check.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.contract.manifest import open_regular
from edgepe.formats.bin import check_table_size
from edgepe.graphs.int8 import _quantised_output as onnx_quantised
from edgepe.graphs.int8 import _weight as int8_weight
from edgepe.graphs.int8 import projection_quant
from edgepe.graphs.quant import check_quantizable, table_quant
from edgepe.graphs.sliced import (
    COS,
    SIN,
    _frequencies,
    _record,
    binary_plan,
    binary_tables,
    plan_of,
    slice_tables,
)
from edgepe.graphs.table_values import full_table, iter_table
from edgepe.graphs.tflite_graph import IDENTIFIER, TYPE_NAMES, Graph

INSTALL = "pip install -c constraints.txt -e '.[tflite]'"
# Positions per call (and key positions per call for bias models): static shapes for TFLM.
ROWS = 16
BIAS_ROWS = 16
LOWERINGS = ("bitwise", "float")
BIT_SCHEMES = ("binary", "binary-bits", "binary-signed", "gray", "binary-multilevel",
               "hybrid-int-binary", "binary-smooth", "fourier-binary", "binary-gated")
# bits @ W in one FULLY_CONNECTED (binary's projection, fourier-binary's DFT basis [cos | -sin]):
# float32, or int8 per-channel weights (graphs.int8.PROJECTIONS, the same quantisation).
PROJECTIONS = ("binary", "fourier-binary")
# --quantize int8 of a graph that stores no weights (binary-gated's compute, rope's and
# sinusoidal's sliced): its float32 output QUANTIZEd and DEQUANTIZEd, the ONNX int8 graph's
# output scales and bound (graphs.int8._quantised_output, issue 43).
OUTPUT_QUANT = ("binary-gated", "rope", "sinusoidal")
# Compute graphs of float arithmetic (no bits): pos / C (integer) or pos / (L - 1) (the others),
# one CAST and one DIV, then a MUL by the columns' factors (and learnable's ADD of its bias).
FLOAT_COMPUTE = ("integer", "integer-norm", "integer-multiscale", "integer-learnable")
# --mode sliced: the demo's projection as one GATHER per bit slice (graphs.sliced.binary_tables).
SLICED = ("binary",)
# --mode sliced, trig-free cos/sin from bit slices (graphs.sliced's angle addition, issue 43):
# the float lowering only, which both interpreters run.
SLICED_TRIG = ("rope", "sinusoidal")
# Bias models subtract int32 positions: |t|, |u| <= 2^30 keeps t - u inside int32.
BIAS_LIMIT = 2**30
INT32 = (-(2**31), 2**31 - 1)
FLOAT_LIMIT = 2**24
# read_model's bounds on an untrusted file.
MAX_FILE_BYTES = 256 * 2**20
MAX_TENSOR_BYTES = 64 * 2**20
MAX_TENSORS = 4096
# Operators, op codes and a tensor's rank: a vector of offsets may name one table many times,
# so a 256 MiB file could list 64M operators (gigabytes of Python objects) without these.
MAX_OPERATORS = 4096
MAX_RANK = 8
RUNTIMES = ("litert", "tflm")
# TFLM's arena for a model: found by bisection (the smallest that allocates), then this much
# more for alignment on a target whose pointers differ from the host's.
ARENA_STEP = 16


def require_runtime(name: str = "litert") -> str:
    """The installed version of ``ai-edge-litert`` (``litert``) or ``tflite-micro`` (``tflm``),
    or a one-line ``BadParameterError`` with the install line."""
    from importlib.metadata import PackageNotFoundError, version

    package = {"litert": "ai-edge-litert", "tflm": "tflite-micro"}[name]
    try:
        return version(package)
    except PackageNotFoundError:
        raise BadParameterError(f"--format tflite on {name} needs {package}, which is not "
                                f"installed: {INSTALL}") from None


def installed() -> list[str]:
    """The interpreters of ``RUNTIMES`` installed here (``verify``'s default runtimes)."""
    import importlib.util

    modules = {"litert": "ai_edge_litert", "tflm": "tflite_micro"}
    return [name for name in RUNTIMES if importlib.util.find_spec(modules[name]) is not None]


def runs_on(manifest: dict[str, Any]) -> list[str]:
    """The interpreters of ``RUNTIMES`` that run what edgepe writes for ``manifest``: LiteRT
    runs every model; TFLM all but ``--lowering bitwise`` (its resolver has no RIGHT_SHIFT)."""
    bitwise = manifest.get("mode") in ("compute", "sliced") and manifest.get("lowering") == \
        "bitwise"
    return [name for name in RUNTIMES if not (name == "tflm" and bitwise)]


def _require_writer() -> None:
    try:
        import flatbuffers  # noqa: F401
        import tflite  # noqa: F401
    except ImportError:
        raise BadParameterError(f"--format tflite needs the tflite schema package: {INSTALL}") \
            from None


def check_options(config: ExportConfig) -> None:
    """Refuse the options a ``.tflite`` cannot take, naming what works instead."""
    s = config.scheme
    if config.dtype != "float32":
        raise BadParameterError(f"--dtype {config.dtype}: a .tflite outputs float32 (int8 with "
                                "--quantize int8)")
    sliced = config.mode == "sliced"
    if config.int8_runtime != "fold" or set(config.extra) - ({"slices"} if sliced else set()):
        raise BadParameterError("--int8-runtime and --param options apply to ONNX graphs, not "
                                "to --format tflite" + (" (but slices=...)" if sliced else ""))
    # (every scheme with a sliced mode has its .tflite: SLICED + SLICED_TRIG)
    if s.scheme == "mrope":
        # Decided (issue 43): refused, not three GATHERs of rope's cos/sin rows by section. mrope
        # has no table mode (its compute is unbounded in position); such a .tflite would be a
        # table whose positions clamp at max_len, a cell no other format has, with [N, 3] inputs.
        raise BadParameterError("scheme 'mrope' takes positions [N, 3] and has no table mode: a "
                                ".tflite holds no SIN/COS compute graph (use --format onnx or "
                                "pte)")
    if s.arity is not None:
        raise BadParameterError(f"scheme '{s.scheme}' takes positions [N, {s.arity}]: .tflite "
                                "models take positions [N] (use --format onnx, pte or c)")
    if s.spec.kind not in ("pe", "bias") and not (s.spec.kind == "rope"
                                                  and config.mode in ("table", "sliced")):
        raise BadParameterError(f"scheme '{s.scheme}' ({s.spec.kind}) has no .tflite "
                                f"--mode {config.mode}: its .tflite is --mode table")
    if sliced and s.scheme in SLICED_TRIG:
        _check_trig_sliced(config)
    elif config.mode == "compute" and s.scheme in FLOAT_COMPUTE:
        # no bits, no lowering: float32 arithmetic within the scheme's position limit
        if config.quantize == "int8":
            raise BadParameterError(f"scheme '{s.scheme}' --mode compute has no int8 .tflite "
                                    "(its graph stores no table): use --mode table")
    elif config.mode in ("compute", "sliced"):
        if s.scheme not in BIT_SCHEMES:
            raise BadParameterError(f"scheme '{s.scheme}' has no .tflite compute graph (compute: "
                                    f"{', '.join(BIT_SCHEMES + FLOAT_COMPUTE)}): use --mode "
                                    "table")
        if config.lowering not in LOWERINGS:
            raise BadParameterError(f"--lowering {config.lowering}: a .tflite computes bits with "
                                    f"{' or '.join(LOWERINGS)}")
        if s.n_bits > (31 if config.lowering == "bitwise" else 24):
            raise BadParameterError(f"max_len {s.max_len} needs {s.n_bits} bits: past what "
                                    f"--lowering {config.lowering} computes in int32/float32")
    if config.quantize == "int8":
        check_quantizable(config)  # (the other compute schemes are exact: refused there)
    if config.mode == "table":
        check_table_size(config, "int8" if config.quantize == "int8" else config.dtype)


def _check_trig_sliced(config: ExportConfig) -> None:
    """rope/sinusoidal ``--mode sliced``: slices with the float lowering (``bitwise``, the
    default, is taken as it: a trig-free graph has no bit columns to shift out), the plan
    checked (rope's ``--param`` graphs are refused with the other params); int8 quantises the
    output (``_quantised_output``)."""

    if config.lowering not in LOWERINGS:
        raise BadParameterError(f"--lowering {config.lowering}: a .tflite slices positions with "
                                "float (FLOOR, exact to 2^24)")
    plan_of(config)


def _trig(config: ExportConfig) -> bool:
    return config.mode == "sliced" and config.scheme.scheme in SLICED_TRIG


def rows(manifest: dict[str, Any]) -> int:
    return BIAS_ROWS if manifest.get("kind") == "bias" else ROWS


def output_shape(config: ExportConfig) -> list[Any]:
    s = config.scheme
    return [s.heads, "N", "M"] if s.spec.kind == "bias" else ["N", s.d_model]


def prepare(config: ExportConfig, module) -> Prepared:
    """The ``.tflite`` artifact for ``config``: manifest (all but sha256) and a writer."""
    _require_writer()
    check_options(config)
    if _trig(config):  # float slicing whatever --lowering said (_check_trig_sliced)
        from dataclasses import replace

        config = replace(config, lowering="float")
    manifest = base_manifest(config, output_shape(config), config.dtype)
    if config.mode == "table" or config.scheme.scheme in FLOAT_COMPUTE:
        manifest["lowering"] = None
    # Bias models subtract int32 positions; float bits are exact up to 2^24 (lowerings.py).
    cap = (BIAS_LIMIT if config.scheme.spec.kind == "bias"
           else FLOAT_LIMIT if config.mode != "table" and config.lowering == "float" else None)
    limit = manifest["positions"]["limit"]
    if cap is not None:
        manifest["positions"]["limit"] = cap if limit is None else min(limit, cap)
    graph = build(config, module, manifest)
    data = graph.serialize(f"edgepe {config.scheme.scheme} {config.mode}")
    manifest["tflite"] = {
        "rows": BIAS_ROWS if config.scheme.spec.kind == "bias" else ROWS,
        "inputs": [graph.tensors[i].name for i in graph.inputs],
        "operators": sorted({op.name for op in graph.ops}),
        # int64 positions reach the int32 input wrapped (bit columns read bits < 32 only) or
        # saturated (clamped tables, float bits within their limit).
        "feed": "wrap" if _wraps(config) else "saturate",
    }

    def write(f) -> None:
        f.write(data)

    return Prepared(manifest, write)


def _wraps(config: ExportConfig) -> bool:
    return config.mode in ("compute", "sliced") and config.lowering == "bitwise" and \
        not _clamps(config)


def _clamps(config: ExportConfig) -> bool:
    """binary-gated in int8: ``pos / (L - 1)`` grows without bound, so, as the ONNX int8 graph
    (``graphs.int8._output_range``'s clamp policy), positions are clamped to ``[0, L - 1]``."""
    return config.quantize == "int8" and config.scheme.scheme == "binary-gated"


def build(config: ExportConfig, module, manifest: dict[str, Any]) -> Graph:
    """The graph for ``config`` (``manifest['quant']`` filled for int8)."""
    s = config.scheme
    g = Graph()
    if s.spec.kind == "bias":
        _bias_table(g, config, module, manifest)
    elif config.mode == "table":
        _table(g, config, module, manifest)
    elif _trig(config):
        _trig_sliced(g, config, module, manifest)
    elif s.scheme in FLOAT_COMPUTE:
        _integer(g, config, module, manifest)
    elif s.scheme == "hybrid-int-binary":
        _hybrid(g, config)
    elif config.mode == "sliced":
        _binary_sliced(g, config, module, manifest)
    else:
        _bits_model(g, config, module, manifest)
    return g


def _stored_table(config, module, manifest):
    """``(table, scale)``: float32 rows, or int8 rows and their float32 column scales."""
    if config.quantize != "int8":
        return full_table(config.scheme, module).astype(np.float32), None

    tq = table_quant(config, module)
    manifest["quant"] = tq.manifest("table_int8")
    table = np.concatenate(list(tq.chunks(iter_table(config.scheme, module))))
    return table, np.broadcast_to(tq.scale.astype(np.float32).reshape(-1), (table.shape[1],))


def _gather(g: Graph, table: np.ndarray, scale, index: int, shape) -> int:
    """Rows of ``table`` at ``index`` (float32, dequantised ``q * scale`` for int8)."""
    t = g.const("table_int8" if scale is not None else "table", table)
    out_shape = (*shape, table.shape[1])
    rows_ = g.op("GATHER", [t, index], out_shape, table.dtype,
                 ("GatherOptions", {"Axis": 0, "BatchDims": 0}))
    if scale is None:
        return rows_
    wide = g.op("CAST", [rows_], out_shape, np.float32)
    return g.op("MUL", [wide, g.const("scale", np.ascontiguousarray(scale, np.float32))],
                out_shape, np.float32)


def _clamp(g: Graph, x: int, lo: int, hi: int, shape) -> int:
    x = g.op("MINIMUM", [x, g.const(f"hi_{len(g.ops)}", np.int32(hi))], shape, np.int32)
    return g.op("MAXIMUM", [x, g.const(f"lo_{len(g.ops)}", np.int32(lo))], shape, np.int32)


def _table(g: Graph, config, module, manifest) -> None:
    table, scale = _stored_table(config, module, manifest)
    pos = g.input("positions", (ROWS,), np.int32)
    index = _clamp(g, pos, 0, config.scheme.max_len - 1, (ROWS,))
    g.outputs.append(_gather(g, table, scale, index, (ROWS,)))
    g.tensors[g.outputs[0]].name = "pe"


def _bias_table(g: Graph, config, module, manifest) -> None:
    """``bias [H, N, M]`` = table row ``clamp(t - u, -(L-1), L-1) + L - 1`` (table_values)."""
    if config.mode != "table":
        raise BadParameterError(f"scheme '{config.scheme.scheme}' is a .tflite --mode table "
                                "(a bias model gathers its rows by distance)")
    table, scale = _stored_table(config, module, manifest)
    hi, r = config.scheme.max_len - 1, BIAS_ROWS
    t = g.input("positions", (r,), np.int32)
    u = g.input("key_positions", (r,), np.int32)
    t2 = g.op("RESHAPE", [t, g.const("shape_t", np.array([r, 1], np.int32))], (r, 1), np.int32)
    u2 = g.op("RESHAPE", [u, g.const("shape_u", np.array([1, r], np.int32))], (1, r), np.int32)
    d = g.op("SUB", [t2, u2], (r, r), np.int32)
    d = _clamp(g, d, -hi, hi, (r, r))
    index = g.op("ADD", [d, g.const("offset", np.int32(hi))], (r, r), np.int32)
    rows_ = _gather(g, table, scale, index, (r, r))
    out = g.op("TRANSPOSE", [rows_, g.const("perm", np.array([2, 0, 1], np.int32))],
               (table.shape[1], r, r), np.float32, out_name="bias")
    g.outputs.append(out)


def _bits(g: Graph, config, pos: int, shifts: np.ndarray, gray: bool) -> int:
    """``[ROWS, W]`` bits (int32 for ``bitwise``, float32 for ``float``): column ``j`` is bit
    ``shifts[j]`` of ``pos mod 2^n`` (0 where ``shifts[j] >= n``), or its Gray code."""
    n, w = config.scheme.n_bits, len(shifts)
    col = (ROWS, w)
    valid = shifts < n
    k = np.where(valid, shifts, 0).reshape(1, w)
    if config.lowering == "bitwise":
        x = g.op("RESHAPE", [pos, g.const("shape", np.array([ROWS, 1], np.int32))], (ROWS, 1),
                 np.int32)

        def bit(offset: int) -> int:
            lo = g.op("RIGHT_SHIFT", [x, g.const(f"k{offset}", (k + offset).astype(np.int32))],
                      col, np.int32)
            hi = g.op("RIGHT_SHIFT", [x, g.const(f"k{offset}_1", (k + offset + 1)
                                                 .astype(np.int32))], col, np.int32)
            twice = g.op("ADD", [hi, hi], col, np.int32)
            b = g.op("SUB", [lo, twice], col, np.int32)
            # A bit at n or above is 0 (pos mod 2^n): masked by a 0/1 column factor.
            mask = (valid & (shifts + offset < n)).astype(np.int32).reshape(1, w)
            return g.op("MUL", [b, g.const(f"mask{offset}", mask)], col, np.int32)
        dtype = np.int32
    else:
        # graphs/lowerings.py's float proof: x exact (|pos| <= 2^24), power-of-two multiplies.
        xi = g.op("RESHAPE", [pos, g.const("shape", np.array([ROWS, 1], np.int32))], (ROWS, 1),
                  np.int32)
        x = g.op("CAST", [xi], (ROWS, 1), np.float32)
        q = g.op("FLOOR", [g.op("MUL", [x, g.const("inv_2n", np.float32(2.0 ** -n))], (ROWS, 1),
                                np.float32)], (ROWS, 1), np.float32)
        r = g.op("SUB", [x, g.op("MUL", [q, g.const("two_n", np.float32(2.0 ** n))], (ROWS, 1),
                                 np.float32)], (ROWS, 1), np.float32)  # pos mod 2^n in [0, 2^n)

        def bit(offset: int) -> int:
            # shifts >= n read bit n of r < 2^n: both floors 0
            kk = np.where(valid, shifts + offset, n).reshape(1, w)
            lo = g.op("FLOOR", [g.op("MUL", [r, g.const(f"inv{offset}", (2.0 ** -kk)
                                                        .astype(np.float32))], col, np.float32)],
                      col, np.float32)
            hi = g.op("FLOOR", [g.op("MUL", [r, g.const(f"inv{offset}_1", (2.0 ** -(kk + 1))
                                                        .astype(np.float32))], col, np.float32)],
                      col, np.float32)
            return g.op("SUB", [lo, g.op("ADD", [hi, hi], col, np.float32)], col, np.float32)
        dtype = np.float32
    b = bit(0)
    if gray:  # b_k xor b_(k+1) = (b_k - b_(k+1))^2 for 0/1 values
        d = g.op("SUB", [b, bit(1)], col, dtype)
        b = g.op("MUL", [d, d], col, dtype)
    return b


def _bits_model(g: Graph, config, module, manifest) -> None:
    s = config.scheme
    pos = g.input("positions", (ROWS,), np.int32)
    if s.scheme in PROJECTIONS:
        b = _bits(g, config, pos, np.arange(s.n_bits), gray=False)
        if config.quantize == "int8":
            out = _int8_projection(g, config, module, manifest, b)
        else:
            weight = int8_weight(config, module)  # [n, d]
            fb = b if config.lowering == "float" else g.op("CAST", [b], (ROWS, s.n_bits),
                                                           np.float32)
            w = g.const("projection_weight", np.ascontiguousarray(weight.T, np.float32))
            out = g.op("FULLY_CONNECTED", [fb, w, -1], (ROWS, s.d_model), np.float32,
                       ("FullyConnectedOptions", {"FusedActivationFunction": 0}), out_name="pe")
    else:
        if _clamps(config):
            pos = _clamp(g, pos, 0, s.max_len - 1, (ROWS,))
        # binary-multilevel's column j reads bit shifts[j] (bit_select), the others bit j
        shifts = (module.shifts.numpy() if s.scheme == "binary-multilevel"
                  else np.arange(s.d_model))
        b = _bits(g, config, pos, shifts, gray=s.scheme == "gray")
        if config.lowering == "bitwise":
            b = g.op("CAST", [b], (ROWS, s.d_model), np.float32)
        if s.scheme == "binary-gated":
            # b g + (pos / (L - 1)) (1 - g): graphs.bits.binary_gated's Mul, Div, Mul, Add in its
            # order, g and 1 - g the module's folded float32 gates (no Exp in the graph)
            gate, rest = (t.detach().numpy().astype(np.float32).reshape(1, s.d_model)
                          for t in module.gates())
            col = (ROWS, s.d_model)
            gated = g.op("MUL", [b, g.const("gate", gate)], col, np.float32)
            lin = _divided(g, pos, float(max(s.max_len - 1, 1)))
            b = g.op("ADD", [gated, g.op("MUL", [lin, g.const("one_minus_gate", rest)], col,
                                         np.float32)], col, np.float32)
        if s.scheme == "binary-smooth":  # b hi + (1 - b) lo: exactly hi or lo (b is 0 or 1)
            hi, lo = (np.float32(getattr(module, k).item()) for k in ("hi", "lo"))
            b = g.op("ADD", [g.op("MUL", [b, g.const("hi", hi)], (ROWS, s.d_model), np.float32),
                             g.op("MUL", [g.op("SUB", [g.const("one", np.float32(1.0)), b],
                                               (ROWS, s.d_model), np.float32),
                                          g.const("lo", lo)], (ROWS, s.d_model), np.float32)],
                     (ROWS, s.d_model), np.float32)
        if s.scheme == "binary-signed":  # 2b - 1, exact in float32
            b = g.op("SUB", [g.op("ADD", [b, b], (ROWS, s.d_model), np.float32),
                             g.const("one", np.float32(1.0))], (ROWS, s.d_model), np.float32)
        out = g.op("RESHAPE", [b, g.const("out_shape", np.array([ROWS, s.d_model], np.int32))],
                   (ROWS, s.d_model), np.float32, out_name="pe")
    if config.quantize == "int8" and s.scheme in OUTPUT_QUANT:
        out = _quantised_output(g, config, module, manifest, out)
    g.tensors[out].name = "pe"
    g.outputs.append(out)
    if config.quantize == "int8":
        # The int8 row too, for a model that stays int8 (its scale: quant.output.scale).
        g.outputs.append(next(i for i, t in enumerate(g.tensors) if t.name == "pe_int8"))


def _binary_sliced(g: Graph, config, module, manifest) -> None:
    """``pe = sum_c T_c[s_c]``: slice ``c`` holds bits ``k_c .. k_c + w_c - 1`` of
    ``pos mod 2^n``, ``s_c = floor(p / 2^k_c) - 2^w_c floor(p / 2^(k_c + w_c))`` (with
    RIGHT_SHIFT in int32, or FLOOR in float32 then CAST to int32 indices), ``T_c`` the sum of
    the projection rows of the bits set in ``s_c`` (``graphs.sliced.binary_tables``: float32
    tables of float64 sums; int8: the exact integer sums of the int8 projection, held in
    float32, then one float32 multiply by the column scale: the int8 compute graph's value bit
    for bit, and its bound)."""

    s = config.scheme
    n, d = s.n_bits, s.d_model
    widths = binary_plan(config)
    low_first = list(reversed(widths))
    shifts = np.cumsum([0, *low_first[:-1]]).astype(int).tolist()
    if config.quantize == "int8":

        q, scale, _, quant = projection_quant(config, module, "int32")
        for graph_only in ("tensor", "scale_tensor", "scale_storage"):
            quant.pop(graph_only, None)
        # float32 holds the exact int32 sums (|T| <= 127 n < 2^24) and TFLM gathers float32
        # and int8 only ("Type 'INT32' is not supported by gather"); sums of integers below
        # 2^24 stay exact, so this is the int32 sum, bit for bit.
        tables = [t.astype(np.float32) for t in binary_tables(q, low_first, True)]
        quant["bytes"]["int8"] = sum(t.nbytes for t in tables) + 4 * d
        manifest["quant"] = quant
        scale = np.broadcast_to(np.asarray(scale, np.float32).reshape(-1), (d,))
    else:
        tables = binary_tables(int8_weight(config, module), low_first, False)
    manifest["sliced"] = {"slices": [int(w) for w in widths],
                          "shifts": [int(k) for k in shifts[::-1]],
                          "table_bytes": int(sum(t.nbytes for t in tables))}
    pos = g.input("positions", (ROWS,), np.int32)
    if config.lowering == "bitwise":
        x = pos
    else:  # graphs/lowerings.py's proof: exact for |pos| <= 2^24
        x = g.op("CAST", [pos], (ROWS,), np.float32)
        q_ = g.op("FLOOR", [g.op("MUL", [x, g.const("inv_2n", np.float32(2.0 ** -n))], (ROWS,),
                                 np.float32)], (ROWS,), np.float32)
        x = g.op("SUB", [x, g.op("MUL", [q_, g.const("two_n", np.float32(2.0 ** n))], (ROWS,),
                                 np.float32)], (ROWS,), np.float32)  # pos mod 2^n

    floors: dict[int, int] = {0: x} if config.lowering == "bitwise" else {}

    def down(k: int) -> int:  # floor(x / 2^k), each k computed once
        if k not in floors:
            floors[k] = _down(k)
        return floors[k]

    def _down(k: int) -> int:
        if config.lowering == "bitwise":
            return g.op("RIGHT_SHIFT", [x, g.const(f"k{k}", np.int32(k))], (ROWS,), np.int32)
        return g.op("FLOOR", [g.op("MUL", [x, g.const(f"inv{k}", np.float32(2.0 ** -k))],
                                   (ROWS,), np.float32)], (ROWS,), np.float32)

    dtype = np.int32 if config.lowering == "bitwise" else np.float32
    total = None
    for c, (k, w) in enumerate(zip(shifts, low_first, strict=True)):
        high = g.op("MUL", [down(k + w), g.const(f"width{c}", dtype(2 ** w))], (ROWS,), dtype)
        index = g.op("SUB", [down(k), high], (ROWS,), dtype)  # in [0, 2^w)
        if dtype is np.float32:
            index = g.op("CAST", [index], (ROWS,), np.int32)
        rows_ = g.op("GATHER", [g.const(f"slice{c}", tables[c]), index], (ROWS, d),
                     tables[c].dtype, ("GatherOptions", {"Axis": 0, "BatchDims": 0}))
        total = rows_ if total is None else g.op("ADD", [total, rows_], (ROWS, d),
                                                 tables[c].dtype)
    if config.quantize == "int8":
        total = g.op("MUL", [total, g.const("scale", np.ascontiguousarray(scale))], (ROWS, d),
                     np.float32)
    g.tensors[total].name = "pe"
    g.outputs.append(total)


def _trig_sliced(g: Graph, config, module, manifest) -> None:
    """rope (``[cos | sin]``, its encode rows) and sinusoidal from bit slices, no SIN/COS: the
    angle addition of ``edgepe.graphs.sliced`` (its tables, its operations in its order, so its
    ``bound`` holds). The slices of ``|pos|`` with the float lowering only (TFLM has no
    RIGHT_SHIFT and float32-only FLOOR): ``x`` float32 (exact to 2^24), ``[pos < 0] =
    min(max(-x, 0), 1)``, ``|x| = x (1 - 2 [pos < 0])``, ``q_c = FLOOR(|x| 2^-k_c)`` (exact),
    ``s_c = q_c - 2^w_c q_(c+1)``; the top index ``+ 2^w_top`` where ``pos < 0``, whose rows are
    the top tables with their sin columns negated (``sin(-a) = -sin a``). The graph's
    column-expanded tables (``H``, ``H'``, ``L``, ``L'``: what the ONNX graph folds at load) are
    stored as they are; every index is clamped to its table (``MINIMUM``), so a position past
    ``positions.limit`` reads a table's edge, never outside it."""
    s = config.scheme
    widths = plan_of(config)
    inv_freq, scale, attention = _frequencies(module)
    k = len(inv_freq)
    if s.scheme == "rope":
        slots, kinds = np.tile(np.arange(k), 2), np.repeat([COS, SIN], k)
    elif module.layout == "half":
        slots, kinds = np.tile(np.arange(k), 2), np.repeat([SIN, COS], k)
    else:
        slots, kinds = np.repeat(np.arange(k), 2), np.tile([SIN, COS], k)
    _record(config, manifest, widths, attention)
    low_first = [int(w) for w in reversed(widths)]
    tables = [(c[:, slots], t[:, slots]) for c, t in slice_tables(inv_freq, widths, scale)]
    is_sin = (np.asarray(kinds) == SIN)[None, :]
    cos_t, sin_t = tables[-1]
    h = np.where(is_sin, sin_t, cos_t)  # cos | sin of the column
    h2 = np.where(is_sin, cos_t, -sin_t)  # H': -sin | cos
    flip = np.where(is_sin, np.float32(-1), np.float32(1))
    h = np.concatenate([h, h * flip]).astype(np.float32)
    h2 = np.concatenate([h2, h2 * flip]).astype(np.float32)
    manifest["sliced"]["table_bytes"] = int(h.nbytes + h2.nbytes + sum(
        2 * c.nbytes for c, _ in tables[:-1]))
    manifest["sliced"]["reference"] += "; tables stored per column"
    d, f32 = s.d_model, np.float32
    v, col = (ROWS,), (ROWS, d)
    pos = g.input("positions", v, np.int32)
    offset = int(getattr(module, "offset", 0) or 0) if s.scheme == "sinusoidal" else 0
    if offset:
        pos = g.op("ADD", [pos, g.const("offset", np.int32(offset))], v, np.int32)
    x = g.op("CAST", [pos], v, f32)
    neg = g.op("MINIMUM", [g.op("MAXIMUM", [g.op("MUL", [x, g.const("minus_one", f32(-1))], v,
                                                 f32), g.const("zero", f32(0))], v, f32),
                           g.const("one", f32(1))], v, f32)  # 1 where pos < 0, else 0
    sign = g.op("SUB", [g.const("one_", f32(1)), g.op("ADD", [neg, neg], v, f32)], v, f32)
    a = g.op("MUL", [x, sign], v, f32)  # |pos|, exact
    shifts = np.cumsum([0, *low_first[:-1]]).astype(int).tolist()
    quotients = [a if kk == 0 else g.op("FLOOR", [g.op("MUL", [a, g.const(
        f"down{c}", f32(2.0 ** -kk))], v, f32)], v, f32) for c, kk in enumerate(shifts)]
    top_rows = 1 << low_first[-1]

    def index(value: int, rows: int) -> int:  # float32 index in [0, rows) -> int32, clamped
        clamped = g.op("MINIMUM", [value, g.const(f"last_{len(g.ops)}", f32(rows - 1))], v, f32)
        return g.op("CAST", [clamped], v, np.int32)

    def gather(name: str, table: np.ndarray, i: int) -> int:
        return g.op("GATHER", [g.const(name, np.ascontiguousarray(table, f32)), i], col, f32,
                    ("GatherOptions", {"Axis": 0, "BatchDims": 0}))

    top_q = g.op("ADD", [quotients[-1], g.op("MUL", [neg, g.const("top_rows", f32(top_rows))],
                                             v, f32)], v, f32)
    top = index(top_q, 2 * top_rows)
    top_h = gather("top_h", h, top)
    if len(low_first) == 1:
        out = top_h
    else:
        idx = []
        for c in range(len(low_first) - 1):  # s_c = q_c - q_(c+1) 2^w_c, in [0, 2^w_c)
            up = g.op("MUL", [quotients[c + 1], g.const(f"up{c}", f32(1 << low_first[c]))], v,
                      f32)
            idx.append(index(g.op("SUB", [quotients[c], up], v, f32), 1 << low_first[c]))
        low_c = gather("cos0", tables[0][0], idx[0])
        low_s = gather("sin0", tables[0][1], idx[0])
        for c in range(1, len(low_first) - 1):  # rotate (L, L') by the middle slice's angle
            tc = gather(f"cos{c}", tables[c][0], idx[c])
            ts = gather(f"sin{c}", tables[c][1], idx[c])
            low_c, low_s = (
                g.op("SUB", [g.op("MUL", [tc, low_c], col, f32),
                             g.op("MUL", [ts, low_s], col, f32)], col, f32),
                g.op("ADD", [g.op("MUL", [ts, low_c], col, f32),
                             g.op("MUL", [tc, low_s], col, f32)], col, f32))
        top_h2 = gather("top_h2", h2, top)
        out = g.op("ADD", [g.op("MUL", [top_h, low_c], col, f32),
                           g.op("MUL", [top_h2, low_s], col, f32)], col, f32)
    if config.quantize == "int8":
        out = _quantised_output(g, config, module, manifest, out)
    g.tensors[out].name = "pe"
    g.outputs.append(out)
    if config.quantize == "int8":
        g.outputs.append(next(i for i, t in enumerate(g.tensors) if t.name == "pe_int8"))


def _quantised_output(g: Graph, config, module, manifest, x: int) -> int:
    """``DEQUANTIZE(QUANTIZE(x))`` of the float32 ``[ROWS, d]`` output ``x``, with the ONNX int8
    graph's output scales, manifest and bound (``graphs.int8._quantised_output``: half a step,
    the float graph's tolerance, <= 2 roundings of ``x / s`` and one of ``q s``).

    One scale for every column (rope and sinusoidal: each covers +-1; ``--quant-granularity
    tensor``): ``QUANTIZE`` to ``pe_int8`` with that scale (a per-tensor int8 output, what
    TFLM's and CMSIS-NN's kernels take), ``DEQUANTIZE``. Scales per column (binary-gated):
    ``MUL`` by the float32 reciprocals ``1 / s_j`` (the reciprocal multiply the bound already
    counts as two roundings), ``QUANTIZE`` with scale 1 (exact), ``DEQUANTIZE`` (exact) and
    ``MUL`` by ``s_j`` (one rounding): the same bound, with TFLite's per-tensor QUANTIZE, whose
    output scale would otherwise be one for all columns; ``pe_int8`` then holds ``q`` with
    scale 1 in the file and its real scales in ``quant.output.scale``."""
    from dataclasses import replace

    s, d = config.scheme, config.scheme.d_model
    g.tensors[x].name = "pe_float32"
    # The ONNX int8 graph of the same cell: its manifest's quant section is this graph's. A
    # sliced one with --lowering trunc (the float slicing this graph does: same tolerance).
    onnx_config = replace(config, format="onnx",
                          lowering="trunc" if config.mode == "sliced" else "bitwise")
    onnx_manifest = base_manifest(onnx_config, output_shape(config), config.dtype)
    onnx_quantised(onnx_config, module, onnx_manifest)
    quant = dict(onnx_manifest["quant"])
    if onnx_manifest["positions"].get("out_of_range") == "clamp":  # binary-gated (_clamps)
        assert _clamps(config), s.scheme
        manifest["positions"] = {**manifest["positions"], "out_of_range": "clamp",
                                 "limit": None}
    scale = np.broadcast_to(np.asarray(quant["scale"], np.float32).reshape(-1), (d,))
    quant.pop("scale_tensor", None)
    quant["tensor"] = "pe_int8"
    col = (ROWS, d)
    if (scale == scale[0]).all():
        s0 = float(scale[0])
        q = g.op("QUANTIZE", [x], col, np.int8, out_name="pe_int8", scale=(s0,),
                 zero_point=(0,))
        out = g.op("DEQUANTIZE", [q], col, np.float32, out_name="pe")
        quant["output"] = {"tensor": "pe_int8", "scale": s0, "zero_point": 0}
    else:
        inverse = (np.float32(1) / scale).astype(np.float32).reshape(1, d)
        steps = g.op("MUL", [x, g.const("inverse_scale", inverse)], col, np.float32)
        q = g.op("QUANTIZE", [steps], col, np.int8, out_name="pe_int8", scale=(1.0,),
                 zero_point=(0,))
        wide = g.op("DEQUANTIZE", [q], col, np.float32)
        out = g.op("MUL", [wide, g.const("scale", np.ascontiguousarray(scale.reshape(1, d)))],
                   col, np.float32, out_name="pe")
        quant["output"] = {"tensor": "pe_int8", "scale": [float(v) for v in scale],
                           "zero_point": 0}
    manifest["quant"] = quant
    return out


def _integer(g: Graph, config, module, manifest) -> None:
    """The integer family, the schemes' own float32 operations in their order:
    ``v = float32(pos) / D`` (one correctly rounded DIV by a divisor of the row's shape, as
    ``schemes._base.divide``; ``D = C`` for integer, ``max(L - 1, 1)`` for the others), then
    ``MUL`` by the columns' factors ``[1, d]`` (ones: exact; multiscale's ``s``; learnable's
    ``w``) and learnable's ``ADD`` of ``b``. ``float32(pos)`` is exact within the schemes'
    limit (2^24)."""
    s, d = config.scheme, config.scheme.d_model
    pos = g.input("positions", (ROWS,), np.int32)
    divisor = s.params["C"] if s.scheme == "integer" else float(max(s.max_len - 1, 1))
    value = _divided(g, pos, divisor)
    factor = {"integer-multiscale": "scale", "integer-learnable": "weight"}.get(s.scheme)
    row = np.ones(d) if factor is None else getattr(module, factor).detach().numpy()
    out = g.op("MUL", [value, g.const("factor", np.asarray(row, np.float32).reshape(1, d))],
               (ROWS, d), np.float32)
    if s.scheme == "integer-learnable":
        bias = module.bias.detach().numpy().astype(np.float32).reshape(1, d)
        out = g.op("ADD", [out, g.const("bias", bias)], (ROWS, d), np.float32)
    g.tensors[out].name = "pe"
    g.outputs.append(out)



def _divided(g: Graph, pos: int, divisor: float) -> int:
    """``[ROWS, 1]`` ``float32(pos) / divisor``: one correctly rounded DIV by a tensor of the
    row's shape (``schemes._base.divide``)."""
    x = g.op("CAST", [g.op("RESHAPE", [pos, g.const("shape", np.array([ROWS, 1], np.int32))],
                           (ROWS, 1), np.int32)], (ROWS, 1), np.float32)
    return g.op("DIV", [x, g.const("divisor", np.full((ROWS, 1), divisor, np.float32))],
                (ROWS, 1), np.float32, ("DivOptions", {"FusedActivationFunction": 0}))


def _hybrid(g: Graph, config) -> None:
    """hybrid-int-binary: ``[pos / (L - 1)] * (d // 2)`` (the integer family's DIV, times ones)
    then the bits ``0 .. d - d // 2 - 1`` (``_bits``, either lowering), CONCATENATION on the
    columns: every value exact or one correctly rounded division (tolerance 0)."""
    s = config.scheme
    half, rest = s.d_model // 2, s.d_model - s.d_model // 2
    pos = g.input("positions", (ROWS,), np.int32)
    lin = g.op("MUL", [_divided(g, pos, float(max(s.max_len - 1, 1))),
                       g.const("ones", np.ones((1, half), np.float32))], (ROWS, half), np.float32)
    b = _bits(g, config, pos, np.arange(rest), gray=False)
    if config.lowering == "bitwise":
        b = g.op("CAST", [b], (ROWS, rest), np.float32)
    out = g.op("CONCATENATION", [lin, b], (ROWS, s.d_model), np.float32,
               ("ConcatenationOptions", {"Axis": 1, "FusedActivationFunction": 0}), out_name="pe")
    g.outputs.append(out)


def _int8_projection(g: Graph, config, module, manifest, b: int) -> int:
    """``pe = DEQUANTIZE(FULLY_CONNECTED(bits int8, q int8 per channel))`` and its bound.

    The weights: ``projection_quant(..., "int32")`` (per output channel ``s_j``, exact int32
    sum; its bound covers the float32 reference's own dot product). The output: one scale
    ``s_out = max_j s_j max(sum_k q+_kj, sum_k -q-_kj) / 127``, so every bit pattern's
    ``acc_j s_j`` lies in ``[-127, 127] s_out`` (no saturation) and every multiplier
    ``s_j / s_out <= 1``. TFLite requantises ``acc_j`` with a Q31 multiplier and two rounding
    steps (``MultiplyByQuantizedMultiplier``: a rounding high multiply, a rounding shift):
    within one output step of ``acc_j s_j / s_out`` plus the multiplier's relative error
    ``2^-30`` on a value of at most 127 steps; ``DEQUANTIZE`` rounds ``q s_out`` once in
    float32 (``127 u s_out``). Added to the weights' bound, for every position.
    """

    s = config.scheme
    q, scale, _, quant = projection_quant(config, module, "int32")
    for graph_only in ("tensor", "scale_tensor", "scale_storage"):
        quant.pop(graph_only, None)
    scale = np.broadcast_to(np.asarray(scale, np.float32).reshape(-1), (s.d_model,))
    qi = q.astype(np.int64)  # [n, d]
    reach = np.maximum(np.clip(qi, 0, None).sum(0), -np.clip(qi, None, 0).sum(0))  # [d]
    peak = float((reach * scale.astype(np.float64)).max())
    s_out = float(np.float32(peak / 127.0)) if peak > 0 else 1.0
    while peak > 127 * s_out:  # float32 rounding down: one step up keeps the range
        s_out = float(np.nextafter(np.float32(s_out), np.float32(np.inf)))
    u = 2.0**-24
    out_term = s_out * (1.0 + 127 * 2.0**-30 + 127 * u)
    quant["bound"] = quant["bound"] + out_term
    if quant.get("bound_per_channel"):
        quant["bound_per_channel"] = [v + out_term for v in quant["bound_per_channel"]]
    if quant.get("bound_in_range") is not None:
        quant["bound_in_range"] = quant["bound_in_range"] + out_term
    quant["bound_why"] += (f"; plus the int8 output's requantisation, s_out (1 + 127 2^-30 + "
                           f"127u) with s_out = {s_out!r} (two roundings of TFLite's Q31 "
                           "multiply, its multiplier's error, float32 DEQUANTIZE)")
    quant["output"] = {"tensor": "pe_int8", "scale": s_out, "zero_point": 0}
    quant["bytes"]["int8"] = q.size + 4 * s.d_model  # weights and their float32 scales
    # Measured: the int32 sum requantised (round half away from zero, TFLite's rule) at every
    # position below max_len, against the float reference.
    pos = np.arange(s.max_len, dtype=np.int64)
    bits = ((pos[:, None] >> np.arange(s.n_bits)) & 1)
    acc = bits @ qi
    out_q = np.clip(np.sign(acc) * np.floor(np.abs(acc * scale / s_out) + 0.5), -128, 127)
    ref = bits.astype(np.float64) @ int8_weight(config, module).astype(np.float64)
    quant["max_abs_err"] = max(quant["max_abs_err"], float(np.abs(out_q * s_out - ref).max()))
    assert quant["max_abs_err"] <= quant["bound"], "int8 error past its proven bound"
    manifest["quant"] = quant

    n = s.n_bits
    if config.lowering == "float":
        b8 = g.op("QUANTIZE", [b], (ROWS, n), np.int8, scale=(1.0,), zero_point=(0,))
    else:
        b8 = g.op("CAST", [b], (ROWS, n), np.int8)
        g.tensors[b8].scale, g.tensors[b8].zero_point = (1.0,), (0,)
    w = g.const("weight_int8", np.ascontiguousarray(q.T, np.int8), scale=scale,
                zero_point=[0] * s.d_model, axis=0)
    # No bias operand (optional in TFLite's FULLY_CONNECTED, TFLM's and CMSIS-NN's kernels
    # alike): a zero int32 bias would add 64 words and their per-channel quantisation.
    acc8 = g.op("FULLY_CONNECTED", [b8, w, -1], (ROWS, s.d_model), np.int8,
                ("FullyConnectedOptions", {"FusedActivationFunction": 0}), out_name="pe_int8",
                scale=(s_out,), zero_point=(0,))
    return g.op("DEQUANTIZE", [acc8], (ROWS, s.d_model), np.float32, out_name="pe")


# ---------------------------------------------------------------------------------------------
# Reading a .tflite (untrusted: bounded, in Python, no interpreter).

def read_model(data: bytes) -> dict[str, Any]:
    """What the flatbuffer holds: ``operators`` (builtin names in graph order), ``tensors``,
    ``inputs``/``outputs`` (name, shape, dtype), ``constant_bytes``. Refuses (``ArtifactError``,
    one line) what is not a TFLite model edgepe can read: no ``TFL3`` identifier, offsets
    outside the file, several subgraphs, a custom op, an unknown op or type, a tensor past
    ``MAX_TENSOR_BYTES``."""
    if len(data) > MAX_FILE_BYTES:
        raise ArtifactError(f"the .tflite is {len(data)} bytes, past the {MAX_FILE_BYTES} this "
                            "reader takes")
    if len(data) < 8 or data[4:8] != IDENTIFIER:
        raise ArtifactError("not a TFLite model (no TFL3 flatbuffer identifier: truncated or "
                            "another file?)")
    import tflite

    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        if model.SubgraphsLength() != 1:
            raise ArtifactError(f"the .tflite has {model.SubgraphsLength()} subgraphs; edgepe's "
                                "models have one")
        sg = model.Subgraphs(0)
        for what, count, most in (("op codes", model.OperatorCodesLength(), MAX_OPERATORS),
                                  ("operators", sg.OperatorsLength(), MAX_OPERATORS),
                                  ("tensors", sg.TensorsLength(), MAX_TENSORS)):
            if count > most:
                raise ArtifactError(f"the .tflite has {count} {what} (at most {most})")
        codes = []
        for i in range(model.OperatorCodesLength()):
            oc = model.OperatorCodes(i)
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            if oc.CustomCode() is not None or code == tflite.BuiltinOperator.CUSTOM:
                custom = (oc.CustomCode() or b"?").decode("utf-8", "replace")[:40]
                raise ArtifactError(f"the .tflite calls custom op {custom!r}: edgepe's models "
                                    "use builtin ops only")
            if code not in names:
                raise ArtifactError(f"the .tflite names builtin op code {code}, unknown to this "
                                    "schema")
            codes.append(names[code])
        n_buffers = model.BuffersLength()
        tensors, constant = [], 0
        for i in range(sg.TensorsLength()):
            t = sg.Tensors(i)
            if t.ShapeLength() > MAX_RANK:
                raise ArtifactError(f"tensor {i} has rank {t.ShapeLength()} (at most {MAX_RANK})")
            shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
            if t.Type() not in TYPE_NAMES:
                raise ArtifactError(f"tensor {i} has TFLite type {t.Type()}, not one edgepe "
                                    "writes")
            dtype = TYPE_NAMES[t.Type()]
            count = 1
            for d in shape:
                if d < 0:
                    raise ArtifactError(f"tensor {i} has a dynamic dimension ({shape}): "
                                        "edgepe's models have static shapes")
                count *= d
            size = count * np.dtype(dtype).itemsize
            if size > MAX_TENSOR_BYTES:
                raise ArtifactError(f"tensor {i} {shape} {dtype} is {size} bytes, past "
                                    f"{MAX_TENSOR_BYTES}: not a PE model")
            if not 0 <= t.Buffer() < max(n_buffers, 1):
                raise ArtifactError(f"tensor {i} names buffer {t.Buffer()} of {n_buffers}")
            if t.Buffer():
                buf = model.Buffers(t.Buffer())
                # Data past the flatbuffer (Buffer.offset/size, for models over 2 GB): edgepe
                # never writes it, and TFLM allocates such a model with the offset unchecked.
                if buf.Offset() or buf.Size():
                    raise ArtifactError(f"tensor {i}'s buffer {t.Buffer()} lies outside the "
                                        f"flatbuffer (offset {buf.Offset()}): not edgepe's")
                held = buf.DataLength()
                if held and held != size:
                    raise ArtifactError(f"tensor {i} holds {held} bytes for {shape} {dtype}")
                constant += held
            name = (t.Name() or b"").decode("utf-8", "replace")[:100]
            tensors.append({"name": name, "shape": shape, "dtype": dtype})
        operators = []
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            index = op.OpcodeIndex()
            if not 0 <= index < len(codes):
                raise ArtifactError(f"operator {i} names op code {index} of {len(codes)}")
            for j in list(op.InputsAsNumpy()) + list(op.OutputsAsNumpy()):
                if not -1 <= j < len(tensors):
                    raise ArtifactError(f"operator {i} names tensor {j} of {len(tensors)}")
            operators.append({"op": codes[index],
                              "inputs": [int(j) for j in op.InputsAsNumpy()],
                              "outputs": [int(j) for j in op.OutputsAsNumpy()]})
        inputs = [tensors[int(j)] for j in sg.InputsAsNumpy()]
        outputs = [tensors[int(j)] for j in sg.OutputsAsNumpy()]
    except ArtifactError:
        raise
    except Exception as exc:  # noqa: BLE001 - a forged flatbuffer fails anywhere in the reader
        raise ArtifactError(f"the .tflite's flatbuffer is damaged ({type(exc).__name__}: "
                            f"{str(exc)[:80]})") from None
    return {"operators": operators, "tensors": tensors, "inputs": inputs, "outputs": outputs,
            "constant_bytes": constant}


def read_file(path: Path) -> bytes:
    """The bytes of the ``.tflite`` at ``path`` (a regular file, never a symlink's target),
    refused (``ArtifactError``) past ``MAX_FILE_BYTES`` before more than that is read."""
    with open(open_regular(Path(path), "artifact"), "rb", closefd=True) as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ArtifactError(f"the .tflite is over {MAX_FILE_BYTES} bytes, past what this reader "
                            "takes")
    return data


def check_file(path: Path, manifest: dict[str, Any]) -> tuple[tuple[str, ...], set[str]]:
    """Refuse a file that is not a TFLite model edgepe reads; returns the model's inputs."""
    data = read_file(path)
    info = read_model(data)
    if "litert" in installed():
        verify_flatbuffer(data)
    return tuple(t["name"] for t in info["inputs"]), set()


def arena_bytes(data: bytes, top: int = 16 * 2**20) -> int:
    """The smallest TFLM tensor arena (bytes, to ``ARENA_STEP``) in which the model allocates
    on this host's TFLM (bisection: allocation fails below it). A Cortex-M build's pointers
    are 4 bytes, not 8: its arena is this or a little less. A model TFLM cannot allocate at
    ``top`` (an op its resolver lacks) is refused with TFLM's own first line."""
    require_runtime("tflm")
    verify_flatbuffer(data)
    ok, why = _allocates(data, top)
    if not ok:
        raise ArtifactError(f"the .tflite does not load in tflm: {why}")
    lo, hi = 0, top
    while hi - lo > ARENA_STEP:
        mid = (lo + hi) // 2 // ARENA_STEP * ARENA_STEP
        if mid <= lo:
            break
        lo, hi = (lo, mid) if _allocates(data, mid)[0] else (mid, hi)
    return hi


def verify_flatbuffer(data: bytes) -> None:
    """Refuse bytes that FlatBuffers' verifier rejects, before TFLM sees them: TFLM's
    interpreter reads the buffer unchecked; LiteRT's runs the verifier when it builds the model
    ("The model is not a valid Flatbuffer buffer"). ``read_model``'s checks come first."""
    read_model(data)
    require_runtime("litert")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        Interpreter(model_content=data,
                    experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    except Exception as exc:  # noqa: BLE001 - the interpreter raises untyped errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"the .tflite is not a valid TFLite flatbuffer ({first})") from None


def _quiet(fn):
    """``(fn(), what fds 1 and 2 received)``: TFLM's native code prints why a model fails
    ("Didn't find op for builtin opcode ...", "Failed to allocate ...") there, not in its
    exception; the caller decides what to say."""
    import tempfile

    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            result = fn()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        log.seek(0)
        return result, log.read(4096).decode("utf-8", "replace")


def _allocates(data: bytes, arena: int) -> tuple[bool, str]:
    """Whether TFLM allocates the model in ``arena`` bytes, and its first line if not."""
    from tflite_micro.python.tflite_micro import runtime

    def make():
        try:
            runtime.Interpreter.from_bytes(data, arena_size=arena)
            return True
        except RuntimeError:
            return False
    ok, text = _quiet(make)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return ok, (lines[0] if lines else "allocation failed")


class Program:
    """A ``.tflite`` in LiteRT's interpreter (``runtime="litert"``) or TFLM's
    (``runtime="tflm"``), for ``edgepe.load`` and the verifier: ``run(feeds)`` takes int64
    ``positions`` (and ``key_positions``) of any length and calls the model on pieces of
    ``tflite.rows``, the last padded with position 0 (its rows dropped).

    ``data`` is the file's bytes as hashed by the caller (never re-read from a path). LiteRT
    verifies the flatbuffer before it builds the interpreter; TFLM is given only bytes that
    verifier accepted (``arena_bytes``), in ``verify`` after they were rebuilt byte for byte.
    """

    placement = None

    def __init__(self, data: bytes, manifest: dict[str, Any], runtime: str = "litert") -> None:
        if runtime not in RUNTIMES:
            raise BadParameterError(f"a .tflite runs on {' or '.join(RUNTIMES)}, not {runtime!r}")
        require_runtime(runtime)
        self.name = runtime
        self.bias = manifest.get("kind") == "bias"
        self.rows = rows(manifest)
        self.width = manifest["heads"] if self.bias else manifest["d_model"]
        section = manifest.get("tflite") if isinstance(manifest.get("tflite"), dict) else {}
        self.wrap = section.get("feed") == "wrap"
        read_model(data)  # bounded checks first: custom ops, huge tensors, damaged offsets
        try:
            if runtime == "litert":
                from ai_edge_litert.interpreter import Interpreter, OpResolverType

                # Builtin kernels only: no XNNPACK delegate (which would rewrite float graphs).
                self._it = Interpreter(
                    model_content=data,
                    experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
                self._it.allocate_tensors()
                self._in = [d["index"] for d in self._it.get_input_details()]
                self._out = self._it.get_output_details()[0]["index"]
            else:
                from tflite_micro.python.tflite_micro import runtime as tflm

                arena = arena_bytes(data)
                self.arena = arena
                self._it = _quiet(lambda: tflm.Interpreter.from_bytes(data, arena_size=arena))[0]
        except (ArtifactError, BadParameterError):
            raise
        except Exception as exc:  # noqa: BLE001 - the interpreters raise untyped errors
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ArtifactError(f"the .tflite does not load in {runtime}: {first}") from None

    def _feed(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        # Bit columns read bits below 32: the low 32 bits carry them (two's complement wrap).
        return x.astype(np.int32) if self.wrap else np.clip(x, *INT32).astype(np.int32)

    def _call(self, *inputs: np.ndarray) -> np.ndarray:
        if self.name == "litert":
            for index, x in zip(self._in, inputs, strict=True):
                self._it.set_tensor(index, x)
            self._it.invoke()
            return self._it.get_tensor(self._out).copy()
        for i, x in enumerate(inputs):
            self._it.set_input(x, i)
        self._it.invoke()
        return np.array(self._it.get_output(0))

    def _piece(self, x: np.ndarray) -> np.ndarray:
        padded = np.zeros(self.rows, np.int32)
        padded[:len(x)] = self._feed(x)
        return padded

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        positions = np.asarray(feeds["positions"], dtype=np.int64).reshape(-1)
        keys = np.asarray(feeds.get("key_positions", np.zeros(0, np.int64)),
                          dtype=np.int64).reshape(-1)
        step = self.rows
        if not len(positions) or (self.bias and not len(keys)):
            shape = (self.width, len(positions), len(keys)) if self.bias else (0, self.width)
            return np.zeros(shape, dtype=np.float32)
        if not self.bias:
            return np.concatenate([
                self._call(self._piece(positions[i:i + step]))[:len(positions[i:i + step])]
                for i in range(0, len(positions), step)])
        return np.concatenate([
            np.concatenate([
                self._call(self._piece(positions[i:i + step]), self._piece(keys[j:j + step]))
                [:, :len(positions[i:i + step]), :len(keys[j:j + step])]
                for j in range(0, len(keys), step)], axis=2)
            for i in range(0, len(positions), step)], axis=1)

    def close(self) -> None:
        self._it = None


def describe_model(data: bytes, arena: bool = True) -> dict[str, Any]:
    """What ``edgepe inspect`` shows of a ``.tflite``, read from the model itself: its ops in
    graph order, inputs, outputs, constant bytes, and TFLM's arena (``None`` where
    tflite-micro is not installed or does not load the model: ``arena_note`` says which)."""
    info = read_model(data)
    info["arena_bytes"], info["arena_note"] = None, "tflite-micro not installed"
    if arena:
        try:
            require_runtime("tflm")
        except BadParameterError:
            return info
        verify_flatbuffer(data)  # a damaged flatbuffer is refused, not noted
        try:
            info["arena_bytes"] = arena_bytes(data)
        except ArtifactError as exc:  # an op TFLM lacks: its own line says which
            info["arena_note"] = str(exc).removeprefix("the .tflite ")
    return info
