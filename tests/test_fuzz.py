"""Fuzzing the two ways data gets in: the export command's parameters and ``encode``'s inputs.

Whatever hypothesis draws, the outcome is a success or a clean refusal (an ``EdgepeError``, or
exit 2 with one line): never a traceback, never an internal error, never a half-written file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from edgepe.contract.errors import EdgepeError
from edgepe.schemes import scheme_ids

junk = st.text(alphabet="abcxyz-_=,.0123456789 ", min_size=0, max_size=8)
sizes = st.one_of(
    st.integers(1, 80), st.integers(1, 80),
    st.sampled_from([-3, 0, 255, 256, 511, 512, 2**40, 2**41]),
)
params = st.dictionaries(
    st.sampled_from(["c", "groups", "C", "alpha", "widths", "base", "sigma", "dropout", "nope"]),
    st.one_of(st.integers(1, 5).map(str), st.sampled_from(["0.5", "2,3", "-1", "1e400", "nan"]),
              junk),
    max_size=1,
)


def rarely(values: st.SearchStrategy) -> st.SearchStrategy:
    """An option left out two times in three, so most draws stay near the valid region."""
    return st.one_of(st.none(), st.none(), values)


@st.composite
def export_args(draw) -> list[str]:
    scheme = draw(st.sampled_from([*scheme_ids(), "grey", "", "binary "]))
    args = ["--scheme", scheme, "--max-len", str(draw(sizes))]
    for flag, values in (
        ("--d-model", sizes.map(str)),
        ("--heads", st.integers(-1, 12).map(str)),
        ("--mode", st.sampled_from(["compute", "table", "tabel"])),
        ("--format", st.sampled_from(["onnx", "onnx", "npy", "bin", "c", "tflite"])),
        ("--dtype", st.sampled_from(["float32", "float16", "uint8", "bit", "int4"])),
        ("--quantize", st.sampled_from(["none", "int8", "int8", "int4"])),
        ("--lowering", st.sampled_from(["bitwise", "arith", "magic"])),
        ("--opset", st.sampled_from(["11", "18", "19", "21", "99"])),
    ):
        value = draw(rarely(values))
        if value is not None:
            args += [flag, value]
    for key, value in draw(params).items():
        args += ["--param", f"{key}={value}"]
    return args


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(args=export_args())
def test_export_parameters_succeed_or_refuse_cleanly(args, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    out = folder / "artifact.out"
    result = CliRunner().invoke(app, ["export", *args, "--out", str(out), "--no-verify"])
    assert "Traceback" not in result.output and "internal error" not in result.output, (
        args, result.output)
    assert result.exit_code in (0, 2), (args, result.output)
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        assert len([x for x in result.stderr.splitlines() if x.strip()]) == 1, result.stderr
        assert list(folder.iterdir()) == []
    else:
        manifest = json.loads(Path(str(out) + ".json").read_text())
        assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()


ARTIFACTS = [
    ["--scheme", "gray", "--max-len", "64"],
    ["--scheme", "sinusoidal", "--max-len", "64", "--d-model", "8"],
    ["--scheme", "binary-2d", "--max-len", "16", "--mode", "table"],
    ["--scheme", "learned", "--max-len", "16", "--d-model", "4"],
]


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rt")
    loaded = []
    for i, args in enumerate(ARTIFACTS):
        out = folder / f"a{i}.onnx"
        result = CliRunner().invoke(app, ["export", *args, "--out", str(out), "--no-verify"])
        assert result.exit_code == 0, result.output
        loaded.append(edgepe.load(out))
    return loaded


positions = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6).map(lambda v: np.array(v, np.int64)),
    st.lists(st.integers(-5, 70), max_size=6).map(lambda v: np.array(v, np.int32)),
    st.lists(st.floats(allow_nan=True), max_size=4).map(lambda v: np.array(v, np.float64)),
    st.lists(st.booleans(), max_size=4).map(lambda v: np.array(v, bool)),
    st.lists(st.lists(st.integers(-3, 40), min_size=1, max_size=3), min_size=1, max_size=3)
    .filter(lambda rows: len({len(r) for r in rows}) == 1).map(lambda v: np.array(v, np.int64)),
    st.integers(-10, 10).map(np.int64),
    st.just(np.zeros((2, 2, 2), np.int64)),
    st.just("0:4"),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(ARTIFACTS) - 1), value=positions)
def test_encode_inputs_succeed_or_refuse_cleanly(runtimes, which, value):
    runtime = runtimes[which]
    try:
        out = runtime.encode(value)
    except EdgepeError as exc:
        assert str(exc) and "\n" not in str(exc)
        event("refused")
        return
    event("encoded")
    array = np.asarray(value)
    assert array.dtype.kind in "iu", (value, out)
    assert out.shape[0] == array.shape[0]
    assert np.isfinite(out).all()
