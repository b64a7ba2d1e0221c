"""onnxruntime's CUDA provider: parity on the GPU and where each node really ran.

onnxruntime's CUDA provider has no BitShift or Bitwise kernels (DESIGN.md, facts of the platform):
a ``--lowering bitwise`` graph still runs, with those nodes on the CPU, and the verifier must say
so (and fail ``--strict-placement``); ``--lowering arith`` keeps every node on the GPU. These tests
need onnxruntime-gpu (docs/readme/verify.md: the GPU install) on a CUDA machine and skip with
that reason elsewhere.
"""

from __future__ import annotations

from dataclasses import replace

import onnxruntime as ort
import pytest
from test_parity_grid import CELLS, artifacts, check_cell  # noqa: F401 (artifacts: a fixture)
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.export import ExportConfig, export
from edgepe.schemes import resolve
from edgepe.verify import verify_artifact

CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not CUDA,
        reason=f"onnxruntime {ort.__version__} here has no CUDAExecutionProvider (providers: "
        f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu on a CUDA "
        "machine (docs/readme/verify.md)",
    ),
]
# The default grid's ONNX cells, on the CUDA provider instead of the CPU one.
CUDA_CELLS = [replace(c, runtime="cuda") for c in CELLS
              if c.format == "onnx" and c.runtime == "cpu"]
BITWISE = {"BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"}


def _export(tmp_path, scheme="gray", lowering="bitwise", max_len=512):
    out = tmp_path / f"{scheme}-{lowering}.onnx"
    export(ExportConfig(scheme=resolve(scheme, max_len), lowering=lowering, out=out))
    return out


def test_bitwise_nodes_fall_back_to_the_cpu_and_the_report_says_so(tmp_path):
    path = _export(tmp_path)
    report = verify_artifact(path, providers=["cuda"])
    result = report.results[0]
    assert report, str(report)  # parity holds wherever the nodes ran
    on_cpu = result.placement.get("CPUExecutionProvider", {})
    assert BITWISE & set(on_cpu), result.placement
    assert "--lowering arith" in result.placement_note


def test_strict_placement_fails_the_bitwise_graph_on_cuda(tmp_path):
    path = _export(tmp_path)
    result = CliRunner().invoke(app, ["verify", str(path), "--providers", "cuda",
                                      "--strict-placement"])
    assert result.exit_code == 1
    assert "ran on the CPU" in result.output and "--lowering arith" in result.output


@pytest.mark.parametrize("scheme", ["gray", "binary", "binary-2d"])
def test_the_arith_lowering_runs_every_node_on_the_gpu(tmp_path, scheme):
    path = _export(tmp_path, scheme, lowering="arith")
    report = verify_artifact(path, providers=["cuda"], strict_placement=True)
    result = report.results[0]
    assert report, str(report)
    assert set(result.placement) == {"CUDAExecutionProvider"}, result.placement


@pytest.mark.parametrize("cell", CUDA_CELLS, ids=lambda c: c.id)
def test_the_onnx_grid_on_cuda(cell, artifacts):  # noqa: F811 (the grid's fixture)
    """Every ONNX cell of the default parity grid, on the CUDA provider (same tolerances)."""
    check_cell(cell, artifacts(cell))


@pytest.mark.parametrize("lowering", ["arith32", "float"])
@pytest.mark.parametrize("scheme", ["gray", "binary", "binary-2d", "hierarchical"])
def test_the_int32_and_float_lowerings_run_every_node_on_the_gpu(tmp_path, scheme, lowering):
    """Issue 17: the lowerings for runtimes without bitwise kernels stay on the GPU as well."""
    path = _export(tmp_path, scheme, lowering=lowering)
    report = verify_artifact(path, providers=["cuda"], strict_placement=True)
    assert report, str(report)
    assert set(report.results[0].placement) == {"CUDAExecutionProvider"}


@pytest.mark.parametrize("scheme", ["gray", "sinusoidal", "integer-norm", "alibi"])
def test_what_export_target_ort_cuda_writes_runs_every_node_on_the_gpu(tmp_path, scheme):
    from edgepe import api
    from edgepe.targets import for_export

    config, _ = for_export(api.make_config(scheme, 256), "ort-cuda", lowering_given=False)
    result = export(config.with_out(tmp_path / f"{scheme}.onnx"))
    report = verify_artifact(result.path, providers=["cuda"], strict_placement=True)
    assert report, str(report)
