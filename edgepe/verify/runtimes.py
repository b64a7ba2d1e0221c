"""The runtimes an artifact is verified on, behind one small interface each.

- ONNX artifacts: every installed onnxruntime execution provider (``OrtRuntime``, with a
  placement audit from its profiler) and the ONNX reference evaluator (``RefRuntime``, an
  independent reading of the operator spec in Python).
- Table files (npy, bin): ``FileRuntime`` reads the rows back as a consumer would, from the
  manifest alone (dtype, shape, bitorder, quant).
- C headers: ``CRuntime`` compiles and runs them through ``edgepe.verify.c_runner``.
- ExecuTorch programs (``.pte``): ``edgepe.formats.pte.Program`` in ExecuTorch's runtime.
- TFLite models (``.tflite``): ``edgepe.formats.tflite.Program`` in LiteRT's interpreter
  (``litert``) and TFLM's (``tflm``, its reference kernels), each where installed.

Names are forgiving (STYLE 6): ``cpu``, ``CUDA``, ``trt``/``tensorrt``, ``openvino``, ``dml``
match case-insensitively; an unknown or unavailable one is a ``BadParameterError`` that lists
what this artifact can run on.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.errors import BadParameterError, ParityError
from edgepe.contract.manifest import open_regular
from edgepe.formats.bin import dequantise
from edgepe.graphs.sessions import quiet_options
from edgepe.runtime import with_options

# Short names for onnxruntime's providers; anything else matches its full name or the name
# without "ExecutionProvider" (case-insensitive).
ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "trt-rtx": "NvTensorRTRTXExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "ov": "OpenVINOExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "dnnl": "DnnlExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "qnn": "QNNExecutionProvider",
}
# Azure's provider calls remote endpoints and runs no node itself: nothing to verify on it.
NOT_COMPUTE = {"AzureExecutionProvider"}
CPU_PROVIDER = "CPUExecutionProvider"
REF = "ref"
FILE = "file"
C = "c"
# OpenVINO itself (the `openvino` package, `pip install 'edgepe[openvino]'`), not onnxruntime's
# OpenVINO provider: the name wins over that provider's alias when the package is installed.
OPENVINO = "openvino"
EXECUTORCH = "executorch"
LITERT, TFLM = "litert", "tflm"


def short_name(provider: str) -> str:
    """``CUDAExecutionProvider`` -> ``cuda`` (the name reports and ``--providers`` use)."""
    for alias, full in ALIASES.items():
        if full == provider:
            return alias
    return provider.removesuffix("ExecutionProvider").lower()


def ort_providers() -> list[str]:
    """The installed onnxruntime providers that execute nodes, in onnxruntime's priority order."""
    import onnxruntime as ort

    return [p for p in ort.get_available_providers() if p not in NOT_COMPUTE]


def openvino_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def available(fmt: str) -> list[str]:
    """Runtime names that can run an artifact of format ``fmt``."""
    if fmt == "onnx":
        ort_names = [short_name(p) for p in ort_providers() if short_name(p) != OPENVINO]
        return ort_names + [REF] + ([OPENVINO] if openvino_installed() else [])
    if fmt == "c":
        return [C]
    if fmt == "pte":
        return [EXECUTORCH]
    if fmt == "tflite":
        from edgepe.formats.tflite import installed

        return installed()
    return [FILE]


def default_runtimes(fmt: str, quick: bool = False) -> list[str]:
    """What ``edgepe verify`` runs when ``--providers`` is not given: everything installed here
    that can run ``fmt`` (for ONNX, every onnxruntime provider that executes nodes, then the
    reference evaluator). The export's quick check runs the CPU provider alone."""
    if fmt == "onnx" and quick:
        return ["cpu"]
    # OpenVINO runs when asked for (--providers openvino): its profile refuses some graphs
    # that every onnxruntime provider runs (edgepe.targets.profiles.OPENVINO).
    return [name for name in available(fmt) if name != OPENVINO]


