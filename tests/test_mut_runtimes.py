"""``edgepe.verify.runtimes`` on tiny artifacts, with real sessions and exact expected values.

Every runtime is the real one (onnxruntime's CPU provider, the ONNX reference evaluator,
OpenVINO's CPU plugin, the table readers, gcc for C headers) on graphs of one node or tables of
8 rows; expected values are worked out by hand (integer PE is ``p / max_len``; Gray code PE has
bit ``i`` of ``p ^ (p >> 1)`` in column ``i``; ALiBi is ``-2^(-8 (h + 1) / H) |q - k|``). These
are the fast tests of issue 33's mutation run of the module (scripts/mutation.py's MODULES).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgepe import rebuild as rb
from edgepe.contract.errors import ArtifactError, BadParameterError, ParityError
from edgepe.export import ExportConfig, export
from edgepe.formats.onnx_table import SplitTable, split_table
from edgepe.schemes import resolve
from edgepe.verify import runtimes as rt

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
CPUINFO = Path("/proc/cpuinfo")
CPU_BF16 = CPUINFO.is_file() and any(flag in CPUINFO.read_text().split()
                                     for flag in ("avx512_bf16", "amx_bf16"))
# What onnxruntime runs nodes on here, by hand: its providers but Azure's (remote endpoints)
ORT_HERE = [p for p in ort.get_available_providers() if p != "AzureExecutionProvider"]


def _short(provider):
    return {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda",
            "TensorrtExecutionProvider": "trt"}.get(provider, provider)


ONNX_HERE = [_short(p) for p in ORT_HERE] + ["ref"] + (["openvino"] if HAS_OPENVINO else [])


@pytest.fixture(scope="module")
def add_graph(tmp_path_factory):
    """``y = x + 1`` (one Add node), float32 ``[N]``."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    path = tmp_path_factory.mktemp("add") / "add.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.fixture(scope="module")
def half_graph(tmp_path_factory):
    """``y = Cast(x, float16)``: 70000 is past float16's 65504."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N"])])
    path = tmp_path_factory.mktemp("half") / "half.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Tiny exports: integer PE (L = 8, d = 2) as an ONNX table graph, npy, int8 bin and an int8
    C table; Gray code (L = 8) and ALiBi (L = 4, H = 2) C compute headers."""
    out = tmp_path_factory.mktemp("artifacts")
    integer = resolve("integer", 8, d_model=2)
    made = {}
    for name, config in {
        "table.onnx": ExportConfig(integer, mode="table", format="onnx"),
        "compute.onnx": ExportConfig(integer, mode="compute", format="onnx"),
        "table.npy": ExportConfig(integer, mode="table", format="npy"),
        "int8.bin": ExportConfig(integer, mode="table", format="bin", quantize="int8"),
        "int8.h": ExportConfig(integer, mode="table", format="c", quantize="int8"),
        "gray.h": ExportConfig(resolve("gray", 8), mode="compute", format="c"),
        "alibi.h": ExportConfig(resolve("alibi", 4, heads=2), mode="compute", format="c"),
    }.items():
        export(config.with_out(out / name))
        made[name] = out / name
    return made


def _manifest(path):
    return json.loads(Path(f"{path}.json").read_text())


def _integer_pe(positions, max_len=8):
    p = np.asarray(positions, dtype=np.float64)
    return np.repeat((p / max_len)[:, None], 2, axis=1).astype(np.float32)


def _gray(positions, width=4):
    p = np.asarray(positions, dtype=np.int64)
    return (((p ^ (p >> 1))[:, None] >> np.arange(width)) & 1).astype(np.float32)


def _alibi(queries, keys, heads=2):
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    d = np.abs(np.asarray(queries)[:, None] - np.asarray(keys)[None, :])
    return (-slopes[:, None, None] * d[None]).astype(np.float32)


# --- names -------------------------------------------------------------------------------------

