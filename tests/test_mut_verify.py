"""``edgepe.verify`` (the package's ``__init__``): the report, the tolerance, what is compared,
and ``verify_artifact`` end to end on tiny exports (integer PE, ``max_len`` 8, ``d_model`` 2).

Expected values are worked out by hand: a sweep of a compute graph covers its 8 positions, the
probe (``probe_values``' documented count) and each single position, 2 columns a position;
integer PE is ``p / 8``. Real runtimes only (onnxruntime's CPU provider, the reference
evaluator, the table readers, gcc). These are the fast tests of issue 33's mutation run of the
module (scripts/mutation.py's MODULES).
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

import edgepe.verify as v
from edgepe import rebuild as rb
from edgepe.contract.checkpoint import sha256_file
from edgepe.contract.errors import ArtifactError, BadParameterError, EdgepeError, ParityError
from edgepe.export import ExportConfig, export
from edgepe.schemes import resolve
from edgepe.verify import sweep
from edgepe.verify.compare import FIRST_MISMATCHES, CompareResult, Comparison, Mismatch, Tolerance
from edgepe.verify.runtimes import OrtRuntime

needs_tflite = pytest.mark.skipif(
    importlib.util.find_spec("ai_edge_litert") is None
    or importlib.util.find_spec("tflite_micro") is None,
    reason="the [tflite] extra is not installed")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler here")
INTEGER = resolve("integer", 8, d_model=2)


EXPORTS = {
    "compute.onnx": ExportConfig(INTEGER),
    "table.npy": ExportConfig(INTEGER, mode="table", format="npy"),
    "table.bin": ExportConfig(INTEGER, mode="table", format="bin"),
    "table.h": ExportConfig(INTEGER, mode="table", format="c"),
    "gray.h": ExportConfig(resolve("gray", 8), format="c"),
    # len(widths) > 1 at 256 positions: the sliced graph fuses with com.microsoft's kernel
    "rope.onnx": ExportConfig(resolve("rope", 256, d_model=4), mode="sliced",
                              extra={"rope_lowering": "ort"}),
    "table.pte": ExportConfig(INTEGER, mode="table", format="pte"),
    "apply.onnx": ExportConfig(resolve("rope", 16, d_model=4), extra={"rope_graph": "apply"}),
    "sin.onnx": ExportConfig(resolve("sinusoidal", 8192, d_model=4), mode="sliced"),
    "sin.h": ExportConfig(resolve("sinusoidal", 64, d_model=4), mode="sliced", format="c"),
    "sin-compute.onnx": ExportConfig(resolve("sinusoidal", 64, d_model=4)),
    "table.onnx": ExportConfig(INTEGER, mode="table", format="onnx"),
    "long.npy": ExportConfig(resolve("integer", 5000, d_model=1), mode="table", format="npy"),
    # issue 43: a table .tflite runs on both interpreters; bitwise gray on LiteRT alone (TFLM's
    # resolver has no RIGHT_SHIFT)
    "table.tflite": ExportConfig(INTEGER, mode="table", format="tflite"),
    "gray.tflite": ExportConfig(resolve("gray", 8), format="tflite"),
}


class _Made(dict):
    """Each tiny export, made the first time a test asks for it (once a module)."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def __missing__(self, name):
        export(EXPORTS[name].with_out(self.out / name))
        self[name] = self.out / name
        return self[name]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return _Made(tmp_path_factory.mktemp("made"))


def _copy(path, tmp_path, name=None):
    """A copy of an artifact and its manifest, to edit."""
    to = tmp_path / (name or path.name)
    shutil.copyfile(path, to)
    shutil.copyfile(f"{path}.json", f"{to}.json")
    return to


def _edit_manifest(path, **fields):
    mpath = Path(f"{path}.json")
    manifest = json.loads(mpath.read_text())
    manifest.update(fields)
    manifest["sha256"] = sha256_file(path)
    mpath.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def _sweep_positions(quick):
    """in-range positions + the probe + the single positions of integer L = 8."""
    probe = len(sweep.probe_values(INTEGER, 2**24, 16 if quick else 128))
    return 8 + probe + len(sweep.single_positions(8))


# --- Report --------------------------------------------------------------------------------------

def _result(runtime="cpu", **fields):
    result = CompareResult(runtime, Tolerance(0.0, 1e-3))
    for key, value in fields.items():
        setattr(result, key, value)
    return result


OK = dict(elements=10, positions=5, max_abs_err=1.25e-4)
SHA = "0123456789abcdef" * 4


def _report(results, rebuild=True, actual=SHA, **kw):
    rebuilt = rb.Rebuilt(True, None, None) if rebuild is True else rebuild
    return v.Report("a.onnx", {"scheme": "integer", "mode": "compute", "format": "onnx",
                               "dtype": "float32", "max_len": 8}, SHA, actual, results,
                    rebuild=rebuilt, **kw)


