"""``edgepe verify`` on a GPU provider also runs one call past every kernel limit edgepe knows
(issue 44 point 2: onnxruntime's CUDA RotaryEmbedding failed from 65,536 rows per call, which the
verifier's chunks never reached). The call itself (``verify._past_kernel_limits``) is exercised
here on onnxruntime's CPU provider, with real graphs: the fused sliced artifact passes it, and a
graph that really fails past 65,535 rows (a Gather from a 65,535-row table at ``Range(N)``, as a
grid-limited kernel fails) is reported in one line. tests/test_gpu.py runs it on CUDA.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from edgepe import verify as v
from edgepe.contract.config import ExportConfig
from edgepe.export import export
from edgepe.schemes import resolve
from edgepe.verify import runtimes as rt
from edgepe.verify.sweep import onnx_chunks


def _first_chunk(path):
    from edgepe.rebuild import read_manifest, rebuild
    from edgepe.schemes.definition import Definition

    manifest = read_manifest(path)
    rebuilt = rebuild(path, manifest)
    module = Definition(rebuilt.module)
    inputs, _ = v._check_file(path, manifest)
    chunk = next(c for c in onnx_chunks(rebuilt.config.scheme, module, rebuilt.manifest, True,
                                        inputs) if not c.probe)
    return manifest, rebuilt, chunk


def test_the_fused_graph_passes_one_call_past_the_grid_limit(tmp_path):
    path = tmp_path / "r.onnx"
    export(ExportConfig(scheme=resolve("rope", 4096, 32), mode="sliced",
                        extra={"rope_lowering": "ort"}, out=path))
    manifest, rebuilt, chunk = _first_chunk(path)
    runtime = rt.open_positions_runtime("cpu", path, manifest, rebuilt)
    comparison = v.Comparison("cpu", v.tolerance_for(rebuilt.manifest))
    v._past_kernel_limits(runtime, chunk, comparison, rebuilt.manifest)
    result = comparison.finish()
    assert result.error is None and result.passed, str(result)
    reps = -(-v.PAST_KERNEL_LIMITS // len(chunk.feeds["positions"]))
    assert result.elements == reps * chunk.expected.size
    assert v.PAST_KERNEL_LIMITS == 131071 > 2 * 65535


class _Rows:
    """A real onnxruntime session whose graph fails past 65,535 rows per call."""

    def __init__(self, width: int):
        table = numpy_helper.from_array(np.zeros((65535, width), np.float32), "table")
        nodes = [helper.make_node("Shape", ["positions"], ["n"]),
                 helper.make_node("Squeeze", ["n"], ["n0"]),
                 helper.make_node("Range", ["zero", "n0", "one"], ["rows"]),
                 helper.make_node("Gather", ["table", "rows"], ["pe"])]
        graph = helper.make_graph(
            nodes, "rows", [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
            [helper.make_tensor_value_info("pe", TensorProto.FLOAT, ["N", width])],
            [table, numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        options = ort.SessionOptions()  # as written: optimised, the Gather of a Range is a
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # Slice
        self.session = ort.InferenceSession(model.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])

    def run(self, feeds):
        return self.session.run(None, feeds)[0]


def test_a_graph_failing_past_65535_rows_fails_verify_in_one_line(tmp_path):
    path = tmp_path / "r.onnx"
    export(ExportConfig(scheme=resolve("rope", 4096, 32), mode="sliced", out=path))
    manifest, rebuilt, chunk = _first_chunk(path)
    comparison = v.Comparison("cuda", v.tolerance_for(rebuilt.manifest))
    v._past_kernel_limits(_Rows(32), chunk, comparison, rebuilt.manifest)
    error = comparison.finish().error
    assert error.startswith("run of ") and "positions in one call (past 65535 rows: CUDA's " \
        "grid limit) failed: " in error and "\n" not in error


def test_only_gpu_providers_make_the_call_and_only_for_rows_of_positions(tmp_path):
    """The CPU sweep stays as it was (its elements are the sweep's, far fewer than one call
    past the limit); graphs of another input (apply's ``x``), no positions or rows wider than
    ``PAST_LIMITS_ELEMENTS`` allow are not called at all (a runtime that fails would say so)."""
    assert v.GPU_RUNTIMES == ("cuda", "trt") and v.PAST_LIMITS_ELEMENTS == 2**27
    path = tmp_path / "r.onnx"
    export(ExportConfig(scheme=resolve("rope", 4096, 32), mode="sliced",
                        extra={"rope_lowering": "ort"}, out=path))
    report = v.verify_artifact(path, providers=["cpu"], quick=True)
    assert report and report.results[0].elements < v.PAST_KERNEL_LIMITS * 32
    manifest, rebuilt, chunk = _first_chunk(path)
    fails = _Rows(1)  # any call of it past 65535 positions fails
    for feeds, expected in (
            ({**chunk.feeds, "x": chunk.feeds["positions"]}, chunk.expected),  # apply
            ({"positions": chunk.feeds["positions"][:0]}, chunk.expected[:0]),  # none
            ({"positions": chunk.feeds["positions"][None]}, chunk.expected),  # not [N]
            (chunk.feeds, chunk.expected[:-1]),  # not a row per position
            (chunk.feeds, np.zeros((len(chunk.expected), 1025), np.float32))):  # too wide
        odd = type(chunk)(feeds=feeds, expected=expected, where=chunk.where,
                          positions=chunk.positions)
        comparison = v.Comparison("cuda", v.tolerance_for(rebuilt.manifest))
        v._past_kernel_limits(fails, odd, comparison, rebuilt.manifest)
        result = comparison.finish()
        assert result.error is None and result.elements == 0
    # just under the widest rows it calls: 1024 columns (131071 x 1024 < 2^27) is called
    narrow = type(chunk)(feeds=chunk.feeds, expected=np.zeros((len(chunk.expected), 1024),
                                                                np.float32),
                         where=chunk.where, positions=chunk.positions)
    comparison = v.Comparison("cuda", v.tolerance_for(rebuilt.manifest))
    v._past_kernel_limits(fails, narrow, comparison, rebuilt.manifest)
    assert comparison.finish().error.startswith("run of ")