def test_short_names_are_the_aliases_or_the_lowercased_stem():
    assert rt.short_name("CPUExecutionProvider") == "cpu"
    assert rt.short_name("CUDAExecutionProvider") == "cuda"
    assert rt.short_name("TensorrtExecutionProvider") == "trt"  # the first alias of two
    assert rt.short_name("OpenVINOExecutionProvider") == "openvino"
    assert rt.short_name("DmlExecutionProvider") == "dml"
    assert rt.short_name("VitisAIExecutionProvider") == "vitisai"  # no alias
    assert rt.short_name("Plain") == "plain"


def test_ort_providers_are_those_that_run_nodes():
    assert rt.ort_providers() == ORT_HERE
    assert "CPUExecutionProvider" in ORT_HERE
    assert "AzureExecutionProvider" in ort.get_available_providers()  # and it is dropped


def test_openvino_installed_says_whether_the_package_is_there():
    assert rt.openvino_installed() is HAS_OPENVINO


def test_available_and_default_runtimes_per_format():
    assert rt.available("onnx") == ONNX_HERE
    assert rt.available("c") == ["c"]
    assert rt.available("pte") == ["executorch"]
    assert rt.available("npy") == ["file"] and rt.available("bin") == ["file"]
    assert rt.default_runtimes("onnx") == [n for n in ONNX_HERE if n != "openvino"]
    assert rt.default_runtimes("onnx", quick=True) == ["cpu"]
    assert rt.default_runtimes("c", quick=True) == ["c"]
    assert rt.default_runtimes("npy") == ["file"]
    assert rt.default_runtimes("pte") == ["executorch"]


def test_runtime_names_are_forgiving_and_deduplicated():
    names = [" CPU ", "cpu", "CPUExecutionProvider", "cpuexecutionprovider", "CPUExecution"
             "provider ", "", "  ", "Ref", "REF"]
    assert rt.resolve_runtimes(names, "onnx") == ["cpu", "ref"]
    assert rt.resolve_runtimes(("ref", "cpu"), "onnx") == ["ref", "cpu"]
    assert rt.resolve_runtimes(["cpu"], "onnx") == ["cpu"]
    assert rt.resolve_runtimes(["File"], "npy") == ["file"]
    assert rt.resolve_runtimes(["C"], "c") == ["c"]
    if HAS_OPENVINO:
        assert rt.resolve_runtimes(["ov", "OpenVINO", "openvino"], "onnx") == ["openvino"]


def _refusal(names, fmt):
    with pytest.raises(BadParameterError) as caught:
        rt.resolve_runtimes(names, fmt)
    return str(caught.value)


GPU_HINT = (" (the CUDA and TensorRT providers come with onnxruntime-gpu: see the README's GPU "
            "install)")


@pytest.mark.skipif("CUDAExecutionProvider" in ORT_HERE, reason="CUDA is installed here")
def test_an_unavailable_runtime_is_refused_listing_what_exists():
    here = ", ".join(ONNX_HERE)
    for name in ("cuda", "CUDA", "CUDAExecutionProvider", "cudaexecutionprovider"):
        assert _refusal([name], "onnx") == (
            f"runtime {name!r} is not available for onnx artifacts here; available: {here}"
            + GPU_HINT)
    for name in ("trt", "tensorrt", "TensorrtExecutionProvider", "Tensorrt"):
        assert _refusal([name], "onnx") == (
            f"runtime {name!r} is not available for onnx artifacts here; available: {here}"
            + GPU_HINT)
    for name in ("dml", "VitisAI", "nonsense", "c", "file"):
        assert _refusal(["cpu", name], "onnx") == (
            f"runtime {name!r} is not available for onnx artifacts here; available: {here}")
    assert _refusal(["cuda"], "npy") == ("runtime 'cuda' is not available for npy artifacts "
                                        "here; available: file")
    assert _refusal(["CPUExecutionProvider"], "c") == (
        "runtime 'CPUExecutionProvider' is not available for c artifacts here; available: c")
    assert _refusal(["ref"], "c") == ("runtime 'ref' is not available for c artifacts here; "
                                      "available: c")
    assert _refusal(["openvino"], "npy") == ("runtime 'openvino' is not available for npy "
                                            "artifacts here; available: file")


