"""verify's comparison rule and its statistics at known values (edgepe.verify.compare; issue 33:
the mutmut survivors of that module). Every number below is worked out by hand in the comment
beside it: the tolerance rule ``|a - e| <= atol + rtol |e| (+ k fp16 spacings of |e|)``, the
error statistics over chunks, the first mismatches kept, the per-column counts, the median
sample's stride, and each line and dict a result prints.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgepe.verify import compare
from edgepe.verify.compare import CompareResult, Comparison, Mismatch, Tolerance


def _where(index) -> str:
    return "at " + ",".join(str(i) for i in index)


# ---- Tolerance ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("tolerance", "exact"), [
    (Tolerance(), True), (Tolerance(rtol=1e-9), False), (Tolerance(atol=1e-9), False),
    (Tolerance(fp16_ulps=1), False)])
def test_a_tolerance_is_exact_only_when_every_term_is_zero(tolerance, exact):
    assert tolerance.exact is exact
    assert (str(tolerance) == "exact") is exact


def test_allowed_is_atol_plus_rtol_times_the_magnitude():
    allowed = Tolerance(rtol=0.5, atol=0.25).allowed(np.array([-2.0, 4.0, 0.0]))
    assert allowed.tolist() == [1.25, 2.25, 0.25]  # 0.25 + 0.5 * |e|


def test_allowed_adds_whole_float16_spacings_of_the_magnitude():
    # float16 spacing is 2^-10 at 1, 1 at 1024 (and -1024), 2^-24 at 0 (the smallest subnormal)
    allowed = Tolerance(atol=0.5, fp16_ulps=3).allowed(np.array([1.0, -1024.0, 0.0]))
    assert allowed.tolist() == [0.5 + 3 * 2.0**-10, 0.5 + 3.0, 0.5 + 3 * 2.0**-24]


@pytest.mark.parametrize(("tolerance", "text"), [
    (Tolerance(atol=1e-3), "atol 0.001"),
    (Tolerance(rtol=1e-5), "rtol 1e-05"),
    (Tolerance(rtol=1e-5, atol=0.000123456), "atol 0.000123, rtol 1e-05"),
    (Tolerance(atol=1e-3, fp16_ulps=2), "atol 0.001, +2 fp16 ulp"),
    (Tolerance(fp16_ulps=1), "+1 fp16 ulp"),
    (Tolerance(atol=0.5, source="quant bound"), "atol 0.5 (quant bound)"),
    (Tolerance(atol=0.5, source="float32 default"), "atol 0.5"),
    (Tolerance(source="quant bound"), "exact"),
])
def test_a_tolerance_prints_its_nonzero_terms_and_a_quant_source(tolerance, text):
    assert str(tolerance) == text


def test_a_tolerance_as_a_dict():
    assert Tolerance(1e-5, 1e-6, 2, "quant").as_dict() == {
        "rtol": 1e-5, "atol": 1e-6, "fp16_ulps": 2, "source": "quant"}
    assert Tolerance().as_dict() == {"rtol": 0.0, "atol": 0.0, "fp16_ulps": 0,
                                     "source": "exact"}


def test_a_mismatch_prints_nine_significant_digits():
    assert str(Mismatch("row 3", 0.12345678912, -2.5)) == "row 3: got 0.123456789, expected -2.5"


# ---- CompareResult ------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "passed"), [
    ({"elements": 1}, True),
    ({"elements": 0}, False),  # nothing compared is not a pass
    ({"elements": 1, "mismatches": 1}, False),
    ({"elements": 1, "error": "no outputs"}, False),
    ({"elements": 1, "placement_error": "ran on CPU"}, False),
])
def test_a_result_passes_only_with_elements_and_no_mismatch_or_error(fields, passed):
    result = CompareResult("cpu", Tolerance(), **fields)
    assert result.passed is passed and bool(result) is passed


def test_a_result_prints_one_line():
    r = CompareResult("cpu", Tolerance(atol=1e-3), elements=12, positions=3, mismatches=0,
                      max_abs_err=0.000123456, mean_abs_err=2.5e-5, median_abs_err=0.0,
                      max_rel_err=0.5)
    assert str(r) == ("cpu: PASSED | 12 elements at 3 positions | max abs 0.000123, mean abs "
                      "2.5e-05, median abs 0, max rel 0.5 | tolerance atol 0.001 | 0 mismatching")
    r.mismatches = 2
    r.first_mismatches = [Mismatch("at 1,2", 1.0, 2.0), Mismatch("at 2,2", 3.0, 4.0)]
    r.placement_error = "2 nodes on CPU"
    assert str(r) == ("cpu: FAILED | 12 elements at 3 positions | max abs 0.000123, mean abs "
                      "2.5e-05, median abs 0, max rel 0.5 | tolerance atol 0.001 | 2 mismatching"
                      " (first: at 1,2: got 1, expected 2) | 2 nodes on CPU")
    assert str(CompareResult("ort", Tolerance(), elements=5, error="it crashed")) == (
        "ort: FAILED: it crashed")


def test_a_result_as_a_dict():
    r = CompareResult("cpu", Tolerance(atol=0.5), elements=4, positions=2, mismatches=1,
                      max_abs_err=1.0, mean_abs_err=0.25, median_abs_err=0.125, max_rel_err=2.0,
                      mean_rel_err=0.75, first_mismatches=[Mismatch("at 1", 1.0, 0.0)],
                      mismatches_by_column={3: 1, 0: 2}, placement={"cpu": {"CPU": 3}},
                      placement_note="note", placement_error=None, seconds=1.23456)
    assert r.as_dict() == {
        "runtime": "cpu", "passed": False, "max_abs_err": 1.0, "mean_abs_err": 0.25,
        "median_abs_err": 0.125, "max_rel_err": 2.0, "mean_rel_err": 0.75, "elements": 4,
        "positions": 2, "mismatches": 1,
        "first_mismatches": [{"where": "at 1", "actual": 1.0, "expected": 0.0}],
        "mismatches_by_column": {"0": 2, "3": 1},
        "tolerance": {"rtol": 0.0, "atol": 0.5, "fp16_ulps": 0, "source": "exact"},
        "error": None, "placement": {"cpu": {"CPU": 3}}, "placement_note": "note",
        "placement_error": None, "seconds": 1.235}
    assert list(r.as_dict()["mismatches_by_column"]) == ["0", "3"]  # sorted by column


# ---- Comparison ---------------------------------------------------------------------------------


def test_statistics_over_an_exact_chunk_and_an_inexact_one():
    c = Comparison("cpu", Tolerance(atol=0.5))
    # exact chunk: 4 elements, 3 of them nonzero and finite (they count for the mean rel error)
    c.update(np.array([[1.0, 2.0], [0.0, 4.0]]), np.array([[1.0, 2.0], [0.0, 4.0]]), _where, 2)
    # inexact chunk: errors 0.25, 1, 0, 3 against 1, 2, 0, -4 (rel 0.25, 0.5, -, 0.75)
    c.update(np.array([[1.25, 3.0], [0.0, -1.0]]), np.array([[1.0, 2.0], [0.0, -4.0]]), _where, 2)
    r = c.finish()
    assert (r.elements, r.positions, r.mismatches) == (8, 4, 2)  # 1 > 0.5 and 3 > 0.5
    assert r.max_abs_err == 3.0 and r.max_rel_err == 0.75
    assert r.mean_abs_err == (0.25 + 1 + 0 + 3) / 8
    assert r.mean_rel_err == (0.25 + 0.5 + 0.75) / (3 + 3)
    assert r.median_abs_err == 0.0  # four zeros of the exact chunk, 0, 0.25, 1, 3
    assert [str(m) for m in r.first_mismatches] == ["at 0,1: got 3, expected 2",
                                                    "at 1,1: got -1, expected -4"]
    assert r.mismatches_by_column == {1: 2}
    assert not r.passed


def test_the_median_is_over_every_error_kept():
    c = Comparison("cpu", Tolerance(atol=10.0))
    c.update(np.array([1.0, 2.0, 4.0]), np.array([0.0, 0.0, 0.0]), _where, 3)  # 1, 2, 4
    r = c.finish()
    assert (r.median_abs_err, r.mean_abs_err, r.mean_rel_err, r.max_rel_err) == (2.0, 7 / 3,
                                                                                 0.0, 0.0)
    assert r.passed


def test_the_tolerance_is_inclusive_at_its_edge():
    c = Comparison("cpu", Tolerance(rtol=0.5, atol=0.25))
    c.update(np.array([3.25, 3.5]), np.array([2.0, 2.0]), _where, 2)  # allowed 1.25 exactly
    assert c.result.mismatches == 1 and [m.where for m in c.result.first_mismatches] == ["at 1"]


def test_a_chunks_own_tolerance_overrides_the_results():
    c = Comparison("cpu", Tolerance())
    c.update(np.array([1.5]), np.array([1.0]), _where, 1, tolerance=Tolerance(atol=0.5))
    assert c.result.mismatches == 0
    c.update(np.array([1.5]), np.array([1.0]), _where, 1)
    assert c.result.mismatches == 1 and c.result.tolerance == Tolerance()


def test_nan_and_infinity_rules():
    c = Comparison("cpu", Tolerance(atol=1.0))
    actual = np.array([np.nan, np.nan, np.inf, 1.0, -np.inf])
    expected = np.array([np.nan, 0.0, np.inf, np.nan, np.inf])
    c.update(actual, expected, _where, 5)
    r = c.finish()
    # both NaN and equal infinities match; NaN on one side and opposite infinities do not
    assert r.mismatches == 3 and [m.where for m in r.first_mismatches] == ["at 1", "at 3",
                                                                          "at 4"]
    assert r.max_abs_err == np.inf and r.mean_abs_err == np.inf and r.max_rel_err == 0.0
    assert r.mean_rel_err == 0.0  # no nonzero finite expected value


def test_the_relative_error_of_a_nan_against_a_finite_value_is_infinite():
    c = Comparison("cpu", Tolerance(atol=1.0))
    c.update(np.array([np.nan, 2.0]), np.array([2.0, 2.0]), _where, 2)
    r = c.finish()
    assert r.max_rel_err == np.inf and r.mean_rel_err == np.inf


def test_a_shape_mismatch_counts_every_element_without_raising():
    c = Comparison("cpu", Tolerance())
    c.update(np.zeros((2, 3)), np.zeros((3, 2)), _where, 7)
    r = c.finish()
    assert (r.elements, r.positions, r.mismatches, r.max_abs_err) == (6, 7, 6, np.inf)
    (m,) = r.first_mismatches
    assert m.where == "output shape [2, 3], expected [3, 2]"
    assert np.isnan(m.actual) and np.isnan(m.expected)
    for _ in range(12):  # no more than FIRST_MISMATCHES locations kept
        c.update(np.zeros(1), np.zeros(2), _where, 1)
    assert compare.FIRST_MISMATCHES == 10 and len(c.result.first_mismatches) == 10


def test_first_mismatches_stop_at_ten_across_chunks_the_count_does_not():
    c = Comparison("cpu", Tolerance())
    c.update(np.ones(7), np.zeros(7), _where, 7)
    c.update(np.full(6, 2.0), np.zeros(6), lambda i: f"second {i[0]}", 6)
    r = c.finish()
    assert r.mismatches == 13 and len(r.first_mismatches) == 10
    assert [m.where for m in r.first_mismatches[6:]] == ["at 6", "second 0", "second 1",
                                                         "second 2"]
    # a 1-D output's last axis is its only one: each element counts as its own column
    assert r.mismatches_by_column == {0: 2, 1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 1}


def test_mismatches_are_counted_per_column_or_per_head():
    c = Comparison("cpu", Tolerance())
    expected = np.zeros((3, 4))
    actual = expected.copy()
    actual[0, 1] = actual[2, 1] = actual[1, 3] = 1.0
    c.update(actual, expected, _where, 3)
    assert c.result.mismatches_by_column == {1: 2, 3: 1}
    c.update(actual, expected, _where, 3)  # counts add up over chunks
    assert c.result.mismatches_by_column == {1: 4, 3: 2}
    heads = Comparison("cpu", Tolerance())
    bias = np.zeros((2, 3, 3))  # [H, N, M]: counted per head
    wrong = bias.copy()
    wrong[1, 0, 0] = wrong[1, 2, 1] = 1.0
    heads.update(wrong, bias, _where, 3)
    assert heads.result.mismatches_by_column == {1: 2}
    assert [m.where for m in heads.result.first_mismatches] == ["at 1,0,0", "at 1,2,1"]


def test_an_exact_run_has_zero_errors_and_counts_its_nonzero_elements():
    c = Comparison("cpu", Tolerance())
    c.update(np.array([0.0, 1.0, np.inf, 2.0]), np.array([0.0, 1.0, np.inf, 2.0]), _where, 4)
    assert c._rel_count == 2  # 1 and 2: nonzero and finite
    r = c.finish()
    assert (r.max_abs_err, r.mean_abs_err, r.median_abs_err, r.mean_rel_err) == (0, 0, 0, 0)
    assert r.passed and r.elements == 4


def test_fail_keeps_the_message_and_finish_of_nothing_is_zero():
    c = Comparison("ort", Tolerance())
    c.fail("the session could not be created")
    r = c.finish()
    assert r.error == "the session could not be created" and not r.passed
    assert (r.elements, r.mean_abs_err, r.mean_rel_err, r.median_abs_err) == (0, 0.0, 0.0, 0.0)


def test_the_median_sample_is_bounded_and_spread_evenly(monkeypatch):
    monkeypatch.setattr(compare, "MEDIAN_SAMPLE", 4)
    c = Comparison("cpu", Tolerance(atol=100.0))
    # errors 0 .. 9: room 4, stride ceil(10 / 4) = 3, so 0, 3, 6, 9 are kept
    c.update(np.arange(10.0), np.zeros(10), _where, 10)
    assert [s.tolist() for s in c._sample] == [[0.0, 3.0, 6.0, 9.0]] and c._sampled == 4
    c.update(np.full(3, 50.0), np.zeros(3), _where, 3)  # no room left: not kept
    assert c._sampled == 4
    assert c.finish().median_abs_err == 4.5  # median of 0, 3, 6, 9


def test_the_median_sample_fills_the_room_left(monkeypatch):
    monkeypatch.setattr(compare, "MEDIAN_SAMPLE", 5)
    c = Comparison("cpu", Tolerance(atol=100.0))
    c.update(np.array([1.0, 2.0]), np.zeros(2), _where, 2)  # room 5: both kept
    c.update(np.arange(10.0, 16.0), np.zeros(6), _where, 6)  # room 3: stride 2 -> 10, 12, 14
    assert [s.tolist() for s in c._sample] == [[1.0, 2.0], [10.0, 12.0, 14.0]]
    c2 = Comparison("cpu", Tolerance())
    c2.update(np.zeros(8), np.zeros(8), _where, 8)  # an exact chunk keeps min(8, 5) zeros
    assert c2._sampled == 5
    c2.update(np.zeros(0), np.zeros(0), _where, 0)  # an empty chunk keeps nothing
    assert len(c2._sample) == 1


def test_counts_and_sums_add_up_over_chunks_of_every_kind():
    c = Comparison("cpu", Tolerance(atol=10.0))
    assert c.result.runtime == "cpu" and c.result.tolerance == Tolerance(atol=10.0)
    c.update(np.array([1.0, 2.0, np.inf]), np.array([1.0, 2.0, np.inf]), _where, 3)  # exact
    c.update(np.array([5.0]), np.array([5.0]), _where, 1)  # exact again: 1 + 2 nonzero so far
    c.update(np.array([2.0, 0.0]), np.array([1.0, 0.0]), _where, 2)  # error 1 (rel 1), 0
    c.update(np.array([7.0, 4.0]), np.array([4.0, 4.0]), _where, 2)  # error 3 (rel 0.75), 0
    c.update(np.zeros(2), np.zeros(3), _where, 5)  # a wrong shape: 3 bad elements
    c.update(np.zeros(4), np.zeros(1), _where, 4)  # and another: 1 more
    r = c.finish()
    assert (r.elements, r.positions, r.mismatches) == (3 + 1 + 2 + 2 + 3 + 1, 17, 4)
    assert r.mean_abs_err == (1.0 + 3.0) / 12
    assert r.mean_rel_err == (1.0 + 0.75) / (2 + 1 + 1 + 2)  # nonzero finite expected values


def test_the_median_sample_takes_one_error_when_one_place_is_left(monkeypatch):
    monkeypatch.setattr(compare, "MEDIAN_SAMPLE", 5)
    c = Comparison("cpu", Tolerance(atol=100.0))
    c.update(np.arange(1.0, 5.0), np.zeros(4), _where, 4)  # 4 kept, room 1
    c.update(np.array([7.0, 8.0, 9.0]), np.zeros(3), _where, 3)  # stride 3: 7 only
    assert [s.tolist() for s in c._sample] == [[1.0, 2.0, 3.0, 4.0], [7.0]]
    assert c._sampled == 5
    c.update(np.array([50.0]), np.zeros(1), _where, 1)  # full: not kept
    assert c._sampled == 5 and c.finish().median_abs_err == 3.0


def test_infinities_and_overflow_compare_without_numpy_warnings():
    import warnings

    c = Comparison("cpu", Tolerance(rtol=1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf and 1e308 - -1e308 warn unless silenced
        c.update(np.array([np.inf, 1e308, -np.inf]), np.array([-np.inf, -1e308, 0.0]), _where, 3)
        c.update(np.array([np.inf, 1.0]), np.array([np.inf, 2.0]), _where, 2)  # inf - inf: nan
    assert c.result.mismatches == 4 and c.result.max_abs_err == np.inf


@pytest.mark.parametrize("tolerance", [Tolerance(rtol=1e-3), Tolerance(atol=1.0),
                                       Tolerance(rtol=1e-3, atol=1.0, fp16_ulps=2)])
def test_an_infinite_expected_value_matches_only_itself(tolerance):
    """Real bug found by the mutation run (issue 33): with rtol > 0 the allowance of an infinite
    expected value was inf, so ANY actual value (0, +inf for -inf) passed against it."""
    c = Comparison("cpu", tolerance)
    c.update(np.array([0.0, np.inf, -np.inf, np.inf, -1e30]),
             np.array([-np.inf, -np.inf, -np.inf, np.inf, -np.inf]), _where, 5)
    assert [m.where for m in c.result.first_mismatches] == ["at 0", "at 1", "at 4"]
