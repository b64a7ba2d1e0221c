"""Completeness of the catalogue, and the registry's behaviour on bad input.

Every registered scheme needs a slow reference formula (``SLOW_FORMULAS`` in test_schemes.py)
and a tolerance; a float one also says why its tolerance is what it is. Adding a scheme
without them fails here (STYLE 9d).
"""

from __future__ import annotations

import math
import re

import pytest
from test_schemes import SLOW_FORMULAS

from edgepe.contract.errors import BadParameterError, UnknownSchemeError
from edgepe.schemes import SchemeSpec, _registry, build, get_class, get_spec, resolve, scheme_ids
from edgepe.schemes._registry import register

DEFAULT_WHY = SchemeSpec(id="x", source="x", summary="x").tolerance_why


def catalogue_gaps() -> list[str]:
    """What each registered scheme lacks: a slow formula, a valid tolerance, a reason for it."""
    gaps = []
    for scheme_id in scheme_ids():
        spec = get_spec(scheme_id)
        if scheme_id not in SLOW_FORMULAS:
            gaps.append(f"{scheme_id}: no slow reference formula in SLOW_FORMULAS")
        tol = spec.tolerance
        if not (isinstance(tol, tuple) and len(tol) == 2
                and all(isinstance(v, float | int) and math.isfinite(v) and v >= 0 for v in tol)):
            gaps.append(f"{scheme_id}: tolerance {tol!r} is not a pair (rtol, atol) >= 0")
        if spec.exact and tol != (0.0, 0.0):
            gaps.append(f"{scheme_id}: exact but tolerance {tol!r}")
        if not spec.exact and (not spec.tolerance_why.strip() or spec.tolerance_why == DEFAULT_WHY):
            gaps.append(f"{scheme_id}: float output without a tolerance_why of its own")
    gaps += [f"{s}: SLOW_FORMULAS names an unregistered scheme" for s in SLOW_FORMULAS
             if s not in scheme_ids()]
    return gaps


def test_every_registered_scheme_has_a_reference_test_and_a_tolerance():
    assert catalogue_gaps() == []
    assert len(scheme_ids()) == 23


def test_the_completeness_check_catches_a_scheme_without_them(monkeypatch):
    spec = SchemeSpec(id="triangle", source="nowhere", summary="a new scheme", tolerance=(0, 1e-6))
    monkeypatch.setitem(_registry._REGISTRY, "triangle", (spec, object))
    gaps = catalogue_gaps()
    assert "triangle: no slow reference formula in SLOW_FORMULAS" in gaps
    assert "triangle: float output without a tolerance_why of its own" in gaps


def test_registering_an_id_twice_raises():
    before = get_class("gray")
    with pytest.raises(RuntimeError, match="'gray' registered twice"):
        register(get_spec("gray"))(type("Impostor", (), {}))
    assert get_class("gray") is before


def test_unknown_scheme_suggests_and_lists():
    with pytest.raises(UnknownSchemeError) as err:
        resolve("grey", 16)
    message = str(err.value)
    assert "'grey'" in message and "Did you mean 'gray'?" in message
    assert all(scheme_id in message for scheme_id in scheme_ids())
    assert "\n" not in message
    with pytest.raises(UnknownSchemeError, match="Did you mean 'alibi'"):
        get_spec("alibl")


