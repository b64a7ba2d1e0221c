"""``edgepe.verify.sweep`` function by function, on tiny schemes, with exact expected values.

The expected values come from each scheme's definition, worked out here by hand, not from the
code under test: integer PE is ``p / max_len`` in every column, ALiBi is ``-slope_h |q - k|``
with slopes ``2^(-8 (h + 1) / H)``, binary-2d interleaves the bits of x and y (LSB first), a
binary or hierarchical table row ``p`` holds the bits of ``p``. Sweep shapes (spans, samples,
probes, single positions) come from the module's documented recipe. Module constants are
shrunk with ``monkeypatch`` where a branch needs a big input (a 2^24-position sweep). These are
the fast tests of issue 33's mutation run of the module (scripts/mutation.py's MODULES).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgepe.contract.errors import ArtifactError
from edgepe.schemes import build, resolve
from edgepe.verify import sweep

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def _integer(max_len, d_model=2):
    config = resolve("integer", max_len, d_model=d_model)
    return config, build(config)


def _alibi(max_len, heads=2):
    config = resolve("alibi", max_len, heads=heads)
    return config, build(config)


def _integer_pe(positions, max_len, d_model=2):
    """integer PE by hand: ``p / max_len`` in every column."""
    p = np.asarray(positions, dtype=np.float64)
    return np.repeat((p / max_len)[:, None], d_model, axis=1).astype(np.float32)


def _alibi_bias(queries, keys, heads=2):
    """ALiBi by hand: ``-2^(-8 (h + 1) / H) |q - k|``, ``[H, N, M]``."""
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    distance = np.abs(np.asarray(queries)[:, None] - np.asarray(keys)[None, :])
    return (-slopes[:, None, None] * distance[None]).astype(np.float32)


def _bits(values, width):
    """Bit ``i`` of each value in column ``i`` (LSB first)."""
    v = np.asarray(values, dtype=np.int64)
    return ((v[:, None] >> np.arange(width)) & 1).astype(np.float32)


def _sample_mask(stop, width):
    """The documented sample of a long sweep: the first and last ``width`` positions, ``width``
    around every power of two below ``stop`` (clipped into range), and ``SAMPLE_CHUNKS`` spans
    at ``numpy.random.default_rng(2)`` starts in ``[0, stop - width)``."""
    covered = np.zeros(stop, dtype=bool)
    starts = [0, stop - width]
    starts += [min(max(0, 2**k - width // 2), stop - width) for k in range(1, 64) if 2**k < stop]
    starts += [int(v) for v in np.random.default_rng(2).integers(0, stop - width,
                                                                   sweep.SAMPLE_CHUNKS)]
    for start in starts:
        covered[start: start + width] = True
    return covered


def _runs(mask, step):
    """Maximal runs of ``mask`` split into pieces of ``step``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    out = []
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        out += [(s, min(s + step, b)) for s in range(a, b, step)]
    return out


# --- position_spans and sampled_positions -------------------------------------------------------

def test_spans_cover_every_position_up_to_the_full_sweep():
    assert sweep.position_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert sweep.position_spans(8, 4) == [(0, 4), (4, 8)]
    assert sweep.position_spans(0, 4) == []
    full = sweep.SWEEP_FULL
    assert sweep.position_spans(full, full) == [(0, full)]  # still a full sweep at 2^24


@pytest.mark.parametrize("stop, step", [(1026, 64), (1026, 5), (1026, 2), (1026, 1), (101, 64)])
def test_a_long_sweep_covers_the_documented_sample_in_maximal_spans(monkeypatch, stop, step):
    monkeypatch.setattr(sweep, "SWEEP_FULL", 100)
    monkeypatch.setattr(sweep, "SAMPLE_WIDTH", 8)
    width = min(step, 8)
    spans = sweep.position_spans(stop, step)
    # the sample, merged where spans touch or overlap, then cut into pieces of at most ``step``
    assert spans == _runs(_sample_mask(stop, width), step)
    assert all(0 <= a < b <= stop and b - a <= step for a, b in spans)


def test_a_sweep_of_2_to_the_24_plus_one_is_the_sample():
    stop = sweep.SWEEP_FULL + 1
    spans = sweep.position_spans(stop, sweep.CHUNK_POSITIONS)
    assert spans == _runs(_sample_mask(stop, sweep.SAMPLE_WIDTH), sweep.CHUNK_POSITIONS)


def test_sampled_positions_are_every_position_or_the_sample(monkeypatch):
    small = sweep.sampled_positions(37)
    assert small.dtype == np.int64 and small.tolist() == list(range(37))
    monkeypatch.setattr(sweep, "SWEEP_FULL", 100)
    monkeypatch.setattr(sweep, "SAMPLE_WIDTH", 8)
    assert sweep.sampled_positions(100).tolist() == list(range(100))  # up to SWEEP_FULL: all
    big = sweep.sampled_positions(1026)
    assert big.dtype == np.int64
    assert big.tolist() == np.flatnonzero(_sample_mask(1026, 8)).tolist()


# --- probe_values and position_limit ------------------------------------------------------------

