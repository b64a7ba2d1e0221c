"""``scripts/bench.py --part sliced``: ``--mode sliced`` rope against Sin/Cos and the full cache.

Issue 34's speed and size rows, one run: rope ``d = 128``, ``max_len = 32768``, ``N = 512, 4096,
65536`` random positions below 32768 (seeded), onnxruntime CPU, one thread, candidates timed
round-robin (``bench.latency.time_round_robin``). Candidates:

- ``sincos``: ``--mode compute`` (the float32 angle, Sin and Cos);
- ``sliced``: ``--mode sliced`` with its default plan (8,7), bitwise slicing;
- ``sliced-trunc``: the same with ``--lowering trunc`` (CoreML's form), for information;
- ``cache``: a ``Gather`` of the full ``[32768, 128]`` float32 ``[cos | sin]`` cache (the usual
  fix; 16 MiB).

Every candidate's output is checked against the float64 definition first (the sliced ones within
``graphs.sliced.bound``, the float32 recipe reports its own distance). Ratios are medians of the
per-repetition ratio (paired: the two candidates ran back to back in the same repetition), in
wall time (``bench.latency.time_round_robin``) and, in a second round-robin, in the calling
thread's CPU time (``time.thread_time``: onnxruntime with one intra-op thread runs the graph in
the caller's thread), which a shared machine's scheduling perturbs less than wall time.
Targets (issue 34): sliced <= 0.8x sincos at every N; <= 2.5x cache at N <= 4096, <= 3.5x at
65536 (goal 1.5x); file <= 1/50 of the cache. Never imported by the package.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import numpy as np

MAX_LEN, D_MODEL = 32768, 128
SIZES = (512, 4096, 65536)
SINCOS_TARGET = 0.8
CACHE_TARGETS = {512: 2.5, 4096: 2.5, 65536: 3.5}
CACHE_GOAL = 1.5
SIZE_TARGET = 1 / 50


def _export(config, module, path: Path) -> Path:
    from edgepe.export import prepare

    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    path.write_bytes(buffer.getvalue())
    return path


def run(bench, work: Path, reps: int, min_sample_s: float, quick: bool) -> dict[str, Any]:
    """Export the candidates once, check them, time them at every N; rows of ratios."""
    import torch

    from edgepe.contract.config import ExportConfig
    from edgepe.graphs.sliced import bound, default_plan
    from edgepe.schemes import build, resolve
    from edgepe.schemes.definition import Definition

    scheme = resolve("rope", MAX_LEN, D_MODEL)
    module = build(scheme)
    paths = {
        "sincos": _export(ExportConfig(scheme), module, work / "sincos.onnx"),
        "sliced": _export(ExportConfig(scheme, mode="sliced"), module, work / "sliced.onnx"),
        "sliced-trunc": _export(ExportConfig(scheme, mode="sliced", lowering="trunc"), module,
                                work / "sliced-trunc.onnx"),
    }
    with torch.no_grad():
        exact = Definition(module).encode64(torch.arange(MAX_LEN)).numpy()
    cache = exact.astype(np.float32)
    paths["cache"] = work / "cache.onnx"
    bench.gather_floor(cache, paths["cache"])
    sizes = {name: path.stat().st_size for name, path in paths.items()}
    limit = bound(default_plan(MAX_LEN))
    rng = np.random.default_rng(0)
    rows, errors = [], {}
    for n in (SIZES[:1] if quick else SIZES):
        positions = rng.integers(0, MAX_LEN, n).astype(np.int64)
        candidates = []
        for name, path in paths.items():
            c = bench.Candidate(name, "edgepe", path=path, session=bench.session(path),
                                feeds={"positions": positions})
            got = c.session.run(None, c.feeds)[0].astype(np.float64)
            err = float(np.abs(got - exact[positions]).max())
            errors[name] = max(errors.get(name, 0.0), err)
            if name.startswith("sliced") and err > limit:  # timing a wrong graph is moot
                raise SystemExit(f"{name}: error {err:.3g} past the bound {limit:.3g}")
            candidates.append(c)
        print(f"sliced: N={n}", file=sys.stderr, flush=True)
        bench.time_round_robin(candidates, reps, min_sample_s)
        row: dict[str, Any] = {"n": n}
        _ratios(row, {c.name: np.asarray(c.samples) for c in candidates}, "")
        _ratios(row, _cpu_round_robin(candidates, reps, min_sample_s), "cpu_")
        rows.append(row)
    return {"rows": rows, "bytes": sizes, "cache_bytes": int(cache.nbytes),
            "max_abs_err": errors, "bound": limit, "plan": list(default_plan(MAX_LEN))}


def _cpu_round_robin(candidates, reps: int, min_sample_s: float) -> dict[str, np.ndarray]:
    """``time_round_robin`` again, timed by the calling thread's CPU time."""
    import time

    samples: dict[str, list[float]] = {c.name: [] for c in candidates}
    for rep in range(reps):
        for k in range(len(candidates)):
            c = candidates[(rep + k) % len(candidates)]
            run, feeds, inner = c.session.run, c.feeds, c.inner
            start = time.thread_time()
            for _ in range(inner):
                run(None, feeds)
            samples[c.name].append((time.thread_time() - start) / inner)
    return {name: np.asarray(v) for name, v in samples.items()}