def test_openvino_without_its_package_names_the_extra(monkeypatch):
    # a machine without the openvino package (it is installed here)
    monkeypatch.setattr(rt, "openvino_installed", lambda: False)
    here = ", ".join(n for n in ONNX_HERE if n != "openvino")
    for name in ("openvino", "ov", "OV"):
        assert _refusal([name], "onnx") == (
            f"runtime {name!r} is not available for onnx artifacts here; available: {here}"
            " (pip install 'edgepe[openvino]')")


def test_no_runtime_named_is_refused():
    for names in ([], [""], [" ", ""]):
        assert _refusal(names, "onnx") == ("--providers is empty; available: "
                                           + ", ".join(ONNX_HERE))
    assert _refusal([], "bin") == "--providers is empty; available: file"


# --- onnxruntime and the reference evaluator ----------------------------------------------------

def test_an_ort_runtime_runs_the_graph_and_reads_its_placement(add_graph):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. onnxruntime's "Duplicate provider" warning
        runtime = rt.OrtRuntime("cpu", add_graph)
    profile = Path(runtime._profile_dir)
    try:
        assert runtime.name == "cpu" and runtime.provider == "CPUExecutionProvider"
        assert runtime.session.get_providers() == ["CPUExecutionProvider"]
        assert runtime.output == "y" and runtime.placement is None and runtime.split is None
        # onnxruntime's own logger: FATAL only (issue 41: its ERROR line was a 2nd stderr line)
        assert runtime.session.get_session_options().log_severity_level == 4
        assert profile.is_dir() and profile.name.startswith("edgepe-profile-")
        x = np.array([0.0, 1.5, -2.0], dtype=np.float32)
        np.testing.assert_array_equal(runtime.run({"x": x}), x + 1)
        assert runtime.placement == {"CPUExecutionProvider": {"Add": 1}}
        assert list(profile.iterdir()) == []  # the trace is read and removed
        np.testing.assert_array_equal(runtime.run({"x": x[:1]}), x[:1] + 1)  # not profiled
        assert list(profile.iterdir()) == []
        assert runtime.placement == {"CPUExecutionProvider": {"Add": 1}}
    finally:
        runtime.close()
    assert not profile.exists()


def test_the_trace_is_named_by_its_prefix(add_graph, monkeypatch):
    names = []
    original = Path.unlink

    def unlink(self, missing_ok=False):
        names.append(self)
        return original(self, missing_ok=missing_ok)

    runtime = rt.OrtRuntime("cpu", add_graph)
    monkeypatch.setattr(Path, "unlink", unlink)
    runtime.run({"x": np.zeros(2, np.float32)})
    monkeypatch.undo()
    runtime.close()
    assert len(names) == 1 and names[0].parent == Path(runtime._profile_dir)
    assert names[0].name.startswith("ort")


def test_onnxruntime_logs_errors_only(add_graph, tmp_path, capfd):
    # an initializer no node uses: onnxruntime warns that it removes it (severity 2 < 3)
    model = onnx.load(add_graph)
    model.graph.initializer.append(helper.make_tensor("unused", TensorProto.FLOAT, [], [2.0]))
    path = tmp_path / "unused.onnx"
    onnx.save(model, path)
    capfd.readouterr()
    runtime = rt.OrtRuntime("cpu", path)
    runtime.run({"x": np.zeros(1, np.float32)})
    runtime.close()
    ort.set_default_logger_severity(2)
    try:
        loud = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        loud.run(None, {"x": np.zeros(1, np.float32)})
    finally:
        ort.set_default_logger_severity(3)
    err = capfd.readouterr().err
    assert err.count("unused") == 1  # only the session opened at warning level said it


