"""Scale: exporting and verifying sinusoidal tables up to ``65536 x 512``, one subprocess a step,
and whether the work stays linear in the table's bytes."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from bench.cli import measure
from bench.common import PYTHON


def linear_fit(x: list[float], y: list[float]) -> dict[str, float]:
    """Least squares ``y = a + b x`` with R^2 (the scale test: is time linear in bytes?)."""
    if len(x) < 2:
        return {}
    b, a = np.polyfit(x, y, 1)
    pred = a + b * np.asarray(x)
    ss_res = float(np.sum((np.asarray(y) - pred) ** 2))
    ss_tot = float(np.sum((np.asarray(y) - np.mean(y)) ** 2)) or 1e-30
    return {"intercept_s": float(a), "s_per_mib": float(b) * 2**20, "r2": 1 - ss_res / ss_tot}


# One scale step in its own process: the import and the work are timed apart, so the fit of work
# time against table size is not drowned by the ~1.5 s import. Prints one JSON line.
SCALE_STEP = """
import json, sys, time
t0 = time.perf_counter()
import torch, onnx, onnxruntime  # what export and verify load anyway: counted as import
from edgepe import api
t1 = time.perf_counter()
step, path, max_len, d_model, fmt = sys.argv[1:]
ok = True
if step == "export":
    config = api.make_config("sinusoidal", int(max_len), int(d_model), mode="table", format=fmt,
                             max_table_bytes=2 * int(max_len) * int(d_model) * 4 + 2**20, out=path)
    api.export(config, force=True, verify=False)
elif step == "verify":
    report = api.verify(path)
    ok = bool(report)
    if not ok:
        print(str(report).splitlines()[0], file=sys.stderr)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "work_s": t2 - t1, "ok": ok}))
sys.exit(0 if ok else 1)
"""


def scale_step(step: str, path: Path, max_len: int, d_model: int, fmt: str) -> dict[str, Any]:
    os.sync()  # the previous step's dirty pages are flushed before, not during, this one
    result = measure([PYTHON, "-c", SCALE_STEP, step, str(path), str(max_len), str(d_model), fmt])
    with contextlib.suppress(ValueError, IndexError):
        result.update(json.loads(result["stdout_tail"]))
    return result


def bench_scale(work: Path, sizes: list[tuple[int, int]], runs: dict[str, int]) -> dict[str, Any]:
    """Export then verify sinusoidal tables (``--mode table``) through ``edgepe.api`` (what the
    CLI calls), one subprocess per step, size and run (clean maxrss); sizes alternate within a
    run. Work time (import excluded; the fastest run) is fitted against table bytes; peak RSS is
    divided by them.
    """
    folder = work / "scale"
    folder.mkdir(exist_ok=True)
    baseline = scale_step("import", folder / "none", 1, 2, "npy")
    rows = []
    for fmt, n_runs in runs.items():
        samples: dict[tuple[int, int], dict[str, list]] = {
            size: {"export": [], "verify": []} for size in sizes}
        for _ in range(n_runs):
            for max_len, d_model in sizes:
                path = folder / f"sinusoidal-L{max_len}-d{d_model}.{fmt}"
                export = scale_step("export", path, max_len, d_model, fmt)
                samples[(max_len, d_model)]["export"].append(export)
                samples[(max_len, d_model)]["file_bytes"] = (
                    path.stat().st_size if path.exists() else None)
                samples[(max_len, d_model)]["verify"].append(
                    scale_step("verify", path, max_len, d_model, fmt) if export["rc"] == 0
                    else {"rc": None, "stderr_tail": "not run: export failed"})
                for p in folder.glob("sinusoidal-*"):
                    p.unlink()
        for (max_len, d_model), got in samples.items():
            table_bytes = max_len * d_model * 4
            row: dict[str, Any] = {"format": fmt, "max_len": max_len, "d_model": d_model,
                                   "table_bytes": table_bytes, "file_bytes": got["file_bytes"],
                                   "runs": n_runs}
            for step in ("export", "verify"):
                ok = [r for r in got[step] if r.get("rc") == 0]
                if len(ok) < len(got[step]) or not ok:
                    bad = next(r for r in got[step] if r.get("rc") != 0)
                    row[step] = {"rc": bad.get("rc"), "stderr_tail": bad["stderr_tail"]}
                    continue
                row[step] = {
                    "rc": 0,
                    "wall_s": statistics.median(r["wall_s"] for r in ok),
                    # The fastest run: other load and disk writeback only ever add time.
                    "work_s": min(r["work_s"] for r in ok),
                    "work_median_s": statistics.median(r["work_s"] for r in ok),
                    "import_s": statistics.median(r["import_s"] for r in ok),
                    "work_samples_s": [r["work_s"] for r in ok],
                    "maxrss_bytes": max(r["maxrss_bytes"] for r in ok),
                }
                row[f"{step}_peak_vs_table"] = row[step]["maxrss_bytes"] / table_bytes
            rows.append(row)
    fits = {}
    for fmt in runs:
        fits[fmt] = {}
        for step in ("export", "verify"):
            ok = [r for r in rows if r["format"] == fmt and r[step].get("rc") == 0]
            fits[fmt][step] = linear_fit([r["table_bytes"] for r in ok],
                                         [r[step]["work_s"] for r in ok])
    return {"rows": rows, "fits": fits, "baseline": baseline}
