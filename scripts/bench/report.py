"""The report: issue 8's targets evaluated, the machine, the markdown (BENCHMARKS.md), the README
section and the plot."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    BARE_IMPORT,
    COMPUTE_BYTES_FLOOR_FACTOR,
    COMPUTE_BYTES_FLOOR_SLACK,
    COMPUTE_BYTES_VS_PEER,
    COMPUTE_LATENCY_VS_PEER,
    DEMO_CASE,
    EXPORT_VS_BARE_IMPORT,
    HELP_SECONDS,
    SCALE_PEAK_VS_TABLE,
    SCALE_PER_MIB_GROWTH,
    TABLE_LATENCY_VS_IDENTITY,
)

# ---------------------------------------------------------------------------------------------
# Targets, report, plot


def target(name: str, measured: float | None, limit: float, how: str, bound: str = "",
           lower_is_better: bool = True) -> dict[str, Any]:
    if measured is None:
        status = "N/A"
    else:
        status = "PASS" if (measured <= limit if lower_is_better else measured >= limit) else "MISS"
    return {"target": name, "measured": measured, "limit": limit, "status": status,
            "how": how, "bound": bound if status != "PASS" else ""}


def paired(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Median over repetitions of ``a / b`` timed side by side (robust to drift between reps)."""
    return statistics.median(x / y for x, y in zip(a["samples_s"], b["samples_s"], strict=True))


def median_of(entry: dict[str, Any] | None) -> float | None:
    return entry.get("median_s") if entry and entry.get("error") is None else None


