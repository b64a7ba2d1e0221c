"""The ``edgepe patch`` benchmark: a tiny Llama-style model, patched vs unpatched, per runtime.

    .venv/bin/python scripts/bench_patch.py [--reps 201] [--runtimes onnx,pte,pte-xnnpack,tflite]

The model is scripts/patch_example.py's (tests/_hf_models.py ``llama``: 2 layers, width 32, 4
heads, 256 positions, random weights, seed 0). For each exporter of ``edgepe.patch.export``
whose package is installed, three programs of ``(input_ids, position_ids) [1, 8] -> logits``:
the unpatched model (its rotary embedding computes Sin/Cos), ``--mode table`` and ``--mode
sliced``; their bytes and the latency of one call on the exporter's runtime, timed round-robin
in one process (the starting program rotates each repetition), medians. Each patched program's
logits are checked against the unpatched program's first (``edgepe.patch.export.TOLERANCE``).
Prints a markdown table; docs/readme/patch.md quotes it. Never imported by the package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _hf_models  # noqa: E402 - tests/ holds the builders the tests use too

NEEDS = {"onnx": "onnxruntime", "pte": "executorch", "pte-xnnpack": "executorch",
         "tflite": "litert_torch"}


def programs(runtime: str):
    """``{variant: (bytes, run)}`` for the unpatched, table and sliced model on ``runtime``."""
    import edgepe.patch as patching
    from edgepe.patch.export import TOLERANCE, inputs, program

    out = {}
    for variant in ("unpatched", "table", "sliced"):
        model = _hf_models.model("llama")
        if variant != "unpatched":
            patching.patch(model, mode=variant)
        example = inputs(model, 256)[0]
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            data, trig, run = program(model, runtime, example)
        out[variant] = (len(data), trig, run)
    base = out["unpatched"][2]
    for ids, pos in inputs(model, 256):
        for variant in ("table", "sliced"):
            err = float(abs(out[variant][2](ids, pos) - base(ids, pos)).max())
            assert err <= TOLERANCE, (runtime, variant, err)
    return out, inputs(model, 256)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=201)
    parser.add_argument("--runtimes", default=",".join(NEEDS))
    args = parser.parse_args()
    rows = []
    for runtime in args.runtimes.split(","):
        if importlib.util.find_spec(NEEDS[runtime]) is None:
            print(f"skipped {runtime}: {NEEDS[runtime]} is not installed", file=sys.stderr)
            continue
        progs, (ids, pos) = programs(runtime)
        times = {v: [] for v in progs}
        order = list(progs)
        for rep in range(args.reps):
            for v in order[rep % 3:] + order[: rep % 3]:
                start = time.perf_counter()
                progs[v][2](ids, pos)
                times[v].append(time.perf_counter() - start)
        base = statistics.median(times["unpatched"])
        for v in order:
            median = statistics.median(times[v])
            rows.append(f"| {runtime} | {v} | {progs[v][0]:,} | {progs[v][1][0]} | "
                        f"{median * 1e6:.0f} | {median / base:.2f} |")
    print("| runtime | program | bytes | Sin/Cos | latency (us, median) | vs unpatched |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
