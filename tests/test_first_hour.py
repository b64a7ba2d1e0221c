"""Issue 32's friction, each fixed and held: ``--out``'s extension names the format, a manifest's
path or a lone ONNX artifact is taken by verify/inspect/run/load, ``edgepe list`` fits 80
columns, the C float16 message, the plots' labels, and the doc-test matcher's notation."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

import edgepe
from edgepe.cli import app
from tests._doctest_harness import line_matches, output_matches

GRAY = ["--scheme", "gray", "--max-len", "16"]


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# -- --out and --format -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pe.c", "pe.npz", "pe", "pe.onnx.bak", "pe.json"])
def test_out_with_an_extension_that_names_no_format_is_refused(tmp_path, name):
    out = tmp_path / name
    result = _invoke("export", *GRAY, "--out", str(out), "--no-verify")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "names no format" in line and ".onnx" in line and ".h" in line
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("name, fmt, extra", [
    ("t.onnx", "onnx", []), ("t.npy", "npy", ["--mode", "table"]),
    ("t.bin", "bin", ["--mode", "table"]), ("t.h", "c", []),
])
def test_a_known_extension_picks_the_format(tmp_path, name, fmt, extra):
    out = tmp_path / name
    result = _invoke("export", *GRAY, *extra, "--out", str(out), "--no-verify")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / f"{name}.json").read_text())["format"] == fmt


def test_an_extension_that_contradicts_format_is_refused(tmp_path):
    result = _invoke("export", *GRAY, "--format", "npy", "--mode", "table", "--out",
                     str(tmp_path / "t.onnx"), "--no-verify")
    assert result.exit_code == 2
    assert "--format npy writes .npy files" in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_c_float16_says_c_has_no_half_type_in_either_mode():
    for mode in ("compute", "table"):
        result = _invoke("export", *GRAY, "--format", "c", "--mode", mode, "--dtype", "float16",
                         "--no-verify")
        assert result.exit_code == 2
        line = _one_error_line(result)
        assert "no float16" in line and "--dtype float32" in line
        assert "for a uint8 or bit table use --mode table" not in line


# -- the manifest's path, and lone artifacts --------------------------------------------------

@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lone")
    path = folder / "b.onnx"
    result = _invoke("export", "--scheme", "binary", "--max-len", "64", "--d-model", "8",
                     "--out", str(path), "--no-verify")
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize("command", [["verify", "--quick"], ["inspect"], ["run", "-p", "0:3"]])
def test_commands_take_the_manifest_path_for_the_artifact(graph, command):
    name, *rest = command
    by_manifest = _invoke(name, f"{graph}.json", *rest)
    by_artifact = _invoke(name, str(graph), *rest)
    assert by_manifest.exit_code == 0, by_manifest.output
    assert by_manifest.stdout == by_artifact.stdout  # the same artifact, not X.onnx.json.json
    assert ".json.json" not in by_manifest.output


def test_a_manifest_path_whose_artifact_is_missing_says_so(tmp_path, graph):
    shutil.copy(f"{graph}.json", tmp_path / "gone.onnx.json")
    result = _invoke("verify", str(tmp_path / "gone.onnx.json"))
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "is a manifest" in line and "gone.onnx', does not exist" in line


def test_a_lone_graph_is_read_through_its_embedded_manifest(tmp_path, graph):
    lone = tmp_path / "moved.onnx"
    shutil.copy(graph, lone)  # without its .json
    inspected = _invoke("inspect", str(lone))
    assert inspected.exit_code == 0, inspected.output
    assert "no .json beside it" in inspected.stdout
    verified = _invoke("verify", str(lone))
    assert verified.exit_code == 0, verified.output
    assert "rebuilt byte-identical" in verified.output
    np.testing.assert_array_equal(edgepe.load(lone).encode(np.arange(5)),
                                  edgepe.load(graph).encode(np.arange(5)))
    assert not (tmp_path / "moved.onnx.json").exists()  # reading writes nothing


def test_a_lone_graph_whose_bytes_its_manifest_does_not_rebuild_is_refused(tmp_path, graph):
    """The embedded manifest is as untrusted as the file: a weight edited, the copy kept, and
    the graph is refused rather than run under the manifest's name."""
    model = onnx.load(str(graph))
    weights = next(t for t in model.graph.initializer if t.name == "projection_scaled")
    values = numpy_helper.to_array(weights).copy()
    values[0, 0] += 1.0
    weights.CopyFrom(numpy_helper.from_array(values, weights.name))
    lone = tmp_path / "edited.onnx"
    onnx.save(model, str(lone))
    for command in (["verify"], ["inspect"], ["run", "-p", "0:3"]):
        result = _invoke(command[0], str(lone), *command[1:])
        assert result.exit_code == 2, result.output
        assert "not trusted" in _one_error_line(result)
    with pytest.raises(edgepe.contract.errors.ArtifactError, match="not trusted"):
        edgepe.load(lone)


