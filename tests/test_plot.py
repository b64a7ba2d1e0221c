"""``edgepe plot``: real PNG/SVG files, reproducible bytes, pictures that depend on the scheme."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest
from matplotlib import image as mpimg
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.export import ExportConfig, export
from edgepe.schemes import resolve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which the PNG spec puts first."""
    assert data[:8] == PNG_MAGIC
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def _plot(tmp_path, name, *args):
    out = tmp_path / name
    result = CliRunner().invoke(app, ["plot", *map(str, args), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_heatmap_is_a_real_png(tmp_path):
    out = _plot(tmp_path, "binary.png", "--scheme", "binary", "--max-len", "64")
    data = out.read_bytes()
    width, height = _png_size(data)
    assert len(data) > 20_000  # two heatmaps, axes and a colour bar: tens of KB
    assert width > 1000 and 300 < height < width  # the demo's wide 1 x 2 layout
    pixels = mpimg.imread(out)
    assert pixels.shape[:2] == (height, width)
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 50  # not blank


def test_changing_the_scheme_changes_the_image(tmp_path):
    binary = _plot(tmp_path, "binary.png", "--scheme", "binary", "--max-len", "64")
    gray = _plot(tmp_path, "gray.png", "--scheme", "gray", "--max-len", "64")
    assert binary.read_bytes() != gray.read_bytes()
    a, b = mpimg.imread(binary), mpimg.imread(gray)
    if a.shape == b.shape:
        assert np.abs(a - b).sum(axis=-1).astype(bool).mean() > 0.05  # >5% of pixels differ
    seeded = _plot(tmp_path, "binary-seed1.png", "--scheme", "binary", "--max-len", "64",
                   "--seed", "1")
    assert seeded.read_bytes() != binary.read_bytes()  # other learned weights, other picture


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_same_command_same_bytes(tmp_path, suffix):
    args = ("--scheme", "sinusoidal", "--max-len", "32", "--d-model", "16", "--kind",
            "similarity")
    first = _plot(tmp_path, f"a.{suffix}", *args).read_bytes()
    second = _plot(tmp_path, f"b.{suffix}", *args).read_bytes()
    assert first == second
    if suffix == "svg":
        assert first.lstrip().startswith(b"<?xml") and b"<svg" in first
        assert b"<dc:date>" not in first
    else:
        assert b"Software" not in first


@pytest.mark.parametrize(
    ("args", "min_bytes"),
    [
        (("--scheme", "gray", "--max-len", "64", "--kind", "hamming"), 10_000),
        (("--scheme", "binary-signed", "--max-len", "64", "--kind", "hamming"), 10_000),
        (("--scheme", "rope", "--max-len", "128", "--d-model", "32"), 20_000),
        (("--scheme", "alibi", "--max-len", "32", "--heads", "4"), 20_000),
        (("--scheme", "binary-2d", "--max-len", "16", "--positions", "0:16"), 10_000),
        (("--scheme", "gray", "--max-len", "1024", "--kind", "similarity", "-p", "0:512:4"),
         10_000),
    ],
)
def test_every_kind_draws(tmp_path, args, min_bytes):
    data = _plot(tmp_path, "x.png", *args).read_bytes()
    assert len(data) > min_bytes
    _png_size(data)


def test_hamming_picture_depends_on_max_len(tmp_path):
    small = _plot(tmp_path, "a.png", "--scheme", "gray", "--max-len", "16", "--kind", "hamming")
    large = _plot(tmp_path, "b.png", "--scheme", "gray", "--max-len", "64", "--kind", "hamming")
    assert small.read_bytes() != large.read_bytes()


def test_quant_error_of_an_int8_artifact(tmp_path):
    artifact = tmp_path / "q.npy"
    export(ExportConfig(scheme=resolve("binary", 64, d_model=16), mode="table", format="npy",
                        quantize="int8", out=artifact))
    data = _plot(tmp_path, "q.png", "--kind", "quant-error", "--artifact", artifact).read_bytes()
    assert len(data) > 20_000
    plain = tmp_path / "plain.npy"
    export(ExportConfig(scheme=resolve("binary", 64, d_model=16), mode="table", format="npy",
                        out=plain))
    result = CliRunner().invoke(app, ["plot", "--kind", "quant-error", "--artifact", str(plain),
                                      "--out", str(tmp_path / "no.png")])
    assert result.exit_code == 2
    assert "is not quantised" in _one_line(result.stderr)
    assert not (tmp_path / "no.png").exists()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--scheme", "binary", "--max-len", "64", "--out", "x.jpg"], "must end in .png or .svg"),
        (["--scheme", "alibi", "--max-len", "64", "--kind", "similarity", "--out", "x.png"],
         "'alibi' is a bias"),
        (["--scheme", "grey", "--max-len", "64", "--out", "x.png"], "unknown scheme 'grey'"),
        (["--max-len", "64", "--out", "x.png"], "needs --scheme and --max-len"),
        (["--scheme", "binary", "--max-len", "64", "--kind", "bars", "--out", "x.png"],
         "--kind 'bars' is not one of"),
        (["--kind", "quant-error", "--out", "x.png"], "give --artifact"),
        (["--scheme", "binary", "--max-len", "64", "-p", "5", "--out", "x.png"],
         "2 to 4096 positions"),
        (["--scheme", "binary", "--max-len", "64", "--param", "dropout", "--out", "x.png"],
         "KEY=VALUE"),
        (["--scheme", "gray", "--max-len", "64", "--checkpoint", "x.pt", "--out", "x.png"],
         "no learned weights"),
        (["--scheme", "binary", "--max-len", "64", "--checkpoint", "x.pt", "--out", "x.png"],
         "is not a file"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, match):
    args = [str(tmp_path / a) if a.startswith("x.") else a for a in args]
    result = CliRunner().invoke(app, ["plot", *args])
    assert result.exit_code == 2
    assert match in _one_line(result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_real_subprocess(tmp_path, edgepe_exe):
    out = tmp_path / "gray.svg"
    proc = subprocess.run(
        [edgepe_exe, "-q", "plot", "--scheme", "gray", "--max-len", "64", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # --quiet
    assert out.read_bytes().count(b"<svg") == 1 and out.stat().st_size > 20_000


def test_checkpoint_weights_are_drawn(tmp_path):
    """A checkpoint's weights, not the seeded ones, are what the heatmap shows."""
    import torch

    from edgepe.schemes import build

    checkpoint = tmp_path / "w.pt"
    torch.save(build(resolve("binary", 64, d_model=16), seed=5).state_dict(), checkpoint)
    base = ("--scheme", "binary", "--max-len", "64", "--d-model", "16")
    loaded = _plot(tmp_path, "ck.png", *base, "--checkpoint", checkpoint).read_bytes()
    assert loaded == _plot(tmp_path, "s5.png", *base, "--seed", "5").read_bytes()
    assert loaded != _plot(tmp_path, "s0.png", *base).read_bytes()


def test_hamming_curves_are_the_bit_distances():
    """Binary: popcount(p ^ (p + 1)) (every carry); Gray: always 1, across the wrap at 2^n too;
    with a stride, still p against p + 1."""
    from edgepe import plot
    from edgepe.schemes import build

    config = resolve("gray", 64)  # n = 7: position 127 wraps to 0 at 128
    positions = np.r_[np.arange(0, 128, 3), 127]
    lines = plot.hamming(config, build(config), positions).axes[0].get_lines()
    binary, gray = (np.asarray(line.get_ydata()) for line in lines[:2])
    want = [bin(int(p) ^ (int(p) + 1) & 127).count("1") for p in positions]
    assert binary.tolist() == want
    assert set(gray.tolist()) == {1.0}
    assert len(lines) == 2  # gray is itself one of the two references


def test_artifact_pictures_show_what_the_artifact_computes(tmp_path):
    """A gray table clamps past max_len where the reference wraps: drawn from the artifact, the
    picture differs; drawn over positions inside the table, the values are the reference's."""
    from edgepe import plot
    from edgepe.schemes import build

    table = tmp_path / "gray.npy"
    export(ExportConfig(scheme=resolve("gray", 32), mode="table", format="npy", out=table))
    drawn = _plot(tmp_path, "a.png", "--artifact", table, "-p", "0:64").read_bytes()
    reference = _plot(tmp_path, "r.png", "--scheme", "gray", "--max-len", "32", "-p", "0:64")
    assert len(drawn) > 20_000 and drawn != reference.read_bytes()

    import edgepe

    config = resolve("gray", 32)
    inside, past = np.arange(32), np.arange(32, 64)
    runtime = edgepe.load(table)
    np.testing.assert_array_equal(plot._encode(runtime, config, inside),
                                  plot._encode(build(config), config, inside))
    assert (plot._encode(runtime, config, past) == plot._encode(runtime, config, [31])).all()

    result = CliRunner().invoke(app, ["plot", "--artifact", str(table), "--scheme", "gray",
                                      "--out", str(tmp_path / "no.png")])
    assert result.exit_code == 2
    assert "drop --scheme" in _one_line(result.stderr)


def test_a_bias_plot_computes_its_heads_in_bounded_blocks(monkeypatch):
    """A bias plot draws head 0's [S, S]; its heads are computed in query blocks of at most
    BIAS_VALUES values (1024 heads at 4096 positions were 64 GiB in one call), with the same
    values as one call."""
    import torch

    from edgepe import plot
    from edgepe.schemes import build

    config = resolve("alibi", 64, heads=8)
    module = build(config)
    positions = np.arange(40, dtype=np.int64)
    with torch.no_grad():
        whole = module.encode(torch.as_tensor(positions), torch.as_tensor(positions))[0]
    calls = []
    encode = module.encode

    def watched(queries, keys):
        calls.append(len(queries) * len(keys) * config.heads)
        return encode(queries, keys)
    monkeypatch.setattr(module, "encode", watched)
    monkeypatch.setattr(plot, "BIAS_VALUES", 8 * 40 * 3)  # 3 query rows a block
    got = plot._encode(module, config, positions)
    np.testing.assert_array_equal(got, whole.double().numpy())
    assert calls == [8 * 40 * 3] * 13 + [8 * 40 * 1]
    monkeypatch.setattr(plot, "BIAS_VALUES", 1)  # one row at least
    calls.clear()
    np.testing.assert_array_equal(plot._encode(module, config, positions), got)
    assert calls == [8 * 40] * 40