def test_a_report_passes_only_with_its_rebuild_its_sha256_and_every_result():
    assert _report([_result(**OK)]) and _report([_result(**OK)]).passed
    assert not _report([])  # nothing run
    assert not _report([_result(**OK), _result("ref", elements=0)])
    assert not _report([_result(**OK)], rebuild=None)
    assert not _report([_result(**OK)], rebuild=rb.Rebuilt(False, "bytes differ", None))
    # issue 41: a numeric check alone (a foreign build, accepted) is never a PASS, only accepted
    foreign = _report([_result(**OK)], rebuild=rb.Rebuilt(False, None, None, same_version=False))
    assert not foreign and not foreign.passed and foreign.accepted
    assert not _report([_result(**OK)]).accepted  # reproduced: a PASS, not "accepted"
    assert not _report([_result(**OK)], rebuild=rb.Rebuilt(False, "bytes differ", None)).accepted
    assert not _report([], rebuild=rb.Rebuilt(False, None, None)).accepted  # nothing run
    assert not _report([_result(**OK)], rebuild=None).accepted
    assert not _report([_result(**OK)], rebuild=rb.Rebuilt(False, None, None),
                       actual="f" * 64).accepted
    assert not _report([_result(**OK), _result("ref", elements=0)],
                       rebuild=rb.Rebuilt(False, None, None)).accepted
    assert str(foreign) == ("parity ACCEPTED, NOT PROVEN (--accept-foreign) for a.onnx: not "
                            "reproduced (); cpu ok (max abs 0.000125)")
    assert foreign.as_dict()["passed"] is False and foreign.as_dict()["accepted"] is True
    assert "accepted" not in _report([_result(**OK)]).as_dict()
    assert not _report([_result(**OK)], actual="f" * 64)
    assert _report([], rebuild=None).rebuild_ok is False
    assert _report([_result(**OK)]).sha256_ok and not _report([], actual="0" * 64).sha256_ok


def test_a_report_prints_one_line_naming_each_runtime():
    mismatch = Mismatch("position 5 column 1", 1.0, 2.0)
    report = _report([
        _result(**OK),
        _result("ref", elements=10, error="run failed: boom"),
        _result("cuda", **OK, placement_error="--strict-placement: 2 of 3 nodes"),
        _result("trt", elements=10, mismatches=3, first_mismatches=[mismatch]),
        _result("dml", elements=10, mismatches=2),
    ], actual="fedcba9876543210" * 4, reference_distance=1.234e-7)
    assert str(report) == (
        "parity FAILED for a.onnx: rebuilt byte-identical; sha256 fedcba987654 != manifest "
        "0123456789ab; cpu ok (max abs 0.000125); ref FAILED: run failed: boom; cuda FAILED: "
        "--strict-placement: 2 of 3 nodes; trt FAILED: 3 of 10 elements beyond atol 0.001, "
        "first at position 5 column 1; dml FAILED: 2 of 10 elements beyond atol 0.001; against "
        "the float64 definition; the float32 reference is 1.23e-07 from it")
    assert str(_report([_result(**OK)], rebuild=None)) == (
        "parity FAILED for a.onnx: cpu ok (max abs 0.000125)")
    assert str(_report([_result(**OK)])) == (
        "parity PASSED for a.onnx: rebuilt byte-identical; cpu ok (max abs 0.000125)")


def test_a_report_as_json():
    rebuilt = rb.Rebuilt(False, None, None, same_version=False, note="another version",
                         unchecked=("quant.scale",))
    result = _result(**OK)
    report = _report([result], rebuild=rebuilt, quick=True, actual="f" * 64)
    assert report.as_dict() == {
        "passed": False, "artifact": "a.onnx", "scheme": "integer", "mode": "compute",
        "format": "onnx", "dtype": "float32", "max_len": 8, "quick": True,
        "rebuild": {"reproduced": False, "passed": True, "same_version": False,
                    "difference": None, "note": "another version",
                    "unchecked_claims": ["quant.scale"]},
        "sha256": {"expected": SHA, "actual": "f" * 64, "passed": False},
        "results": [result.as_dict()]}
    rebuilt = rb.Rebuilt(False, "bytes differ", None)
    out = _report([], rebuild=rebuilt, reference_distance=0.5).as_dict()
    assert out["rebuild"] == {"reproduced": False, "passed": False, "same_version": True,
                              "difference": "bytes differ", "note": None,
                              "unchecked_claims": []}
    assert out["reference_distance"] == 0.5 and out["quick"] is False
    assert _report([], rebuild=None).as_dict()["rebuild"] is None
    assert "reference_distance" not in _report([]).as_dict()


# --- tolerance_for, _as_stored, _wrong_dtype -----------------------------------------------------

def test_the_tolerance_is_the_manifests_or_the_proven_int8_bound():
    T = Tolerance
    assert v.tolerance_for({}) == T(0.0, 0.0, 0, "manifest")
    assert v.tolerance_for({"tolerance": None, "quant": None}) == T(0.0, 0.0, 0, "manifest")
    assert v.tolerance_for({"tolerance": {"rtol": 1e-6, "atol": 2e-6}}) == T(1e-6, 2e-6, 0,
                                                                             "manifest")
    assert v.tolerance_for({"tolerance": {"rtol": None, "atol": None}}) == T(0, 0, 0, "manifest")
    half = {"dtype": "float16"}
    assert v.tolerance_for({**half, "tolerance": {"rtol": 0, "atol": 1e-6}}) == T(0, 1e-6, 1,
                                                                                  "manifest")
    assert v.tolerance_for({**half, "tolerance": {"rtol": 1e-6, "atol": 0}}) == T(1e-6, 0, 1,
                                                                                  "manifest")
    assert v.tolerance_for({**half, "tolerance": {"rtol": 0, "atol": 0}}) == T(0, 0, 0,
                                                                               "manifest")
    assert v.tolerance_for({"dtype": "float32", "tolerance": {"atol": 1e-6}}).fp16_ulps == 0
    quant = {"tolerance": {"rtol": 1e-6, "atol": 1e-6}, "dtype": "float16",
             "quant": {"bound": 0.01, "bound_all_positions": 0.03}}
    assert v.tolerance_for(quant) == T(0.0, 0.01, 0, "quant.bound")
    assert v.tolerance_for(quant, probe=True) == T(0.0, 0.03, 0, "quant.bound_all_positions")
    one = {"quant": {"bound": 1, "bound_all_positions": None}}
    assert v.tolerance_for(one, probe=True) == T(0.0, 1.0, 0, "quant.bound")
    assert isinstance(v.tolerance_for(one).atol, float)
    assert isinstance(v.tolerance_for({"quant": {"bound": 1, "bound_all_positions": 2}},
                                      True).atol, float)
    assert v.tolerance_for({"tolerance": {"atol": 1e-6}, "quant": {"bound": None}}) == T(
        0, 1e-6, 0, "manifest")


