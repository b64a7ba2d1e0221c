"""int8 speed rows of the benchmark (issue 19): the demo itself at N = 512, 4096, 65536.

    .venv/bin/python scripts/bench.py --part int8-speed [--reps 41] [--md FILE] [--out FILE]

Per N (positions 0 .. N-1 per call, ``max_len = N``, d_model 64), timed round-robin in one run
by ``scripts/bench/latency.py``'s ``bench_case`` (onnxruntime CPU, one thread): the torch.onnx
TorchScript peer, edgepe's
float32 compute and table graphs, each int8 variant (``--int8-runtime fold`` and ``live``, compute
and table), a bare ``Gather`` of the table and the Identity floor. Then the ratios issue 19 sets
targets on, each of two figures from the same run:

- int8 fold / float32 (compute, table): latency <= 1.05x, payload bytes <= 0.35x;
- int8 live / float32: latency <= 1.6x, RAM <= 0.3x;
- float32 compute / TorchScript peer <= 1.05x; float32 table / bare Gather <= 1.08x.

"Payload bytes" are the graph's initializers (what int8 shrinks; the manifest and node framing
are the same few hundred bytes in both files, and the file bytes are given too). The RAM ratio
is what the session holds of the stored tensor (the manifest's ``quant.ram_bytes``: int8 and
scales for live, float32 after folding) over its float32 bytes; the tables also give each
session's measured resident growth over creating it and running it once on N positions (output
buffers included), in a fresh subprocess per graph (``session_ram``). "What bounds it" is
onnxruntime's own profile of the graph: the share of node time each op takes (``op_shares``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SIZES = (512, 4096, 65536)
D_MODEL = 64
VARIANTS = (("compute", "none"), ("table", "none"), ("compute", "int8"), ("compute", "int8-live"),
            ("table", "int8"), ("table", "int8-live"), ("table", "int8-live-channel"))
# name in bench_case's candidates -> (the float32 twin it is compared with, the targets)
INT8_ROWS = {
    "edgepe-int8-compute": ("edgepe-compute", 1.05, "bytes", 0.35),
    "edgepe-int8-table": ("edgepe-table", 1.05, "bytes", 0.35),
    "edgepe-int8-live-compute": ("edgepe-compute", 1.6, "ram", 0.3),
    "edgepe-int8-live-table": ("edgepe-table", 1.6, "ram", 0.3),
    "edgepe-int8-live-channel-table": ("edgepe-table", 1.6, "ram", 0.3),
}
PEER_TARGET, GATHER_TARGET = 1.05, 1.08

RAM_STEP = """
import json, sys
import numpy as np
import onnxruntime as ort
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
feeds = {"positions": np.arange(int(sys.argv[2]), dtype=np.int64)}
ort.InferenceSession(sys.argv[3], options, providers=["CPUExecutionProvider"]).run(None, feeds)
before = rss()
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
session.run(None, feeds)
print(json.dumps({"ram_bytes": rss() - before}))
"""


def session_ram(path: Path, n: int, warm: Path) -> int | None:
    """Resident bytes a loaded session of ``path`` adds (after one call on ``N`` positions), in a
    fresh process that first ran ``warm`` (a small graph: onnxruntime's own arenas and code
    pages are then already counted in ``before``)."""
    done = subprocess.run([sys.executable, "-c", RAM_STEP, str(path), str(n), str(warm)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None
    return int(json.loads(done.stdout)["ram_bytes"])


def op_shares(path: Path, feeds: dict[str, Any], calls: int = 30) -> dict[str, float]:
    """Share of node time per op type over ``calls`` runs, from onnxruntime's profiler."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(path.with_suffix("")) + "-profile"
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(calls):
        session.run(None, feeds)
    trace = Path(session.end_profiling())
    totals: dict[str, float] = {}
    for event in json.loads(trace.read_text()):
        args = event.get("args") or {}
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = args.get("op_name", "?")
            totals[op] = totals.get(op, 0.0) + float(event.get("dur", 0))
    trace.unlink()
    whole = sum(totals.values()) or 1.0
    return {op: t / whole for op, t in sorted(totals.items(), key=lambda kv: -kv[1])}


def payload_bytes(path: Path) -> int:
    import onnx

    return sum(len(t.raw_data) or len(t.SerializeToString())
               for t in onnx.load(str(path)).graph.initializer)


def _bound(shares: dict[str, float]) -> str:
    top = list(shares.items())[:3]
    return ", ".join(f"{op} {100 * s:.0f}%" for op, s in top) or "-"