# max_len 37, n_bits 6: the documented fixed probe values, by hand
FIXED_37 = {-1, -2, -3, -37, -38, 37, 38, 39, 73, 74, 63, 64, 65, 131, 197, 2**24 - 1, 2**24,
            2**24 + 1, -(2**24), 2**31 - 1, 2**31, 2**32 + 3, 2**53 + 1, 2**62, INT64_MAX,
            INT64_MIN, INT64_MIN + 1}


def _randoms(count, seed):
    """The documented random probe values: ``2^u``, ``u`` uniform in ``[0, 63)``, capped at
    ``2^62``, each with a random sign (``numpy.random.default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    magnitude = np.exp2(rng.uniform(0, 63, count))
    sign = rng.choice([-1, 1], count)
    return {int(min(m, 2.0**62)) * int(s) for m, s in zip(magnitude, sign, strict=True)}


def test_probe_values_are_the_fixed_edges_outside_the_range():
    config, _ = _integer(37)
    assert config.n_bits == 6
    values = sweep.probe_values(config, None, 0)
    assert values.dtype == np.int64
    assert values.tolist() == sorted(FIXED_37)


@pytest.mark.parametrize("seed, count", [(0, 40), (5, 40), (5, 200)])
def test_probe_values_add_seeded_random_ones_of_every_magnitude(seed, count):
    config, _ = _integer(37)
    values = sweep.probe_values(config, None, count, seed)
    expected = sorted(v for v in FIXED_37 | _randoms(count, seed) if not 0 <= v < 37)
    assert values.tolist() == expected
    assert len(expected) > len(FIXED_37) + count // 2  # the randoms are there
    if count == 200:  # some draws past 2^62, capped there (seed 5: four of them)
        rng = np.random.default_rng(5)
        assert (np.exp2(rng.uniform(0, 63, 200)) > 2.0**62).sum() == 4
    if seed == 0:
        assert sweep.probe_values(config, None, 40).tolist() == expected  # seed 0 by default


def test_probe_values_stay_within_the_limit_and_include_it():
    config, _ = _integer(37)
    low = [-3, -2, -1]
    assert sweep.probe_values(config, 100, 0).tolist() == sorted(
        [-100, -38, -37, *low, 37, 38, 39, 63, 64, 65, 73, 74, 100])
    # a limit that is a fixed value is there once; its negative is added
    assert sweep.probe_values(config, 74, 0).tolist() == sorted(
        [-74, -38, -37, *low, 37, 38, 39, 63, 64, 65, 73, 74])
    # a limit inside the range is not a probe; minus it is
    assert sweep.probe_values(config, 10, 0).tolist() == [-10, -3, -2, -1]
    none = sweep.probe_values(config, 0, 0)  # 0 is in range
    assert none.tolist() == [] and none.dtype == np.int64


def test_position_limit_is_the_manifests_else_the_schemes():
    config, _ = _integer(8)
    assert config.spec.position_limit == 2**24
    assert sweep.position_limit({}, config) == 2**24
    assert sweep.position_limit({"positions": None}, config) == 2**24
    assert sweep.position_limit({"positions": {"out_of_range": "clamp"}}, config) == 2**24
    assert sweep.position_limit({"positions": {"limit": 5}}, config) == 5
    assert sweep.position_limit({"positions": {"limit": None}}, config) is None


# --- _reference and unit -----------------------------------------------------------------------

def test_the_reference_extrapolates_or_clamps_and_is_float32():
    config, module = _integer(8)
    positions = np.array([-3, 0, 5, 20], dtype=np.int64)
    out = sweep._reference(config, module, False)(positions)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, _integer_pe(positions, 8))
    clamped = sweep._reference(config, module, True)(positions)
    assert clamped.dtype == np.float32
    np.testing.assert_array_equal(clamped, _integer_pe([0, 0, 5, 7], 8))
    # a reversed (negative-stride) view is read as it is
    view = np.arange(6, dtype=np.int64)[::-1]
    np.testing.assert_array_equal(sweep._reference(config, module, False)(view),
                                  _integer_pe(view, 8))


def test_the_bias_reference_takes_queries_and_keys():
    config, module = _alibi(4)
    q, k = np.array([0, 1, 9]), np.array([0, 3])
    out = sweep._reference(config, module, False)(q, k[::-1])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, _alibi_bias(q, k[::-1]))
    table = sweep._reference(config, module, True)(np.array([9, -9]), np.array([0]))
    np.testing.assert_array_equal(table, _alibi_bias([3, -3], [0]))  # distance clamped to 3


def test_unit_names_bits_for_exact_or_bit_outputs():
    integer, _ = _integer(8)
    gray = resolve("gray", 8)
    assert sweep.unit(integer, "float32") == "column"
    assert sweep.unit(integer, "float16") == "column"
    assert sweep.unit(integer, "uint8") == "bit"
    assert sweep.unit(integer, "bit") == "bit"
    assert sweep.unit(gray, "float32") == "bit"


# --- single_positions --------------------------------------------------------------------------

def test_single_positions_are_the_edges_and_seeded_ones_in_range():
    for stop, expected in [(0, []), (1, [0]), (2, [0, 1]), (3, [0, 1, 2])]:
        values = sweep.single_positions(stop)
        assert values.dtype == np.int64 and values.tolist() == expected
    picks = np.random.default_rng(1).integers(0, 1000, sweep.SINGLES - 4)
    expected = sorted({0, 1, 500, 999} | {int(v) for v in picks})
    assert sweep.single_positions(1000).tolist() == expected
    assert len(expected) <= sweep.SINGLES


# --- onnx_chunks: position encodings ------------------------------------------------------------

COMPUTE = {"mode": "compute", "dtype": "float32"}


def _check_pe_chunk(chunk, positions, expected, probe, again=False):
    """``again``: a single-position call, which adds nothing to the progress bar."""
    assert chunk.feeds.keys() == {"positions"}
    assert chunk.feeds["positions"].dtype == np.int64
    assert chunk.feeds["positions"].tolist() == list(positions)
    np.testing.assert_allclose(chunk.expected, expected, rtol=1e-6, atol=0)
    assert chunk.positions == len(positions) and chunk.probe is probe
    assert chunk.progress == (0 if probe or again else len(positions))


def test_a_pe_graph_is_swept_then_probed_then_called_one_position_at_a_time():
    config, module = _integer(37)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    singles = sweep.single_positions(37).tolist()
    probe = sweep.probe_values(config, 2**24, 128).tolist()
    assert len(chunks) == 2 + len(singles)
    _check_pe_chunk(chunks[0], range(37), _integer_pe(range(37), 37), False)
    # the probe extrapolates (integer compute graphs are defined up to |p| = 2^24)
    _check_pe_chunk(chunks[1], probe, _integer_pe(probe, 37), True)
    assert max(abs(v) for v in probe) == 2**24
    for chunk, p in zip(chunks[2:], singles, strict=True):
        _check_pe_chunk(chunk, [p], _integer_pe([p], 37), False, again=True)
    assert chunks[0].where((5, 1)) == "position 5 column 1"
    assert chunks[1].where((0, 0)) == f"position {probe[0]} column 0"
    assert chunks[2].where((0, 1)) == f"position {singles[0]} column 1"


def test_an_exact_scheme_names_bits():
    config = resolve("gray", 8)
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    assert chunks[0].where((3, 2)) == "position 3 bit 2"


def test_a_table_graph_or_a_clamping_one_clamps_the_probe_and_has_no_limit():
    config, module = _integer(37)
    for manifest in ({"mode": "table", "dtype": "float32"},
                     {**COMPUTE, "positions": {"out_of_range": "clamp", "limit": 100}}):
        chunks = list(sweep.onnx_chunks(config, module, manifest, False))
        probe = sweep.probe_values(config, None, 128)
        _check_pe_chunk(chunks[1], probe.tolist(), _integer_pe(np.clip(probe, 0, 36), 37), True)


def test_a_compute_graph_probes_up_to_its_manifest_limit():
    config, module = _integer(37)
    manifest = {**COMPUTE, "positions": {"out_of_range": "extrapolate", "limit": 100}}
    chunks = list(sweep.onnx_chunks(config, module, manifest, False))
    probe = sweep.probe_values(config, 100, 128).tolist()
    assert max(probe) == 100 and min(probe) == -100
    _check_pe_chunk(chunks[1], probe, _integer_pe(probe, 37), True)


def test_quick_sweeps_the_first_4096_positions_and_a_small_probe():
    config, module = _integer(5000, 1)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, True))
    singles = sweep.single_positions(4096).tolist()
    probe = sweep.probe_values(config, 2**24, 16).tolist()
    assert len(chunks) == 2 + len(singles)
    _check_pe_chunk(chunks[0], range(4096), _integer_pe(range(4096), 5000, 1), False)
    _check_pe_chunk(chunks[1], probe, _integer_pe(probe, 5000, 1), True)
    assert [c.feeds["positions"].tolist() for c in chunks[2:]] == [[p] for p in singles]


@pytest.mark.parametrize("elements, limit, d_model, step", [
    (6, 65536, 2, 3), (6, 2, 2, 2), (6, 65536, 1, 6), (1, 65536, 2, 1)])
def test_pe_chunks_hold_at_most_chunk_elements_and_chunk_positions(
        monkeypatch, elements, limit, d_model, step):
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", elements)
    monkeypatch.setattr(sweep, "CHUNK_POSITIONS", limit)
    config, module = _integer(13, d_model)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    swept = [c.feeds["positions"].tolist() for c in chunks[: -(-13 // step)]]
    assert swept == [list(range(a, min(a + step, 13))) for a in range(0, 13, step)]
    assert chunks[-(-13 // step)].probe


# --- onnx_chunks: bias schemes -----------------------------------------------------------------

def _check_bias_chunk(chunk, queries, keys, probe, again=False):
    assert chunk.feeds.keys() == {"positions", "key_positions"}
    assert chunk.feeds["positions"].tolist() == list(queries)
    assert chunk.feeds["key_positions"].tolist() == list(keys)
    np.testing.assert_allclose(chunk.expected, _alibi_bias(queries, keys), rtol=1e-6, atol=0)
    assert chunk.positions == len(queries) * len(keys) and chunk.probe is probe
    assert chunk.progress == (0 if probe or again else len(queries))


def test_a_bias_graph_covers_the_grid_the_probes_and_single_queries():
    config, module = _alibi(4)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    probe = sweep.probe_values(config, 2**24, 128).tolist()
    singles = sweep.single_positions(4).tolist()
    assert len(chunks) == 1 + 3 + 2 * len(singles)
    _check_bias_chunk(chunks[0], range(4), range(4), False)
    inside = [0, 1, 2, 3]
    _check_bias_chunk(chunks[1], probe, inside, True)
    _check_bias_chunk(chunks[2], inside, probe, True)
    _check_bias_chunk(chunks[3], probe, probe, True)
    for i, q in enumerate(singles):
        _check_bias_chunk(chunks[4 + 2 * i], [q], range(4), False, again=True)
        _check_bias_chunk(chunks[5 + 2 * i], [q], [q], False, again=True)
    assert chunks[0].where((1, 2, 3)) == "head 1 query 2 key 3"
    assert chunks[1].where((0, 0, 3)) == f"head 0 query {probe[0]} key 3"


def test_the_bias_probe_holds_16_evenly_spread_keys_in_range():
    config, module = _alibi(31)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, True))
    probe = sweep.probe_values(config, 2**24, 16).tolist()
    _check_bias_chunk(chunks[1], probe, range(0, 31, 2), True)


@pytest.mark.parametrize("elements, grid, limit, spans, keys", [
    (16, 65536, 65536, [[0, 1], [2, 3]], [0, 1, 2, 3]),  # grid in 2-query chunks (H = 2, 4 keys)
    (1, 65536, 65536, [[0], [1], [2], [3]], [0, 1, 2, 3]),  # at least one query a chunk
    (1 << 20, 1, 65536, [[0, 1, 2, 3]], [0, 1, 2, 3]),  # 16 cells <= 1 * 16: still the grid
    (8, 0, 65536, [[0, 1], [2, 3]], [0, 3]),  # past the grid: every query against the edges
    (8, 0, 1, [[0], [1], [2], [3]], [0, 3]),  # at most CHUNK_POSITIONS queries
    (1, 0, 65536, [[0], [1], [2], [3]], [0, 3]),
])
def test_bias_chunks_are_bounded(monkeypatch, elements, grid, limit, spans, keys):
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", elements)
    monkeypatch.setattr(sweep, "GRID_LIMIT", grid)
    monkeypatch.setattr(sweep, "CHUNK_POSITIONS", limit)
    config, module = _alibi(4)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    for chunk, queries in zip(chunks, spans, strict=False):
        _check_bias_chunk(chunk, queries, keys, False)
    assert chunks[len(spans)].probe and not chunks[len(spans) - 1].probe


# --- onnx_chunks: multi-index schemes ----------------------------------------------------------

def _binary_2d(rows, n_bits):
    """binary-2d by hand: x's bits in the even columns, y's in the odd ones (LSB first)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.zeros((len(rows), 2 * n_bits), dtype=np.float32)
    out[:, 0::2] = _bits(rows[:, 0], n_bits)
    out[:, 1::2] = _bits(rows[:, 1], n_bits)
    return out