def test_the_reference_is_stored_as_the_artifact_documents_its_output():
    expected = np.array([[1.0, -5.0], [0.1, 70000.0]], dtype=np.float32)
    assert v._as_stored(expected, {"dtype": "float32"}) is expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 70000 past float16: inf, silently
        half = v._as_stored(expected, {"dtype": "float16"})
    assert half.dtype == np.float16 and half[1, 1] == np.inf
    with np.errstate(over="ignore"):
        assert half.tolist() == expected.astype(np.float16).tolist()
    # int8 outputs saturate at [-128, 127] steps of each channel's scale (float32 products)
    s = np.float32(0.005), np.float32(0.01)
    quant = {"tensor": "pe_int8", "scale": [0.005, 0.01], "axis": 1}
    clipped = v._as_stored(expected, {"dtype": "float16", "quant": quant})
    assert clipped.dtype == np.float32
    assert clipped.tolist() == [[np.float32(127) * s[0], np.float32(-128) * s[1]],
                                [np.float32(0.1), np.float32(127) * s[1]]]
    rows = {"tensor": "bias_int8", "scale": [0.005, 0.01]}  # no axis: axis 0
    assert v._as_stored(expected, {"quant": rows}).tolist() == [
        [np.float32(127) * s[0], np.float32(-128) * s[0]],
        [np.float32(0.1), np.float32(127) * s[1]]]
    tensor = {"tensor": "y_int8", "scale": 0.01, "axis": 1}  # one scale for the tensor
    assert v._as_stored(expected, {"quant": tensor}).tolist() == [
        [np.float32(1.0), np.float32(-128) * s[1]], [np.float32(0.1), np.float32(127) * s[1]]]
    for quant in ({"tensor": "table", "scale": [0.005, 0.01]}, {"tensor": "pe_int8"}):
        assert v._as_stored(expected, {"dtype": "float16", "quant": quant}) is expected


def test_a_float_output_must_have_the_rebuilds_width():
    f32 = np.zeros(2, np.float32)
    f16 = np.zeros(2, np.float16)
    builds = "but this edgepe builds {} from the recorded inputs"
    assert v._wrong_dtype(f16, f32, {"dtype": "float32"}) == (
        "outputs float16, " + builds.format("float32"))
    assert v._wrong_dtype(f32, f16, {"dtype": "float16"}) == (
        "outputs float32, " + builds.format("float16"))
    assert v._wrong_dtype([0.0, 1.0], f32, {"dtype": "float32"}) == (
        "outputs float64, " + builds.format("float32"))
    assert v._wrong_dtype(f32, f32, {"dtype": "float32"}) is None
    assert v._wrong_dtype(f16, f16, {"dtype": "float16"}) is None
    assert v._wrong_dtype(np.zeros(2, np.int8), f32, {"dtype": "float32"}) is None
    assert v._wrong_dtype(f16, np.zeros(2, np.float64), {"dtype": "float32"}) is None
    assert v._wrong_dtype(f16, f32, {"dtype": "uint8"}) is None
    assert v._wrong_dtype(f16, f32, {}) is None


# --- _check_file ---------------------------------------------------------------------------------

def test_each_format_is_checked_by_its_own_reader(made, tmp_path):
    for name in ("compute.onnx", "table.npy", "table.bin", "table.h"):
        path = made[name]
        assert v._check_file(path, json.loads(Path(f"{path}.json").read_text())) == (
            ("positions",), set())
    rope = made["rope.onnx"]
    inputs, domains = v._check_file(rope, json.loads(Path(f"{rope}.json").read_text()))
    assert inputs == ("positions",) and domains == {"com.microsoft"}
    # a file of another format than its manifest says is refused by that format's reader
    for name, other in (("table.npy", "table.bin"), ("table.bin", "table.npy"),
                        ("table.h", "table.bin")):
        wrong = _copy(made[name], tmp_path, f"wrong-{name}")
        manifest = json.loads(Path(f"{made[other]}.json").read_text())
        with pytest.raises(EdgepeError):
            v._check_file(wrong, {**manifest, "sha256": sha256_file(wrong)})


# --- verify_artifact -----------------------------------------------------------------------------

def test_a_graph_passes_on_cpu_and_ref_over_the_whole_sweep(made, tmp_path):
    report = v.verify_artifact(made["compute.onnx"], progress=False)
    assert report and report.rebuild.reproduced and report.quick is False
    assert report.sha256_ok and report.artifact == str(made["compute.onnx"])
    assert [r.runtime for r in report.results] == ["cpu", "ref"]
    for r in report.results:
        assert r.positions == _sweep_positions(False) and r.elements == 2 * r.positions
        assert r.max_abs_err == 0 and 0 < r.seconds < 60
    assert report.results[0].placement["CPUExecutionProvider"]
    assert report.results[1].placement is None