def resolve_runtimes(names: list[str] | tuple[str, ...], fmt: str) -> list[str]:
    """Canonical runtime names for ``names`` (deduplicated, in order); unknown ones are refused."""
    allowed = available(fmt)
    resolved: list[str] = []
    for raw in names:
        name = str(raw).strip()
        key = name.lower()
        if not key:
            continue
        if key == "ov":
            key = OPENVINO
        if fmt == "onnx" and key not in (REF, OPENVINO):
            full = ALIASES.get(key)
            if full is None:
                full = next(
                    (p for p in _all_ort_providers()
                     if key in (p.lower(), p.lower().removesuffix("executionprovider"))),
                    None,
                )
            key = short_name(full) if full else key
        if key not in allowed:
            raise BadParameterError(
                f"runtime {name!r} is not available for {fmt} artifacts here; "
                f"available: {', '.join(allowed)}"
                + (" (the CUDA and TensorRT providers come with onnxruntime-gpu: see the "
                   "README's GPU install)" if fmt == "onnx" and key in ("cuda", "trt") else "")
                + (" (pip install 'edgepe[openvino]')" if fmt == "onnx" and key == OPENVINO
                   else "")
            )
        if key not in resolved:
            resolved.append(key)
    if not resolved:
        raise BadParameterError(f"--providers is empty; available: {', '.join(allowed)}")
    return resolved


def _all_ort_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_all_providers())


class OrtRuntime:
    """An onnxruntime session on one execution provider (with CPU as onnxruntime's fallback).

    The first ``run`` is profiled: ``placement`` then says how many nodes of each op type ran
    on each provider (the ``args.provider`` of the trace's ``Node`` events).
    """

    def __init__(self, name: str, path: Path, split=None) -> None:
        import onnxruntime as ort

        self.name = name
        self.split = split  # a streamed table read in place (edgepe.formats.onnx_table)
        self.provider = ALIASES.get(name) or next(
            p for p in ort_providers() if short_name(p) == name
        )
        # onnxruntime's own log off: a failure is the report's, in one line (issue 41)
        options = quiet_options()
        self._profile_dir = tempfile.mkdtemp(prefix="edgepe-profile-")
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(self._profile_dir, "ort")
        providers = [self.provider] + ([CPU_PROVIDER] if self.provider != CPU_PROVIDER else [])
        # float32 stays float32 on GPUs (no TF32 MatMul: edgepe.runtime.PROVIDER_OPTIONS)
        source = str(path) if split is None else split.runtime_model().SerializeToString()
        self.session = ort.InferenceSession(source, options, providers=with_options(providers))
        self.output = self.session.get_outputs()[0].name
        self.placement: dict[str, dict[str, int]] | None = None

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if self.split is None:
            out = self.session.run([self.output], feeds)[0]
        else:
            out = self.session.run([self.output], self.split.feeds(feeds))[0]
            self.split.release()
        if self.placement is None:
            self.placement = self._read_profile()
        return out

    def _read_profile(self) -> dict[str, dict[str, int]]:
        # end_profiling writes the trace and stops profiling: later runs are not slowed down.
        trace = Path(self.session.end_profiling())
        try:
            events = json.loads(trace.read_text())
        finally:
            trace.unlink(missing_ok=True)
        return placement_from_trace(events)

    def close(self) -> None:
        import shutil

        shutil.rmtree(self._profile_dir, ignore_errors=True)