def _check_multi_chunk(chunk, rows, probe, n_bits=3, again=False):
    assert chunk.feeds.keys() == {"positions"}
    got = chunk.feeds["positions"]
    assert got.dtype == np.int64 and got.flags.c_contiguous
    assert got.tolist() == [list(r) for r in rows]
    if not probe:
        np.testing.assert_array_equal(chunk.expected, _binary_2d(rows, n_bits))
    else:
        np.testing.assert_array_equal(chunk.expected, _binary_2d(np.asarray(rows) % 8, n_bits))
    assert chunk.positions == len(rows) and chunk.probe is probe
    assert chunk.progress == (0 if probe or again else len(rows))


def test_a_multi_index_graph_covers_the_coordinate_grid_probes_and_singles():
    config = resolve("binary-2d", 4)
    assert config.arity == 2 and config.n_bits == 3
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    grid = [(x, y) for x in range(4) for y in range(4)]
    singles = sweep.single_positions(16).tolist()
    assert len(chunks) == 2 + len(singles)
    _check_multi_chunk(chunks[0], grid, False)
    probe = sweep.probe_values(config, None, 128)
    inside = np.arange(len(probe)) % 4
    expected = np.concatenate([np.stack([probe, inside], 1), np.stack([inside, probe], 1),
                               np.stack([probe, np.roll(probe, 1)], 1)])
    # binary-2d wraps modulo 2^n_bits (8)
    _check_multi_chunk(chunks[1], expected.tolist(), True)
    for chunk, index in zip(chunks[2:], singles, strict=True):
        _check_multi_chunk(chunk, [grid[index]], False, again=True)
    assert chunks[0].where((6, 4)) == "position (1, 2) bit 4"
    assert chunks[1].where((0, 1)) == f"position ({int(probe[0])}, 0) bit 1"
    x, y = grid[singles[0]]
    assert chunks[2].where((0, 5)) == f"position ({x}, {y}) bit 5"


