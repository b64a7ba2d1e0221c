"""Progress bars: drawn for large tables and verification sweeps when asked (the CLI asks on a
terminal, without --quiet), never for short work, never when not asked."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from edgepe import api
from edgepe.cli import app
from edgepe.contract.progress import reporting, track
from edgepe.graphs.table_values import PROGRESS_ENTRIES

# sinusoidal [65536, 64]: exactly PROGRESS_ENTRIES entries, 16 MiB of npy, ~0.2 s
BIG = ["--scheme", "sinusoidal", "--max-len", "65536", "--d-model", "64", "--mode", "table",
       "--format", "npy"]


def _config(tmp_path, max_len: str, name: str):
    return api.make_config("sinusoidal", max_len, d_model="64", mode="table", format="npy",
                           out=tmp_path / name)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_bar_draws_description_bar_count_and_time_then_erases_itself(capfd):
    """One line per frame: the description as given, a bar, done/total, the elapsed time; on
    exit the bar is transient: rich moves up onto its line and erases it (1A, 2K), so nothing of
    it stays on the terminal."""
    with reporting(True, force=True):
        advance = track("rows of t", 5)
        advance(2)
        advance(3)
    err = capfd.readouterr().err
    frames = [_ANSI.sub("", f) for f in err.split("\r") if "rows" in f]
    assert frames, err
    assert re.fullmatch(r"rows of t ━{10,} 5/5 \d+:\d\d:\d\d\n?", frames[-1]), frames[-1]
    assert err.endswith("\x1b[1A\x1b[2K"), repr(err[-40:])


def test_a_large_table_reports_its_rows(tmp_path, capfd):
    assert 65536 * 64 == PROGRESS_ENTRIES
    with reporting(True, force=True):
        api.export(_config(tmp_path, "65536", "big.npy"), verify=False)
    err = capfd.readouterr().err
    assert "sinusoidal table [65536, 64]" in err and "65536/65536" in err


def test_short_work_shows_nothing_even_when_asked(tmp_path, capfd):
    with reporting(True, force=True):
        api.export(_config(tmp_path, "4096", "small.npy"), verify=False)
    assert capfd.readouterr().err == ""


def test_the_outer_block_decides(tmp_path, capfd):
    """``--quiet`` silences the quick check an export runs, even where it would draw its own."""
    path = tmp_path / "big.npy"
    api.export(_config(tmp_path, "65536", "big.npy"), verify=False)
    with reporting(False):
        api.verify_artifact(path, progress=True)
        track("nobody listens", 10)(10)
    assert capfd.readouterr().err == ""
    with reporting(True, force=True):
        api.verify_artifact(path, progress=False)  # nested: shares the outer bar
    assert "verify on file" in capfd.readouterr().err


def test_the_cli_draws_no_bar_off_a_terminal_or_under_quiet(tmp_path):
    for flags in ([], ["--quiet"]):
        out = tmp_path / f"big{len(flags)}.npy"
        result = CliRunner().invoke(app, [*flags, "export", *BIG, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert result.stderr == "" and out.exists()
