"""``edgepe run``: positions syntax, printed tables, npy/csv output, errors; CliRunner and a real
subprocess of the installed script."""

from __future__ import annotations

import csv
import os
import re
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from edgepe.cli.run_cmd import parse_positions
from edgepe.contract.errors import PositionError
from edgepe.export import ExportConfig, export
from edgepe.schemes import resolve


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    made = {}
    for name, scheme, max_len, d_model, mode, fmt in (
        ("gray", "gray", 64, None, "compute", "onnx"),
        ("binary", "binary", 64, 64, "compute", "onnx"),
        ("sin", "sinusoidal", 64, 8, "table", "npy"),
        ("b2d", "binary-2d", 16, None, "compute", "onnx"),
        ("alibi", "alibi", 16, None, "compute", "onnx"),
    ):
        out = root / f"{name}.{fmt}"
        export(ExportConfig(scheme=resolve(scheme, max_len, d_model=d_model), mode=mode,
                            format=fmt, out=out))
        made[name] = out
    return made


def _run(*args):
    return CliRunner().invoke(app, list(map(str, args)))


def _table(stdout: str) -> list[list[str]]:
    """The printed table's rows (lines that start with a number), split on whitespace."""
    return [line.split() for line in stdout.splitlines() if re.match(r"\s*-?\d", line)]


def _one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("text", "arity", "expected"),
    [
        ("0:4", None, [0, 1, 2, 3]),
        ("0,5,9", None, [0, 5, 9]),
        ("0:4,10,20:26:3", None, [0, 1, 2, 3, 10, 20, 23]),
        ("-3:0", None, [-3, -2, -1]),
        ("5:0:-2", None, [5, 3, 1]),
        ("[3, 1, 4]", None, [3, 1, 4]),
        ("0:2,5:7", 2, [[0, 5], [0, 6], [1, 5], [1, 6]]),
        ("3,0:2", 2, [[3, 0], [3, 1]]),
        ("[[1, 2], [3, 4]]", 2, [[1, 2], [3, 4]]),
    ],
)
def test_positions_syntax(text, arity, expected):
    got = parse_positions(text, arity)
    assert got.dtype == np.int64
    assert got.tolist() == expected


@pytest.mark.parametrize(
    ("text", "arity", "match"),
    [
        ("0.5:3", None, "not an integer"),
        ("a", None, "not an integer"),
        ("4:0", None, "selects no positions"),
        ("0:4:0", None, "STEP 0"),
        ("1:2:3:4", None, "more than START:STOP:STEP"),
        ("0:4", 2, "takes 2 coordinates"),
        ("0:100000000", None, "at most 16777216"),
        ("[1.5]", None, "must be integers"),
        ("[1, ", None, "not valid JSON"),
    ],
)
def test_positions_syntax_errors(text, arity, match):
    with pytest.raises(PositionError, match=match) as exc:
        parse_positions(text, arity)
    assert "\n" not in str(exc.value)


def test_prints_the_encodings(arts):
    result = _run("run", arts["gray"], "--positions", "0:8")
    assert result.exit_code == 0, result.output
    rows = _table(result.stdout)
    want = edgepe.load(arts["gray"]).encode(np.arange(8))
    assert [int(r[0]) for r in rows] == list(range(8))
    assert np.array([[int(v) for v in r[1:]] for r in rows]).tolist() == want.astype(int).tolist()
    assert "gray (compute onnx, float32): [8, 7]" in result.stdout


def test_wide_and_long_tables_are_cut_and_say_so(arts):
    result = _run("run", arts["binary"], "--positions", "0:64")
    assert result.exit_code == 0, result.output
    rows = _table(result.stdout)
    assert len(rows) == 40  # 20 first and 20 last
    assert rows[0][0] == "0" and rows[-1][0] == "63"
    assert "…" in result.stdout and "⋮" in result.stdout
    assert re.search(r"showing 40 of 64 rows and \d+ of 64 columns", result.stdout)
    want = edgepe.load(arts["binary"]).encode(np.array([63]))[0]
    assert float(rows[-1][-1]) == pytest.approx(float(want[-1]), abs=5e-5)


