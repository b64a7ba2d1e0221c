"""Issue 44's GPU timings: rope and sinusoidal on onnxruntime's CUDA provider, per call.

    python scripts/gpu_timings.py OUT.json [--quick]   (a CUDA machine with onnxruntime-gpu;
                                                        edgepe importable; gpu_check.sh runs it)

Without a CUDA provider it times the CPU provider instead and says so (a dry run of the script;
``--quick``: N = 65536 only, 3 calls).

Candidates, head dim / d_model 128, max_len 32768, N positions below 32768 (seeded): ``sincos``
(``--mode compute``, the GPU's form), ``cache`` (a ``Gather`` of the full float32 cache),
``sliced-cuda`` (``--mode sliced`` as ``--target ort-cuda`` writes it: ``--lowering trunc``), and
the fused ``sliced-ort`` / ``sliced-rotary23`` (``--rope-lowering``; bitwise slicing, whose
BitwiseAnd nodes run on the CPU provider). N = 65535 (the last N the unfolded fused graph ran
at), 65536 and 1048576. IOBinding: positions and output on the GPU, the median of ``REPS`` calls
after ``WARM``, each call synchronised. Every output is first checked against the CPU provider's
(a candidate that fails to run is recorded with its one-line error, not hidden). Prints a
markdown table and writes the figures as JSON. Never imported by the package.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MAX_LEN, D = 32768, 128
SIZES = (65535, 65536, 1048576)
REPS, WARM = 30, 5
CUDA = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]


def _export(config, module, path: Path) -> Path:
    from edgepe.export import prepare

    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    path.write_bytes(buffer.getvalue())
    return path


def _candidates(scheme_name: str, work: Path) -> dict[str, Path]:
    import torch
    from onnx import TensorProto, helper, numpy_helper, save

    from edgepe.contract.config import ExportConfig
    from edgepe.schemes import build, resolve
    from edgepe.schemes.definition import Definition

    scheme = resolve(scheme_name, MAX_LEN, D)
    module = build(scheme)
    stem = work / scheme_name
    stem.mkdir()
    paths = {
        "sincos": _export(ExportConfig(scheme), module, stem / "sincos.onnx"),
        "sliced-cuda": _export(ExportConfig(scheme, mode="sliced", lowering="trunc"), module,
                               stem / "sliced-trunc.onnx"),
        "sliced-ort": _export(ExportConfig(scheme, mode="sliced", extra={"rope_lowering": "ort"}),
                              module, stem / "sliced-ort.onnx"),
        "sliced-rotary23": _export(ExportConfig(scheme, mode="sliced", opset=23,
                                                extra={"rope_lowering": "rotary23"}),
                                   module, stem / "sliced-rotary23.onnx"),
    }
    with torch.no_grad():
        table = Definition(module).encode64(torch.arange(MAX_LEN)).numpy().astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "positions"], ["pe"])], "cache",
        [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("pe", TensorProto.FLOAT, ["N", D])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    paths["cache"] = stem / "cache.onnx"
    save(model, str(paths["cache"]))
    return paths


def _time(session, positions: np.ndarray, device: str, reps: int) -> float:
    import onnxruntime as ort

    binding = session.io_binding()
    binding.bind_ortvalue_input("positions", ort.OrtValue.ortvalue_from_numpy(positions,
                                                                             device, 0))
    binding.bind_output("pe", device, 0)
    samples = []
    for i in range(WARM + reps):
        binding.synchronize_inputs()
        t0 = time.perf_counter()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        if i >= WARM:
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def main(argv: list[str]) -> int:
    import onnxruntime as ort

    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    out = Path(args[0]) if args else Path("gpu_timings.json")
    sizes, reps = ((65536,), 3) if quick else (SIZES, REPS)
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    device, providers = ("cuda", CUDA) if cuda else ("cpu", ["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    report = {"onnxruntime": ort.__version__, "device": ort.get_device(), "rows": [],
              "timed_on": device if cuda else "cpu (no CUDAExecutionProvider here: a dry run)"}
    with tempfile.TemporaryDirectory() as folder:
        for scheme in ("rope", "sinusoidal"):
            paths = _candidates(scheme, Path(folder))
            for n in sizes:
                positions = rng.integers(0, MAX_LEN, n).astype(np.int64)
                row = {"scheme": scheme, "n": n}
                for name, path in paths.items():
                    try:
                        gpu = ort.InferenceSession(str(path), providers=providers)
                        cpu = ort.InferenceSession(str(path),
                                                   providers=["CPUExecutionProvider"])
                        got = gpu.run(None, {"positions": positions})[0]
                        want = cpu.run(None, {"positions": positions})[0]
                        row[f"{name}_err_vs_cpu"] = float(np.abs(got - want).max())
                        row[f"{name}_us"] = _time(gpu, positions, device, reps)
                    except Exception as exc:  # noqa: BLE001 - recorded, as the issue asks
                        row[f"{name}_error"] = " ".join(str(exc).split())[:200]
                print(json.dumps(row), flush=True)
                report["rows"].append(row)
    names = ("sincos", "cache", "sliced-cuda", "sliced-ort", "sliced-rotary23")
    print(f"\nonnxruntime {report['onnxruntime']} ({report['device']}), timed on "
          f"{report['timed_on']}, IOBinding, median of {reps} calls, us per call:\n")
    print("| scheme | N | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for r in report["rows"]:
        cells = [f"{r[f'{k}_us']:.1f}" if f"{k}_us" in r else "failed" for k in names]
        print(f"| {r['scheme']} | {r['n']} | " + " | ".join(cells) + " |")
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
