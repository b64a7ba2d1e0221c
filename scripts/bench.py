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
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BARE_IMPORT = "import torch, onnx, onnxruntime"
DEMO = {"scheme": "binary", "max_len": 512, "d_model": 64}
DEMO_CASE = "binary-L512-d64"

# Targets of issue 8 (demo scheme unless stated).
COMPUTE_LATENCY_VS_PEER = 1.0
COMPUTE_BYTES_VS_PEER = 1 / 8
COMPUTE_BYTES_FLOOR_FACTOR, COMPUTE_BYTES_FLOOR_SLACK = 1.25, 600
TABLE_LATENCY_VS_IDENTITY = 1.2
EXPORT_VS_BARE_IMPORT = 1.3
HELP_SECONDS = 0.5
SCALE_PEAK_VS_TABLE = 3.0
# "Stays linear": the work per MiB at the largest table is at most this much the median work per
# MiB over all sizes (fixed costs only make small tables dearer per MiB; superlinear growth
# fails; the median keeps one noisy small size from deciding).
SCALE_PER_MIB_GROWTH = 1.25


# ---------------------------------------------------------------------------------------------
# The grid


@dataclass(frozen=True)
class Case:
    """One scheme configuration and the candidates timed on it (``N = max_len`` per call)."""

    scheme: str
    max_len: int
    d_model: int | None = None
    heads: int | None = None
    peers: tuple[str, ...] = ("torchscript",)
    edgepe: tuple[tuple[str, str], ...] = (("compute", "none"), ("table", "none"))

    @property
    def name(self) -> str:
        width = f"h{self.heads}" if self.d_model is None else f"d{self.d_model}"
        return f"{self.scheme}-L{self.max_len}-{width}"


BOTH_PEERS = ("torchscript", "dynamo")
INT8 = (("compute", "none"), ("table", "none"), ("compute", "int8"), ("table", "int8"))


def grid(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("binary", 512, 64, peers=BOTH_PEERS, edgepe=INT8),
            Case("binary", 64, 64, edgepe=INT8),
            Case("alibi", 64, heads=8),
        ]
    cases = [Case("binary", 512, 64, peers=BOTH_PEERS, edgepe=INT8)]
    cases += [Case("binary", L, 64, peers=BOTH_PEERS, edgepe=INT8) for L in (64, 4096, 65536)]
    cases += [Case("binary", 512, d, edgepe=INT8) for d in (16, 512)]
    cases += [Case(s, L, 64) for s in ("binary-bits", "gray") for L in (512, 65536)]
    cases += [Case("sinusoidal", L, d) for L, d in ((512, 64), (4096, 64), (4096, 512))]
    cases += [Case("alibi", L, heads=8) for L in (64, 512, 1024)]
    return cases


# ---------------------------------------------------------------------------------------------
# Candidates: an ONNX file, its session and inputs


@dataclass
class Candidate:
    name: str  # peer-torchscript, peer-dynamo, edgepe-compute, ..., floor-identity
    role: str  # peer | edgepe | floor
    path: Path | None = None
    error: str | None = None
    export_s: float | None = None  # in-process export wall time (informational)
    session: Any = None
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    samples: list[float] = field(default_factory=list)  # seconds per call
    inner: int = 1


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def session(path: Path):
    """An onnxruntime CPU session on one thread (default graph optimisations, as users get)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def file_bytes(path: Path) -> int:
    """The artifact's bytes, with an external-data file if the exporter wrote one."""
    extra = Path(str(path) + ".data")
    return path.stat().st_size + (extra.stat().st_size if extra.exists() else 0)


def graph_info(path: Path) -> dict[str, Any]:
    """Bytes, node count, op histogram and where the bytes go (weights, metadata, the rest)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    weights = sum(len(t.SerializeToString()) for t in model.graph.initializer)
    weights += sum(
        len(n.SerializeToString()) for n in model.graph.node if n.op_type == "Constant"
    )
    metadata = sum(len(p.SerializeToString()) for p in model.metadata_props)
    total = file_bytes(path)
    return {
        "bytes": total,
        "nodes": len(model.graph.node),
        "ops": dict(sorted(ops.items())),
        "bytes_weights": weights,
        "bytes_metadata": metadata,
        "bytes_other": total - weights - metadata,
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                     default=None),
    }


def peer_module(reference, case: Case):
    """What a user writes before calling ``torch.onnx.export``: for the demo, a wrapper taking
    positions to the stored bit table rows ``pe_binary[0, positions]`` and the projection; for
    the other schemes, the reference module's own ``encode``."""
    import torch
    from torch import nn

    if case.scheme == "binary":

        class DemoPeer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.register_buffer("pe_binary", reference.pe_binary.detach().clone())
                self.projection = reference.projection

            def forward(self, positions: torch.Tensor) -> torch.Tensor:
                return self.projection(self.pe_binary[0, positions])

        return DemoPeer().eval()

    class EncodePeer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.reference = reference

        def forward(self, *positions: torch.Tensor) -> torch.Tensor:
            return self.reference.encode(*positions)

    return EncodePeer().eval()