def evaluate(cases: list[dict[str, Any]], export: dict[str, Any], cli_help: dict[str, Any],
             scale: dict[str, Any]) -> list[dict[str, Any]]:
    demo = next(c for c in cases if c["case"] == DEMO_CASE)
    cand = demo["candidates"]
    compute, table = cand.get("edgepe-compute"), cand.get("edgepe-table")
    peers = {k: v for k, v in cand.items() if v["role"] == "peer" and v.get("error") is None}
    floor = cand["floor-identity"]
    gather = cand.get("floor-gather")
    out = []

    compute_ok = compute is not None and compute.get("error") is None
    why_missing = "" if compute_ok else f"edgepe compute graph: {(compute or {}).get('error')}"
    for name, peer in sorted(peers.items()):
        lat = median_of(compute) / peer["median_s"] if compute_ok else None
        out.append(target(
            f"compute latency <= {COMPUTE_LATENCY_VS_PEER}x {name} (demo)", lat,
            COMPUTE_LATENCY_VS_PEER, "median edgepe-compute / median peer, same run",
            why_missing or (
                f"paired per-rep ratio {paired(compute, peer):.2f}x; "
                f"compute {compute['median_s'] * 1e6:.1f} us ({fmt_ops(compute)}), peer "
                f"{peer['median_s'] * 1e6:.1f} us ({fmt_ops(peer)}); Identity floor "
                f"{floor['median_s'] * 1e6:.1f} us. {_front_end(compute)}; the peer gathers "
                "n_bits floats per row instead")))
        size = compute["bytes"] / peer["bytes"] if compute_ok else None
        out.append(target(
            f"compute bytes <= 1/8 of {name} (demo)", size, COMPUTE_BYTES_VS_PEER,
            "edgepe-compute file bytes / peer file bytes",
            why_missing or _bytes_bound(compute, demo)))
    info_floor = demo["information_floor_bytes"]
    limit = COMPUTE_BYTES_FLOOR_FACTOR * info_floor + COMPUTE_BYTES_FLOOR_SLACK
    out.append(target(
        f"compute bytes <= 1.25 x information floor ({info_floor} B) + 600 B (demo)",
        compute["bytes"] if compute_ok else None, limit,
        "edgepe-compute file bytes vs n_bits x d_model x 4",
        why_missing or _bytes_bound(compute, demo)))
    table_ok = table is not None and table.get("error") is None
    out.append(target(
        f"table latency <= {TABLE_LATENCY_VS_IDENTITY}x Identity floor (demo)",
        table["median_s"] / floor["median_s"] if table_ok else None, TABLE_LATENCY_VS_IDENTITY,
        "median edgepe-table / median Identity (same output size), same run",
        f"edgepe table graph: {(table or {}).get('error')}" if not table_ok else (
            f"paired per-rep ratio {paired(table, floor):.2f}x; "
            f"table {table['median_s'] * 1e6:.1f} us ({fmt_ops(table)}) vs Identity "
            f"{floor['median_s'] * 1e6:.1f} us"
            + (f"; a bare Gather of the same table with no clamp at all is already "
               f"{gather['median_s'] * 1e6:.1f} us ({gather['vs_floor']:.2f}x): onnxruntime's "
               "Gather (one copy per row) bounds any table graph, the clamp adds the rest"
               if gather and "median_s" in gather else ""))))

    ex = export.get("edgepe export --scheme binary --max-len 512", {})
    bare = export.get(f'python -c "{BARE_IMPORT}"', {})
    ratio = (ex["median_s"] / bare["median_s"]
             if "median_s" in ex and "median_s" in bare else None)
    out.append(target(
        f"`edgepe export --scheme binary --max-len 512` <= {EXPORT_VS_BARE_IMPORT}x bare import",
        ratio, EXPORT_VS_BARE_IMPORT, "median wall of alternating subprocesses",
        ex.get("error") or (f"export {ex.get('median_s', 0):.2f} s vs bare import "
                            f"{bare.get('median_s', 0):.2f} s wall; CPU "
                            f"{ex.get('cpu_median_s', 0):.2f} s vs "
                            f"{bare.get('cpu_median_s', 0):.2f} s")))
    h = cli_help.get("edgepe --help", {})
    out.append(target("`edgepe --help` < 0.5 s", h.get("median_s"), HELP_SECONDS,
                      f"median wall of subprocesses (CPU {h.get('cpu_median_s', 0):.2f} s)",
                      h.get("error") or f"CPU time {h.get('cpu_median_s', 0):.2f} s: the wall "
                      "time is the machine's load"))

    rows = scale["rows"]
    base_rss = scale["baseline"].get("maxrss_bytes")
    for fmt, fit in scale["fits"].items():
        for step in ("export", "verify"):
            sized = sorted((r for r in rows if r["format"] == fmt and r[step].get("rc") == 0),
                           key=lambda r: r["table_bytes"])
            what = ", ".join(f"{r['table_bytes'] / 2**20:.0f} MiB {r[step]['work_s']:.2f} s"
                             for r in sized)
            f = fit[step]
            if f:
                what += (f"; fit {f['intercept_s']:.2f} s + {f['s_per_mib'] * 1e3:.1f} ms/MiB, "
                         f"R^2 {f['r2']:.3f}")
            failed = next((r[step]["stderr_tail"] for r in rows
                           if r["format"] == fmt and r[step].get("rc") != 0), "")
            per_mib = [r[step]["work_s"] / r["table_bytes"] for r in sized]
            growth = (per_mib[-1] / statistics.median(per_mib)
                      if len(sized) >= 3 and min(per_mib) > 0 else None)
            out.append(target(
                f"scale: {step} {fmt} sinusoidal table: work time linear in size (work per MiB "
                f"at the largest <= {SCALE_PER_MIB_GROWTH}x the median over sizes)", growth,
                SCALE_PER_MIB_GROWTH, "work time (import excluded), fastest of the runs: " + what,
                failed or what))
            largest = sized[-1] if sized else None
            peak = largest[step]["maxrss_bytes"] / largest["table_bytes"] if largest else None
            bound = failed
            if largest:
                bound = (f"{largest[step]['maxrss_bytes'] / 2**20:.0f} MiB peak for a "
                         f"{largest['table_bytes'] / 2**20:.0f} MiB table")
                if base_rss:
                    added = largest[step]["maxrss_bytes"] - base_rss
                    bound += (f"; the same process doing only its imports peaks at "
                              f"{base_rss / 2**20:.0f} MiB, so the table work adds "
                              f"{added / 2**20:.0f} MiB ({added / largest['table_bytes']:.2f}x "
                              "the table)")
            out.append(target(
                f"scale: {step} {fmt} peak memory <= {SCALE_PEAK_VS_TABLE}x table bytes "
                f"(largest: {largest['max_len'] if largest else '?'} x "
                f"{largest['d_model'] if largest else '?'})",
                peak, SCALE_PEAK_VS_TABLE, "subprocess maxrss (wait4) / table bytes", bound))
    return out


PROJECTION_OPS = ("MatMul", "Gemm")


def _front_end(compute: dict[str, Any]) -> str:
    """What the compute graph runs before its projection, read from its op histogram."""
    ops = compute.get("ops") or {}
    front = {k: v for k, v in ops.items() if k not in PROJECTION_OPS}
    proj = " + ".join(k for k in PROJECTION_OPS if k in ops) or "no projection"
    listed = ", ".join(k if v == 1 else f"{k} x{v}" for k, v in front.items())
    return (f"Before its {proj} the compute graph runs {sum(front.values())} front-end "
            f"nodes on the positions ({listed}), each a pass of its own")


