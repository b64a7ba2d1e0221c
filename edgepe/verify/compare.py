"""Comparing an artifact's outputs with the reference: chunk by chunk, into one result.

Comparisons return results; they never raise (STYLE 5, after Polygraphy's ``OutputCompareResult``):
a ``CompareResult`` holds max/mean/median absolute and relative error, the number of mismatching
elements and where the first ones are, is truthy when it passed and prints itself in one line.
The CLI turns a failed result into exit code 1; ``report`` only renders.

An element mismatches when ``|actual - expected| > atol + rtol * |expected|`` (numpy's
``isclose`` rule), or when exactly one side is NaN, or when the expected value is infinite and
the actual one is not that same infinity; equal values (infinities, equal NaNs) always match.
With ``(0, 0)`` that is plain equality, the rule for integer and bit outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FIRST_MISMATCHES = 10  # locations kept for the report; the count covers them all
MEDIAN_SAMPLE = 1 << 20  # errors kept to take the median from (all of them when fewer)


@dataclass(frozen=True)
class Tolerance:
    """``|a - e| <= atol + rtol |e|``; ``fp16_ulps`` adds that many float16 spacings of ``|e|``.

    The float16 term covers an output stored as float16 whose float32 value was within
    ``(rtol, atol)``: rounding both sides to float16 can then land one float16 step apart.
    """

    rtol: float = 0.0
    atol: float = 0.0
    fp16_ulps: int = 0
    source: str = "exact"

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0 and self.fp16_ulps == 0

    def allowed(self, expected: np.ndarray) -> np.ndarray | float:
        allowed = self.atol + self.rtol * np.abs(expected)
        if self.fp16_ulps:
            step = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float64)
            allowed = allowed + self.fp16_ulps * step
        return allowed

    def __str__(self) -> str:
        if self.exact:
            return "exact"
        parts = []
        if self.atol:
            parts.append(f"atol {self.atol:.3g}")
        if self.rtol:
            parts.append(f"rtol {self.rtol:.3g}")
        if self.fp16_ulps:
            parts.append(f"+{self.fp16_ulps} fp16 ulp")
        text = ", ".join(parts)
        return f"{text} ({self.source})" if self.source.startswith("quant") else text

    def as_dict(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "fp16_ulps": self.fp16_ulps,
                "source": self.source}


@dataclass(frozen=True)
class Mismatch:
    """One element that differs: where (in words and as an index), and both values."""

    where: str
    actual: float
    expected: float

    def __str__(self) -> str:
        return f"{self.where}: got {self.actual:.9g}, expected {self.expected:.9g}"


@dataclass
class CompareResult:
    """The comparison of one runtime's outputs with the reference over every checked element.

    ``error`` is set when the runtime could not produce outputs at all (then nothing was
    compared); ``placement_error`` when ``--strict-placement`` refused where the nodes ran.
    Truthy iff it passed.
    """

    runtime: str
    tolerance: Tolerance
    elements: int = 0
    positions: int = 0
    mismatches: int = 0
    max_abs_err: float = 0.0
    mean_abs_err: float = 0.0
    median_abs_err: float = 0.0
    max_rel_err: float = 0.0
    mean_rel_err: float = 0.0
    first_mismatches: list[Mismatch] = field(default_factory=list)
    # mismatching elements per output column (per head for bias outputs [H, N, M])
    mismatches_by_column: dict[int, int] = field(default_factory=dict)
    error: str | None = None
    placement: dict[str, dict[str, int]] | None = None
    placement_note: str | None = None
    placement_error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return (self.error is None and self.placement_error is None and self.mismatches == 0
                and self.elements > 0)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        if self.error is not None:
            return f"{self.runtime}: {verdict}: {self.error}"
        text = (
            f"{self.runtime}: {verdict} | {self.elements} elements at {self.positions} positions | "
            f"max abs {self.max_abs_err:.3g}, mean abs {self.mean_abs_err:.3g}, "
            f"median abs {self.median_abs_err:.3g}, max rel {self.max_rel_err:.3g} | "
            f"tolerance {self.tolerance} | {self.mismatches} mismatching"
        )
        if self.first_mismatches:
            text += f" (first: {self.first_mismatches[0]})"
        if self.placement_error:
            text += f" | {self.placement_error}"
        return text

    def as_dict(self) -> dict:
        return {
            "runtime": self.runtime,
            "passed": self.passed,
            "max_abs_err": self.max_abs_err,
            "mean_abs_err": self.mean_abs_err,
            "median_abs_err": self.median_abs_err,
            "max_rel_err": self.max_rel_err,
            "mean_rel_err": self.mean_rel_err,
            "elements": self.elements,
            "positions": self.positions,
            "mismatches": self.mismatches,
            "first_mismatches": [
                {"where": m.where, "actual": m.actual, "expected": m.expected}
                for m in self.first_mismatches
            ],
            "mismatches_by_column": {str(k): v for k, v in
                                     sorted(self.mismatches_by_column.items())},
            "tolerance": self.tolerance.as_dict(),
            "error": self.error,
            "placement": self.placement,
            "placement_note": self.placement_note,
            "placement_error": self.placement_error,
            "seconds": round(self.seconds, 3),
        }


class Comparison:
    """Accumulates chunks of (actual, expected) into one ``CompareResult`` in bounded memory."""

    def __init__(self, runtime: str, tolerance: Tolerance) -> None:
        self.result = CompareResult(runtime, tolerance)
        self._abs_sum = 0.0
        self._rel_sum = 0.0
        self._rel_count = 0
        self._sample: list[np.ndarray] = []
        self._sampled = 0

    def update(
        self,
        actual: np.ndarray,
        expected: np.ndarray,
        where: Callable[[tuple[int, ...]], str],
        positions: int,
        tolerance: Tolerance | None = None,
    ) -> None:
        """Compare one chunk; ``where(index)`` names an element of it for the report.

        ``tolerance`` overrides the result's for this chunk (the extrapolation probe of an int8
        graph whose proven bound over all positions is wider than over ``0 .. max_len - 1``).
        """
        r = self.result
        tolerance = tolerance or r.tolerance
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        if actual.shape != expected.shape:
            # A wrong shape is a failed comparison, not a crash: every element counts as bad.
            r.mismatches += int(expected.size)
            r.elements += int(expected.size)
            r.positions += positions
            if len(r.first_mismatches) < FIRST_MISMATCHES:
                r.first_mismatches.append(
                    Mismatch(f"output shape {list(actual.shape)}, expected "
                             f"{list(expected.shape)}", float("nan"), float("nan"))
                )
            r.max_abs_err = float("inf")
            return
        if np.array_equal(actual, expected):  # the common case of exact outputs: no error at all
            r.elements += int(expected.size)
            r.positions += positions
            self._rel_count += int(np.count_nonzero((expected != 0) & np.isfinite(expected)))
            self._keep_for_median(np.zeros(min(expected.size, MEDIAN_SAMPLE)))
            return
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - e)
            same = (a == e) | (np.isnan(a) & np.isnan(e))
            diff[same] = 0.0
            # an infinite expected value matches only itself: its allowance atol + rtol * inf
            # is inf (or nan), which would otherwise pass any value against it
            bad = ~same & (~(diff <= tolerance.allowed(e)) | ~np.isfinite(e))
            nonzero = (e != 0) & np.isfinite(e)
            rel = np.where(nonzero, diff / np.where(nonzero, np.abs(e), 1.0), 0.0)
        diff_finite = np.where(np.isnan(diff), np.inf, diff)
        r.elements += int(e.size)
        r.positions += positions
        if e.size:
            r.max_abs_err = max(r.max_abs_err, float(diff_finite.max()))
            r.max_rel_err = max(r.max_rel_err, float(np.nan_to_num(rel, nan=np.inf).max()))
        self._abs_sum += float(diff_finite.sum())
        self._rel_sum += float(np.nan_to_num(rel, nan=np.inf)[nonzero].sum())
        self._rel_count += int(nonzero.sum())
        count = int(bad.sum())
        if count:
            r.mismatches += count
            axis = 0 if bad.ndim == 3 else bad.ndim - 1
            per_column = np.count_nonzero(bad, axis=tuple(i for i in range(bad.ndim)
                                                          if i != axis))
            for column in np.flatnonzero(per_column):
                r.mismatches_by_column[int(column)] = (
                    r.mismatches_by_column.get(int(column), 0) + int(per_column[column]))
            for index in np.argwhere(bad)[: FIRST_MISMATCHES - len(r.first_mismatches)]:
                idx = tuple(int(i) for i in index)
                r.first_mismatches.append(Mismatch(where(idx), float(a[idx]), float(e[idx])))
        self._keep_for_median(diff_finite.ravel())

    def _keep_for_median(self, errors: np.ndarray) -> None:
        room = MEDIAN_SAMPLE - self._sampled
        if room <= 0 or not errors.size:
            return
        if errors.size > room:  # an even stride over the chunk keeps the sample spread out
            errors = errors[:: -(-errors.size // room)]
        self._sample.append(errors.copy())
        self._sampled += errors.size

    def fail(self, message: str) -> None:
        """The runtime could not produce outputs: the result fails with ``message``."""
        self.result.error = message

    def finish(self) -> CompareResult:
        r = self.result
        if r.elements:
            r.mean_abs_err = self._abs_sum / r.elements
        if self._rel_count:
            r.mean_rel_err = self._rel_sum / self._rel_count
        if self._sample:
            r.median_abs_err = float(np.median(np.concatenate(self._sample)))
        return r
