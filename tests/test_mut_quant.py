"""``edgepe.graphs.quant``'s helpers at their edges (issue 33): the scales where float32 leaves its
normal range, float16 scales at both ends of theirs, the per-tensor manifest section, the bound
check at equality, the table measure over N-D chunks, and the export note of a sliced graph.

Expected values are exact numbers derived here: powers of two, ``m / 127`` in Python's float64
(exact for the values chosen), the float16 range ``[2^-14, 65504]`` from IEEE 754.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgepe.graphs import quant

TINY = float(np.finfo(np.float32).tiny)  # 2^-126, float32's smallest normal


def _smallest_float32_at_least(x: float) -> np.float32:
    s = np.float32(x)
    return s if float(s) >= x else np.nextafter(s, np.float32(np.inf))


def test_subnormal_scales_round_up_so_nothing_clips():
    """m = 127 x 2^-140 x 1.2: m / 127 = 614.4 x 2^-149 lies between two float32 subnormals
    (steps of 2^-149) and the nearest, 614, is below it; the scale is 615 x 2^-149, so
    round(m / s) <= 127."""
    m = 127 * 2.0**-140 * 1.2
    nearest = np.float32(m / 127)
    assert float(nearest) < m / 127  # this m is one that rounds down
    s = quant.scales(np.array([m]))
    assert s.dtype == np.float32
    assert s[0] == _smallest_float32_at_least(m / 127) == np.float32(615 * 2.0**-149)
    assert np.abs(quant.quantize(np.array([m, -m]), s)).max() == 127


def test_an_exact_subnormal_scale_is_kept():
    """m / 127 = 2^-140 exactly (a float32 subnormal): no rounding, no step up."""
    assert quant.scales(np.array([127 * 2.0**-140]))[0] == np.float32(2.0**-140)


def test_normal_scales_are_rounded_to_nearest_even_at_the_smallest_normal():
    """m / 127 = 2^-126 (1 + 2^-30): its nearest float32 is 2^-126 itself (below it), and being
    normal it is kept as onnxruntime computes it (within u relative: the proof holds)."""
    m = 127 * TINY * (1 + 2.0**-30)
    assert quant.scales(np.array([m]))[0] == np.float32(TINY)


def test_zero_channels_get_scale_one():
    s = quant.scales(np.array([0.0, 127.0]))
    np.testing.assert_array_equal(s, np.array([1.0, 1.0], np.float32))
    h = quant.half_scales(np.array([0.0, 254.0]))
    assert h is not None and h.dtype == np.float16
    np.testing.assert_array_equal(h, np.array([1.0, 2.0], np.float16))


@pytest.mark.parametrize("scale, fits", [
    (2.0**-14, True),  # float16's smallest normal: in range
    (2.0**-14 * (1 - 2.0**-20), False),
    (65504.0, True),  # float16's largest finite
    (65504.5, False),
    (65505.0, False),
])
@pytest.mark.filterwarnings("error::RuntimeWarning")  # 65504's next float16 is inf: no warning
def test_half_scales_cover_exactly_float16s_normal_range(scale, fits):
    h = quant.half_scales(np.array([127 * scale, 127.0]))
    if not fits:
        assert h is None
        return
    assert h is not None and float(h[0]) == scale and float(h[1]) == 1.0


def test_half_scales_round_up():
    """m / 127 = 1 + 2^-12 lies between float16 1 and 1 + 2^-10 (nearer 1): the scale is
    1 + 2^-10, never below m / 127."""
    h = quant.half_scales(np.array([127 * (1 + 2.0**-12)]))
    assert float(h[0]) == 1 + 2.0**-10


def test_dequantize_is_one_float32_rounding_whatever_the_scales_type():
    q = np.array([[127, -3], [1, 0]], np.int8)
    out = quant.dequantize(q, [0.1, 1 / 3])
    assert out.dtype == np.float32
    expected = q.astype(np.float32) * np.array([0.1, 1 / 3], np.float32)
    np.testing.assert_array_equal(out, expected)


def test_absmax_is_per_last_axis_for_chunks_of_any_rank():
    chunk = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12  # -12 .. 11
    np.testing.assert_array_equal(quant.absmax([chunk]), [12, 11, 10, 11])
    np.testing.assert_array_equal(quant.absmax([chunk], "tensor"), [12])


def test_measure_table_per_tensor_uses_one_scale_over_every_column():
    table = np.array([[1.0, -0.25], [0.5, 127.0]], np.float32)
    tq = quant.measure_table("tensor", lambda: iter([table[:1], table[1:]]))
    np.testing.assert_array_equal(tq.scale, np.array([1.0], np.float32))
    assert (tq.rows, tq.cols) == (2, 2)
    # 1.0 -> 1, 0.5 -> 0 (ties to even: error 0.5), -0.25 -> 0, 127 -> 127
    assert tq.max_abs_err == 0.5


def test_measure_table_counts_columns_of_the_last_axis():
    chunk = np.ones((2, 3, 5), np.float32)
    tq = quant.measure_table("channel", lambda: iter([chunk]))
    assert (tq.rows, tq.cols) == (2, 5)


def _section(granularity, scale, err, bound):
    return quant.quant_section(granularity, np.asarray(scale, np.float32), axis=1,
                               max_abs_err=err, bound=bound, bound_why="why",
                               measured_over="rows", float32_bytes=8, int8_bytes=2)


def test_per_tensor_section_holds_one_scale_and_no_axis():
    section = _section("tensor", [0.5], 0.1, [0.25])
    assert section["scale"] == 0.5 and section["axis"] is None
    assert section["bound"] == 0.25 and section["bound_per_channel"] is None
    channel = _section("channel", [0.5, 0.25], 0.1, [0.25, 0.125])
    assert channel["scale"] == [0.5, 0.25] and channel["axis"] == 1
    assert channel["bound_per_channel"] == [0.25, 0.125] and channel["bound"] == 0.25


def test_an_error_equal_to_the_bound_passes_and_one_above_does_not():
    assert _section("channel", [0.5], 0.25, [0.25])["max_abs_err"] == 0.25
    with pytest.raises(AssertionError, match="exceeds the proven bound"):
        _section("channel", [0.5], np.nextafter(0.25, 1), [0.25])


def test_export_note_of_a_sliced_graph_names_its_float32_slice_tables():
    manifest = {"scheme": "rope", "mode": "sliced", "quant": {"bytes_of": quant.OUTPUT_ROW}}
    assert quant.export_note(manifest) == (
        "note: rope's sliced graph keeps its float32 slice tables; int8 quantises its output "
        "(error bounded, Q/DQ nodes added: the file grows)")
    manifest["mode"] = "compute"
    assert quant.export_note(manifest).startswith("note: rope's compute graph stores no weights")
    assert quant.export_note({"quant": {"bytes_of": "table"}}) is None


def test_export_note_of_mrope_points_to_no_table():
    """mrope has no table mode (issue 40): its note ends without the table's pointer."""
    manifest = {"scheme": "mrope", "mode": "compute", "quant": {"bytes_of": quant.OUTPUT_ROW}}
    assert quant.export_note(manifest) == (
        "note: mrope's compute graph stores no weights, so int8 quantises its output (error "
        "bounded, Q/DQ nodes added: the file grows)")
    manifest["scheme"] = "t5-bias"
    assert quant.export_note(manifest).endswith("; for a small int8 artifact use --mode table "
                                                "--quantize int8")