@pytest.mark.parametrize("grid, elements, first", [
    (16, 1 << 20, [(x, y) for x in range(4) for y in range(4)]),  # 16 cells <= 16: the grid
    (15, 1 << 20, [(0, 3), (1, 0), (2, 1), (3, 2)]),  # y is x shifted by 4 // 2 + 1
    (65536, 12, [(0, 0), (0, 1)]),  # 6 columns: 2 rows a chunk
    (65536, 1, [(0, 0)]),
])
def test_multi_index_rows_are_the_grid_or_shifted_columns(monkeypatch, grid, elements, first):
    monkeypatch.setattr(sweep, "GRID_LIMIT", grid)
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", elements)
    config = resolve("binary-2d", 4)
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    _check_multi_chunk(chunks[0], first, False)


def test_multi_index_columns_of_a_long_sweep_are_shifts_of_the_sample(monkeypatch):
    monkeypatch.setattr(sweep, "SWEEP_FULL", 100)
    monkeypatch.setattr(sweep, "SAMPLE_WIDTH", 8)
    config = resolve("binary-2d", 1026)
    assert config.n_bits == 11
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    base = np.flatnonzero(_sample_mask(1026, 8))
    rows = np.stack([base, (base + 514) % 1026], axis=1)
    _check_multi_chunk(chunks[0], rows.tolist(), False, n_bits=11)