def test_multi_index_grid_and_bias(arts):
    result = _run("run", arts["b2d"], "--positions", "1:3,4")
    assert result.exit_code == 0, result.output
    rows = _table(result.stdout)
    assert [r[:2] for r in rows] == [["1", "4"], ["2", "4"]]
    want = edgepe.load(arts["b2d"]).encode(np.array([[1, 4], [2, 4]]))
    assert np.array([[int(v) for v in r[2:]] for r in rows]).tolist() == want.astype(int).tolist()

    result = _run("run", arts["alibi"], "-p", "0:2", "--key-positions", "0:3")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("bias[") == 8  # one table a head
    first = _table(result.stdout)[:2]
    want = edgepe.load(arts["alibi"]).encode(np.arange(2), np.arange(3))[0]
    assert np.array([[float(v) for v in r[1:]] for r in first]) == pytest.approx(want, abs=5e-5)


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_out_writes_every_value(arts, tmp_path, suffix):
    out = tmp_path / f"pe{suffix}"
    result = _run("run", arts["binary"], "-p", "-2:70", "--out", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out} [72, 64]" in result.stderr
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # what open() gives, not 0600
    want = edgepe.load(arts["binary"]).encode(np.arange(-2, 70))
    if suffix == ".npy":
        got = np.load(out)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    else:
        with out.open() as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["pos", *(f"d{i}" for i in range(64))]
        assert [int(r[0]) for r in rows[1:]] == list(range(-2, 70))
        # 9 significant digits round-trip float32 exactly
        np.testing.assert_array_equal(np.array(rows[1:], dtype=np.float64)[:, 1:]
                                      .astype(np.float32), want)


def test_out_streams_in_chunks(arts, tmp_path, monkeypatch):
    """Past CHUNK_ROWS the output is written chunk by chunk, and still equals one encode."""
    from edgepe.cli import run_cmd

    monkeypatch.setattr(run_cmd, "CHUNK_ROWS", 7)
    out = tmp_path / "chunked.npy"
    result = _run("run", arts["sin"], "-p", "0:50", "--out", out)
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(out), edgepe.load(arts["sin"]).encode(np.arange(50)))
    out = tmp_path / "chunked.csv"
    assert _run("run", arts["sin"], "-p", "0:50", "--out", out).exit_code == 0
    values = np.loadtxt(out, delimiter=",", skiprows=1)
    assert values[:, 0].tolist() == list(range(50))


def test_bias_csv_has_a_line_per_head_and_query(arts, tmp_path):
    out = tmp_path / "bias.csv"
    assert _run("run", arts["alibi"], "-p", "0:3", "-k", "0:5", "-o", out).exit_code == 0
    with out.open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["head", "pos", "key0", "key1", "key2", "key3", "key4"]
    assert len(rows) == 1 + 8 * 3
    want = edgepe.load(arts["alibi"]).encode(np.arange(3), np.arange(5))
    assert [float(v) for v in rows[1 + 3 * 2 + 1][2:]] == want[2, 1].tolist()