def test_placement_from_a_trace_counts_each_node_once_per_provider():
    events = [
        {"cat": "Session", "name": "model_run", "args": {"provider": "X"}},
        {"cat": "Node", "name": "a_kernel_time",
         "args": {"provider": "CPUExecutionProvider", "op_name": "Add"}},
        {"cat": "Node", "name": "a_kernel_time",  # the same node in a second run
         "args": {"provider": "CPUExecutionProvider", "op_name": "Add"}},
        {"cat": "Node", "name": "a_fence_before", "args": {"op_name": "Add"}},  # no provider
        {"cat": "Node", "name": "b_kernel_time",
         "args": {"provider": "CUDAExecutionProvider", "op_name": "Mul"}},
        {"cat": "Node", "name": "b",  # node b again, without the suffix
         "args": {"provider": "CUDAExecutionProvider", "op_name": "Mul"}},
        {"cat": "Node", "name": "c_kernel_time",
         "args": {"provider": "CUDAExecutionProvider", "op_name": "Add"}},
        {"cat": "Node", "name": "d", "args": {"provider": "CUDAExecutionProvider",
                                              "op_name": "Add"}},
        {"cat": "Node", "args": {"provider": "CPUExecutionProvider"}},  # no name, no op name
        {"cat": "Node", "name": "e", "args": None},
        {"cat": "Node", "name": "f"},
    ]
    placement = rt.placement_from_trace(events)
    assert placement == {"CPUExecutionProvider": {"?": 1, "Add": 1},
                         "CUDAExecutionProvider": {"Add": 2, "Mul": 1}}
    assert list(placement) == ["CPUExecutionProvider", "CUDAExecutionProvider"]
    assert list(placement["CUDAExecutionProvider"]) == ["Add", "Mul"]
    assert rt.placement_from_trace([]) == {}


def test_the_reference_evaluator_runs_the_graph(add_graph):
    runtime = rt.RefRuntime(add_graph)
    assert runtime.name == "ref" and runtime.placement is None and runtime.output == "y"
    x = np.array([3.0, -1.0], dtype=np.float32)
    np.testing.assert_array_equal(runtime.run({"x": x}), x + 1)


def test_a_float16_overflow_is_inf_without_a_warning(half_graph):
    runtime = rt.RefRuntime(half_graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = runtime.run({"x": np.array([1.0, 70000.0], dtype=np.float32)})
    assert out.dtype == np.float16 and out.tolist() == [1.0, np.inf]


def test_a_streamed_table_graph_runs_with_its_table_read_in_place(artifacts):
    path = artifacts["table.onnx"]
    manifest = _manifest(path)
    positions = np.array([-3, 0, 5, 7, 20], dtype=np.int64)
    expected = _integer_pe([0, 0, 5, 7, 7])  # a table clamps
    for name in ("cpu", "ref"):
        split = split_table(path, manifest)
        assert isinstance(split, SplitTable)
        runtime = rt.open_onnx(name, path, split)
        assert runtime.split is split and runtime.name == name
        if name == "ref":  # the evaluator holds the graph without its table (fed in place)
            held = runtime.session.proto_.graph
            assert "table" not in [i.name for i in held.initializer]
            assert "table" in [i.name for i in held.input]
        try:
            np.testing.assert_array_equal(runtime.run({"positions": positions}), expected)
            np.testing.assert_array_equal(runtime.run({"positions": positions[:2]}),
                                          expected[:2])
        finally:
            getattr(runtime, "close", lambda: None)()
    runtime = rt.open_positions_runtime("cpu", path, manifest)
    assert isinstance(runtime.split, SplitTable)
    runtime.close()
    compute = artifacts["compute.onnx"]
    runtime = rt.open_positions_runtime("ref", compute, _manifest(compute))
    assert isinstance(runtime, rt.RefRuntime) and runtime.split is None
    np.testing.assert_array_equal(runtime.run({"positions": positions}), _integer_pe(positions))


def test_open_onnx_picks_the_runtime_by_name(add_graph):
    runtime = rt.open_onnx("cpu", add_graph)
    assert isinstance(runtime, rt.OrtRuntime) and runtime.split is None
    runtime.close()
    assert isinstance(rt.open_onnx("ref", add_graph), rt.RefRuntime)
    if HAS_OPENVINO:
        assert isinstance(rt.open_onnx("openvino", add_graph), rt.OpenVinoRuntime)


# --- OpenVINO ----------------------------------------------------------------------------------

@pytest.mark.skipif(not HAS_OPENVINO, reason="the openvino package is not installed")
def test_openvino_runs_in_float32_and_reports_its_layers(add_graph):
    runtime = rt.OpenVinoRuntime(add_graph)
    assert runtime.name == "openvino"
    assert "float32" in runtime.precision and runtime.low_precision == []
    assert runtime.placement == {"CPU": {"Eltwise": 1}}
    x = np.array([0.25, -7.0], dtype=np.float32)
    out = runtime.run({"x": x})
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x + 1)
    # given its own config, OpenVINO's default (bf16 on CPUs that have it) is not refused
    own = rt.OpenVinoRuntime(add_graph, config={})
    assert own.placement == {"CPU": {"Eltwise": 1}}