# --- onnx_chunks: rope apply graphs ------------------------------------------------------------

def _rope(max_len=6, d_model=4):
    config = resolve("rope", max_len, d_model=d_model)
    return config, build(config)


def test_a_rope_apply_graph_gets_seeded_x_and_the_modules_rotation():
    config, module = _rope()
    manifest = {**COMPUTE, "shape": [2, 6, 4]}
    chunks = list(sweep.onnx_chunks(config, module, manifest, False, ("x", "positions")))
    probe = sweep.probe_values(config, 2**24, 128)
    assert len(chunks) == 2
    rng = np.random.default_rng(0)
    for chunk, positions, probe_flag in [(chunks[0], np.arange(6), False),
                                         (chunks[1], probe, True)]:
        x = rng.uniform(-0.5, 0.5, (2, len(positions), 4)).astype(np.float32)
        assert chunk.feeds.keys() == {"x", "positions"}
        np.testing.assert_array_equal(chunk.feeds["x"], x)
        assert chunk.feeds["positions"].tolist() == positions.tolist()
        rotated = module.apply(torch.from_numpy(x), torch.from_numpy(positions)).numpy()
        np.testing.assert_array_equal(chunk.expected, rotated)
        assert chunk.positions == len(positions) and chunk.probe is probe_flag
        assert chunk.progress == (0 if probe_flag else len(positions))
    assert chunks[0].where((1, 2, 3)) == "x[1] position 2 column 3"
    assert chunks[1].where((0, 0, 1)) == f"x[0] position {probe[0]} column 1"


def test_a_4d_rope_apply_graph_gets_two_rows_of_positions_and_two_heads():
    config, module = _rope()
    manifest = {**COMPUTE, "shape": [2, 2, 6, 4],
                "positions": {"out_of_range": "extrapolate", "limit": 50}}
    chunks = list(sweep.onnx_chunks(config, module, manifest, True, ("x", "positions")))
    probe = sweep.probe_values(config, 50, 16)
    rng = np.random.default_rng(0)
    for chunk, positions in [(chunks[0], np.arange(6)), (chunks[1], probe)]:
        feed = np.stack([positions, positions[::-1]])
        x = rng.uniform(-0.5, 0.5, (2, 2, len(positions), 4)).astype(np.float32)
        np.testing.assert_array_equal(chunk.feeds["x"], x)
        assert chunk.feeds["positions"].tolist() == feed.tolist()
        rotated = module.apply(torch.from_numpy(x), torch.from_numpy(feed)).numpy()
        np.testing.assert_array_equal(chunk.expected, rotated)
    assert chunks[0].where((1, 0, 2, 3)) == "x[1, 0] position 3 column 3"
    assert chunks[0].where((0, 1, 2, 3)) == "x[0, 1] position 2 column 3"


@pytest.mark.parametrize("elements, limit, step", [(32, 65536, 4), (32, 3, 3), (1, 65536, 1)])
def test_rope_apply_chunks_are_bounded(monkeypatch, elements, limit, step):
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", elements)  # x is [2, N, d]: 2 d a position
    monkeypatch.setattr(sweep, "CHUNK_POSITIONS", limit)
    config, module = _rope(10)
    chunks = list(sweep.onnx_chunks(config, module, {**COMPUTE, "shape": [2, 10, 4]}, False,
                                    ("x", "positions")))
    swept = [c.feeds["positions"].tolist() for c in chunks if not c.probe]
    assert swept == [list(range(a, min(a + step, 10))) for a in range(0, 10, step)]


def test_quick_rope_apply_sweeps_4096_positions(monkeypatch):
    config, module = _rope(5000, 2)
    chunks = list(sweep.onnx_chunks(config, module, {**COMPUTE, "shape": [2, 5000, 2]}, True,
                                    ("x", "positions")))
    assert chunks[0].feeds["positions"].tolist() == list(range(4096))
    assert chunks[1].feeds["positions"].tolist() == sweep.probe_values(config, 2**24, 16).tolist()


