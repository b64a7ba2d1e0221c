"""The benchmark script runs end to end (``--quick``) and writes its JSON, markdown and plot.

This checks that ``scripts/bench.py`` works, not what it measures: timings on a shared 2-core
machine are not a test. It does check that every figure the report promises is there, that the
targets are evaluated from the run's own numbers, and that the timed graphs were checked.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STATUSES = {"PASS", "MISS", "N/A"}


def test_quick_benchmark_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # quiet unless -v: no progress lines, no torch.onnx graph dumps (issue 32)
    assert done.stderr == "", done.stderr[-2000:]
    report = json.loads(out.read_text())

    assert {"machine", "cases", "export", "cli_help", "scale", "targets", "reps"} <= set(report)
    assert report["reps"] == 3
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["onnxruntime"] and machine["torch"]

    demo = next(c for c in report["cases"] if c["case"] == "binary-L512-d64")
    assert demo["information_floor_bytes"] == 10 * 64 * 4  # n_bits x d_model float32
    candidates = demo["candidates"]
    assert {"peer-torchscript", "peer-dynamo", "edgepe-compute", "edgepe-table",
            "edgepe-int8-compute", "edgepe-int8-table", "floor-identity",
            "floor-gather"} <= set(candidates)
    floor = candidates["floor-identity"]
    assert floor["reps"] == 3 and floor["median_s"] > 0 and floor["vs_floor"] == 1.0
    # edgepe's own candidates must run: a benchmark whose edgepe rows all failed is no result.
    edgepe = [name for name in candidates if name.startswith("edgepe-")]
    assert len(edgepe) >= 4
    assert {name: candidates[name]["error"] for name in edgepe} == dict.fromkeys(edgepe)
    for name, entry in candidates.items():
        # Every candidate is either measured (and, unless it is the floor, checked against the
        # torch reference) or, for a peer only, carries the one-line reason it could not be.
        if entry["error"] is None:
            assert entry["median_s"] > 0 and entry["bytes"] > 0, name
            assert len(entry["samples_s"]) == 3, name  # one sample per round-robin repetition
            if entry["role"] != "floor":
                assert entry["matches"] is True, (name, entry.get("max_abs_err"))
        else:
            assert isinstance(entry["error"], str) and "\n" not in entry["error"], name

    assert all(t["status"] in STATUSES for t in report["targets"])
    targets = {t["target"]: t for t in report["targets"]}
    # The targets are ratios of this run's own figures.
    table = next(t for name, t in targets.items() if "Identity" in name)
    ratio = candidates["edgepe-table"]["median_s"] / floor["median_s"]
    assert abs(table["measured"] - ratio) < 1e-9
    assert table["status"] == ("PASS" if ratio <= 1.2 else "MISS")
    size = targets["compute bytes <= 1/8 of peer-torchscript (demo)"]
    assert candidates["peer-torchscript"]["error"] is None  # torch.jit ships with torch
    ratio = candidates["edgepe-compute"]["bytes"] / candidates["peer-torchscript"]["bytes"]
    assert abs(size["measured"] - ratio) < 1e-12
    assert any("--help" in name for name in targets)
    assert "edgepe --help" in report["cli_help"]
    assert report["scale"]["rows"], "the scale section ran no size"

    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## Targets (issue 8)" in md and machine["cpu"] in md and machine["date_utc"] in md
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if importlib.util.find_spec("executorch") is not None:  # .ci/run installs the extra
        rows = {r["artifact"]: r for r in report["executorch"]["rows"]}
        assert set(rows) == {"demo onnx float32", "demo pte float32", "demo onnx int8",
                             "demo pte int8"}
        assert all(r["bytes"] > 0 and r["us"] > 0 for r in rows.values())
        assert rows["demo pte float32"]["bytes"] <= 2560 + 2560  # weights + 2.5 KB (issue 22)
        assert "## ExecuTorch" in md


def run_part(part: str, tmp_path: Path) -> tuple[dict, str]:
    """``scripts/bench.py --part PART --quick``: its JSON report and its markdown."""
    out = tmp_path / f"{part}.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--part", part, "--quick",
         "--out", str(out), "--md", str(tmp_path / f"{part}.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text()), (tmp_path / f"{part}.md").read_text()


def test_int8_speed_part_writes_every_ratio_row_from_its_own_figures(tmp_path):
    """``--part int8-speed --quick``: the demo at N = 512 with every int8 variant; each row's
    latency ratio is the median of per-repetition ratios of the same run; each int8 graph was
    checked against the torch reference within its manifest's bound before it was timed."""
    report, md = run_part("int8-speed", tmp_path)
    (case,) = report["cases"]
    cand = case["candidates"]
    whats = {r["what"] for r in report["rows"]}
    for name in ("edgepe-int8-compute", "edgepe-int8-table", "edgepe-int8-live-compute",
                 "edgepe-int8-live-table", "edgepe-int8-live-channel-table"):
        assert cand[name]["error"] is None and cand[name]["matches"] is True, name
        assert cand[name]["quant"]["runtime"] == ("live" if "live" in name else "fold")
        assert any(w.startswith(f"{name} / ") for w in whats), name
    # the live table as the CLI makes it by default: one scale; per column only when asked
    assert cand["edgepe-int8-live-table"]["quant"]["granularity"] == "tensor"
    assert cand["edgepe-int8-live-channel-table"]["quant"]["granularity"] == "channel"
    for r in report["rows"]:
        a, b = r["what"].split(" / ")
        pairs = np.array(cand[a]["samples_s"]) / np.array(cand[b]["samples_s"])
        assert abs(r["latency"] - np.median(pairs)) < 1e-9  # the per-repetition ratio
        assert r["bound"] != "-"  # onnxruntime's profile named the ops
    assert md.count("| 512 |") >= len(report["rows"])