def _bytes_bound(compute: dict[str, Any], demo: dict[str, Any]) -> str:
    return (f"{compute['bytes']} B = weights {compute['bytes_weights']} B (information floor "
            f"{demo['information_floor_bytes']} B) + metadata {compute['bytes_metadata']} B "
            f"(the manifest in metadata_props) + graph {compute['bytes_other']} B "
            f"({compute['nodes']} nodes)")


def machine() -> dict[str, Any]:
    import onnx
    import onnxruntime
    import torch

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu, "cores": os.cpu_count(), "loadavg_at_start": load,
        "python": platform.python_version(), "platform": platform.platform(),
        "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
        "onnx": onnx.__version__, "numpy": np.__version__,
    }


def fmt_us(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "-"
    if entry.get("error"):
        return "failed"
    if "median_s" not in entry:
        return "-"
    return f"{entry['median_s'] * 1e6:,.1f} ({entry['iqr_s'] * 1e6:,.1f})"


def fmt_measured(t: dict[str, Any]) -> str:
    m = t["measured"]
    if m is None:
        return "n/a"
    if "bytes <= 1.25" in t["target"]:
        return f"{m:,.0f} B (limit {t['limit']:,.0f} B)"
    if "--help" in t["target"]:
        return f"{m:.3f} s"
    return f"{m:.3f}x"


# The candidates' order in every table and plot: bench.json is written with sorted keys, so a
# report read back from it renders the same as the run that wrote it (tests/test_bench_docs.py).
CANDIDATE_ORDER = ("peer-torchscript", "peer-dynamo", "edgepe-compute", "edgepe-table",
                   "edgepe-int8-compute", "edgepe-int8-table", "floor-identity", "floor-gather")


def in_order(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with each case's candidates in ``CANDIDATE_ORDER`` (others after, by name)."""
    def rank(name: str) -> tuple[int, str]:
        return (CANDIDATE_ORDER.index(name) if name in CANDIDATE_ORDER
                else len(CANDIDATE_ORDER), name)

    cases = [{**c, "candidates": dict(sorted(c["candidates"].items(), key=lambda kv: rank(kv[0])))}
             for c in report.get("cases", [])]
    return {**report, "cases": cases}


def markdown(report: dict[str, Any]) -> str:
    report = in_order(report)
    m = report["machine"]
    lines = [
        "# edgepe benchmarks",
        "",
        f"Generated by `{report['command']}` on {m['date_utc']}.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'] or [])}, at end "
        f"{', '.join(f'{x:.2f}' for x in m.get('loadavg_at_end') or [])} (1, 5, 15 min); "
        f"Python {m['python']}, "
        f"onnxruntime {m['onnxruntime']}, torch {m['torch']}, onnx {m['onnx']}, numpy "
        f"{m['numpy']}. {report['conditions']}",
        "",
        "Latency: onnxruntime CPU provider, one thread (intra_op = inter_op = 1), sessions built "
        "once, `N = max_len` positions per call (`positions = arange(max_len)`), candidates "
        f"timed round-robin within each of {report['reps']} repetitions (a sample is ~0.3 ms of "
        "back-to-back calls, or one call when longer, so most samples fit in a scheduler "
        "time slice); median per call in "
        "microseconds with the IQR in brackets. Every timed graph was first checked against "
        "the torch reference (`ok`).",
        "",
        "## Targets (issue 8)",
        "",
        "| target | measured | limit | status | what bounds it |",
        "|---|---|---|---|---|",
    ]
    for t in report["targets"]:
        limit = f"{t['limit']:,.0f} B" if "bytes <= 1.25" in t["target"] else f"{t['limit']:g}"
        lines.append(f"| {t['target']} | {fmt_measured(t)} | {limit} | **{t['status']}** | "
                     f"{t['bound'] or t['how']} |")

    demo = next(c for c in report["cases"] if c["case"] == DEMO_CASE)
    lines += [
        "",
        f"## Demo scheme ({demo['case']}): bytes and latency",
        "",
        f"Information floor: n_bits x d_model float32 weights = {demo['n_bits']} x "
        f"{demo['d_model']} x 4 = {demo['information_floor_bytes']} B. Output per call "
        f"{demo['output_bytes']:,} B.",
        "",
        "| candidate | bytes | weights B | metadata B | nodes | ops | latency us (IQR) | "
        "x floor | ok | export s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in demo["candidates"].items():
        if e.get("error"):
            lines.append(f"| {name} | failed: {e['error']} | | | | | | | | |")
            continue
        ops = fmt_ops(e).split(": ", 1)[1]
        export_s = f"{e['export_s']:.2f}" if "export_s" in e else "-"
        lines.append(
            f"| {name} | {e.get('bytes', 0):,} | {e.get('bytes_weights', 0):,} | "
            f"{e.get('bytes_metadata', 0):,} | {e.get('nodes')} | {ops} | {fmt_us(e)} | "
            f"{e.get('vs_floor', 0):.2f} | {_ok(e)} | {export_s} |")

    names = []
    for c in report["cases"]:
        for n in c["candidates"]:
            if n not in names:
                names.append(n)
    lines += [
        "",
        "## Latency per call, every configuration (us, median (IQR))",
        "",
        "| case | N | out bytes | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for c in report["cases"]:
        cells = [fmt_us(c["candidates"].get(n)) for n in names]
        lines.append(f"| {c['case']} | {c['n_per_call']:,} | {c['output_bytes']:,} | "
                     + " | ".join(cells) + " |")
    big = [c for c in report["cases"] if c["n_per_call"] >= 4096]
    if big:
        lines += ["", "## Per position at large N (ns / position)", "",
                  "| case | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for c in big:
            cells = []
            for n in names:
                e = c["candidates"].get(n)
                cells.append(f"{e['ns_per_position']:.2f}" if e and "ns_per_position" in e
                             else ("failed" if e and e.get("error") else "-"))
            lines.append(f"| {c['case']} | " + " | ".join(cells) + " |")
    lines += ["", "## Artifact bytes, every configuration", "",
              "| case | info floor B | " + " | ".join(n for n in names if n != "floor-identity")
              + " |", "|---|---|" + "---|" * (len(names) - 1)]
    for c in report["cases"]:
        cells = []
        for n in names:
            if n == "floor-identity":
                continue
            e = c["candidates"].get(n)
            cells.append("-" if not e else "failed" if e.get("error") else f"{e['bytes']:,}")
        lines.append(f"| {c['case']} | {c.get('information_floor_bytes', '-')} | "
                     + " | ".join(cells) + " |")

    lines += ["", "## Export and CLI wall time (alternating subprocesses)", "",
              "| command | runs | median s | min s | max s | CPU s (median) | peak RSS MiB | "
              "failed |", "|---|---|---|---|---|---|---|---|"]
    for group in (report["export"], report["cli_help"]):
        for name, e in group.items():
            if "median_s" in e:
                lines.append(f"| `{name}` | {e['runs']} | {e['median_s']:.3f} | "
                             f"{e['min_s']:.3f} | {e['max_s']:.3f} | {e['cpu_median_s']:.3f} | "
                             f"{e['maxrss_bytes'] / 2**20:.0f} | {e['failed']} |")
            else:
                lines.append(f"| `{name}` | {e['runs']} | failed: {e['error']} | | | | | "
                             f"{e['failed']} |")

    base = report["scale"]["baseline"]
    lines += ["", "## Scale: sinusoidal tables (`--mode table`), export then verify", "",
              "Each step runs `edgepe.api.export(..., verify=False)` or `edgepe.api.verify` (what "
              "the CLI calls) in its own subprocess, after a `sync`; work time excludes the "
              "imports (the fastest of the runs: other load and disk writeback only add time; "
              "the JSON has every run); peak is the process's maxrss. The same process doing only "
              f"its imports peaks at {base.get('maxrss_bytes', 0) / 2**20:.0f} MiB.", "",
              "| format | rows x cols | table MiB | file MiB | runs | export work s (wall) | "
              "export peak MiB (x table) | verify work s (wall) | verify peak MiB (x table) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report["scale"]["rows"]:
        cells = []
        for step in ("export", "verify"):
            e = r[step]
            cells.append(f"{e['work_s']:.2f} ({e['wall_s']:.2f}) | "
                         f"{e['maxrss_bytes'] / 2**20:.0f} ({r[step + '_peak_vs_table']:.2f}x)"
                         if e.get("rc") == 0 else f"failed: {e['stderr_tail']} | ")
        fb = f"{r['file_bytes'] / 2**20:.1f}" if r["file_bytes"] else "-"
        lines.append(f"| {r['format']} | {r['max_len']} x {r['d_model']} | "
                     f"{r['table_bytes'] / 2**20:.1f} | {fb} | {r['runs']} | "
                     + " | ".join(cells) + " |")
    for fmt, fit in report["scale"]["fits"].items():
        for step, f in fit.items():
            if f:
                lines.append(f"\n{fmt} {step}: work = {f['intercept_s']:.3f} s + "
                             f"{f['s_per_mib'] * 1e3:.2f} ms/MiB, R^2 = {f['r2']:.4f}.")
    if report.get("plot"):
        lines += ["", "## Plot", "", f"![latency and bytes]({report['plot']})"]
    failures = [(c["case"], n, e["error"]) for c in report["cases"]
                for n, e in c["candidates"].items() if e.get("error")]
    if failures:
        lines += ["", "## Failures recorded", ""]
        lines += [f"- {case} {name}: {err}" for case, name, err in failures]
    lines += ["", f"Total benchmark wall time: {report['total_s']:.0f} s.", ""]
    return "\n".join(lines)


def fmt_ops(e: dict[str, Any]) -> str:
    """``5 nodes: Gather, Greater, Less, Where x2``."""
    ops = ", ".join(k if v == 1 else f"{k} x{v}" for k, v in (e.get("ops") or {}).items())
    return f"{e.get('nodes')} nodes: {ops}"


def _ok(e: dict[str, Any]) -> str:
    if "matches" not in e:
        return "-"
    return "ok" if e["matches"] else f"NO (err {e.get('max_abs_err')})"


FRESH_CLONE = ('python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[dev]" '
               "&& .venv/bin/python scripts/bench.py")


def readme_section(report: dict[str, Any], md_name: str) -> str:
    """The README's benchmark section: the one command, and the latest demo figures."""
    report = in_order(report)
    m = report["machine"]
    demo = next(c for c in report["cases"] if c["case"] == DEMO_CASE)
    lines = [
        "## Benchmarks",
        "",
        "From a fresh clone, one command (a few minutes on 2 cores) measures edgepe's artifacts "
        "against a plain `torch.onnx.export` of the demo module and the onnxruntime floor, and "
        f"writes `docs/{md_name}` (all figures, targets, the plot), `docs/bench.json` and "
        "`docs/bench.png`:",
        "",
        "<!-- doctest: skip the full benchmark takes several minutes and rewrites the tracked "
        "docs/bench.json, docs/bench.png and docs/BENCHMARKS.md on purpose; "
        "tests/test_bench_docs.py checks that the docs quote its latest output -->",
        "```",
        f"$ {FRESH_CLONE}",
        "```",
        "",
        f"Latest run: {m['date_utc']}, {m['cpu']}, {m['cores']} cores (shared: load average "
        f"{(m.get('loadavg_at_start') or [0])[0]:.1f} at start), onnxruntime {m['onnxruntime']} "
        f"CPU with one thread, torch {m['torch']}. Demo scheme (`binary`, max_len 512, "
        f"d_model 64), 512 positions per call, median of {report['reps']} alternating "
        "repetitions:",
        "",
        "| artifact | bytes | latency per call | x Identity floor |",
        "|---|---|---|---|",
    ]
    for name, e in demo["candidates"].items():
        if e.get("error"):
            lines.append(f"| {name} | failed | failed | |")
        else:
            lines.append(f"| {name} | {e['bytes']:,} | {e['median_s'] * 1e6:.1f} us | "
                         f"{e['vs_floor']:.2f} |")
    lines.append(f"| information floor (n_bits x d_model float32) | "
                 f"{demo['information_floor_bytes']:,} | | |")
    lines += ["", "| target (issue 8) | measured | status |", "|---|---|---|"]
    lines += [f"| {t['target']} | {fmt_measured(t)} | {t['status']} |" for t in report["targets"]]
    lines += ["", f"What bounds each miss, with its measurement: `docs/{md_name}`.", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> bool:
    report = in_order(report)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for c in report["cases"]:
        if c["scheme"] != "binary" or c["d_model"] != 64:
            continue
        for name, e in c["candidates"].items():
            if "median_s" in e:
                series.setdefault(name, []).append((c["max_len"], e["median_s"] * 1e6))
    demo = next(c for c in report["cases"] if c["case"] == DEMO_CASE)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, points in series.items():
        points.sort()
        style = "--" if name.startswith("peer") else ":" if name.startswith("floor") else "-"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=name)
    ax.set(xscale="log", yscale="log", xlabel="max_len = positions per call (N)",
           ylabel="latency per call (us, median)",
           title="binary, d_model 64: onnxruntime CPU, 1 thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    names = [n for n, e in demo["candidates"].items() if "bytes" in e and e["role"] != "floor"]
    values = [demo["candidates"][n]["bytes"] for n in names]
    names.append("information floor")
    values.append(demo["information_floor_bytes"])
    bx.barh(names, values, color=["C1" if n.startswith("peer") else "C0" for n in names[:-1]]
            + ["C7"])
    bx.set(xscale="log", xlabel="bytes (log)", title="artifact bytes, demo (binary L512 d64)")
    for i, v in enumerate(values):
        bx.text(v, i, f" {v:,}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