# --- in_range_total ----------------------------------------------------------------------------

def test_in_range_total_counts_rows_queries_or_grid_cells(monkeypatch):
    integer, _ = _integer(37)
    alibi, _ = _alibi(20)
    table = {"format": "npy", "mode": "table"}
    graph = {"format": "onnx", "mode": "compute"}
    assert sweep.in_range_total(integer, table, False) == 37
    assert sweep.in_range_total(alibi, table, False) == 39  # 2 L - 1 distances
    assert sweep.in_range_total(alibi, {"format": "bin", "mode": "table"}, False) == 39
    assert sweep.in_range_total(alibi, graph, False) == 20
    assert sweep.in_range_total(alibi, {"format": "onnx", "mode": "table"}, False) == 20
    assert sweep.in_range_total(alibi, {"format": "c", "mode": "compute"}, False) == 20
    big, _ = _integer(5000, 1)
    assert sweep.in_range_total(big, table, True) == 4096
    assert sweep.in_range_total(big, table, False) == 5000
    assert sweep.in_range_total(big, graph, True) == 4096
    assert sweep.in_range_total(big, graph, False) == 5000
    assert sweep.in_range_total(resolve("binary-2d", 8), graph, False) == 64
    assert sweep.in_range_total(resolve("binary-2d", 300), graph, False) == 300
    monkeypatch.setattr(sweep, "GRID_LIMIT", 64)
    assert sweep.in_range_total(resolve("binary-2d", 8), graph, False) == 64  # 64 <= 64
    monkeypatch.setattr(sweep, "GRID_LIMIT", 63)
    assert sweep.in_range_total(resolve("binary-2d", 8), graph, False) == 8
    monkeypatch.setattr(sweep, "SWEEP_FULL", 100)
    monkeypatch.setattr(sweep, "SAMPLE_WIDTH", 8)
    sample = int(_sample_mask(1026, 8).sum())
    assert sweep.in_range_total(_integer(1026)[0], table, False) == sample
    assert sweep.in_range_total(_integer(1026)[0], graph, False) == sample
    assert sweep.in_range_total(_integer(100)[0], table, False) == 100  # 100 <= SWEEP_FULL
    assert sweep.in_range_total(_integer(100)[0], graph, False) == 100


# --- table_chunks and encoded_rows -------------------------------------------------------------

def test_a_table_of_the_wrong_shape_is_refused_naming_both():
    config, module = _integer(37)
    with pytest.raises(ArtifactError) as caught:
        list(sweep.table_chunks(config, module, (36, 2), False))
    assert str(caught.value) == ("the manifest's shape [36, 2] is not the table of scheme "
                                 "'integer' (expected [37, 2])")
    assert len(list(sweep.table_chunks(config, module, [37, 2], False))) == 1  # a list is fine


def test_table_chunks_are_row_ranges_with_their_reference_rows(monkeypatch):
    config, module = _integer(37)
    (chunk,) = sweep.table_chunks(config, module, (37, 2), False)
    assert chunk.feeds == {} and chunk.start == 0 and chunk.positions == 37
    assert chunk.progress == 37 and not chunk.probe
    np.testing.assert_array_equal(chunk.expected, _integer_pe(range(37), 37))
    assert chunk.where((5, 1)) == "row 5 column 1"
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", 10)  # 2 columns: 5 rows a chunk
    chunks = list(sweep.table_chunks(config, module, (37, 2), False))
    assert [(c.start, c.positions, c.progress) for c in chunks] == [
        (a, min(5, 37 - a), min(5, 37 - a)) for a in range(0, 37, 5)]
    np.testing.assert_array_equal(chunks[1].expected, _integer_pe(range(5, 10), 37))
    assert chunks[1].where((1, 0)) == "row 6 column 0"
    monkeypatch.setattr(sweep, "CHUNK_POSITIONS", 3)
    assert [c.start for c in sweep.table_chunks(config, module, (37, 2), False)] == list(
        range(0, 37, 3))
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", 1)
    assert [c.start for c in sweep.table_chunks(config, module, (37, 2), False)] == list(
        range(37))


def test_a_bias_table_row_is_named_by_its_distance():
    config, module = _alibi(4)
    (chunk,) = sweep.table_chunks(config, module, (7, 2), False)
    np.testing.assert_array_equal(chunk.expected, _alibi_bias(range(-3, 4), [0])[:, :, 0].T)
    assert chunk.where((1, 0)) == "row 1 (distance -2) head 0"
    assert chunk.where((6, 1)) == "row 6 (distance 3) head 1"


def test_quick_table_chunks_stop_at_4096_rows():
    config, module = _integer(5000, 1)
    chunks = list(sweep.table_chunks(config, module, (5000, 1), True))
    assert sum(c.positions for c in chunks) == 4096 and chunks[-1].start + chunks[-1].positions \
        == 4096


