"""Benchmark edgepe's artifacts against a plain ``torch.onnx.export`` and the runtime floor.

    .venv/bin/python scripts/bench.py [--quick] [--out docs/bench.json]

Writes the figures as JSON (``--out``), a markdown report (``--md``, default ``BENCHMARKS.md``
next to the JSON) and a plot (``--png``, default the JSON path with ``.png``). ``--quick`` runs
tiny sizes with 3 repetitions into a temporary folder (the test suite's smoke run).

What is measured (issue 8), all in one run so every target is a ratio of two numbers taken
side by side:

- latency: onnxruntime CPU, one thread (intra and inter op), sessions built once, every call
  with ``N = max_len`` positions. Candidates are timed round-robin inside each repetition (the
  starting candidate rotates) so machine drift hits all of them alike; medians and IQR.
  Candidates: the peer (``torch.onnx.export`` of the module as a user writes it, TorchScript and
  dynamo exporters), edgepe's compute, table and int8 graphs, and the floor (an ``Identity``
  graph returning an output of the same size);
- bytes: artifact files, against the information floor ``n_bits x d_model`` float32 weights;
- wall time and peak memory (``wait4`` maxrss) of ``edgepe export`` and of a bare
  ``python -c "import torch, onnx, onnxruntime"`` in alternating subprocesses, ``edgepe --help``;
- scale: exporting and verifying sinusoidal tables up to ``65536 x 512``, one subprocess each.

Every candidate's output is checked against the torch reference before it is timed, so a fast
but wrong graph shows up as such. An exporter that fails is recorded with its message, not
hidden. This script is never imported by the package.

This file is the entry point: the parts live in ``scripts/bench/`` (``latency``, ``cli``, ``scale``,
``report``, ``common``); ``--part int8-speed`` is ``scripts/bench_int8.py``, ``--part floors``
is ``scripts/bench_floors.py``, ``--part sliced`` is ``scripts/bench_sliced.py``, and the
Cortex-M and ExecuTorch sections are
``scripts/bench_cortexm.py`` and ``scripts/bench_pte.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import latency
from bench.cli import bench_export, bench_help
from bench.common import DEMO, ROOT, VERBOSE_ENV, progress
from bench.latency import bench_case, grid, one_line
from bench.report import evaluate, fmt_measured, machine, markdown, plot, readme_section
from bench.scale import bench_scale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 3 repetitions")
    parser.add_argument("--out", type=Path, help="JSON path (default docs/bench.json; "
                        "--quick: a temporary folder)")
    parser.add_argument("--md", type=Path, help="markdown path (default BENCHMARKS.md next "
                        "to --out)")
    parser.add_argument("--png", type=Path, help="plot path (default --out with .png)")
    parser.add_argument("--reps", type=int, help="latency repetitions (default 61, quick 3)")
    parser.add_argument("--readme", type=Path, help="also write the README section here "
                        "(docs/readme/bench.md)")
    parser.add_argument("--part", choices=["all", *PARTS], default="all",
                        help="int8-speed: only the demo's int8 rows (scripts/bench_int8.py); "
                        "floors: the runtime floors under two of issue 19's targets "
                        "(scripts/bench_floors.py); sliced: --mode sliced rope against Sin/Cos "
                        "and the full cache (scripts/bench_sliced.py); JSON to --out, markdown "
                        "to --md")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="progress lines and the exporters' own output (torch.onnx's graph "
                        "dumps); without it only the summary is printed")
    args = parser.parse_args(argv)
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"  # the parts and their child processes read it
    if args.part != "all":
        return module_part(args, args.part)

    started = time.perf_counter()
    if args.out is None:
        args.out = (Path(tempfile.mkdtemp(prefix="edgepe-bench-")) / "bench.json" if args.quick
                    else ROOT / "docs" / "bench.json")
    md = args.md or args.out.parent / "BENCHMARKS.md"
    png = args.png or args.out.with_suffix(".png")
    reps = args.reps or (3 if args.quick else 61)
    min_sample = 0.0003  # well inside a scheduler time slice: most samples run unpreempted

    import bench_cortexm  # scripts/: this script's folder is on sys.path
    import torch

    torch.set_num_threads(1)  # the reference and the peer exports stay off the timed core
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    report: dict[str, Any] = {
        "command": "scripts/bench.py" + (" --quick" if args.quick else ""),
        "machine": machine(),
        "conditions": "Taken on a shared machine: other processes used the CPU during the "
                      "run, so absolute figures are noisy; the targets are ratios of "
                      "candidates timed alternately in the same run.",
        "reps": reps,
        "demo": DEMO,
    }
    work = Path(tempfile.mkdtemp(prefix="edgepe-bench-work-"))
    try:
        cases = []
        for case in grid(args.quick):
            progress(f"latency: {case.name}")
            cases.append(bench_case(case, work, reps, min_sample))
        report["cases"] = cases
        progress("export wall time")
        report["export"] = bench_export(work, 1 if args.quick else 7)
        report["cli_help"] = bench_help(1 if args.quick else 7)
        sizes = ([(256, 64)] if args.quick else
                 [(8192, 512), (16384, 512), (32768, 512), (65536, 512)])
        progress("scale")
        report["scale"] = bench_scale(work, sizes, {"npy": 1} if args.quick
                                      else {"npy": 3, "onnx": 2})
        report["cortex_m"] = bench_cortexm.run(("binary",) if args.quick else None)
        if importlib.util.find_spec("executorch") is not None:  # the [executorch] extra
            import bench_pte

            progress("executorch")
            report["executorch"] = bench_pte.measure(work, reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["targets"] = evaluate(report["cases"], report["export"], report["cli_help"],
                                 report["scale"])
    report["total_s"] = time.perf_counter() - started
    with contextlib.suppress(OSError):
        report["machine"]["loadavg_at_end"] = list(os.getloadavg())

    args.out.parent.mkdir(parents=True, exist_ok=True)
    report["plot"] = None
    try:
        if plot(report, png):
            report["plot"] = os.path.relpath(png, md.parent)
    except Exception as exc:  # noqa: BLE001 - no plot is not a reason to lose the figures
        report["plot_error"] = one_line(exc)
    args.out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    md.write_text(markdown(report) + bench_cortexm.markdown(report["cortex_m"]) + (
        "\n## ExecuTorch\n\n" + __import__("bench_pte").markdown(report["executorch"])
        if "executorch" in report else ""))
    if args.readme:
        args.readme.write_text(readme_section(report, md.name))
    for t in report["targets"]:
        print(f"{t['status']:4}  {fmt_measured(t):>24}  {t['target']}")
    print(f"wrote {args.out}, {md}, {png} in {report['total_s']:.0f} s")
    return 0


# --part NAME -> the module in scripts/ that measures it (``run`` and ``markdown``): the demo at
# N = 512, 4096, 65536 with every int8 variant and issue 19's ratio rows; the floors under two of
# issue 19's targets.
PARTS = {"int8-speed": "bench_int8", "floors": "bench_floors", "sliced": "bench_sliced",
         "verify-memory": "bench_verify_memory"}  # issue 30: verify peak vs artifact


def module_part(args, part: str) -> int:
    """``--part int8-speed|floors``: only that module's measurements run (see ``PARTS``)."""
    import torch

    module = importlib.import_module(PARTS[part])  # scripts/: this script's folder is on sys.path
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    reps = args.reps or (3 if args.quick else 41)
    work = Path(tempfile.mkdtemp(prefix=f"edgepe-bench-{part}-"))
    try:
        report = module.run(latency, work, reps, 0.0003, args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = module.markdown(report, info, date, reps)
    out = args.out or Path(tempfile.mkdtemp(prefix="edgepe-bench-")) / f"{part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "date": date, "reps": reps, **report},
                              indent=1, sort_keys=True) + "\n")
    md = args.md or out.with_suffix(".md")
    md.write_text(text)
    print(text)
    print(f"wrote {out}, {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
