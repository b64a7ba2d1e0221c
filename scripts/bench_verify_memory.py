"""``scripts/bench.py --part verify-memory``: verify's peak memory against the artifact's size.

Issue 30: verify bounds memory and time by what it reads. Each artifact is exported, then
``edgepe.api.verify`` runs on it in its own subprocess (peak RSS by ``wait4``, as the scale part);
an import-only subprocess (torch, onnx, onnxruntime and edgepe, what verify loads anyway) is the
baseline. "added" is the verify's peak minus that baseline; the ratio divides it by the file's
bytes. Artifacts: sinusoidal tables (ONNX and npy; the table is the file), and compute graphs of a
few KB whose sweep is bounded by chunks (binary at 2^20 positions: every position) or by the
documented sample past 2^24 positions (gray at 2^34: ``edgepe.verify.sweep.position_spans``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench.cli import measure  # noqa: E402
from bench.common import PYTHON  # noqa: E402

STEP = """
import json, sys, time
import torch, onnx, onnxruntime  # what verify loads anyway: the baseline counts them
from edgepe import api
what, path = sys.argv[1:3]
t0 = time.perf_counter()
ok = True
if what == "export":
    spec = json.loads(sys.argv[3])
    config = api.make_config(spec.pop("scheme"), spec.pop("max_len"), out=path, **spec)
    api.export(config, force=True, verify=False)
elif what == "verify":
    ok = bool(api.verify(path))
print(json.dumps({"work_s": time.perf_counter() - t0, "ok": ok}))
sys.exit(0 if ok else 1)
"""


def artifacts(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    rows = 4096 if quick else 65536
    width = 64 if quick else 512
    table = {"scheme": "sinusoidal", "max_len": rows, "d_model": width, "mode": "table",
             "max_table_bytes": 2 * rows * width * 4 + 2**20}
    return [
        (f"sinusoidal-table-{rows}x{width}.onnx", table),
        (f"sinusoidal-table-{rows}x{width}.npy", {**table, "format": "npy"}),
        ("binary-compute-L1048576-d64.onnx",
         {"scheme": "binary", "max_len": 2**16 if quick else 2**20, "d_model": 64}),
        ("gray-compute-L2^34.onnx", {"scheme": "gray", "max_len": 2**34}),
    ]


def _step(what: str, path: Path, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    argv = [PYTHON, "-c", STEP, what, str(path)] + ([json.dumps(spec)] if spec else [])
    result = measure(argv)
    try:
        result.update(json.loads(result.get("stdout_tail") or "{}"))
    except ValueError:
        pass
    return result


def run(bench, work: Path, reps: int, min_sample_s: float, quick: bool) -> dict[str, Any]:
    baseline = _step("import", work / "none")
    rows = []
    for name, spec in artifacts(quick):
        path = work / name
        exported = _step("export", path, dict(spec))
        if exported["rc"] != 0:
            rows.append({"artifact": name, "error": exported["stderr_tail"]})
            continue
        verified = _step("verify", path)
        size = path.stat().st_size
        added = verified["maxrss_bytes"] - baseline["maxrss_bytes"]
        rows.append({"artifact": name, "file_bytes": size, "rc": verified["rc"],
                     "wall_s": verified["wall_s"], "maxrss_bytes": verified["maxrss_bytes"],
                     "added_bytes": added, "added_vs_file": added / size})
        for p in work.glob(name + "*"):
            p.unlink()
    return {"baseline_maxrss_bytes": baseline["maxrss_bytes"], "rows": rows}


def markdown(report: dict[str, Any], machine: dict[str, Any], date: str, reps: int) -> str:
    base = report["baseline_maxrss_bytes"] / 2**20
    lines = ["## verify's peak memory against the artifact", "",
             f"{date}; {machine.get('cpu', '')}. One `edgepe.api.verify` per subprocess "
             f"(peak RSS by wait4); the imports alone peak at {base:.0f} MiB; *added* is the "
             "verify's peak minus that.", "",
             "| artifact | file | verify | peak MiB | added MiB | added / file |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"| {r['artifact']} | export failed: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['artifact']} | {r['file_bytes']} B | "
                     f"{'PASS' if r['rc'] == 0 else 'FAIL'} {r['wall_s']:.1f} s | "
                     f"{r['maxrss_bytes'] / 2**20:.0f} | {r['added_bytes'] / 2**20:.0f} | "
                     f"{r['added_vs_file']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import tempfile

    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory() as folder:
        result = run(None, Path(folder), 1, 0.0, quick)
    print(json.dumps(result, indent=1))
    print(markdown(result, {}, "", 1))