def test_encoded_rows_follow_the_documented_mapping():
    config, module = _integer(37)
    np.testing.assert_array_equal(sweep.encoded_rows(config, module, 3, 9),
                                  _integer_pe(range(3, 9), 37))
    alibi, module = _alibi(4)
    for start, stop in [(0, 7), (2, 5), (4, 7), (0, 2), (3, 4)]:
        rows = sweep.encoded_rows(alibi, module, start, stop)
        assert rows.dtype == np.float32 and rows.flags.c_contiguous
        distances = np.arange(start, stop) - 3
        np.testing.assert_array_equal(rows, _alibi_bias(distances, [0])[:, :, 0].T)
    b2d = resolve("binary-2d", 8)
    np.testing.assert_array_equal(sweep.encoded_rows(b2d, build(b2d), 0, 8),
                                  _bits(range(8), b2d.n_bits))
    for widths, width in [((2, 5, 3), 5), ((4, 2, 2), 4), ((2, 2, 4), 4)]:
        h = resolve("hierarchical", 8, params={"widths": widths})
        rows = sweep.encoded_rows(h, build(h), 2, 8)
        np.testing.assert_array_equal(rows, _bits(range(2, 8), width))


def test_a_bias_grid_past_16_grid_limits_is_swept_against_the_edge_keys(monkeypatch):
    monkeypatch.setattr(sweep, "GRID_LIMIT", 3)  # 7 x 7 = 49 cells > 3 * 16
    config, module = _alibi(7)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    _check_bias_chunk(chunks[0], range(7), [0, 6], False)
    assert chunks[1].probe
    monkeypatch.setattr(sweep, "GRID_LIMIT", 4)  # 49 <= 64: the grid
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    _check_bias_chunk(chunks[0], range(7), range(7), False)


def test_a_full_table_sweep_covers_every_row_past_4096():
    config, module = _integer(5000, 1)
    chunks = list(sweep.table_chunks(config, module, (5000, 1), False))
    assert sum(c.positions for c in chunks) == 5000


def test_a_one_column_table_takes_chunk_elements_rows_a_chunk(monkeypatch):
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", 6)
    config, module = _integer(13, 1)
    assert [c.start for c in sweep.table_chunks(config, module, (13, 1), False)] == [0, 6, 12]


def test_a_full_pe_sweep_covers_every_position_past_4096():
    config, module = _integer(5000, 1)
    chunks = list(sweep.onnx_chunks(config, module, COMPUTE, False))
    assert chunks[0].feeds["positions"].tolist() == list(range(5000))
    assert chunks[1].probe and len(chunks[1].feeds["positions"]) == len(
        sweep.probe_values(config, 2**24, 128))


def test_multi_index_chunks_hold_at_most_chunk_positions_rows(monkeypatch):
    monkeypatch.setattr(sweep, "CHUNK_POSITIONS", 3)
    config = resolve("binary-2d", 4)
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    _check_multi_chunk(chunks[0], [(0, 0), (0, 1), (0, 2)], False)


def test_a_one_position_multi_index_probe_holds_coordinate_0():
    config = resolve("binary-2d", 1)
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    probe = sweep.probe_values(config, None, 128)
    zero = np.zeros(len(probe), dtype=np.int64)
    expected = np.concatenate([np.stack([probe, zero], 1), np.stack([zero, probe], 1),
                               np.stack([probe, np.roll(probe, 1)], 1)])
    assert chunks[0].feeds["positions"].tolist() == [[0, 0]]
    assert chunks[1].feeds["positions"].tolist() == expected.tolist()


def test_a_one_column_multi_index_scheme_takes_chunk_elements_rows(monkeypatch):
    monkeypatch.setattr(sweep, "CHUNK_ELEMENTS", 3)
    config = resolve("hierarchical", 4, params={"widths": [1]})
    assert config.arity == 1 and config.d_model == 1
    chunks = list(sweep.onnx_chunks(config, build(config), COMPUTE, False))
    assert chunks[0].feeds["positions"].tolist() == [[0], [1], [2]]


@pytest.mark.parametrize("scheme, manifest", [
    (("integer", 37, 2, None), COMPUTE), (("alibi", 9, None, 2), COMPUTE),
    (("binary-2d", 4, None, None), COMPUTE), (("binary-2d", 300, None, None), COMPUTE),
    (("integer", 37, 2, None), {"format": "npy", "mode": "table", "dtype": "float32"})])
def test_the_progress_of_a_sweep_adds_up_to_its_total(scheme, manifest):
    """The bar's total (``in_range_total``) is what the chunks' progress adds up to: the
    single-position calls check again positions the sweep counted (before: 15 of 8)."""
    name, max_len, d_model, heads = scheme
    config = resolve(name, max_len, d_model=d_model, heads=heads)
    module = build(config)
    if manifest["mode"] == "table":
        from edgepe.graphs.table_values import table_shape

        chunks = sweep.table_chunks(config, module, table_shape(config), False)
    else:
        chunks = sweep.onnx_chunks(config, module, manifest, False)
    full = {"format": "onnx", **manifest}
    assert sum(c.progress for c in chunks) == sweep.in_range_total(config, full, False)


def test_a_full_rope_apply_sweep_covers_every_position_past_4096():
    config, module = _rope(5000, 2)
    chunks = list(sweep.onnx_chunks(config, module, {**COMPUTE, "shape": [2, 5000, 2]}, False,
                                    ("x", "positions")))
    assert chunks[0].feeds["positions"].tolist() == list(range(5000))



