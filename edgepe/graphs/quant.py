"""Symmetric int8 quantisation with proven error bounds: the math every int8 artifact shares.

Convention (the usual affine one, ONNX ``QuantizeLinear``/``DequantizeLinear``):
``real = scale * (q - zero_point)`` with ``zero_point = 0`` and ``q`` in ``[-127, 127]`` (the
symmetric range: -128 is never used, so ``-q`` is always representable). ``scale`` is one float32
per output channel (``granularity="channel"``: per column of a ``[rows, cols]`` table, per output
column of a weight matrix) or one for the whole tensor (``"tensor"``).

Scale and proof of the half-step bound (tables)
------------------------------------------------
Let ``m = max |x|`` over a channel and ``s = float32(m / 127)`` (rounded up where it would be
subnormal: see ``scales``). Then ``|x / s| <= 127 (1 + u)``
with ``u = 2^-24`` the float32 unit roundoff, so ``round(x / s)`` (to nearest; computed in float64,
where ``x / s`` is exact to 2^-53 relative) is at most 127 in magnitude: clipping to
``[-127, 127]`` never happens. Rounding to nearest has ``|x / s - q| <= 1/2``; times ``s``:

    |x - s q| <= s / 2                                   (exact arithmetic: half a step)

A runtime dequantises in float32, ``fl(s * q)``, one correctly rounded product of magnitude
``<= 127 s``, which moves the result by at most ``u * 127 s``. So the bound an int8 table
guarantees against its float32 reference, per channel, is

    bound = s / 2 + 127 u s          (0 for a channel that is all zeros: it is stored exactly)

and numpy dequantising in float64 (``s * q`` exact: 24 + 7 bits) stays within ``s / 2``.

The scale is computed as onnxruntime's ``quant_utils.compute_scale_zp(..., symmetric=True)``
does for ``[-127, 127]`` (``float32(2 m / 254)``); edgepe does the same vectorised over channels and
chunk-wise: a first pass takes ``max |x|`` per channel over ``iter_table`` chunks, a second pass
quantises (and measures), so no table is ever held whole in float32.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgepe.contract.errors import BadParameterError

QMIN, QMAX = -127, 127
U32 = 2.0**-24  # float32 unit roundoff: a correctly rounded op moves a value by <= u |value|
GRANULARITIES = ("channel", "tensor")
# ``quant.bytes_of`` of a graph whose only int8 tensor is its output (edgepe.graphs.int8).
OUTPUT_ROW = "one output row (the int8 tensor the device receives)"


def check_quantizable(config) -> None:
    """Refuse ``--quantize int8`` where it cannot help, with one line saying what to do instead.

    Exact schemes (every value exactly 0, 1 or +-1: the bit family) would only gain error: their
    lossless ``--dtype uint8`` is already one byte a value (``--dtype bit`` one bit). The int8
    artifact is dequantised to float32, so ``--dtype`` must stay float32.
    """
    spec = config.scheme.spec
    if spec.exact:
        raise BadParameterError(
            f"scheme '{spec.id}' is exact (every value is a bit): --quantize int8 would only add "
            f"error; export it lossless with --dtype uint8 (1 byte a value) or --dtype bit"
        )
    if config.dtype != "float32":
        raise BadParameterError(
            f"--quantize int8 dequantises to float32: --dtype must be float32, got {config.dtype!r}"
        )
    if config.quant_granularity not in GRANULARITIES:
        raise BadParameterError(
            f"--quant-granularity {config.quant_granularity!r} is not one of: "
            f"{', '.join(GRANULARITIES)}"
        )


def absmax(chunks: Iterable[np.ndarray], granularity: str = "channel") -> np.ndarray:
    """First pass: ``max |x|`` per column (``[cols]``) or over everything (``[1]``), float64.

    Refuses non-finite values (no scale represents them).
    """
    peak: np.ndarray | None = None
    for chunk in chunks:
        chunk = np.asarray(chunk)
        if not np.isfinite(chunk).all():
            raise BadParameterError("cannot quantise to int8: the values include inf or nan")
        a = np.abs(chunk.astype(np.float64)).reshape(-1, chunk.shape[-1]).max(axis=0, initial=0.0)
        peak = a if peak is None else np.maximum(peak, a)
    if peak is None:
        raise BadParameterError("cannot quantise to int8: there are no values")
    return peak if granularity == "channel" else np.array([peak.max()])


def scales(peak: np.ndarray) -> np.ndarray:
    """float32 scales ``m / 127``; an all-zero channel gets 1 (its values quantise to 0 exactly).

    Below float32's normal range (``s < 2^-126``) rounding keeps fewer bits and is no longer
    within ``u`` relative: ``float32(m / 127)`` can fall far enough below ``m / 127`` that
    ``round(m / s)`` is 128 and clips. Such scales are rounded up instead (``s >= m / 127``), which
    is all the proof needs; ``s`` is then a multiple of 2^-149, so ``fl(s q)`` is still exact or
    within ``u`` relative and the bound stands. Normal scales are left as onnxruntime computes them.
    """
    exact = np.asarray(peak, dtype=np.float64) / QMAX
    s = exact.astype(np.float32)
    low = (s < np.finfo(np.float32).tiny) & (s.astype(np.float64) < exact)
    s = np.where(low, np.nextafter(s, np.float32(np.inf)), s)
    return np.where(exact > 0, s, np.float32(1.0)).astype(np.float32)


def half_scales(peak: np.ndarray) -> np.ndarray | None:
    """float16 scales ``>= m / 127`` (rounded UP, so still nothing clips), or ``None`` when one
    falls outside float16's normal range ``[2^-14, 65504]`` (there float32 ``scales`` apply).

    Half the bytes of float32 scales; the step grows by at most ``2^-10`` relative, and the
    proofs hold unchanged for any ``s >= m / 127``. All-zero channels get 1, as in ``scales``.
    """
    exact = np.asarray(peak, dtype=np.float64) / QMAX
    live = exact > 0
    if ((exact[live] < 2.0**-14) | (exact[live] > 65504)).any():
        return None
    s = exact.astype(np.float16)
    with np.errstate(over="ignore"):  # nextafter(65504) is inf; where() never takes it there
        s = np.where(s.astype(np.float64) < exact, np.nextafter(s, np.float16(np.inf)), s)
    return np.where(live, s, np.float16(1.0)).astype(np.float16)


def quantize(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``round(x / scale)`` to nearest (ties to even) in ``[-127, 127]``, int8; scale broadcasts
    over the last axis. The clip is a no-op for scales from ``scales`` (module docstring)."""
    q = np.rint(np.asarray(x, dtype=np.float64) / np.asarray(scale, dtype=np.float64))
    return np.clip(q, QMIN, QMAX).astype(np.int8)


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``scale * q`` in float32, one rounding: what ``DequantizeLinear`` computes (zero point 0)."""
    return np.asarray(q).astype(np.float32) * np.asarray(scale, dtype=np.float32)


def half_step_bound(scale: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """Per channel ``s / 2 + 127 u s`` (module docstring); 0 where the channel is all zeros."""
    s = np.asarray(scale, dtype=np.float64)
    return np.where(np.asarray(peak) > 0, s * (0.5 + QMAX * U32), 0.0)


@dataclass(frozen=True)
class TableQuant:
    """A table's int8 quantisation: scales, the proven bound and the measured error.

    ``scale`` is float32 ``[cols]`` (per channel, ``axis`` 1 of the ``[rows, cols]`` table) or
    ``[1]`` (per tensor). ``max_abs_err`` is measured over every row: ``|fl32(s q) - x|``, as a
    runtime dequantises. Writers call ``quantize`` on each ``iter_table`` chunk.
    """

    granularity: str
    scale: np.ndarray
    peak: np.ndarray
    max_abs_err: float
    rows: int
    cols: int

    def quantize(self, chunk: np.ndarray) -> np.ndarray:
        return quantize(chunk, self.scale)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return dequantize(q, self.scale)

    @property
    def bound_per_channel(self) -> np.ndarray:
        return half_step_bound(self.scale, self.peak)

    @property
    def bound(self) -> float:
        return float(self.bound_per_channel.max())

    def chunks(self, table_chunks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """int8 chunks of the float32 chunks given (the writers' second pass)."""
        for chunk in table_chunks:
            yield self.quantize(chunk)

    def manifest(self, tensor: str | None = None) -> dict[str, Any]:
        """The manifest's ``quant`` section (``tensor`` names the int8 initializer in a graph)."""
        section = quant_section(
            self.granularity, self.scale, axis=1, max_abs_err=self.max_abs_err,
            bound=self.bound_per_channel,
            bound_why="half a step per channel: |x - s round(x/s)| <= s/2, no clipping since "
            "s = max|x|/127, plus one float32 rounding of s*q (<= 127 s 2^-24)",
            measured_over=f"every row of the [{self.rows}, {self.cols}] table",
            float32_bytes=4 * self.rows * self.cols,
            int8_bytes=self.rows * self.cols + 4 * self.scale.size,
            bytes_of="table (entries + scales)",
        )
        if tensor is not None:
            section["tensor"] = tensor
        return section


def measure_table(granularity: str, chunks_twice, peak: np.ndarray | None = None) -> TableQuant:
    """Two passes over a table: ``chunks_twice()`` returns a fresh iterator of float32 chunks.

    Pass 1 finds the scales (``max|x|`` per column, or the ``peak`` given: a range known to
    cover more than these rows), pass 2 quantises every row and measures the error as a runtime
    dequantises (float32).
    """
    if granularity not in GRANULARITIES:
        raise BadParameterError(
            f"--quant-granularity {granularity!r} is not one of: {', '.join(GRANULARITIES)}"
        )
    if peak is None:
        peak = absmax(chunks_twice(), granularity)
    scale = scales(peak)
    err, rows, cols = 0.0, 0, 0
    for chunk in chunks_twice():
        q = quantize(chunk, scale)
        diff = np.abs(dequantize(q, scale).astype(np.float64) - chunk.astype(np.float64))
        err = max(err, float(diff.max(initial=0.0)))
        rows, cols = rows + chunk.shape[0], chunk.shape[-1]
    return TableQuant(granularity, scale, peak, err, rows, cols)


def table_quant(config, module) -> TableQuant:
    """The int8 quantisation of ``config``'s table (an ``ExportConfig``), measured over every row.

    This is what the npy/bin/C writers and the ONNX table graph use: scales from a first pass over
    ``iter_table`` chunks, the error measured in a second; writers quantise chunk by chunk with
    ``TableQuant.quantize`` (deterministic, so the bytes match what was measured).
    """
    from edgepe.graphs.table_values import iter_table

    check_quantizable(config)
    return measure_table(config.quant_granularity, lambda: iter_table(config.scheme, module))


def quant_section(
    granularity: str,
    scale: np.ndarray,
    *,
    axis: int,
    max_abs_err: float,
    bound: np.ndarray,
    bound_why: str,
    measured_over: str,
    float32_bytes: int,
    int8_bytes: int,
    **extra: Any,
) -> dict[str, Any]:
    """The manifest's ``quant`` dict (contract: scale, zero_point, axis, max_abs_err, bound).

    ``scale`` is a list per channel (``axis`` says which axis of the int8 tensor it runs along)
    or a number per tensor (``axis`` null). ``bound`` is the worst channel's bound (a number, to
    compare with ``max_abs_err``); ``bound_per_channel`` lists each. Floats are written with
    Python's shortest round-trip repr, so a float32 scale reads back bit for bit.
    """
    per_channel = granularity == "channel"
    bound = np.asarray(bound, dtype=np.float64)
    section = {
        "method": "int8 symmetric",
        "granularity": granularity,
        "dtype": "int8",
        "qmin": QMIN,
        "qmax": QMAX,
        "scale": [float(v) for v in scale] if per_channel else float(scale.reshape(-1)[0]),
        "zero_point": 0,
        "axis": axis if per_channel else None,
        "max_abs_err": float(max_abs_err),
        "bound": float(bound.max()),
        "bound_per_channel": [float(v) for v in bound] if per_channel else None,
        "bound_why": bound_why,
        "measured_over": measured_over,
        "bytes": {"float32": int(float32_bytes), "int8": int(int8_bytes)},
        **extra,
    }
    if not section["max_abs_err"] <= section["bound"]:
        # The proof says this cannot happen; if it does, the artifact must not ship.
        raise AssertionError(f"int8 error {max_abs_err} exceeds the proven bound {bound.max()}")
    return section


def describe(quant: dict[str, Any]) -> str:
    """One line for ``edgepe inspect``: the quantisation and the bytes it saves."""
    scale = quant.get("scale")
    where = (f"per channel (axis {quant.get('axis')}, {len(scale)} scales)"
             if isinstance(scale, list) else "per tensor")
    line = (f"quant: int8 symmetric [{quant.get('qmin')}, {quant.get('qmax')}] {where}, zero "
            f"point {quant.get('zero_point')}; max abs err {quant.get('max_abs_err'):.3g} <= "
            f"bound {quant.get('bound'):.3g}")
    size = quant.get("bytes") or {}
    if quant.get("bytes_of") == OUTPUT_ROW:  # nothing stored is int8: no bytes saved on file
        line += (f"; int8 output only: a row is {size['int8']} B int8 instead of "
                 f"{size['float32']} B at the device boundary, the graph stores no weights")
    elif size.get("float32"):
        saved = size["float32"] - size["int8"]
        line += (f"; {quant.get('bytes_of', 'table')}: {size['float32']} B float32 -> "
                 f"{size['int8']} B int8 (saves {saved} B, {100 * saved / size['float32']:.0f}%)")
    runtime = quant.get("runtime")
    if runtime == "fold":
        line += (f"; runtime fold: onnxruntime folds it to float32 at session load, "
                 f"{quant.get('ram_bytes')} B in RAM (float32 speed)")
    elif runtime == "live":
        line += (f"; runtime live: kept int8 in RAM, {quant.get('ram_bytes')} B, dequantised "
                 "per call")
    return line


def export_note(manifest: dict[str, Any]) -> str | None:
    """One line for ``edgepe export`` where int8 grows the artifact instead of shrinking it: a
    compute graph with no weights, whose output alone is quantised; else ``None``."""
    quant = manifest.get("quant") or {}
    if quant.get("bytes_of") != OUTPUT_ROW:
        return None
    if manifest.get("mode") == "sliced":  # float32 slice tables, kept: the output is quantised
        return (f"note: {manifest['scheme']}'s sliced graph keeps its float32 slice tables; int8 "
                "quantises its output (error bounded, Q/DQ nodes added: the file grows)")
    line = (f"note: {manifest['scheme']}'s compute graph stores no weights, so int8 quantises "
            "its output (error bounded, Q/DQ nodes added: the file grows)")
    if manifest["scheme"] == "mrope":  # no table mode (issue 40): nothing smaller to point to
        return line
    return line + "; for a small int8 artifact use --mode table --quantize int8"