def placement_from_trace(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{provider: {op_type: node count}}`` from an onnxruntime profiling trace."""
    seen: dict[str, tuple[str, str]] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") == "Node" and "provider" in args:
            node = str(event.get("name", "")).removesuffix("_kernel_time")
            seen[node] = (args["provider"], args.get("op_name", "?"))
    placement: dict[str, Counter] = {}
    for provider, op in seen.values():
        placement.setdefault(provider, Counter())[op] += 1
    return {p: dict(sorted(c.items())) for p, c in sorted(placement.items())}


class RefRuntime:
    """``onnx.reference.ReferenceEvaluator``: the ONNX spec's own Python reading of the graph."""

    name = REF
    placement = None

    def __init__(self, path: Path, split=None) -> None:
        import onnx
        from onnx.reference import ReferenceEvaluator

        self.split = split  # a streamed table read in place (edgepe.formats.onnx_table)
        model = onnx.load(path) if split is None else split.runtime_model()
        self.session = ReferenceEvaluator(model)
        self.output = model.graph.output[0].name

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        # A float16 output past 65504 is inf by the spec (Cast); NumPy would warn about it.
        with np.errstate(over="ignore"):
            if self.split is None:
                return np.asarray(self.session.run([self.output], feeds)[0])
            out = np.asarray(self.session.run([self.output], self.split.feeds(feeds))[0])
        self.split.release()
        return out


class OpenVinoRuntime:
    """OpenVINO's CPU plugin running the graph through its ONNX frontend, in float32.

    The CPU plugin computes float32 graphs in bfloat16 by default on CPUs with AVX512-BF16
    (these machines: the demo graph is off by 0.0037 at L = 512, 1.24 on the issue's), as CUDA
    defaults to TF32: ``CONFIG`` asks for f32, and the compiled model is checked to have it.
    The graph is read from its bytes (no path from the artifact is ever opened: ONNX external
    data cannot resolve). Placement proof, before any run: ``Core.query_model`` must map every
    op of the converted model to the CPU device (an op the plugin cannot run would be missing:
    nothing can fall back, as there is no second device), and no op of the compiled runtime
    graph may run in bf16/f16. ``placement``: ``{"CPU": {layerType: count}}`` of that graph.
    """

    name = OPENVINO
    CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
    LOW_PRECISION = ("bf16", "f16")

    def __init__(self, path: Path, config: dict[str, str] | None = None) -> None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(model=Path(path).read_bytes())
        on_cpu = core.query_model(model, "CPU")
        refusal = unplaced_refusal([op.get_friendly_name() for op in model.get_ops()
                                    if on_cpu.get(op.get_friendly_name()) != "CPU"])
        if refusal:
            raise RuntimeError(refusal)
        self.compiled = core.compile_model(model, "CPU", self.CONFIG if config is None
                                           else config)
        self.precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        layers: Counter = Counter()
        self.low_precision: list[str] = []
        for op in self.compiled.get_runtime_model().get_ops():
            info = op.get_rt_info()
            kind = info["layerType"].astype(str)
            if kind in ("Input", "Output", "Const"):
                continue
            layers[kind] += 1
            if info["runtimePrecision"].astype(str) in self.LOW_PRECISION:
                self.low_precision.append(f"{op.get_friendly_name()} ({kind})")
        refusal = precision_refusal(self.precision, self.low_precision)
        if config is None and refusal:
            raise RuntimeError(refusal)
        self.placement = {"CPU": dict(sorted(layers.items()))}
        self.output = self.compiled.outputs[0]

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.compiled(feeds)[self.output])


def unplaced_refusal(missing: list[str]) -> str | None:
    """Why OpenVINO cannot run a graph: the ops ``Core.query_model`` did not map to the CPU
    (the first five named), or ``None`` when there are none."""
    if not missing:
        return None
    return f"OpenVINO's CPU plugin cannot run {len(missing)} op(s): {', '.join(missing[:5])}"


def precision_refusal(precision: str, low_precision: list[str]) -> str | None:
    """Why a model compiled with ``OpenVinoRuntime.CONFIG`` is not float32: its inference
    precision is not float32, or some ops run in bf16/f16 (the first five named); else ``None``."""
    if not low_precision and "float32" in precision:
        return None
    return (f"OpenVINO ignored INFERENCE_PRECISION_HINT=f32 ({precision}): "
            f"{', '.join(low_precision[:5])}")