@pytest.mark.skipif(not HAS_OPENVINO, reason="the openvino package is not installed")
def test_openvino_lists_the_ops_it_runs_in_low_precision(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4).ravel().tolist())])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    assert rt.OpenVinoRuntime(path).low_precision == []  # CONFIG: float32
    if not CPU_BF16:
        pytest.skip("this CPU has no bf16 instructions (avx512_bf16, amx_bf16): OpenVINO keeps "
                    "float32 whatever it is asked")
    bf16 = rt.OpenVinoRuntime(path, config={"INFERENCE_PRECISION_HINT": "bf16"})
    assert "bfloat16" in bf16.precision
    assert bf16.low_precision == ["y (FullyConnected)"]


@pytest.mark.skipif(not HAS_OPENVINO, reason="the openvino package is not installed")
def test_openvino_counts_each_layer_but_constants_inputs_and_outputs(tmp_path):
    tables = [np.arange(8, dtype=np.float32).reshape(4, 2) + 10 * k for k in range(2)]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["t0", "i"], ["a"], axis=0),
         helper.make_node("Gather", ["t1", "i"], ["b"], axis=0),
         helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], "gathers",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor(f"t{k}", TensorProto.FLOAT, [4, 2], tables[k].ravel().tolist())
         for k in range(2)])
    path = tmp_path / "gathers.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    runtime = rt.OpenVinoRuntime(path)
    # two Gathers of two constant tables, their Concat, and the int64 indices' Convert
    assert runtime.placement == {"CPU": {"Concatenation": 1, "Convert": 1, "Gather": 2}}
    np.testing.assert_array_equal(runtime.run({"i": np.array([1, 3])}),
                                  [[2, 3, 12, 13], [6, 7, 16, 17]])


def test_openvino_refusals_name_the_first_five():
    assert rt.unplaced_refusal([]) is None
    names = [f"op{i}" for i in range(7)]
    assert rt.unplaced_refusal(names) == ("OpenVINO's CPU plugin cannot run 7 op(s): op0, op1, "
                                          "op2, op3, op4")
    assert rt.unplaced_refusal(["a"]) == "OpenVINO's CPU plugin cannot run 1 op(s): a"
    f32, bf16 = "<Type: 'float32'>", "<Type: 'bfloat16'>"
    assert rt.precision_refusal(f32, []) is None
    assert rt.precision_refusal(bf16, []) == (
        "OpenVINO ignored INFERENCE_PRECISION_HINT=f32 (<Type: 'bfloat16'>): ")
    assert rt.precision_refusal(f32, names) == (
        "OpenVINO ignored INFERENCE_PRECISION_HINT=f32 (<Type: 'float32'>): op0, op1, op2, op3, "
        "op4")


# --- table files -------------------------------------------------------------------------------

def test_a_file_runtime_reads_rows_as_stored(artifacts):
    path = artifacts["table.npy"]
    runtime = rt.FileRuntime(path, _manifest(path))
    assert runtime.name == "file" and runtime.placement is None
    rows = runtime.rows(2, 6)
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, _integer_pe(range(2, 6)))
    runtime.close()
    with pytest.raises(ValueError):
        runtime.rows(0, 1)  # closed


def test_an_int8_file_is_dequantised_within_its_bound(artifacts):
    path = artifacts["int8.bin"]
    manifest = _manifest(path)
    runtime = rt.FileRuntime(path, manifest)
    rows = runtime.rows(3, 8)
    runtime.close()
    assert rows.dtype == np.float64 and rows.shape == (5, 2)
    assert np.abs(rows - _integer_pe(range(3, 8))).max() <= manifest["quant"]["bound"]
    assert np.any(rows != np.round(rows))  # not the stored integers


# --- C headers ---------------------------------------------------------------------------------

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler here")