def export_peer(reference, case: Case, exporter: str, feeds, path: Path) -> Candidate:
    import torch

    candidate = Candidate(f"peer-{exporter}", "peer", path)
    peer = peer_module(reference, case)
    names = list(feeds)
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    out_name = "bias" if len(names) == 2 else "pe"
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            if exporter == "torchscript":
                axes = {n: {0: f"N{i}"} for i, n in enumerate(names)}
                torch.onnx.export(
                    peer, args, str(path), dynamo=False, opset_version=18, input_names=names,
                    output_names=[out_name], dynamic_axes=axes,
                )
            else:
                dims = tuple({0: torch.export.Dim(f"N{i}", max=case.max_len)}
                             for i in range(len(names)))
                torch.onnx.export(
                    peer, args, str(path), dynamo=True, opset_version=18, input_names=names,
                    output_names=[out_name], dynamic_shapes=dims, external_data=False,
                    verbose=False,
                )
    except Exception as exc:  # noqa: BLE001 - a peer export failure is a result, recorded
        candidate.error = one_line(exc)
    candidate.export_s = time.perf_counter() - start
    return candidate


def export_edgepe(case: Case, mode: str, quantize: str, path: Path) -> Candidate:
    from edgepe.export import ExportConfig, export
    from edgepe.schemes import resolve

    # "int8-live[-tensor]": --quantize int8 --int8-runtime live [--quant-granularity tensor]
    # (scripts/bench_int8.py)
    quantize, *options = quantize.split("-")
    name = "-".join(["edgepe", *([quantize] if quantize == "int8" else []), *options, mode])
    candidate = Candidate(name, "edgepe", path)
    start = time.perf_counter()
    try:
        scheme = resolve(case.scheme, case.max_len, case.d_model, case.heads)
        config = ExportConfig(scheme=scheme, mode=mode, quantize=quantize,
                              int8_runtime="live" if "live" in options else "fold",
                              quant_granularity="tensor" if "tensor" in options else "channel",
                              out=path)
        result = export(config, force=True)
        candidate.info["quant"] = result.manifest.get("quant")
    except Exception as exc:  # noqa: BLE001 - a missing or failing exporter is recorded
        candidate.error = one_line(exc)
    candidate.export_s = time.perf_counter() - start
    return candidate


