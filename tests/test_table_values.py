"""The table layout and its rows (edgepe/graphs/table_values.py), at every boundary it has, on
tiny schemes (issue 33: the mutation run of that module runs these first; milliseconds each).

Expected shapes and indices are derived from the module's documented layout by hand; rows are
compared with the reference module's own ``encode`` at the same index, computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgepe.graphs import table_values as tv
from edgepe.schemes import build, resolve


def _scheme(name, max_len, **kw):
    config = resolve(name, max_len, **kw)
    return config, build(config, seed=0)


@pytest.mark.parametrize(("name", "max_len", "kw", "shape"), [
    ("sinusoidal", 5, {"d_model": 6}, (5, 6)),         # [L, d]
    ("rope", 7, {"d_model": 4}, (7, 4)),
    ("binary-bits", 9, {}, (9, 4)),                     # d = n = ceil(log2(9 + 1)) = 4
    ("binary-2d", 6, {}, (6, 3)),                       # [L, n], n = ceil(log2(7)) = 3
    ("hierarchical", 8, {"params": {"widths": "2,3,1"}}, (8, 3)),  # [L, max(widths)]
    ("alibi", 4, {"heads": 3}, (7, 3)),                 # [2L - 1, H]
    ("gaussian", 1, {"heads": 2}, (1, 2)),
])
def test_table_shape_of_each_layout(name, max_len, kw, shape):
    config, _ = _scheme(name, max_len, **kw)
    assert tv.table_shape(config) == shape


@pytest.mark.parametrize(("itemsize", "expected"), [(4, 5 * 6 * 4), (1, 30), (1 / 8, 4)])
def test_table_bytes_rounds_bit_packed_up(itemsize, expected):
    config, _ = _scheme("sinusoidal", 5, d_model=6)  # 30 entries: 30 bits are 4 bytes
    assert tv.table_bytes(config, itemsize) == expected
    assert isinstance(tv.table_bytes(config, itemsize), int)


def test_rows_of_a_position_table_are_encode_at_each_row():
    config, module = _scheme("sinusoidal", 6, d_model=4)
    rows = tv.table_rows(config, module, 2, 5)
    expected = module.encode(torch.arange(2, 5)).numpy()
    assert rows.dtype == np.float32 and rows.shape == (3, 4)
    np.testing.assert_array_equal(rows, expected)


def test_rows_of_a_coordinate_table_are_the_bits_of_each_index():
    config, module = _scheme("binary-2d", 6)  # n = 3: row p holds p's 3 bits, least first
    rows = tv.table_rows(config, module, 0, 6)
    expected = np.array([[(p >> k) & 1 for k in range(3)] for p in range(6)], np.float32)
    np.testing.assert_array_equal(rows, expected)
    config, module = _scheme("hierarchical", 5, params={"widths": "2,3"})
    np.testing.assert_array_equal(
        tv.table_rows(config, module, 3, 5),
        np.array([[(p >> k) & 1 for k in range(3)] for p in (3, 4)], np.float32))

    config, module = _scheme("mrope", 6, params={"mrope_section": "1,2,1"})  # int8's rows
    rows = tv.table_rows(config, module, 2, 5)
    p = torch.arange(2, 5)
    np.testing.assert_array_equal(rows, module.encode(torch.stack([p, p, p], dim=1)).numpy())


def test_rows_of_a_bias_table_are_each_distance_for_every_head():
    config, module = _scheme("alibi", 3, heads=2)  # rows 0..4 are distances -2..2
    rows = tv.table_rows(config, module, 0, 5)
    for r in range(5):
        d = r - 2
        bias = module.encode(torch.tensor([d]), torch.tensor([0]))[:, 0, 0].numpy()
        np.testing.assert_array_equal(rows[r], bias)
    assert rows.shape == (5, 2) and rows.dtype == np.float32
    assert not np.array_equal(rows[2], rows[3])  # distance 0 and 1 differ: the index is used


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 6, 7])
def test_iter_table_chunks_join_into_the_full_table(chunk_rows):
    config, module = _scheme("sinusoidal", 6, d_model=2)
    chunks = list(tv.iter_table(config, module, chunk_rows))
    assert [len(c) for c in chunks] == [min(chunk_rows, 6 - s) for s in range(0, 6, chunk_rows)]
    np.testing.assert_array_equal(np.concatenate(chunks), tv.full_table(config, module))
    np.testing.assert_array_equal(tv.full_table(config, module),
                                  module.encode(torch.arange(6)).numpy())


def test_iter_table_default_chunk_is_4096_rows():
    config, module = _scheme("binary", 4097)
    assert [len(c) for c in tv.iter_table(config, module)] == [4096, 1]


@pytest.mark.parametrize(("threshold", "tracked"), [(23, True), (24, True), (25, False)])
def test_progress_is_tracked_from_progress_entries_on(monkeypatch, threshold, tracked):
    config, module = _scheme("sinusoidal", 6, d_model=4)  # 6 x 4 = 24 entries
    monkeypatch.setattr(tv, "PROGRESS_ENTRIES", threshold)
    seen = []

    def track(description, total):
        seen.append((description, total))
        return seen.append  # advance(n) records n

    monkeypatch.setattr(tv, "track", track)
    list(tv.iter_table(config, module, chunk_rows=4))
    assert seen == ([("sinusoidal table [6, 4]", 6), 4, 2] if tracked else [])


def test_progress_entries_is_2_22():
    assert tv.PROGRESS_ENTRIES == 1 << 22 and tv.CHUNK_ROWS == 4096


def test_bias_rows_index_clamped_distances():
    # L = 3: row = clamp(t - u, -2, 2) + 2
    rows = tv.bias_rows([0, 1, 5], [0, 4, -7], 3)
    assert rows.dtype == np.int64
    expected = np.array([[2, 0, 4], [3, 0, 4], [4, 3, 4]])
    np.testing.assert_array_equal(rows, expected)


def test_bias_rows_saturate_positions_at_2_61_without_overflow():
    big = np.iinfo(np.int64)
    rows = tv.bias_rows([big.max, big.min, 2**61 + 5], [big.min, big.max, 2**61], 4)
    # L = 4: row = clamp(t - u, -3, 3) + 3, t and u first clipped to +-2^61.
    # max - min wraps in int64 unsaturated; saturated it is 2^62 -> clamped to 3 -> row 6.
    # 2^61 + 5 saturates to 2^61: its distance to 2^61 is 0 -> row 3 (unsaturated: 5 -> row 6).
    np.testing.assert_array_equal(rows, [[6, 3, 3],
                                         [3, 0, 0],
                                         [6, 3, 3]])
    assert tv.BIAS_SATURATION == 2**61


def test_bias_rows_take_narrow_integer_positions():
    # int32 positions (a caller's own) are widened to int64 before the +-2^61 saturation
    rows = tv.bias_rows(np.array([0, 5], np.int32), np.array([1], np.int32), 3)
    assert rows.dtype == np.int64
    np.testing.assert_array_equal(rows, [[1], [4]])


def test_bias_rows_at_one_row():
    np.testing.assert_array_equal(tv.bias_rows([0, 9], [9, 0], 1), [[0, 0], [0, 0]])


def test_table_reference_clamps_positions_to_the_table():
    config, module = _scheme("sinusoidal", 4, d_model=2)
    got = tv.table_reference(config, module, np.array([-5, 0, 3, 4, 100]))
    np.testing.assert_array_equal(got.numpy(), module.encode(torch.tensor([0, 0, 3, 3, 3])).numpy())


def test_table_reference_of_a_bias_is_the_clamped_distance():
    config, module = _scheme("alibi", 3, heads=2)
    got = tv.table_reference(config, module, np.array([0, 5]), np.array([0, 1, 2]))
    assert tuple(got.shape) == (2, 2, 3)  # [H, N, M]
    for i, t in enumerate((0, 5)):
        for j, u in enumerate((0, 1, 2)):
            d = max(-2, min(2, t - u))
            want = module.encode(torch.tensor([d]), torch.tensor([0]))[:, 0, 0]
            np.testing.assert_array_equal(got[:, i, j].numpy(), want.numpy())