def _rebuilt(path):
    return rb.rebuild(path, rb.read_manifest(path))


@needs_cc
def test_a_c_compute_header_is_compiled_and_evaluates_positions(artifacts):
    path = artifacts["gray.h"]
    runtime = rt.CRuntime(path, _manifest(path), _rebuilt(path))
    tmp = Path(runtime._tmp.name)
    assert runtime.name == "c" and runtime.placement is None and tmp.is_dir()
    assert tmp.name.startswith("edgepe-verify-c-")
    positions = np.arange(8, dtype=np.int64)
    np.testing.assert_array_equal(runtime.run({"positions": positions}), _gray(positions))
    runtime.close()
    assert not tmp.exists()


@needs_cc
def test_a_c_bias_header_evaluates_every_query_key_pair(artifacts):
    path = artifacts["alibi.h"]
    runtime = rt.open_positions_runtime("c", path, _manifest(path), _rebuilt(path))
    assert isinstance(runtime, rt.CRuntime)
    q, k = np.array([0, 1, 3], dtype=np.int64), np.array([3, 0], dtype=np.int64)
    out = runtime.run({"positions": q, "key_positions": k})
    runtime.close()
    assert out.shape == (2, 3, 2)
    np.testing.assert_allclose(out, _alibi(q, k), rtol=1e-7, atol=0)


@needs_cc
def test_a_c_table_header_gives_dequantised_rows(artifacts):
    path = artifacts["int8.h"]
    manifest = _manifest(path)
    runtime = rt.CRuntime(path, manifest, _rebuilt(path))
    rows = runtime.rows(2, 8)
    runtime.close()
    file = rt.FileRuntime(artifacts["int8.bin"], _manifest(artifacts["int8.bin"]))
    same = file.rows(2, 8)
    file.close()
    assert rows.shape == (6, 2) and rows.dtype == np.float64
    np.testing.assert_array_equal(rows, same)  # the bin file's dequantised rows
    assert np.abs(rows - _integer_pe(range(2, 8))).max() <= manifest["quant"]["bound"]


def test_a_c_header_that_is_not_the_rebuild_is_never_compiled(artifacts, tmp_path):
    path = artifacts["gray.h"]
    for rebuilt in (None, _edited_rebuild(path, tmp_path)):
        with pytest.raises(ParityError) as caught:
            rt.CRuntime(path, _manifest(path), rebuilt)
        assert str(caught.value) == (f"{str(path)!r} is not compiled: only a C header whose "
                                     "bytes equal the rebuild is ever compiled and run")


def _edited_rebuild(path, tmp_path):
    edited = tmp_path / "edited.h"
    edited.write_bytes(path.read_bytes() + b"/* edited */\n")
    shutil.copyfile(f"{path}.json", f"{edited}.json")
    rebuilt = rb.rebuild(edited, rb.read_manifest(edited))
    assert rebuilt is not None and not rebuilt.reproduced
    return rebuilt


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None,
                    reason="executorch is not installed")
def test_an_executorch_program_is_read_from_its_bytes_and_run(tmp_path):
    path = tmp_path / "gray.pte"
    export(ExportConfig(resolve("gray", 8), format="pte", out=path))
    rt.open_positions_runtime("executorch", path, _manifest(path))  # executorch's own set-up
    fds = _open_fds()
    runtime = rt.open_positions_runtime("executorch", path, _manifest(path))
    assert _open_fds() == fds  # the program is read from its bytes; the file is closed
    positions = np.arange(8, dtype=np.int64)
    np.testing.assert_array_equal(runtime.run({"positions": positions}), _gray(positions))


def _open_fds():
    """This process's open descriptors (Linux's /proc; None elsewhere)."""
    fds = Path("/proc/self/fd")
    return len(list(fds.iterdir())) if fds.is_dir() else None


def test_an_executorch_path_that_is_not_a_file_is_refused_naming_the_artifact(tmp_path):
    with pytest.raises(ArtifactError) as caught:
        rt.open_positions_runtime("executorch", tmp_path, {})
    assert str(caught.value) == (f"artifact {str(tmp_path)!r} is not a file (it is a folder): "
                                 "edgepe reads regular files only")
