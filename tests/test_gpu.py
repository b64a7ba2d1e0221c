"""onnxruntime's CUDA provider: parity on the GPU and where each node really ran.

onnxruntime's CUDA provider has no BitShift or Bitwise kernels (DESIGN.md, facts of the platform):
a ``--lowering bitwise`` graph still runs, with those nodes on the CPU, and the verifier must say
so (and fail ``--strict-placement``); ``--lowering arith`` keeps every node on the GPU. Issue
44 adds the sliced artifacts (plain, fused by ``--rope-lowering ort|rotary23``, int8), the fused
graph at N past CUDA's 65,535-row grid limit, ``--target ort-cuda``'s sliced lowering and a
grafted Llama (table, sliced, fused). These tests need onnxruntime-gpu (docs/readme/verify.md:
the GPU install) on a CUDA machine and skip with that reason elsewhere; ``scripts/gpu_check.sh``
runs them.
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


# -- issue 44: the sliced artifacts, the targets' lowerings and a grafted model on CUDA ------

CUDA_SESSION = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
SLICED = {
    "rope": {}, "rope-ort": {"extra": {"rope_lowering": "ort"}},
    "rope-rotary23": {"opset": 23, "extra": {"rope_lowering": "rotary23"}},
    "rope-int8": {"quantize": "int8"},
    "rope-ort-int8": {"quantize": "int8", "extra": {"rope_lowering": "ort"}},
    "sinusoidal": {}, "sinusoidal-ort": {"extra": {"rope_lowering": "ort"}},
    "sinusoidal-half-rotary23": {"opset": 23, "extra": {"rope_lowering": "rotary23"}},
}


def _sliced(tmp_path, name: str, max_len: int = 32768, d: int = 128):
    scheme = name.split("-")[0]
    params = {"layout": "half"} if "-half" in name else None
    out = tmp_path / f"{name}.onnx"
    export(ExportConfig(scheme=resolve(scheme, max_len, d, None, params), mode="sliced",
                        out=out, **SLICED[name]))
    return out


@pytest.mark.parametrize("name", list(SLICED))
def test_sliced_artifacts_verify_on_cuda(tmp_path, name):
    """Plain, fused (``--rope-lowering ort|rotary23``) and int8 sliced graphs of rope and
    sinusoidal pass ``verify --providers cuda`` (every position, the probe, and one call of
    ``PAST_KERNEL_LIMITS`` positions past CUDA's grid limit)."""
    report = verify_artifact(_sliced(tmp_path, name), providers=["cuda"])
    assert report, str(report)


@pytest.mark.parametrize("name", ["rope-ort", "rope-rotary23", "sinusoidal-ort",
                                  "sinusoidal-half-rotary23"])
@pytest.mark.parametrize("n", [65535, 65536, 262144, 1048576])
def test_the_fused_graph_runs_on_cuda_at_any_n(tmp_path, name, n):
    """Issue 44 point 1: ``CUDA failure 1: invalid argument`` from 65,536 rows per call before
    the rows were folded (``graphs.sliced.fold``); now every N runs, its RotaryEmbedding on CUDA,
    and equals the CPU provider's rows within twice the bound (both within it of the
    definition)."""
    import numpy as np

    from edgepe.graphs import sliced as sl

    path = _sliced(tmp_path, name)
    p = (np.arange(n, dtype=np.int64) * 7919) % 65535 - 32767
    gpu = ort.InferenceSession(str(path), providers=CUDA_SESSION)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got, want = gpu.run(None, {"positions": p})[0], cpu.run(None, {"positions": p})[0]
    assert got.shape == (n, 128)
    assert float(np.abs(got - want).max()) <= 2 * sl.bound(sl.default_plan(32768))


@pytest.mark.parametrize("scheme", ["rope", "sinusoidal"])
def test_what_export_target_ort_cuda_writes_for_sliced_runs_every_node_on_the_gpu(tmp_path,
                                                                                  scheme):
    """The targets' lowering for ``--mode sliced`` (``trunc``: no bitwise kernels on CUDA)."""
    from edgepe import api
    from edgepe.targets import for_export

    config, _ = for_export(api.make_config(scheme, 4096, d_model=64, mode="sliced"), "ort-cuda",
                           lowering_given=False)
    assert config.lowering == "trunc"
    result = export(config.with_out(tmp_path / f"{scheme}.onnx"))
    report = verify_artifact(result.path, providers=["cuda"], strict_placement=True)
    assert report, str(report)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny random-weight Llama (tests/_hf_models.py), exported once for the module."""
    pytest.importorskip("transformers", reason="the Llama model needs transformers")
    import _hf_models

    return _hf_models.export("llama", tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("options", [{"mode": "table"}, {"mode": "sliced"},
                                     {"mode": "table", "rope_lowering": "ort"}])
def test_a_grafted_llama_equals_the_original_on_cuda(tmp_path, llama, options):
    """A tiny random-weight Llama (tests/_hf_models.py) grafted as table, sliced and fused
    (``--rope-lowering ort``): on CUDA its outputs equal the original's on CUDA (the issue's
    run: within 1.2e-7), prefill and a decode step."""
    import numpy as np

    from edgepe.graft import graft_found
    from edgepe.graft.prove import hf_feeds

    path = llama
    out = tmp_path / "grafted.onnx"
    graft_found(path, out, max_len=256, **options)
    theirs = ort.InferenceSession(str(path), providers=CUDA_SESSION)
    mine = ort.InferenceSession(str(out), providers=CUDA_SESSION)
    names = [o.name for o in theirs.get_outputs()]
    rng = np.random.default_rng(7)
    for seq, past in ((6, 0), (1, 200)):
        feeds = hf_feeds(theirs, seq, past, 0, 256, rng)
        for name, w, g in zip(names, theirs.run(names, feeds), mine.run(names, feeds),
                              strict=True):
            # one float32 attention on the same provider: the PE's few ulp, carried through
            assert float(np.abs(g - w).max()) <= 1e-5, (name, seq, past)
