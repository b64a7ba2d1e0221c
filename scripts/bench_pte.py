"""The ExecuTorch part of the benchmark: the demo as a ``.pte`` beside its ONNX graph.

    .venv/bin/python scripts/bench_pte.py [--reps 61]      (or through scripts/bench.py)

For the demo (``binary``, max_len 512, d_model 64), float32 and int8 compute: the bytes of the
``.pte`` and of the ONNX graph, and the latency of one call with 512 positions, the program on
``executorch.runtime`` (its portable kernels) and the graph on onnxruntime's CPU provider with
one thread, timed round-robin in one process (the starting candidate rotates each repetition),
medians. Each output is checked against the PyTorch reference before it is timed. Needs the
``[executorch]`` extra; prints a markdown table. Never imported by the package.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the bench package
from bench.common import muted  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
POSITIONS = 512


def measure(work: Path, reps: int = 61) -> dict[str, Any]:
    """``{"rows": [...], "reps": reps}``: bytes and median latency per artifact."""
    import onnxruntime as ort
    import torch

    from edgepe import api, load
    from edgepe.formats.pte import Program

    positions = np.arange(POSITIONS, dtype=np.int64)
    runners = {}
    for quantize in ("none", "int8"):
        for fmt in ("onnx", "pte"):
            config = api.make_config("binary", 512, format=fmt, quantize=quantize,
                                     out=work / f"demo-{quantize}.{fmt}")
            with muted():  # ExecuTorch's export logs, unless -v
                result, report = api.export(config, force=True)
            assert report, str(report)
            name = f"{fmt} {'int8' if quantize == 'int8' else 'float32'}"
            if fmt == "onnx":
                options = ort.SessionOptions()
                options.intra_op_num_threads = options.inter_op_num_threads = 1
                session = ort.InferenceSession(str(result.path), options,
                                               providers=["CPUExecutionProvider"])
                run = (lambda s: lambda: s.run(None, {"positions": positions})[0])(session)
            else:
                program = Program(result.path.read_bytes(), result.manifest)
                run = (lambda p: lambda: p.run({"positions": positions}))(program)
            runners[name] = (run, result.path.stat().st_size, result.manifest)
    torch.set_num_threads(1)
    reference = load(work / "demo-none.onnx").encode(positions)
    for name, (run, _, manifest) in runners.items():
        bound = (manifest.get("quant") or {}).get("bound", 1e-6)
        assert np.abs(run() - reference).max() <= bound, name
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            run = runners[name][0]
            t0 = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - t0)
    rows = []
    for name, (_, size, _) in runners.items():
        fmt, dtype = name.split()
        onnx_name = f"onnx {dtype}"
        rows.append({
            "artifact": f"demo {name}", "bytes": size,
            "us": 1e6 * statistics.median(samples[name]),
            "x_onnx": statistics.median(samples[name]) / statistics.median(samples[onnx_name]),
        })
    return {"rows": rows, "reps": reps, "positions": POSITIONS}


def markdown(result: dict[str, Any]) -> str:
    lines = ["ExecuTorch (executorch.runtime, portable kernels) beside onnxruntime CPU "
             "(1 thread): "
             f"demo, {result['positions']} positions a call, median of {result['reps']} "
             "round-robin repetitions.", "",
             "| artifact | bytes | latency per call | x the ONNX graph |", "|---|---:|---:|---:|"]
    for row in result["rows"]:
        lines.append(f"| {row['artifact']} | {row['bytes']:,} | {row['us']:.1f} us | "
                     f"{row['x_onnx']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=61)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="edgepe-bench-pte-") as work:
        print(markdown(measure(Path(work), args.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