BAD = [
    # (scheme, max_len, keyword arguments, words the one-line message must contain)
    ("binary", 0, {}, ["max_len", "0"]),
    ("gray", -5, {}, ["max_len", "-5"]),
    ("gray", 2**41, {}, ["max_len"]),
    ("gray", True, {}, ["max_len"]),
    ("sinusoidal", 16, {"d_model": 0}, ["d_model", "0"]),
    ("binary", 16, {"d_model": -3}, ["d_model", "-3"]),
    ("alibi", 16, {"heads": 0}, ["heads", "0"]),
    ("sinusoidal", 16, {"d_model": 63}, ["even", "63"]),
    ("rope", 16, {"d_model": 7}, ["even", "7"]),
    ("sinusoidal-learned", 16, {"d_model": 5}, ["even", "5"]),
    ("fourier-binary", 16, {"d_model": 11}, ["even", "11"]),
    ("fourier-binary", 512, {"d_model": 10}, ["10", "at least 12"]),
    ("binary-bits", 512, {"d_model": 8}, ["8", "9 bits"]),  # guide 7.1: L = 512 needs 9
    ("gray", 1000, {"d_model": 3}, ["3", "10 bits"]),
    ("binary-signed", 100, {"d_model": 6}, ["6", "7 bits"]),
    ("binary-smooth", 100, {"d_model": 2}, ["2", "7"]),
    ("binary-gated", 100, {"d_model": 6}, ["6", "7"]),
    ("hybrid-int-binary", 100, {"d_model": 12}, ["bit half", "7"]),
    ("binary-2d", 100, {"d_model": 12}, ["d_model / 2", "7"]),
    ("binary-multilevel", 100, {"d_model": 10, "params": {"groups": 2}}, ["bits per group"]),
    ("binary-multilevel", 100, {"d_model": 22, "params": {"groups": 3}}, ["multiple", "3"]),
    ("hierarchical", 16, {"d_model": 10, "params": {"widths": "2,2,3"}}, ["sum(widths)", "7"]),
    ("hierarchical", 16, {"params": {"widths": "2,64"}}, ["63", "64"]),
    ("hierarchical", 16, {"params": {"widths": "2,0"}}, ["widths", ">= 1"]),
    ("hierarchical", 16, {"params": {"widths": "a,b"}}, ["widths", "integers"]),
    ("sinusoidal", 16, {"params": {"bse": 100}}, ["'bse'", "Did you mean 'base'", "base"]),
    ("gaussian", 16, {"params": {"sigm": 2}}, ["'sigm'", "Did you mean 'sigma'"]),
    ("gray", 16, {"params": {"c": 5}}, ["'c'", "Allowed: none"]),
    ("gaussian", 16, {"params": {"sigma": 0}}, ["sigma", ">="]),
    ("gaussian", 16, {"params": {"sigma": "1e-30"}}, ["sigma", "1e-30"]),
    ("gaussian", 16, {"params": {"sigma": 1e30}}, ["sigma", "<="]),
    ("binary-smooth", 16, {"params": {"c": 0}}, ["c", "> 0"]),
    ("binary-smooth", 16, {"params": {"c": "abc"}}, ["c", "number", "'abc'"]),
    ("integer", 16, {"params": {"C": "nan"}}, ["C", "finite"]),
    ("integer", 16, {"params": {"C": True}}, ["C", "True"]),
    ("integer", 16, {"params": {"C": 1e-45}}, ["C", ">="]),
    ("integer-multiscale", 16, {"params": {"alpha": -1}}, ["alpha", ">= 0"]),
    ("binary-multilevel", 16, {"params": {"groups": 0}}, ["groups", ">= 1"]),
    ("binary-multilevel", 16, {"params": {"groups": 2.5}}, ["groups", "integer"]),
    ("sinusoidal", 16, {"params": {"base": 1}}, ["base", "> 1"]),
    ("binary", 512, {"params": {"dropout": 1.5}}, ["dropout", "<= 1"]),
    ("alibi", 16, {"d_model": 64}, ["no d_model"]),
    ("gaussian", 16, {"d_model": 8}, ["no d_model"]),
    ("gray", 16, {"heads": 4}, ["no heads"]),
    ("learned", 2**30, {}, ["learned table", "GiB"]),
    ("sinusoidal-learned", 2**24, {"d_model": 64}, ["residual", "GiB"]),
    ("sinusoidal", 2**24 + 1, {"d_model": 8}, ["past where", "its cap is 16777216"]),  # issue 30
    ("binary", 2**40, {}, ["pe_binary", "GiB"]),
]


@pytest.mark.parametrize(("scheme_id", "max_len", "kw", "words"), BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_parameters_are_one_clear_line(scheme_id, max_len, kw, words):
    with pytest.raises(BadParameterError) as err:
        resolve(scheme_id, max_len, **kw)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_limits_are_inclusive():
    """The edges of each refused range are accepted, and build."""
    for scheme_id, max_len, kw in [
        ("binary-bits", 512, {"d_model": 10}), ("fourier-binary", 512, {"d_model": 12}),
        ("hierarchical", 16, {"params": {"widths": "63"}}), ("binary", 512, {"params": {
            "dropout": 1.0}}), ("gaussian", 16, {"params": {"sigma": 1e-6}}),
        ("integer", 16, {"params": {"C": 1e-30}}), ("integer-multiscale", 16, {"params": {
            "alpha": 0}}), ("binary-bits", 1, {}), ("learned", 2**20, {"d_model": 64}),
    ]:
        cfg = resolve(scheme_id, max_len, **kw)
        if max_len <= 2**16:
            build(cfg)


def test_the_catalogue_doc_has_a_true_row_for_every_scheme():
    """docs/readme/catalogue.md (the README's catalogue) names each scheme with its source,
    out-of-range policy and tolerance as the registry has them."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs/readme/catalogue.md").read_text()
    cells_of = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
                for line in doc.splitlines() if line.startswith("| `")]
    assert all(len(cells) == 7 for cells in cells_of), "a row with a stray (unescaped) pipe"
    rows = {cells[0].strip("`"): cells for cells in cells_of}
    assert sorted(rows) == sorted(scheme_ids())
    for scheme_id, cells in rows.items():
        spec = get_spec(scheme_id)
        rtol, atol = spec.tolerance
        tolerance = "exact" if (rtol, atol) == (0, 0) else ", ".join(
            f"{name} {value:g}".replace("e-0", "e-") for name, value in
            (("rtol", rtol), ("atol", atol)) if value)
        assert cells[1].startswith(spec.source), (scheme_id, cells[1], spec.source)
        assert cells[5] == spec.oob and cells[6] == tolerance, (scheme_id, cells[5:], tolerance)