def test_floors_part_reports_every_floor_and_derives_its_conclusions(tmp_path):
    """``--part floors --quick`` (N = 512, 3 repetitions): every candidate of both floors ran and
    gave the right output, the clamp column says which graphs clamp hostile positions, every
    ratio is the median of per-repetition ratios of the JSON's own samples, and each conclusion
    quotes those ratios and takes the side of the target that they are on."""
    import onnxruntime

    report, md = run_part("floors", tmp_path)
    (table,) = report["table"]
    (compute,) = report["compute"]
    assert table["n"] == compute["n"] == 512 and compute["n_bits"] == 10  # the demo's width

    def samples(row, name):
        return np.array(row["candidates"][name]["samples_s"])

    def median(num, den):
        return float(np.median(num / den))

    cand = table["candidates"]
    assert set(cand) == {"floor-gather", "abs-gather", "clip64-gather", "edgepe-table"}
    for name, entry in cand.items():
        assert entry["error"] is None and entry["matches"] is True, name
        assert len(entry["samples_s"]) == 3 and entry["median_s"] > 0, name
    # onnxruntime 1.31.1's int64 Clip maps [2^31, 2^32) to row 0 (pyproject.toml): the column
    # shows it there; 1.32 clamps right.
    fixed = tuple(int(x) for x in onnxruntime.__version__.split(".")[:2]) >= (1, 32)
    assert {name: e["clamps"] for name, e in cand.items()} == {
        "floor-gather": False, "abs-gather": False, "clip64-gather": fixed, "edgepe-table": True}
    t = table["target"]
    ratios = table["ratios"]
    for name, r in ratios.items():
        pairs = samples(table, name) / samples(table, "floor-gather")
        assert np.allclose([r["q1"], r["ratio"], r["q3"]], np.percentile(pairs, [25, 50, 75]),
                           rtol=0, atol=1e-12)
        assert f"{r['ratio']:.2f}x" in table["conclusion"]
    # "cannot hold" where the lower quartile is over the target, "within" where the upper one
    # is not, both to the two decimals the text prints; else undecided.
    clip = ratios["clip64-gather"]
    assert ("no clamped graph meets" in table["conclusion"]) == (round(clip["q1"], 2) > t)
    assert ("clamp is within" in table["conclusion"]) == (round(clip["q3"], 2) <= t)
    assert f"- {table['conclusion']}" in md

    cand = compute["candidates"]
    ops = ("BitwiseAnd", "BitwiseAnd-rows", "BitShift", "Div", "Mod")
    assert set(cand) == {*ops, "Add", "Cast", "peer-Gather", "MatMul", "Gemm", "call",
                         "floor-int32", "floor-int32-rows", "edgepe-compute", "peer-torchscript"}
    for name, entry in cand.items():
        assert entry["error"] is None and entry["matches"] is True, name
        assert len(entry["samples_s"]) == 3, name
    assert cand["peer-torchscript"]["nodes"] == {"Gather": 1, "MatMul": 1}
    bound = compute["bound"]
    assert bound["bit_op"] == min(ops, key=lambda op: cand[op]["median_s"])
    assert bound["gemm"] == min(("MatMul", "Gemm"), key=lambda op: cand[op]["median_s"])
    call = samples(compute, "call")
    ours = (samples(compute, bound["bit_op"]) + samples(compute, "Cast")
            + samples(compute, bound["gemm"]) - 2 * call)
    peers = samples(compute, "peer-Gather") + samples(compute, "MatMul") - call
    assert abs(bound["ratio"] - median(ours, peers)) < 1e-9
    floor = compute["floor_graph"]["graph"]
    assert floor == min(("floor-int32", "floor-int32-rows"), key=lambda g: cand[g]["median_s"])
    for key, name in (("floor_graph", floor), ("measured", "edgepe-compute")):
        want = median(samples(compute, name), samples(compute, "peer-torchscript"))
        assert abs(compute[key]["ratio"] - want) < 1e-9
    for key in ("bound", "floor_graph", "measured"):
        assert f"{compute[key]['ratio']:.2f}x" in compute["conclusion"]
    floors = [compute[k] for k in ("bound", "floor_graph")]
    t = compute["target"]
    assert ("no integer-only graph" in compute["conclusion"]) == all(
        round(r["q1"], 2) > t for r in floors)
    assert ("would meet" in compute["conclusion"]) == all(round(r["q3"], 2) <= t for r in floors)
    assert f"- {compute['conclusion']}" in md