def test_quick_runs_onnxruntimes_cpu_over_the_quick_probe(made):
    report = v.verify_artifact(made["compute.onnx"], quick=True, progress=False)
    assert report and report.quick is True
    assert [r.runtime for r in report.results] == ["cpu"]
    assert report.results[0].positions == _sweep_positions(True)


def test_given_providers_run_in_order_and_only_they(made):
    report = v.verify_artifact(made["compute.onnx"], providers=("ref",), progress=False)
    assert [r.runtime for r in report.results] == ["ref"] and report


def test_a_contrib_op_graph_is_not_run_on_the_reference_evaluator_unless_asked(made):
    report = v.verify_artifact(made["rope.onnx"], quick=True, providers=None, progress=False)
    assert [r.runtime for r in report.results] == ["cpu"]
    full = v.verify_artifact(made["rope.onnx"], progress=False)
    assert "ref" not in [r.runtime for r in full.results]
    asked = v.verify_artifact(made["rope.onnx"], providers=["cpu", "ref"], quick=True,
                              progress=False)
    assert [r.runtime for r in asked.results] == ["cpu", "ref"]


def test_a_sliced_rope_is_checked_against_the_float64_definition(made):
    report = v.verify_artifact(made["rope.onnx"], quick=True, progress=False)
    assert report, str(report)
    assert report.reference_distance is not None and 0 < report.reference_distance < 1e-5
    # quick: positions 0 .. min(256, 4096) - 1 (all of them here), the probe up to the
    # manifest's limit (what the sliced plan covers) and the single positions
    limit = report.manifest["positions"]["limit"]
    assert 0 < limit < 2**24
    assert report.results[0].positions == 256 + len(
        sweep.probe_values(resolve("rope", 256, d_model=4), limit, 16)) + len(
        sweep.single_positions(256))


def test_tables_are_read_row_by_row(made):
    for name in ("table.npy", "table.bin"):
        report = v.verify_artifact(made[name], progress=False)
        assert report, str(report)
        assert [r.runtime for r in report.results] == ["file"]
        assert report.results[0].positions == 8 and report.results[0].elements == 16


@needs_cc
def test_c_headers_run_compiled(made):
    table = v.verify_artifact(made["table.h"], progress=False)
    assert table and table.results[0].positions == 8 and table.results[0].elements == 16
    gray = v.verify_artifact(made["gray.h"], quick=True, progress=False)
    assert gray and [r.runtime for r in gray.results] == ["c"]
    probe = sweep.probe_values(resolve("gray", 8), None, 16)
    assert gray.results[0].positions == 8 + len(probe) + len(sweep.single_positions(8))


@needs_cc
def test_a_c_header_whose_manifest_differs_is_not_compiled(made, tmp_path):
    path = _copy(made["gray.h"], tmp_path)
    _edit_manifest(path, tolerance={"rtol": 0.5, "atol": 0.5})  # the bytes are the rebuild's
    report = v.verify_artifact(path, progress=False)
    assert not report and report.rebuild.bytes_match and not report.rebuild.reproduced
    (result,) = report.results
    assert result.error == (f"could not load the artifact: ParityError: {str(path)!r} is not "
                            "compiled: only a C header whose bytes equal the rebuild is ever "
                            "compiled and run")


def test_a_graph_that_is_not_its_rebuild_is_never_run(made, tmp_path):
    path = _copy(made["compute.onnx"], tmp_path)
    model = onnx.load(path)
    model.graph.node[0].name += "_renamed"  # a valid graph that is not the rebuild's bytes
    onnx.save(model, path)
    _edit_manifest(path, tolerance={"rtol": 0.5, "atol": 0.5})
    report = v.verify_artifact(path, progress=False)
    assert not report and not report.rebuild.ok
    assert [r.runtime for r in report.results] == ["cpu", "ref"]
    for r in report.results:
        assert r.error == ("not run: the file is not the rebuild of its recorded inputs, so it "
                           "is not compiled or run")
        # the rebuild's tolerance (0 for integer PE), never the file's 0.5
        assert r.elements == 0 and r.tolerance == Tolerance(0.0, 0.0, 0, "manifest")