def _save_graph(nodes, inputs, output_rank: int, initializers, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(output_rank)])
    graph = helper.make_graph(nodes, "floor", inputs, [y], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8  # what onnxruntime 1.31 loads (DESIGN.md)
    onnx.save(model, str(path))


def identity_floor(shape: tuple[int, ...], path: Path) -> Candidate:
    """The runtime floor: float32 ``x`` of the output's shape -> ``Identity`` -> output."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [f"d{i}" for i in range(len(shape))])
    _save_graph([helper.make_node("Identity", ["x"], ["y"])], [x], len(shape), [], path)
    candidate = Candidate("floor-identity", "floor", path)
    candidate.feeds = {"x": np.random.default_rng(0).random(shape, dtype=np.float32)}
    return candidate


def gather_floor(table: np.ndarray, path: Path) -> Candidate:
    """What any table graph costs at least: ``Gather`` of the same ``[L, D]`` table, no clamp."""
    from onnx import TensorProto, helper, numpy_helper

    positions = helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])
    _save_graph([helper.make_node("Gather", ["table", "positions"], ["y"])], [positions], 2,
                [numpy_helper.from_array(table, "table")], path)
    return Candidate("floor-gather", "floor", path)


def reference_output(reference, feeds) -> np.ndarray:
    import torch

    with torch.no_grad():
        return reference.encode(*(torch.from_numpy(v) for v in feeds.values())).numpy()


def check_output(candidate: Candidate, expected: np.ndarray, tolerance) -> None:
    """Run once and record the error against the torch reference (timing a wrong graph is moot)."""
    got = candidate.session.run(None, candidate.feeds)[0]
    if got.shape != expected.shape:
        candidate.info.update(max_abs_err=None, matches=False,
                              mismatch=f"shape {list(got.shape)} != {list(expected.shape)}")
        return
    err = float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0
    rtol, atol = tolerance
    quant = candidate.info.get("quant")
    if quant and quant.get("bound") is not None:  # int8: the manifest's proven bound
        ok = err <= float(quant["bound"])
    else:
        ok = bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))
    candidate.info.update(max_abs_err=err, matches=ok)


# ---------------------------------------------------------------------------------------------
# Timing


def stats(samples: list[float]) -> dict[str, float]:
    q = np.percentile(samples, [25, 50, 75])
    return {"median_s": float(q[1]), "q1_s": float(q[0]), "q3_s": float(q[2]),
            "iqr_s": float(q[2] - q[0]), "min_s": float(min(samples)), "reps": len(samples)}


def time_round_robin(candidates: list[Candidate], reps: int, min_sample_s: float) -> None:
    """Median-ready samples of seconds per call, candidates alternating within each repetition.

    Each sample is ``inner`` back-to-back calls (calibrated so a sample lasts ``min_sample_s``,
    above timer noise); the first candidate of a repetition rotates so none always runs first.
    """
    live = [c for c in candidates if c.session is not None]
    for c in live:
        for _ in range(3):
            c.session.run(None, c.feeds)
        start = time.perf_counter()
        c.session.run(None, c.feeds)
        once = max(time.perf_counter() - start, 1e-7)
        c.inner = max(1, min(1000, math.ceil(min_sample_s / once)))
    for rep in range(reps):
        for k in range(len(live)):
            c = live[(rep + k) % len(live)]
            run, feeds, inner = c.session.run, c.feeds, c.inner
            start = time.perf_counter()
            for _ in range(inner):
                run(None, feeds)
            c.samples.append((time.perf_counter() - start) / inner)


def bench_case(case: Case, work: Path, reps: int, min_sample_s: float) -> dict[str, Any]:
    from edgepe.schemes import build, resolve

    cfg = resolve(case.scheme, case.max_len, case.d_model, case.heads)
    reference = build(cfg)
    positions = np.arange(case.max_len, dtype=np.int64)
    feeds = {"positions": positions}
    if cfg.spec.kind == "bias":
        feeds["key_positions"] = positions.copy()
    expected = reference_output(reference, feeds)

    folder = work / case.name
    folder.mkdir(parents=True, exist_ok=True)
    candidates = [export_peer(reference, case, p, feeds, folder / f"peer-{p}.onnx")
                  for p in case.peers]
    for mode, quantize in case.edgepe:
        suffix = "" if quantize == "none" else f"-{quantize}"
        candidates.append(export_edgepe(case, mode, quantize, folder / f"{mode}{suffix}.onnx"))
    candidates.append(identity_floor(expected.shape, folder / "identity.onnx"))
    if cfg.spec.kind != "bias":  # positions = arange(L): the output is the whole table
        candidates.append(gather_floor(expected, folder / "gather.onnx"))

    for c in candidates:
        if c.error is not None:
            continue
        try:
            c.info.update(graph_info(c.path))
            c.session = session(c.path)
            if c.name != "floor-identity":
                c.feeds = {"positions": positions} if c.name == "floor-gather" else feeds
                check_output(c, expected, cfg.spec.tolerance)
        except Exception as exc:  # noqa: BLE001 - a graph onnxruntime rejects is a result
            c.error = one_line(exc)
            c.session = None
    time_round_robin(candidates, reps, min_sample_s)

    floor = next(c for c in candidates if c.name == "floor-identity")
    floor_median = statistics.median(floor.samples)
    result: dict[str, Any] = {
        "case": case.name, "scheme": case.scheme, "max_len": case.max_len,
        "d_model": case.d_model, "heads": case.heads, "n_per_call": case.max_len,
        "output_shape": list(expected.shape), "output_bytes": int(expected.nbytes),
        "n_bits": cfg.n_bits, "candidates": {},
    }
    if case.scheme == "binary":  # what the demo must store: its n_bits x d_model float32 weights
        result["information_floor_bytes"] = cfg.n_bits * case.d_model * 4
    for c in candidates:
        entry: dict[str, Any] = {"role": c.role, "error": c.error}
        if c.export_s is not None:
            entry["export_s"] = c.export_s
        if c.samples:
            entry.update(stats(c.samples), inner=c.inner,
                         samples_s=[float(f"{x:.4g}") for x in c.samples])
            entry["ns_per_position"] = entry["median_s"] / case.max_len * 1e9
            entry["vs_floor"] = entry["median_s"] / floor_median
        entry.update(c.info)
        result["candidates"][c.name] = entry
    return result


# ---------------------------------------------------------------------------------------------
# Subprocesses: wall time and peak memory


def edgepe_cli() -> list[str]:
    script = Path(PYTHON).parent / "edgepe"
    if script.exists():
        return [str(script)]
    return [PYTHON, "-c", "from edgepe.cli import main; main()"]


# The measured command is started by this small launcher, not by the benchmark process: Linux
# keeps a process's peak RSS across exec (exec_mmap records the old mm's high-water mark), so a
# child forked from this torch-sized process would report at least its size.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=sys.stderr)
stdout = proc.stdout.read()
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - start
tail = stdout.decode(errors="replace").strip().splitlines()[-1:]
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "maxrss_bytes": usage.ru_maxrss * 1024,
                  "rc": os.waitstatus_to_exitcode(status), "stdout_tail": "".join(tail)}))
"""


def measure(cmd: list[str], cwd: Path = ROOT) -> dict[str, Any]:
    """Wall and CPU (user + system) seconds, peak RSS (bytes, ``wait4``) and exit code of one
    subprocess. CPU time barely moves with other load on the machine; wall time does."""
    done = subprocess.run([PYTHON, "-c", LAUNCHER, *cmd], cwd=cwd, capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout)
    tail = done.stderr.strip().splitlines()[-1:]
    result["stderr_tail"] = tail[0][:300] if tail else ""
    return result


def alternate(commands: dict[str, Any], runs: int) -> dict[str, Any]:
    """Run each command ``runs`` times, alternating (rotating start); medians per command.

    ``commands`` maps a name to a function ``i -> argv`` (a fresh output path per run).
    """
    runs_by: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(runs):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            runs_by[name].append(measure(commands[name](i)))
    out = {}
    for name, results in runs_by.items():
        ok = [r for r in results if r["rc"] == 0]
        walls = [r["wall_s"] for r in ok]
        out[name] = {
            "argv": commands[name]("N"),
            "runs": len(results),
            "failed": len(results) - len(ok),
            "error": next((r["stderr_tail"] for r in results if r["rc"] != 0), None),
            **({"median_s": statistics.median(walls), "min_s": min(walls),
                "max_s": max(walls), "samples_s": walls,
                "cpu_median_s": statistics.median(r["cpu_s"] for r in ok),
                "maxrss_bytes": max(r["maxrss_bytes"] for r in ok)} if ok else {}),
        }
    return out


def bench_export(work: Path, runs: int) -> dict[str, Any]:
    cli = edgepe_cli()
    folder = work / "export"
    folder.mkdir(exist_ok=True)
    return alternate(
        {
            "edgepe export --scheme binary --max-len 512": lambda i: cli + [
                "export", "--scheme", "binary", "--max-len", "512",
                "--out", str(folder / f"binary-{i}.onnx")],
            f'python -c "{BARE_IMPORT}"': lambda i: [PYTHON, "-c", BARE_IMPORT],
        },
        runs,
    )


def bench_help(runs: int) -> dict[str, Any]:
    cli = edgepe_cli()
    return alternate(
        {"edgepe --help": lambda i: cli + ["--help"],
         'python -c "pass"': lambda i: [PYTHON, "-c", "pass"]},
        runs,
    )


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


def markdown(report: dict[str, Any]) -> str:
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
        f"    {FRESH_CLONE}",
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
    parser.add_argument("--part", choices=["all", "int8-speed"], default="all",
                        help="int8-speed: only the demo's int8 rows (scripts/bench_int8.py), "
                        "JSON to --out, markdown to --md")
    args = parser.parse_args(argv)
    if args.part == "int8-speed":
        return int8_speed_part(args)

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
            print(f"latency: {case.name}", file=sys.stderr, flush=True)
            cases.append(bench_case(case, work, reps, min_sample))
        report["cases"] = cases
        print("export wall time", file=sys.stderr, flush=True)
        report["export"] = bench_export(work, 1 if args.quick else 7)
        report["cli_help"] = bench_help(1 if args.quick else 7)
        sizes = ([(256, 64)] if args.quick else
                 [(8192, 512), (16384, 512), (32768, 512), (65536, 512)])
        print("scale", file=sys.stderr, flush=True)
        report["scale"] = bench_scale(work, sizes, {"npy": 1} if args.quick
                                      else {"npy": 3, "onnx": 2})
        report["cortex_m"] = bench_cortexm.run(("binary",) if args.quick else None)
        if importlib.util.find_spec("executorch") is not None:  # the [executorch] extra
            import bench_pte

            print("executorch", file=sys.stderr, flush=True)
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


def int8_speed_part(args) -> int:
    """``--part int8-speed``: the demo at N = 512, 4096, 65536 with every int8 variant and the
    ratio rows of issue 19 (scripts/bench_int8.py); nothing else runs."""
    import bench_int8
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    reps = args.reps or (3 if args.quick else 41)
    work = Path(tempfile.mkdtemp(prefix="edgepe-bench-int8-"))
    try:
        report = bench_int8.run(sys.modules[__name__], work, reps, 0.0003, args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = bench_int8.markdown(report, info, date, reps)
    out = args.out or Path(tempfile.mkdtemp(prefix="edgepe-bench-")) / "int8-speed.json"
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