# -- edgepe list ------------------------------------------------------------------------------

def test_list_fits_80_columns_and_names_every_scheme():
    from edgepe.schemes import scheme_ids

    result = _invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    for scheme in scheme_ids():
        assert any(line.startswith(scheme + " ") for line in lines), scheme
    assert "docs/readme/catalogue.md" in result.stdout


def test_list_wide_and_json_give_every_column():
    from edgepe.schemes import scheme_ids

    wide = _invoke("list", "--wide").stdout
    assert "atol 1e-06, rtol 1e-06" in wide and "groups (3)" in wide
    data = json.loads(_invoke("list", "--json").stdout)
    assert [row["id"] for row in data] == scheme_ids()
    rope = next(row for row in data if row["id"] == "rope")
    assert rope["parameters"]["base"] == "10000.0" and rope["default_mode"] == "compute"


# -- plots ------------------------------------------------------------------------------------

def test_hamming_plot_draws_gray_visibly_over_binary():
    pytest.importorskip("matplotlib")
    from edgepe import plot as plots
    from edgepe.schemes import resolve

    config = resolve("gray", 64)
    fig = plots.hamming(config, None, np.arange(64))
    lines = {line.get_label().split(":")[0]: line for line in fig.axes[0].get_lines()}
    binary, gray = lines["binary (raw bits)"], lines["Gray code"]
    assert gray.get_zorder() > binary.get_zorder()  # drawn on top where they coincide
    assert gray.get_linestyle() != binary.get_linestyle()
    assert gray.get_linewidth() > binary.get_linewidth() and gray.get_marker() not in (None, "None")


def test_heatmap_and_similarity_colorbars_are_labelled():
    pytest.importorskip("matplotlib")
    from edgepe import plot as plots
    from edgepe.schemes import build, resolve

    config = resolve("binary", 16)
    source = build(config)
    for draw, label in ((plots.heatmap, "encoding value"), (plots.similarity, "PE(t) . PE(u)")):
        fig = draw(config, source, np.arange(16))
        labels = [ax.get_ylabel() for ax in fig.axes]
        assert any(label in text for text in labels), (draw.__name__, labels)
    fig = plots.heatmap(config, source, np.arange(16))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["bit 1", "bit 0"]


# -- the doc-test notation --------------------------------------------------------------------

def test_notation_matches_what_varies_and_nothing_else():
    assert line_matches("max abs ~1.19e-07", "max abs 1.49e-07")
    assert not line_matches("max abs ~1.19e-07", "max abs 0.0038")  # a real change
    assert line_matches("max abs ~0", "max abs 0")
    assert not line_matches("max abs ~0", "max abs 0.25")
    assert line_matches("merged graph: .../x.onnx ok", "merged graph: /tmp/abc/x.onnx ok")
    assert not line_matches("wrote a.onnx (10 bytes)", "wrote a.onnx (11 bytes)")
    assert line_matches("│ cpu  │ 1 │", "│ cpu     │   1 │")  # tables realign
    assert line_matches("┏━━┳━┓", "┏━━━━━┳━━┓")
    assert output_matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert output_matches(["a", "...", "z"], ["a", "z"])
    assert not output_matches(["a", "...", "z"], ["a", "b"])
    assert not output_matches(["a"], ["a", "b"])  # extra lines are a difference