def _ratios(row: dict[str, Any], by: dict[str, np.ndarray], prefix: str) -> None:
    for name, samples in by.items():
        row[f"{prefix}{name}_us"] = float(np.median(samples) * 1e6)
    for name in ("sliced", "sliced-trunc"):
        for base in ("sincos", "cache"):
            ratio = by[name] / by[base]
            row[f"{prefix}{name}_vs_{base}"] = float(np.median(ratio))
            q1, q3 = np.percentile(ratio, [25, 75])
            row[f"{prefix}{name}_vs_{base}_iqr"] = float(q3 - q1)


def markdown(report: dict[str, Any], machine: dict[str, Any], date: str, reps: int) -> str:
    """The tables of docs/readme/sliced.md: ratios per N with PASS/MISS, bytes, errors."""
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    lines = [
        f"Run: {date}, `scripts/bench.py --part sliced --reps {reps}`, onnxruntime "
        f"{machine.get('onnxruntime')} CPU, 1 thread; {machine.get('cpu')} "
        f"({machine.get('cores')} cores, shared with other work: ratios of candidates timed "
        "alternately in the same run, median of the per-repetition ratio, its IQR in brackets). "
        f"rope d {D_MODEL}, max_len {MAX_LEN}, plan {report['plan']}, N random positions "
        f"below {MAX_LEN}.",
        "",
        "| N | sliced / Sin-Cos (target <= 0.8x) | sliced / cache (target, goal 1.5x) | "
        "trunc / Sin-Cos | trunc / cache | us per call: Sin-Cos, sliced, trunc, cache |",
        "|---:|---|---|---|---|---|",
    ]
    for p, clock in (("", "wall"), ("cpu_", "CPU")):
        for r in report["rows"]:
            n = r["n"]
            a, b = r[f"{p}sliced_vs_sincos"], r[f"{p}sliced_vs_cache"]
            target = CACHE_TARGETS[n]
            lines.append(
                f"| {n} ({clock}) | {a:.2f}x ({r[f'{p}sliced_vs_sincos_iqr']:.2f}) "
                f"{verdict(a <= SINCOS_TARGET)} | {b:.2f}x ({r[f'{p}sliced_vs_cache_iqr']:.2f}) "
                f"{verdict(b <= target)} <= {target}x{', goal met' if b <= CACHE_GOAL else ''} | "
                f"{r[f'{p}sliced-trunc_vs_sincos']:.2f}x | {r[f'{p}sliced-trunc_vs_cache']:.2f}x | "
                f"{r[f'{p}sincos_us']:.0f}, {r[f'{p}sliced_us']:.0f}, "
                f"{r[f'{p}sliced-trunc_us']:.0f}, {r[f'{p}cache_us']:.0f} |")
    sizes, cache = report["bytes"], report["cache_bytes"]
    ratio = sizes["sliced"] / cache
    lines += [
        "",
        "| file | bytes | x full cache |",
        "|---|---:|---:|",
        *(f"| {name} | {size} | {size / cache:.4f} |" for name, size in sizes.items()),
        "",
        f"sliced file / full float32 cache: 1/{1 / ratio:.0f} "
        f"({verdict(ratio <= SIZE_TARGET)}, target <= 1/50).",
        "",
        "Max abs error against the float64 definition over the timed positions: "
        + ", ".join(f"{k} {v:.3g}" for k, v in report["max_abs_err"].items())
        + f" (sliced bound {report['bound']:.3g}; cache: the definition rounded to float32).",
    ]
    return "\n".join(lines) + "\n"