def test_a_quick_table_graph_probes_16_random_values_unlimited():
    config, module = _integer(37)
    chunks = list(sweep.onnx_chunks(config, module, {"mode": "table", "dtype": "float32"}, True))
    probe = sweep.probe_values(config, None, 16)
    assert chunks[1].feeds["positions"].tolist() == probe.tolist()
    assert len(sweep.probe_values(config, None, 17)) == len(probe) + 1  # a 17th would show


def test_a_uint8_graph_of_a_float_scheme_names_bits():
    config, module = _integer(8)
    chunks = list(sweep.onnx_chunks(config, module, {"mode": "compute", "dtype": "uint8"}, False))
    assert chunks[0].where((3, 1)) == "position 3 bit 1"


# --- unswept: what a numeric-only check leaves unvisited (issue 41) ------------------------------

def _m(mode="compute", fmt="onnx", policy=None, limit=None):
    return {"mode": mode, "format": fmt, "dtype": "float32",
            "positions": {"out_of_range": policy, **({"limit": limit} if limit else {})}}


def test_unswept_names_the_probe_and_the_in_range_sample():
    config = resolve("integer", 37, d_model=4)
    probe = len(sweep.probe_values(config, 2**24, 128))
    # integer's limit comes from the registry (2^24) when the manifest states none
    assert sweep.unswept(config, _m(), False) == (
        f"positions: only {probe} probe positions of those outside 0 .. 36 (|position| <= "
        f"{2**24}) compared")
    quick = len(sweep.probe_values(config, 2**24, 16))
    assert sweep.unswept(config, _m(), True).startswith(f"positions: only {quick} probe")
    # a table graph clamps every int64: the probe spans int64
    table = len(sweep.probe_values(config, None, 128))
    assert sweep.unswept(config, _m(mode="table"), False) == (
        f"positions: only {table} probe positions of those outside 0 .. 36 (int64) compared")
    assert "(int64)" in sweep.unswept(config, _m(policy="clamp"), False)
    assert "(|position| <= 40)" in sweep.unswept(config, _m(limit=40), False)
    # quick, past 4096: the in-range part is named too
    config = resolve("integer", 5000, d_model=4)
    assert sweep.unswept(config, _m(), True).startswith(
        "positions: only 4096 of the 5000 positions 0 .. 4999 and ")
    full = len(sweep.probe_values(config, 2**24, 128))
    assert sweep.unswept(config, _m(), False) == (
        f"positions: only {full} probe positions of those outside 0 .. 4999 (|position| <= "
        f"{2**24}) compared")
    # past SWEEP_FULL: the documented sample
    big = resolve("gray", 2**25)
    text = sweep.unswept(big, _m(), False)
    assert text.startswith(f"positions: only {len(sweep.sampled_positions(2**25))} of the "
                           f"{2**25} positions 0 .. {2**25 - 1} and ")


def test_unswept_is_none_for_a_table_file_read_whole():
    config = resolve("integer", 37, d_model=4)
    assert sweep.unswept(config, _m(mode="table", fmt="npy"), False) is None
    config = resolve("integer", 5000, d_model=4)
    assert sweep.unswept(config, _m(mode="table", fmt="npy"), False) is None
    assert sweep.unswept(config, _m(mode="table", fmt="bin"), True) == (
        "rows: 4096 of 5000 compared")


def test_a_tflite_bias_table_probes_up_to_its_manifest_limit():
    """A .tflite bias table subtracts int32 positions: unlike a clamping ONNX table it is defined
    only up to its manifest's limit, so its probe stays there."""
    config, module = _alibi(37)
    manifest = {"mode": "table", "format": "tflite", "dtype": "float32",
                "positions": {"out_of_range": "clamp", "limit": 100}}
    probe = next(c for c in sweep.onnx_chunks(config, module, manifest, False) if c.probe)
    assert probe.feeds["positions"].tolist() == sweep.probe_values(config, 100, 128).tolist()
    onnx_table = {**manifest, "format": "onnx"}
    probe = next(c for c in sweep.onnx_chunks(config, module, onnx_table, False) if c.probe)
    assert probe.feeds["positions"].tolist() == sweep.probe_values(config, None, 128).tolist()


def test_unswept_at_exactly_sweep_full_compares_every_position_or_row(monkeypatch):
    monkeypatch.setattr(sweep, "SWEEP_FULL", 5000)
    config = resolve("integer", 5000, d_model=4)
    assert sweep.unswept(config, _m(mode="table", fmt="npy"), False) is None
    assert "of the 5000 positions" not in sweep.unswept(config, _m(), False)
    config = resolve("integer", 5001, d_model=4)
    assert sweep.unswept(config, _m(mode="table", fmt="npy"), False) is not None
    assert "of the 5001 positions" in sweep.unswept(config, _m(), False)


def test_a_quick_unswept_counts_the_16_probe_values():
    config = resolve("integer", 37, d_model=4)
    quick = len(sweep.probe_values(config, None, 16))
    assert quick != len(sweep.probe_values(config, None, 17))
    assert sweep.unswept(config, _m(mode="table"), True) == (
        f"positions: only {quick} probe positions of those outside 0 .. 36 (int64) compared")