def rows_of(case: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """The ratio rows of one N (one ``bench_case`` result), with RAM and op shares measured."""
    import numpy as np

    n = case["max_len"]
    cand = case["candidates"]
    feeds = {"positions": np.arange(n, dtype=np.int64)}
    paths = {"edgepe-compute": folder / "compute.onnx", "edgepe-table": folder / "table.onnx",
             "edgepe-int8-compute": folder / "compute-int8.onnx",
             "edgepe-int8-table": folder / "table-int8.onnx",
             "edgepe-int8-live-compute": folder / "compute-int8-live.onnx",
             "edgepe-int8-live-table": folder / "table-int8-live.onnx",
             "edgepe-int8-live-channel-table": folder / "table-int8-live-channel.onnx",
             "peer-torchscript": folder / "peer-torchscript.onnx",
             "floor-gather": folder / "gather.onnx"}
    warm = folder / "compute.onnx"
    measured = {}
    for name, path in paths.items():
        entry = cand.get(name) or {}
        if entry.get("error") is None and path.exists():
            measured[name] = {"ram": session_ram(path, n, warm), "payload": payload_bytes(path),
                              "shares": op_shares(path, feeds)}
            entry.update(session_ram_bytes=measured[name]["ram"],
                         payload_bytes=measured[name]["payload"],
                         op_shares=measured[name]["shares"])

    def ratio(a: str, b: str) -> tuple[float | None, float | None]:
        """The median and IQR of the per-repetition ratio (the two were timed back to back in
        each repetition, so load that hits one sample hits its pair: on a shared machine this
        is steadier than the ratio of the two medians)."""
        ea, eb = cand.get(a) or {}, cand.get(b) or {}
        if "median_s" not in ea or "median_s" not in eb:
            return None, None
        pairs = [x / y for x, y in zip(ea["samples_s"], eb["samples_s"], strict=True)]
        q = np.percentile(pairs, [25, 50, 75])
        return float(q[1]), float(q[2] - q[0])

    rows = []
    for name, (twin, limit, kind, size_limit) in INT8_ROWS.items():
        lat, iqr = ratio(name, twin)
        m, t = measured.get(name, {}), measured.get(twin, {})
        quant = (cand.get(name) or {}).get("quant") or {}
        if kind == "bytes":
            size = m["payload"] / t["payload"] if m and t else None
        else:  # what the session holds of the table/weights (manifest), vs their float32
            size = quant["ram_bytes"] / quant["bytes"]["float32"] if quant else None
        rows.append({"n": n, "what": f"{name} / {twin}", "latency": lat, "paired_iqr": iqr,
                     "latency_target": limit, "size_kind": kind, "size": size,
                     "size_target": size_limit, "bound": _bound(m.get("shares", {})),
                     "twin_bound": _bound(t.get("shares", {}))})
    for name, other, limit in (("edgepe-compute", "peer-torchscript", PEER_TARGET),
                               ("edgepe-table", "floor-gather", GATHER_TARGET)):
        lat, iqr = ratio(name, other)
        rows.append({"n": n, "what": f"{name} / {other}", "latency": lat, "paired_iqr": iqr,
                     "latency_target": limit, "size_kind": None, "size": None,
                     "size_target": None,
                     "bound": _bound(measured.get(name, {}).get("shares", {})),
                     "twin_bound": _bound(measured.get(other, {}).get("shares", {}))})
    return rows


def run(bench, work: Path, reps: int, min_sample_s: float, quick: bool) -> dict[str, Any]:
    """Time the demo's candidates at every N with ``bench.bench_case`` (``bench`` is the
    ``scripts/bench/latency.py`` module); the ratio rows."""
    cases, rows = [], []
    for n in (SIZES[:1] if quick else SIZES):
        case = bench.Case("binary", n, D_MODEL, peers=("torchscript",), edgepe=VARIANTS)
        print(f"int8 speed: {case.name}", file=sys.stderr, flush=True)
        result = bench.bench_case(case, work, reps, min_sample_s)
        rows += rows_of(result, work / case.name)
        cases.append(result)
    return {"cases": cases, "rows": rows}


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(report: dict[str, Any], machine: dict[str, Any], date: str, reps: int) -> str:
    """The table for docs/readme/int8-speed.md: one row per ratio and N, PASS/MISS per target."""
    lines = [
        f"Run: {date}, `scripts/bench.py --part int8-speed --reps {reps}`, onnxruntime "
        f"{machine.get('onnxruntime')} CPU, 1 thread; {machine.get('cpu')} "
        f"({machine.get('cores')} cores, shared with other work: ratios of candidates timed "
        "alternately in the same run; latency = median of the per-repetition ratio, paired IQR "
        "= its spread).",
        "",
        "| N | ratio | latency (target) | paired IQR | size (target) | what bounds it "
        "(op share of node time) | its float32 twin |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lat_ok = r["latency"] is not None and r["latency"] <= r["latency_target"]
        lat = f"{_x(r['latency'])} ({'PASS' if lat_ok else 'MISS'} <= {r['latency_target']}x)"
        if r["size_kind"] is None:
            size = "-"
        else:
            ok = r["size"] is not None and r["size"] <= r["size_target"]
            size = (f"{r['size_kind']} {_x(r['size'])} ({'PASS' if ok else 'MISS'} <= "
                    f"{r['size_target']}x)")
        iqr = "-" if r["paired_iqr"] is None else f"{r['paired_iqr']:.2f}"
        lines.append(f"| {r['n']} | {r['what']} | {lat} | {iqr} | {size} | {r['bound']} | "
                     f"{r['twin_bound']} |")
    lines += ["", "Medians (us per call, N positions):", "",
              "| N | " + " | ".join(_NAMES) + " |", "|---|" + "---|" * len(_NAMES)]
    for case in report["cases"]:
        cells = []
        for name in _NAMES:
            e = case["candidates"].get(name) or {}
            cells.append(f"{e['median_s'] * 1e6:.1f}" if "median_s" in e else
                         f"error: {e.get('error')}")
        lines.append(f"| {case['max_len']} | " + " | ".join(cells) + " |")
    lines += ["", "Bytes (file / initializers) and session RAM (resident growth, MiB):", "",
              "| N | " + " | ".join(_NAMES) + " |", "|---|" + "---|" * len(_NAMES)]
    for case in report["cases"]:
        cells = []
        for name in _NAMES:
            e = case["candidates"].get(name) or {}
            ram = e.get("session_ram_bytes")
            cells.append(f"{e.get('bytes', '-')} / {e.get('payload_bytes', '-')} B, "
                         + ("-" if ram is None else f"{ram / 2**20:.1f}"))
        lines.append(f"| {case['max_len']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_NAMES = ("peer-torchscript", "edgepe-compute", "edgepe-int8-compute", "edgepe-int8-live-compute",
          "floor-gather", "edgepe-table", "edgepe-int8-table", "edgepe-int8-live-table",
          "edgepe-int8-live-channel-table")