def test_quiet_writes_nothing_on_stderr(arts, tmp_path):
    out = tmp_path / "q.npy"
    result = CliRunner().invoke(app, ["--quiet", "run", str(arts["gray"]), "-p", "0:4",
                                      "-o", str(out)])
    assert result.exit_code == 0 and result.stderr == ""
    assert out.exists()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["-p", "0.5"], "not an integer"),
        (["-p", "0:4", "-o", "x.txt"], "must end in .npy or .csv"),
        (["-p", "0:4", "-k", "0:2"], "--key-positions is for bias schemes"),
        (["-p", "0:4", "--providers", "gpu"], "unknown provider 'gpu'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(arts, tmp_path, args, match):
    args = [str(tmp_path / a) if a.endswith(".txt") else a for a in args]
    result = _run("run", arts["gray"], *args)
    assert result.exit_code == 2
    assert match in _one_line(result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_limit_and_arity_errors(arts):
    result = _run("run", arts["sin"], "-p", "16777215:16777218")
    assert result.exit_code == 2
    assert "--positions must be within +-16777216" in _one_line(result.stderr)
    result = _run("run", arts["b2d"], "-p", "0:3")
    assert result.exit_code == 2
    assert "takes 2 coordinates" in _one_line(result.stderr)


def test_real_subprocess(arts, tmp_path, edgepe_exe):
    proc = subprocess.run([edgepe_exe, "run", str(arts["gray"]), "--positions", "0,1,2,3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = _table(proc.stdout)
    assert [r[:4] for r in rows] == [["0", "0", "0", "0"], ["1", "1", "0", "0"],
                                     ["2", "1", "1", "0"], ["3", "0", "1", "0"]]
    out = tmp_path / "pe.npy"
    proc = subprocess.run([edgepe_exe, "run", str(arts["sin"]), "-p", "0:64", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert np.load(out).shape == (64, 8)
    proc = subprocess.run([edgepe_exe, "run", str(tmp_path / "nope.onnx"), "-p", "0:4"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert _one_line(proc.stderr) == f"error: {str(tmp_path / 'nope.onnx')!r} does not exist"


def test_artifacts_without_encodings_to_print_say_why(tmp_path):
    header = tmp_path / "gray.h"
    export(ExportConfig(scheme=resolve("gray", 16), mode="table", format="c", out=header))
    result = _run("run", header, "-p", "0:4")
    assert result.exit_code == 2
    assert "is a C header" in _one_line(result.stderr)
    rope = tmp_path / "rope-apply.onnx"
    export(ExportConfig(scheme=resolve("rope", 16, d_model=8), out=rope,
                        extra={"rope_graph": "apply"}))
    result = _run("run", rope, "-p", "0:4")
    assert result.exit_code == 2
    assert "apply graph" in _one_line(result.stderr)


def test_printing_a_huge_range_encodes_only_what_is_shown(arts):
    """16M positions print in a moment: only the 40 rows on screen are encoded."""
    result = _run("run", arts["gray"], "-p", "0:16000000")
    assert result.exit_code == 0, result.output
    rows = _table(result.stdout)
    assert [r[0] for r in rows[-2:]] == ["15999998", "15999999"]
    want = edgepe.load(arts["gray"]).encode(np.array([15999999]))[0]
    assert [int(v) for v in rows[-1][1:]] == want.astype(int).tolist()
    assert "showing 40 of 16000000 rows" in result.stdout


# --- --out streams by values, not rows (issue 41) ------------------------------------------------

def test_rows_per_step_bounds_the_values_of_a_step():
    from edgepe.cli import run_cmd

    assert (run_cmd.CHUNK_ROWS, run_cmd.CHUNK_VALUES) == (65536, 1 << 20)
    assert run_cmd.rows_per_step(64) == 16384  # 2^20 / 64
    assert run_cmd.rows_per_step(2048) == 512
    assert run_cmd.rows_per_step(8) == 65536  # CHUNK_ROWS caps narrow rows
    assert run_cmd.rows_per_step(3 << 20) == 1  # one row at least
    assert run_cmd.rows_per_step(0) == 65536


PEAK = """
import sys


# VmHWM (KiB): exec starts it afresh (ru_maxrss keeps the forking parent's peak)
def hwm():
    status = open('/proc/self/status').read().split('VmHWM:')[1]
    return int(status.split()[0])


from typer.testing import CliRunner
from edgepe.cli import app
import edgepe.cli.run_cmd, edgepe.runtime, onnxruntime, numpy  # the imports, before the base
base = hwm()
result = CliRunner().invoke(app, ["run", sys.argv[1], "--positions", "0:4096", "--out",
                                  sys.argv[2]])
assert result.exit_code == 0, result.output
print(hwm() - base)
"""


def test_run_out_csv_at_d_2048_streams_in_bounded_memory(tmp_path):
    """The attack: run --out x.csv at d 2048 peaked at 8.5 GB (65536-row steps: 134M values and
    their CSV text several times over). Here 4096 rows of d 2048 (8M values, ~140 MB of CSV):
    one 65536-row step held all of it, its text several times (measured 293 MiB added at 2048
    rows, so ~580 at 4096); steps of 2^20 values hold an eighth of it (measured ~150 MiB added,
    most of it onnxruntime's session and arena)."""
    import sys

    path = tmp_path / "s.onnx"
    export(ExportConfig(scheme=resolve("sinusoidal", 4096, d_model=2048), out=path))
    out = tmp_path / "x.csv"
    done = subprocess.run([sys.executable, "-c", PEAK, str(path), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    added_kib = int(done.stdout.strip().splitlines()[-1])
    assert added_kib < 250 << 10, added_kib
    with open(out) as f:
        lines = sum(1 for _ in f)
    assert lines == 4097