def open_onnx(name: str, path: Path, split=None):
    """The runtime called ``name`` (a canonical name from ``resolve_runtimes``) for a graph;
    ``split``: its table read in place (``edgepe.formats.onnx_table.split_table``; onnxruntime
    and the reference evaluator)."""
    if name == OPENVINO:
        return OpenVinoRuntime(path)
    return RefRuntime(path, split) if name == REF else OrtRuntime(name, path, split)


class FileRuntime:
    """A table file (npy or bin) read back from its manifest alone, by the format's reader.

    ``rows(start, stop)`` reads only those rows' bytes (``edgepe.formats.bin.Rows``: float16/uint8
    as stored, ``bit`` unpacked with the manifest's ``bitorder``), int8 dequantised as
    ``scale * (q - zero_point)`` (``edgepe.formats.bin.dequantise``).
    """

    name = FILE
    placement = None

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        from edgepe.formats import bin, npy

        self.manifest = manifest
        self._rows = (npy if manifest["format"] == "npy" else bin).open_rows(path, manifest)

    def rows(self, start: int, stop: int) -> np.ndarray:
        return dequantise(self._rows.rows(start, stop), self.manifest.get("quant"), start)

    def close(self) -> None:
        self._rows.close()


class CRuntime:
    """A C header compiled (once, ``-O2`` plus edgepe's strict warning flags) into a program that
    prints its values (``edgepe.verify.c_runner``): a compute header evaluates positions
    (``run``), a table header gives rows (``rows``, int8 dequantised like ``FileRuntime``)."""

    name = C
    placement = None

    def __init__(self, path: Path, manifest: dict[str, Any], rebuilt) -> None:
        from edgepe.verify import c_runner

        # No code from an artifact runs unless it was rebuilt byte for byte (issue 23): a header
        # another version wrote, or one that differs, is never compiled.
        if rebuilt is None or not rebuilt.reproduced:
            raise ParityError(f"{str(path)!r} is not compiled: only a C header whose bytes equal "
                              "the rebuild is ever compiled and run")
        self.manifest = manifest
        self._tmp = tempfile.TemporaryDirectory(prefix="edgepe-verify-c-")
        try:
            self._exe = c_runner.compile_program(path, manifest, self._tmp.name)
        except BaseException:
            self._tmp.cleanup()
            raise
        self._run = c_runner.run_program

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if "key_positions" in feeds:  # a bias function f(t, u): every (query, key) pair
            t, u = feeds["positions"], feeds["key_positions"]
            pairs = np.stack(np.broadcast_arrays(t[:, None], u[None, :]), axis=-1)
            out = self._run(self._exe, self.manifest, pairs.reshape(-1, 2))
            return out.reshape(len(t), len(u), -1).transpose(2, 0, 1)  # [H, N, M]
        return self._run(self._exe, self.manifest, feeds["positions"])

    def rows(self, start: int, stop: int) -> np.ndarray:
        values = self._run(self._exe, self.manifest, np.arange(start, stop, dtype=np.int64))
        return dequantise(values, self.manifest.get("quant"), start)

    def close(self) -> None:
        self._tmp.cleanup()


def open_positions_runtime(name: str, path: Path, manifest: dict[str, Any], rebuilt=None):
    """A runtime that evaluates positions: an onnxruntime provider, ``ref``, or a C compute
    header (``c``, only when ``rebuilt`` says its bytes equal the rebuild)."""
    if name == C:
        return CRuntime(path, manifest, rebuilt)
    if name == EXECUTORCH:
        from edgepe.formats.pte import Program

        with open(open_regular(path, "artifact"), "rb", closefd=True) as f:
            return Program(f.read(), manifest)
    if name in (LITERT, TFLM):
        from edgepe.formats.tflite import Program as TfliteProgram
        from edgepe.formats.tflite import read_file

        return TfliteProgram(read_file(path), manifest, name)
    from edgepe.formats.onnx_table import split_table

    return open_onnx(name, path, split_table(path, manifest))