@pytest.mark.parametrize("name", ["table.npy", "table.bin"])
def test_a_table_that_is_not_its_rebuild_is_still_swept_quickly(made, tmp_path, name):
    path = _copy(made[name], tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # the last float32 of the table
    path.write_bytes(bytes(data))
    _edit_manifest(path)
    report = v.verify_artifact(path, progress=False)
    assert not report and not report.rebuild.ok
    (result,) = report.results
    assert result.mismatches == 1 and result.positions == 8
    assert result.first_mismatches[0].where == "row 7 column 1"


def test_a_manifest_only_difference_still_sweeps_the_graph(made, tmp_path):
    path = _copy(made["compute.onnx"], tmp_path)
    manifest = json.loads(Path(f"{path}.json").read_text())
    _edit_manifest(path, tolerance={"rtol": 0.5, "atol": 0.5},
                   positions={**manifest["positions"], "limit": 100})
    report = v.verify_artifact(path, progress=False)
    assert not report and report.rebuild.bytes_match
    # the probe goes to the rebuild's limit (2^24), not the file's 100
    assert [r.runtime for r in report.results] == ["cpu", "ref"]
    for r in report.results:  # quick: a failed rebuild bounds the sweep
        assert r.positions == _sweep_positions(True) and r.error is None
        assert r.tolerance == Tolerance(0.0, 0.0, 0, "manifest")  # the rebuild's, not 0.5


def test_rebuild_false_trusts_a_just_written_artifact(made):
    report = v.verify_artifact(made["compute.onnx"], rebuild=False, quick=True, progress=False)
    assert report and report.rebuild.reproduced


def test_the_json_report_is_written_and_replaced_only_with_force(made, tmp_path, capfd):
    out = tmp_path / "r.json"
    report = v.verify_artifact(made["compute.onnx"], quick=True, json_path=out, progress=False)
    assert json.loads(out.read_text()) == json.loads(json.dumps(report.as_dict()))
    with pytest.raises(EdgepeError) as caught:  # refused before the sweep: no bar drawn
        v.verify_artifact(made["compute.onnx"], quick=True, json_path=out, progress=True)
    assert str(caught.value) == f"--json {str(out)!r} exists; pass --force to replace it"
    assert "verify on" not in capfd.readouterr().err
    out.write_text("{}")
    v.verify_artifact(made["compute.onnx"], quick=True, json_path=out, progress=False,
                      force=True)
    assert json.loads(out.read_text())["passed"] is True


def test_a_progress_bar_only_when_asked(made, capfd):
    v.verify_artifact(made["compute.onnx"], quick=True, progress=False)
    assert "verify on cpu" not in capfd.readouterr().err
    v.verify_artifact(made["compute.onnx"], quick=True, progress=True)
    assert "verify on cpu" in capfd.readouterr().err
    v.verify_artifact(made["compute.onnx"], quick=True)  # stderr is not a terminal here
    assert "verify on cpu" not in capfd.readouterr().err


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (as the CLI's is when run from a shell)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_none_draws_the_bar_when_stderr_is_a_terminal(made, monkeypatch, terminal):
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert v.verify_artifact(made["compute.onnx"], quick=True, progress=None)
    assert ("verify on cpu" in err.getvalue()) is terminal


def test_a_missing_compiler_is_bad_input_not_a_parity_failure(made, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # a machine without a C compiler
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(EdgepeError) as caught:
        v.verify_artifact(made["table.h"], progress=False)
    assert caught.value.exit_code == 2


# --- _verify_on, _audit_placement, _reraise_bad_input, _first_line -----------------------------

def _chunk(feeds, expected, progress=1, probe=False):
    return sweep.Chunk(feeds, expected, lambda index: f"at {index}", len(expected), probe,
                       progress)


def test_one_runtime_over_its_chunks(made):
    path = made["compute.onnx"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    p = np.arange(4, dtype=np.int64)
    good = _chunk({"positions": p}, (p[:, None] / 8.0).repeat(2, 1).astype(np.float32), 4)
    wrong = _chunk({"positions": p}, np.zeros((4, 2), np.float32), 0, probe=True)
    seen = []
    result = v._verify_on("cpu", path, manifest, manifest, lambda: [good, wrong],
                          Tolerance(), Tolerance(0.0, 0.6), True, seen.append, None)
    assert seen == [4, 0] and result.positions == 8 and result.mismatches == 0  # probe: 0.6
    assert list(result.placement) == ["CPUExecutionProvider"]  # onnxruntime's profile
    result = v._verify_on("cpu", path, manifest, manifest, lambda: [good, wrong],
                          Tolerance(), Tolerance(), True, seen.append, None)
    assert result.mismatches == 6 and result.first_mismatches[0].where == "at (1, 0)"
    # the probe's tolerance applies to probe chunks only
    near = _chunk({"positions": p}, good.expected + np.float32(0.5), 4)
    result = v._verify_on("cpu", path, manifest, manifest, lambda: [near], Tolerance(),
                          Tolerance(0.0, 0.6), True, seen.append, None)
    assert result.mismatches == 8
    # a run that fails ends the runtime's sweep
    bad = _chunk({"nope": p}, good.expected)
    result = v._verify_on("cpu", path, manifest, manifest, lambda: [bad, good], Tolerance(),
                          Tolerance(), True, seen.append, None)
    assert result.error == ("run failed: ValueError: Required inputs (['positions']) are "
                            "missing from input feed (['nope']).") and result.elements == 0
    # an output of another float width than the rebuild's fails without comparing
    half = {**manifest, "dtype": "float16"}
    result = v._verify_on("cpu", path, manifest, half, lambda: [good, good], Tolerance(),
                          Tolerance(), True, seen.append, None)
    assert result.error == ("outputs float32, but this edgepe builds float16 from the "
                            "recorded inputs") and result.elements == 0


def test_a_runtime_that_cannot_load_fails_its_result(tmp_path, made):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"not a graph")
    result = v._verify_on("ref", path, {"format": "onnx", "mode": "compute"}, {},
                          lambda: [], Tolerance(), Tolerance(), True, None, None)
    assert result.error.startswith("could not load the artifact: ") and not result
    assert result.placement is None


def test_the_runtime_is_closed_after_its_sweep(made, monkeypatch):
    closed = []
    original = OrtRuntime.close

    def close(self):
        closed.append(self.name)
        original(self)

    monkeypatch.setattr(OrtRuntime, "close", close)
    path = made["compute.onnx"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    v._verify_on("cpu", path, manifest, manifest, lambda: [], Tolerance(), Tolerance(), True,
                 None, None)
    assert closed == ["cpu"]


def test_placement_off_the_cpu_provider_is_noted_or_fails_when_strict():
    placement = {"CPUExecutionProvider": {"Cast": 2, "Gather": 1}, "CUDAExecutionProvider":
                 {"Add": 3}}
    cpu = _result("cpu")
    v._audit_placement(cpu, placement, True)
    assert cpu.placement == placement and cpu.placement_note is None
    assert cpu.placement_error is None
    note = ("3 of 6 nodes ran on the CPU (Cast x2, Gather x1): onnxruntime's cuda provider has "
            "no kernel for them; export with --lowering arith to keep the graph on the GPU")
    loose = _result("cuda")
    v._audit_placement(loose, placement, False)
    assert loose.placement_note == note and loose.placement_error is None
    strict = _result("cuda")
    v._audit_placement(strict, placement, True)
    assert strict.placement_note == note
    assert strict.placement_error == "--strict-placement: " + note
    gpu = _result("cuda")
    v._audit_placement(gpu, {"CUDAExecutionProvider": {"Add": 3}}, True)
    assert gpu.placement_note == "every node ran on the cuda provider"
    assert gpu.placement_error is None and gpu.placement == {"CUDAExecutionProvider": {"Add": 3}}


def test_only_bad_input_is_reraised():
    with pytest.raises(BadParameterError):
        v._reraise_bad_input(BadParameterError("no compiler"))
    v._reraise_bad_input(ParityError("differs"))  # exit code 1: a failed result
    v._reraise_bad_input(ValueError("x"))


def test_an_exception_in_one_line():
    assert v._first_line(ValueError("MAX")) == "ValueError: MAX"
    assert v._first_line(ValueError("first\nsecond")) == "ValueError: first"
    assert v._first_line(ValueError("  padded  \n")) == "ValueError: padded"
    assert v._first_line(ValueError("")) == "ValueError"
    assert v._first_line(ValueError("ends with:")) == "ValueError: ends with"
    assert v._first_line(KeyError("k")) == "KeyError: 'k'"


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                    reason="executorch is not installed")
def test_an_executorch_program_is_checked_by_the_pte_reader(made):
    path = made["table.pte"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    assert v._check_file(path, manifest) == (("positions",), set())
    # a program of the table mode still evaluates positions (it is run, not read as rows)
    report = v.verify_artifact(path, quick=True, progress=False)
    assert report, str(report)
    # 8 positions, the probe of a table (clamped: no limit) and the singles, not 8 rows
    assert report.results[0].positions == 8 + len(sweep.probe_values(INTEGER, None, 16)) + len(
        sweep.single_positions(8))
    bad = path.with_name("bad.pte")
    bad.write_bytes(b"\0" * path.stat().st_size)  # the size it claims, not a program
    with pytest.raises(EdgepeError):
        v._check_file(bad, {**manifest, "sha256": sha256_file(bad)})


def test_another_versions_artifact_is_refused_or_checked_numerically(made, tmp_path):
    path = _copy(made["compute.onnx"], tmp_path)
    _edit_manifest(path, edgepe_version="0.0.0-other", tolerance={"rtol": 0.0, "atol": 0.5})
    refused = v.verify_artifact(path, quick=True, progress=False)
    assert not refused and refused.rebuild.unchecked == ()
    accepted = v.verify_artifact(path, quick=True, progress=False, accept_foreign=True)
    assert accepted.rebuild.unchecked == ("tolerance.atol: 0.5 != this edgepe's 0.0",)


def test_a_sliced_sinusoidal_is_checked_against_the_float64_definition(made):
    from edgepe.schemes import build
    from edgepe.schemes.definition import reference_distance

    module = build(resolve("sinusoidal", 8192, d_model=4))
    quick = v.verify_artifact(made["sin.onnx"], quick=True, progress=False)
    assert quick, str(quick)
    # quick: measured over the first 4096 positions only (the float32 error grows with p)
    assert quick.reference_distance == reference_distance(module, 4096)
    assert quick.reference_distance < reference_distance(module, 8192)


@needs_cc
def test_a_sliced_c_header_evaluates_positions(made):
    report = v.verify_artifact(made["sin.h"], quick=True, progress=False)
    assert report, str(report)
    assert report.results[0].positions > 64  # positions, the probe and singles: not rows


def test_an_outer_reporting_block_decides(made, capfd):
    from edgepe.contract.progress import reporting

    with reporting(True, force=True):  # edgepe export's block: its bar, whatever progress says
        v.verify_artifact(made["compute.onnx"], quick=True, progress=False)
    assert "verify on cpu" in capfd.readouterr().err
    with reporting(False):  # --quiet holds for the verification inside it
        v.verify_artifact(made["compute.onnx"], quick=True, progress=True)
    assert "verify on cpu" not in capfd.readouterr().err


def test_a_checkpoint_artifact_is_rebuilt_with_the_checkpoint_given(tmp_path):
    import torch

    from edgepe.api import make_config
    from edgepe.contract.errors import CheckpointError
    from edgepe.schemes import build

    config = resolve("binary", 8, d_model=4)
    checkpoint = tmp_path / "trained.pt"
    torch.save(build(config, seed=7).state_dict(), checkpoint)  # not the seed-0 weights
    out = tmp_path / "b.onnx"
    export(make_config(scheme="binary", max_len=8, d_model=4, checkpoint=checkpoint, out=out))
    assert v.verify_artifact(out, checkpoint=checkpoint, quick=True, progress=False)
    assert v.verify_artifact(out, checkpoint=checkpoint, quick=True, progress=False,
                             rebuild=False)
    for rebuild in (True, False):
        with pytest.raises(CheckpointError):
            v.verify_artifact(out, quick=True, progress=False, rebuild=rebuild)


def test_only_a_sliced_rope_or_sinusoidal_is_checked_against_the_definition(made):
    report = v.verify_artifact(made["sin-compute.onnx"], quick=True, progress=False)
    assert report and report.reference_distance is None


def test_a_full_sliced_check_measures_every_position(made):
    from edgepe.schemes import build
    from edgepe.schemes.definition import reference_distance

    module = build(resolve("sinusoidal", 8192, d_model=4))
    full = v.verify_artifact(made["sin.onnx"], providers=["cpu"], progress=False)
    assert full.reference_distance == reference_distance(module, 8192)


def test_a_rope_apply_graph_is_fed_x_as_well_as_positions(made):
    """The graph's inputs decide the feeds: a rope apply graph gets x [2, N, d] besides the
    positions (fed only positions, onnxruntime refuses the run)."""
    report = v.verify_artifact(made["apply.onnx"], quick=True, progress=False)
    assert report, str(report)
    assert v._check_file(made["apply.onnx"], report.manifest)[0] == ("x", "positions")


def test_an_onnx_table_graph_evaluates_positions(made):
    report = v.verify_artifact(made["table.onnx"], quick=True, progress=False)
    assert report, str(report)
    assert report.results[0].positions > 8  # positions, the probe and singles: not 8 rows


def test_a_quick_table_check_reads_4096_rows_and_says_so(made, capfd):
    report = v.verify_artifact(made["long.npy"], quick=True, progress=True)
    assert report and report.results[0].positions == 4096
    assert "4096/4096" in capfd.readouterr().err  # the bar's total is the quick sweep's


def test_an_accepted_foreign_build_lists_the_positions_its_sweep_skipped(made, tmp_path):
    # issue 41: numeric only, so what the sweep did not visit is a claim left unchecked too
    path = _copy(made["compute.onnx"], tmp_path)
    _edit_manifest(path, edgepe_version="0.0.0-other", trust_me=True)
    refused = v.verify_artifact(path, quick=True, progress=False)
    assert not refused and not refused.accepted and refused.rebuild.unchecked == ()
    accepted = v.verify_artifact(path, quick=True, progress=False, accept_foreign=True)
    skipped = sweep.unswept(accepted.rebuild.config.scheme, accepted.rebuild.manifest, True)
    assert skipped.startswith("positions: only ")
    assert accepted.rebuild.unchecked == ("trust_me (extra in the file's manifest)", skipped)
    # appended to the rebuild's note, which says whose build it is (issue 41)
    assert accepted.rebuild.note.startswith("written by edgepe '0.0.0-other', this is ")
    assert accepted.rebuild.note.endswith(f"; {skipped}")
    assert accepted.accepted and not accepted.passed
    # reproduced: nothing skipped is listed (the rebuild proves every position)
    honest = v.verify_artifact(made["compute.onnx"], quick=True, progress=False)
    assert honest.passed and honest.rebuild.unchecked == () and "positions:" not in str(honest)


def test_verify_names_wrong_argument_types(made, tmp_path):
    path = _copy(made["compute.onnx"], tmp_path)
    with pytest.raises(BadParameterError, match="^providers must be a str or a list of runtime "
                                                "names, got int$"):
        v.verify_artifact(path, providers=5, quick=True)
    with pytest.raises(BadParameterError, match="^json_path must be a str or os.PathLike"):
        v.verify_artifact(path, json_path=5, quick=True)
    report = v.verify_artifact(path, providers="cpu,ref", quick=True, progress=False)
    assert [r.runtime for r in report.results] == ["cpu", "ref"]


# --- issue 44: GPU runtimes run past every kernel limit; issue 43: tflite ------------------------

class _GpuOnCpu(OrtRuntime):
    """A stand-in for onnxruntime's CUDA provider, which is not on this machine: a real session
    on the CPU provider under the GPU runtime's name, recording each call's position count.
    ``limit``: refuse calls of more positions, as CUDA's RotaryEmbedding did from 65,536 rows
    with "CUDA failure 1: invalid argument" (issue 44's measurement on an H200)."""

    def __init__(self, path, limit=None, name="cuda"):
        super().__init__("cpu", path)
        self.name, self.limit, self.calls = name, limit, []

    def run(self, feeds):
        n = len(next(iter(feeds.values())))
        self.calls.append(n)
        if self.limit is not None and n > self.limit:
            raise RuntimeError("CUDA failure 1: invalid argument\nrotary_embedding_impl.cu")
        return super().run(feeds)


def _integer_rows(p):
    return (np.asarray(p)[:, None] / 8.0).repeat(2, 1).astype(np.float32)


def test_a_gpu_runtime_runs_the_first_in_range_chunk_past_every_kernel_limit(made, monkeypatch):
    path = made["compute.onnx"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    opened = []

    def gpu_on_cpu(name, path, manifest, rebuilt=None):
        opened.append(_GpuOnCpu(path, name=name))
        return opened[-1]

    monkeypatch.setattr("edgepe.verify.runtimes.open_positions_runtime", gpu_on_cpu)
    p3, p4 = np.arange(3, dtype=np.int64), np.arange(4, dtype=np.int64)
    probe = _chunk({"positions": p3}, _integer_rows(p3), 0, probe=True)
    good = _chunk({"positions": p4}, _integer_rows(p4), 4)
    result = v._verify_on("cuda", path, manifest, manifest, lambda: [probe, good, probe],
                          Tolerance(), Tolerance(), True, lambda n: None, None)
    # the first chunk that is not the probe (4 positions), tiled 32768 times: 131072 >= 131071
    assert v.PAST_KERNEL_LIMITS == 2 * 65535 + 1
    assert opened[-1].calls == [3, 4, 3, 131072]
    assert result and result.error is None and result.positions == 3 + 4 + 3 + 131072
    assert result.elements == 2 * result.positions
    # the CPU provider (not a GPU runtime) makes no such call
    v._verify_on("cpu", path, manifest, manifest, lambda: [probe, good], Tolerance(),
                 Tolerance(), True, lambda n: None, None)
    assert opened[-1].calls == [3, 4]
    # nothing swept, or a failed sweep: no call past the limits either
    assert v._verify_on("trt", path, manifest, manifest, lambda: [], Tolerance(), Tolerance(),
                        True, None, None).positions == 0
    assert opened[-1].calls == []
    bad = _chunk({"nope": p4}, _integer_rows(p4))
    failed = v._verify_on("cuda", path, manifest, manifest, lambda: [bad], Tolerance(),
                          Tolerance(), True, None, None)
    assert failed.error.startswith("run failed: ")
    assert opened[-1].calls == [4]


def test_past_kernel_limits_compares_every_tiled_row_and_names_it_in_its_chunk(made):
    path = made["compute.onnx"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    runtime = OrtRuntime("cpu", path)
    p = np.arange(4, dtype=np.int64)
    wrong = _integer_rows(p)
    wrong[1, 0] += 1  # row 1 of every tile
    comparison = Comparison("cuda", Tolerance())
    v._past_kernel_limits(runtime, _chunk({"positions": p}, wrong), comparison, manifest)
    result = comparison.finish()
    assert result.positions == 131072 and result.elements == 2 * 131072
    assert result.mismatches == 32768  # one a tile
    assert [m.where for m in result.first_mismatches] == \
        ["at (1, 0) (in one call of 131072 positions)"] * FIRST_MISMATCHES
    # one position: 131071 copies of it in one call
    one = Comparison("cuda", Tolerance())
    v._past_kernel_limits(runtime, _chunk({"positions": p[3:]}, _integer_rows(p[3:])), one,
                          manifest)
    assert one.finish().positions == 131071 and one.result.mismatches == 0
    # not a graph of one positions [N] input: nothing runs (a 0-d position has no length)
    for feeds in ({"positions": np.int64(3)}, {"positions": None}):
        skipped = Comparison("cuda", Tolerance())
        v._past_kernel_limits(runtime, _chunk(feeds, _integer_rows(p[:1])), skipped, manifest)
        assert skipped.finish().positions == 0 and skipped.result.error is None


def test_a_call_past_the_kernel_limits_that_fails_fails_the_runtime(made):
    path = made["compute.onnx"]
    manifest = json.loads(Path(f"{path}.json").read_text())
    runtime = _GpuOnCpu(path, limit=65535)
    p = np.arange(4, dtype=np.int64)
    comparison = Comparison("cuda", Tolerance())
    v._past_kernel_limits(runtime, _chunk({"positions": p}, _integer_rows(p)), comparison,
                          manifest)
    assert comparison.finish().error == (
        "run of 131072 positions in one call (past 65535 rows: CUDA's grid limit) failed: "
        "RuntimeError: CUDA failure 1: invalid argument")


@needs_tflite
def test_a_tflite_runs_by_default_on_each_interpreter_that_runs_it(made, tmp_path):
    # issue 43: TFLM by default, except where its resolver lacks an op (bitwise: RIGHT_SHIFT)
    bitwise = v.verify_artifact(made["gray.tflite"], quick=True, progress=False)
    assert bitwise and [r.runtime for r in bitwise.results] == ["litert"]
    with pytest.raises(ArtifactError, match="RIGHT_SHIFT"):  # asked for: it is tried
        v.verify_artifact(made["gray.tflite"], providers="tflm", quick=True, progress=False)
    # a table .tflite evaluates positions (a graph), on both interpreters
    table = v.verify_artifact(made["table.tflite"], quick=True, progress=False)
    assert table and [r.runtime for r in table.results] == ["litert", "tflm"]
    assert table.results[0].positions > 8  # positions, the probe and singles: not 8 rows
    manifest = json.loads(Path(f"{made['table.tflite']}.json").read_text())
    assert v._check_file(made["table.tflite"], manifest) == (("positions",), set())
    junk = tmp_path / "junk.tflite"  # refused by the TFLite reader, not another format's
    junk.write_bytes(b"TFL3" * 16)
    with pytest.raises(ArtifactError):
        v._check_file(junk, manifest)


def test_strict_placement_fails_a_gpu_runtime_whose_nodes_ran_on_the_cpu(made, monkeypatch):
    """``--strict-placement`` end to end on the stand-in above (onnxruntime's CUDA provider is
    not on this machine): every node of its session runs on the CPU provider, as onnxruntime's
    CPU fallback runs the nodes CUDA has no kernel for."""
    from edgepe.verify import runtimes as rt

    monkeypatch.setattr(rt, "ort_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(rt, "open_positions_runtime",
                        lambda name, path, manifest, rebuilt=None: _GpuOnCpu(path, name=name))
    path = made["compute.onnx"]
    loose = v.verify_artifact(path, providers="cuda", quick=True, progress=False)
    assert loose and loose.results[0].placement_error is None  # not strict by default
    assert loose.results[0].placement_note.endswith(" nodes ran on the CPU (" + ", ".join(
        f"{op} x{n}" for op, n in loose.results[0].placement["CPUExecutionProvider"].items())
        + "): onnxruntime's cuda provider has no kernel for them; export with --lowering "
        "arith to keep the graph on the GPU")
    strict = v.verify_artifact(path, providers="cuda", quick=True, progress=False,
                               strict_placement=True)
    assert not strict
    assert strict.results[0].placement_error == \
        "--strict-placement: " + loose.results[0].placement_note
