"""Table graphs for every scheme: the precomputed table stored once, rows gathered by position.

The stored initializer ``table`` has the layout of ``edgepe.graphs.table_values`` (``[L, D]``;
per-coordinate bit rows ``[L, W]`` for binary-2d/hierarchical; ``[2L - 1, H]`` by distance for
bias schemes), in the output dtype (float32, float16, or uint8 for 0/1 schemes), so a float16
graph is half the size rather than a float32 table plus a Cast. Every position is clamped to
``[0, L - 1]`` first (bias schemes: the distance ``t - u`` to ``[-(L - 1), L - 1]``, as
``table_values.bias_rows`` says): table artifacts clamp (DESIGN.md), and Gather with an index out
of range is an error in onnxruntime, so no input can make the graph fail.

``edgepe export`` streams the table (``streamed``): the file is the serialised model without its
``table`` initializer, followed by a second serialised ``ModelProto`` holding only that
initializer, whose raw data is written chunk by chunk as ``iter_table`` computes it. Protobuf
parses concatenated messages as one merged message (repeated fields appended, "Encoding:
Last One Wins" / merging in the protobuf encoding guide), so every reader sees one model with
the table as its last initializer, and the table is never held whole: peak memory stays a few
chunks above the imports instead of several copies of the table (array, TensorProto,
serialised bytes).
"""

from __future__ import annotations

import numpy as np
import onnx

from edgepe.contract.config import ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.graphs._common import (
    BIAS,
    ELEM_TYPES,
    KEY_POSITIONS,
    PE,
    POSITIONS,
    Graph,
    clamp_int64,
    output,
    positions_input,
)
from edgepe.graphs.table_values import BIAS_SATURATION, iter_table, table_bytes, table_shape

TABLE = "table"
# A protobuf message cannot exceed 2 GiB; leave room for the rest of the model.
ONNX_TABLE_LIMIT = 2**31 - 2**20
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8}


def check_table_size(config: ExportConfig) -> None:
    """Refuse a table over ``--max-table-bytes`` (or protobuf's 2 GiB) before allocating it."""
    s = config.scheme
    itemsize = np.dtype(NP_DTYPES[config.dtype]).itemsize
    size = table_bytes(s, itemsize)
    rows, cols = table_shape(s)
    limit = min(config.max_table_bytes, ONNX_TABLE_LIMIT)
    if size > limit:
        hints = []
        if "compute" in s.spec.modes:
            hints.append("--mode compute (no table)")
        hints.append("--format bin --dtype bit (bit-packed)" if s.spec.exact
                     else "--dtype float16 or --quantize int8")
        if limit == config.max_table_bytes:
            hints.append("a larger --max-table-bytes")
        why = ("--max-table-bytes" if limit == config.max_table_bytes
               else "the 2 GiB limit of an ONNX file")
        raise BadParameterError(
            f"the table of scheme '{s.scheme}' is {rows} x {cols} {config.dtype} = {size} bytes, "
            f"over {why} ({limit}); use {' or '.join(hints)}"
        )


def stored_table(config: ExportConfig, module) -> np.ndarray:
    """The whole table in the output dtype, filled chunk by chunk (one allocation)."""
    check_table_size(config)
    table = np.empty(table_shape(config.scheme), dtype=NP_DTYPES[config.dtype])
    start = 0
    for chunk in iter_table(config.scheme, module):
        table[start:start + len(chunk)] = chunk  # float32 -> dtype (0/1 exact in uint8)
        start += len(chunk)
    return table


# Every integer of magnitude up to 2^24 is a float32 (24-bit significand).
FLOAT32_EXACT = 2**24


def _bias_row(g: Graph, max_len: int) -> str:
    """``[N, M]`` int64 rows of a bias table: ``table_values.bias_rows`` as graph ops.

    Each position saturates at ``+-BIAS_SATURATION`` (``clamp_int64``, on the ``[N]`` and ``[M]``
    vectors), so the int64 ``Sub`` cannot overflow; the row ``t - u + L - 1`` is then clipped to
    the table on the ``[N, M]`` grid.
    """
    t = clamp_int64(g, POSITIONS, -BIAS_SATURATION, BIAS_SATURATION, POSITIONS)
    u = clamp_int64(g, KEY_POSITIONS, -BIAS_SATURATION, BIAS_SATURATION, KEY_POSITIONS)
    distance = g.op("Sub", g.op("Unsqueeze", t, g.const([-1], np.int64, "last_axis")), u)
    row = g.op("Add", distance, g.const(max_len - 1, np.int64, "row_offset"))
    return _clip(g, row, 2 * (max_len - 1))


def _clip(g: Graph, x: str, high: int) -> str:
    """int64 ``x`` clamped to ``[0, high]``, exactly, for every int64.

    Up to ``high = 2^24`` in float32 (``Cast``, ``Clip``, ``Cast``): int64 -> float32 rounding is
    monotonic and exact up to 2^24, so any ``x > high`` becomes a float ``>= high`` and any
    ``x < 0`` one ``<= -1``; both clip to the exact bound, and in-range values are exact. Not int64
    ``Clip``, one node instead of three: right on onnxruntime 1.32, wrong in ``[2^31, 2^32)`` on
    1.31.1 and before, and onnxruntime-gpu has no 1.32 (pyproject; issue 19 measured int64 Clip
    at 1.13 | 1.11 | 1.06x a bare Gather for N = 512 | 4096 | 65536, this form 1.18 | 1.12 |
    1.10x). ~25% faster per call than two ``Where`` at the demo size. Larger tables use
    ``clamp_int64``; tests/test_clamp_hostile.py checks both at the hostile positions.
    """
    if high > FLOAT32_EXACT:
        return clamp_int64(g, x, 0, high, x)
    clipped = g.op("Clip", g.cast(x, "float32"), g.const(0.0, np.float32, f"{x}_low"),
                   g.const(float(high), np.float32, f"{x}_high"))
    return g.cast(clipped, "int64")


