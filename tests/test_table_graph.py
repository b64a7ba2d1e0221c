"""``edgepe.graphs.table`` beyond the goldens (issue 33): the clamp on both sides of 2^24, the
multi-index column mask, the varint of the streamed writer, and tables of several chunks.

References are independent of the module: ``np.clip`` on int64, protobuf's own varint encoder,
the scheme's ``encode`` at clamped positions. Each graph runs on onnxruntime.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from google.protobuf.internal.encoder import _VarintBytes
from onnx import TensorProto, helper

from edgepe import api
from edgepe.graphs import table
from edgepe.graphs._common import POSITIONS, Graph, positions_input
from edgepe.graphs.table_values import CHUNK_ROWS, table_shape
from edgepe.schemes import build

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
LONG = 2 * CHUNK_ROWS + 5


def _run(model, feeds) -> np.ndarray:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("n", [0, 1, 127, 128, 255, 300, 16383, 16384, 2**21, 2**31 - 1,
                               2**35 + 7, 2**63 - 1])
def test_varint_is_protobufs(n):
    assert table._varint(n) == _VarintBytes(n)


@pytest.mark.parametrize("high", [7, table.FLOAT32_EXACT - 1, table.FLOAT32_EXACT,
                                  table.FLOAT32_EXACT + 1, 2**40 + 3])
def test_clip_is_exact_for_every_int64_on_both_sides_of_2_24(high):
    """``_clip(x, high)`` equals ``np.clip(x, 0, high)`` at int64's extremes, around 0 and around
    ``high``: float32 Cast/Clip up to 2^24, int64 Where above (2^24 + 1 is not a float32)."""
    g = Graph("clip")
    g.rename(g.op("Identity", table._clip(g, POSITIONS, high)), "out")
    model = g.model([positions_input(None)],
                    [helper.make_tensor_value_info("out", TensorProto.INT64, ["N"])], 18,
                    {"scheme": "test"})
    x = np.array([INT64_MIN, -(2**40), -1, 0, 1, high - 1, high, high + 1, high + 2, 2**31,
                  2**41, INT64_MAX], dtype=np.int64)
    np.testing.assert_array_equal(_run(model, {POSITIONS: x}), np.clip(x, 0, high))
    kinds = {n.op_type for n in model.graph.node}
    assert ("Clip" in kinds) == (high <= table.FLOAT32_EXACT)


@pytest.mark.parametrize("d_model", [6, 8, 9, 11])
def test_binary_2d_table_graph_zeroes_the_columns_past_its_bits(d_model):
    """binary-2d at L = 8 stores W = 4 bits a coordinate (``table_shape``: 8 columns); output
    columns past 2W hold no bit and are 0 (a ``Where`` mask). The graph equals ``encode`` at
    clamped coordinates, probes included."""
    config = api.make_config("binary-2d", 8, mode="table", d_model=d_model)
    module = build(config.scheme)
    model = table.build(config, module, {"scheme": "binary-2d"})
    rng = np.random.default_rng(d_model)
    values = np.array([INT64_MIN, -5, -1, 0, 1, 3, 6, 7, 8, 9, 2**33, INT64_MAX], np.int64)
    positions = np.stack([values, rng.permutation(values)], axis=1)
    with torch.no_grad():
        expected = module.encode(torch.from_numpy(np.clip(positions, 0, 7))).numpy()
    np.testing.assert_array_equal(_run(model, {POSITIONS: positions}), expected)
    assert table_shape(config.scheme) == (8, 4)
    assert not expected[:, 8:].any() and expected[:, :6].any()
    assert ("Where" in {n.op_type for n in model.graph.node}) == (d_model > 8)


def _long(dtype: str = "float32"):
    """A table of three chunks: L = 2 CHUNK_ROWS + 5 rows of sinusoidal, d = 4."""
    config = api.make_config("sinusoidal", LONG, mode="table", d_model=4, dtype=dtype)
    module = build(config.scheme)
    with torch.no_grad():
        reference = module.encode(torch.arange(LONG)).numpy()
    return config, module, reference


def test_a_stored_table_of_several_chunks_is_every_row_in_the_dtype():
    config, module, reference = _long("float16")
    stored = table.stored_table(config, module)
    assert stored.dtype == np.float16
    np.testing.assert_array_equal(stored, reference.astype(np.float16))


def test_a_streamed_table_of_several_chunks_reads_back_as_the_built_graph():
    """The streamed file (model, then the table fragment) parses as one model whose rows are the
    reference rows at clamped positions, as the graph ``build`` holds whole."""
    config, module, reference = _long()
    model, write_table = table.streamed(config, module, {"scheme": "sinusoidal"})
    buffer = io.BytesIO()
    buffer.write(model.SerializeToString())
    write_table(buffer)
    data = buffer.getvalue()
    loaded = onnx.load_from_string(data)
    (stored,) = [t for t in loaded.graph.initializer if t.name == table.TABLE]
    assert list(stored.dims) == [LONG, 4]
    positions = np.array([-3, 0, 1, CHUNK_ROWS - 1, CHUNK_ROWS, 2 * CHUNK_ROWS, LONG - 1, LONG,
                          INT64_MAX], np.int64)
    expected = reference[np.clip(positions, 0, LONG - 1)]
    np.testing.assert_array_equal(_run(data, {POSITIONS: positions}), expected)
    whole = table.build(config, module, {"scheme": "sinusoidal"})
    np.testing.assert_array_equal(_run(whole, {POSITIONS: positions}), expected)