def _columns(config: ExportConfig) -> tuple[np.ndarray, np.ndarray]:
    """For multi-index schemes: column ``j``'s index in the flattened ``[k * W]`` gathered rows,
    and whether it holds a bit at all (binary-2d columns past ``2 n`` are 0)."""
    s = config.scheme
    width = table_shape(s)[1]
    column = np.arange(s.d_model)
    if s.scheme == "binary-2d":
        axis, shift = column % 2, column // 2
    else:
        widths = np.asarray(s.params["widths"])
        axis = np.repeat(np.arange(len(widths)), widths)
        shift = np.concatenate([np.arange(w) for w in widths])
    inside = shift < width
    return axis * width + np.minimum(shift, width - 1), inside


def build(config: ExportConfig, module, manifest: dict, table: np.ndarray | None = None):
    """``positions [N] (or [N, k]) int64 -> pe [N, D]``, or ``bias [H, N, M]``: table rows.

    Positions are clamped to ``[0, L - 1]``, then ``Gather`` reads the stored rows; bias schemes
    gather by the distance, ``clip(t - u, -(L - 1), L - 1) + L - 1`` (``_bias_row``);
    multi-index schemes gather one row per coordinate and place its bits in the output columns.
    ``table``: store this instead of the scheme's table (``streamed`` checks the graph around a
    one-row stand-in).
    """
    s = config.scheme
    g = Graph(f"{s.scheme.replace('-', '_')}_table")
    if table is None:
        table = stored_table(config, module)
    table = g.const(table, NP_DTYPES[config.dtype], TABLE)
    high = s.max_len - 1
    if s.spec.kind == "bias":
        rows = g.op("Gather", table, _bias_row(g, s.max_len), axis=0)  # [N, M, H]
        g.rename(g.op("Transpose", rows, perm=[2, 0, 1]), BIAS)  # [H, N, M]
        inputs = [positions_input(None), positions_input(None, KEY_POSITIONS)]
        outputs = [output(BIAS, config.dtype, [s.heads, "N", "M"])]
    elif s.arity is None:
        g.rename(g.op("Gather", table, _clip(g, POSITIONS, high), axis=0), PE)
        inputs = [positions_input(None)]
        outputs = [output(PE, config.dtype, ["N", s.d_model])]
    else:
        rows = g.op("Gather", table, _clip(g, POSITIONS, high), axis=0)  # [N, k, W]
        flat = g.op("Reshape", rows, g.const([0, -1], np.int64, "flat_shape"))  # [N, k W]
        index, inside = _columns(config)
        y = g.op("Gather", flat, g.const(index, np.int64, "columns"), axis=1)  # [N, d]
        if not inside.all():
            zero = g.const(0, NP_DTYPES[config.dtype], "zero")
            y = g.op("Where", g.const(inside, np.bool_, "has_bit"), y, zero)
        g.rename(y, PE)
        inputs = [positions_input(s.arity)]
        outputs = [output(PE, config.dtype, ["N", s.d_model])]
    return g.model(inputs, outputs, config.opset, manifest)


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative ``n``."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


# Field tags (field number << 3 | wire type 2, length-delimited) of onnx.proto:
# ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.raw_data = 9.
_GRAPH, _INITIALIZER, _RAW_DATA = b"\x3a", b"\x2a", b"\x4a"


def table_fragment_header(rows: int, cols: int, dtype: str) -> bytes:
    """The bytes ``streamed`` writes between the model and the table's raw data: the
    ``ModelProto`` fragment ``graph { initializer { table: dims, data_type, raw_data length } }``
    (the raw data, ``rows x cols`` little-endian ``dtype``, follows to the end of the file)."""
    header = onnx.TensorProto(name=TABLE, dims=[rows, cols],
                              data_type=ELEM_TYPES[dtype]).SerializeToString()
    size = rows * cols * np.dtype(NP_DTYPES[dtype]).itemsize
    tensor = len(header) + len(_RAW_DATA) + len(_varint(size)) + size
    graph = len(_INITIALIZER) + len(_varint(tensor)) + tensor
    return (_GRAPH + _varint(graph) + _INITIALIZER + _varint(tensor) + header + _RAW_DATA
            + _varint(size))


def streamed(config: ExportConfig, module, manifest: dict):
    """``(model, write_table)``: the table graph without its table, and a writer of the rest.

    ``model`` is built and checked (``onnx.checker``, full) around a one-row stand-in of the
    table (same dtype and width; no op reads the row count, the clamp bounds come from
    ``max_len``), which is then removed. ``write_table(f)`` appends, after
    ``model.SerializeToString()``, the ``ModelProto`` fragment ``graph { initializer { table } }``
    with the real ``dims`` and the raw data (little-endian, as ONNX stores it) streamed from
    ``iter_table``; the lengths of the enclosing messages are known up front from the shape.
    """
    check_table_size(config)
    rows, cols = table_shape(config.scheme)
    dtype = np.dtype(NP_DTYPES[config.dtype]).newbyteorder("<")
    model = build(config, module, manifest, table=np.zeros((1, cols), dtype))
    index = [t.name for t in model.graph.initializer].index(TABLE)
    del model.graph.initializer[index]
    size = rows * cols * dtype.itemsize

    def write_table(f) -> None:
        f.write(table_fragment_header(rows, cols, config.dtype))
        written = 0
        for chunk in iter_table(config.scheme, module):
            data = chunk.astype(dtype).tobytes()  # float32 -> dtype (0/1 exact in uint8)
            f.write(data)
            written += len(data)
        assert written == size, (written, size)

    return model, write_table
