"""``scripts/bench.py --part sliced``: ``--mode sliced`` rope and sinusoidal against Sin/Cos and
the full cache.

Issue 34's speed and size rows (issue 44: sinusoidal's fused form beside rope's), one run: rope
head dim and sinusoidal ``d_model`` 128, ``max_len = 32768``, ``N = 512, 4096, 65536`` random
positions below 32768 (seeded), onnxruntime CPU, one thread, candidates timed
round-robin (``bench.latency.time_round_robin``). Candidates:

- ``sincos``: ``--mode compute`` (the float32 angle, Sin and Cos);
- ``sliced``: ``--mode sliced`` with its default plan (8,7), bitwise slicing;
- ``sliced-trunc``: the same with ``--lowering trunc`` (CoreML's form), for information (rope);
- ``sliced-ort``, ``sliced-rotary23``: ``--mode sliced --rope-lowering ort`` / ``rotary23``
  (``--opset 23``): the same slices, each angle addition one fused ``RotaryEmbedding`` pass
  (``com.microsoft``'s, ONNX opset 23's) instead of six nodes: onnxruntime's form;
- ``cache``: a ``Gather`` of the full ``[32768, 128]`` float32 ``[cos | sin]`` cache (the usual
  fix; 16 MiB).
- ``floor`` (rope): not a PE (its output is not checked): the slicing front end, the four Gathers of
  ``[N, d/2]`` from the plan's own ``cos``/``sin`` tables of its two slices (the least any
  angle-addition graph reads: cos and sin of both slices at every frequency), an ``Add`` per
  half and the ``Concat`` that writes ``[N, d]``. The true form needs four products and two
  sums where this has two sums, and onnxruntime's CPU kernels fuse none of them, so no
  two-slice graph on them can beat this one: its ratios bound what ``--mode sliced`` can
  reach on the machine.
- ``passes``, ``unfolded`` (rope; issue 44, why N = 512 misses 2.5x the cache): bounds of the
  fused form. ``passes`` is its three passes over ``[N, d]`` alone (the lowest slice's
  ``Gather``, the ``RotaryEmbedding``, the copy of the op's 3-D output into ``[N, d]``) with
  both slice indices fed in already computed, as ``[N, 1]``: no slicing, no fold; ``unfolded``
  adds the slicing on ``[N]`` (``BitwiseAnd``, ``BitwiseAnd``, ``Div`` and the two index
  ``Reshape`` nodes) but not the CUDA grid fold (the ``[N, 1]`` form, which fails on CUDA from
  N = 65536). Both are checked PEs; neither is an artifact.

Every candidate's output is checked against the float64 definition first (the sliced ones within
``graphs.sliced.bound``, the float32 recipe reports its own distance). Ratios are medians of the
per-repetition ratio (paired: the two candidates ran back to back in the same repetition), in
wall time (``bench.latency.time_round_robin``) and, in a second one (``round_robin``), in the
calling thread's CPU time (``time.thread_time``: onnxruntime with one intra-op thread runs the
graph in the caller's thread), which a shared machine's scheduling perturbs less than wall time.
Targets (issue 34): sliced <= 0.8x sincos at every N; <= 2.5x cache at N <= 4096, <= 3.5x at
65536 (goal 1.5x); file <= 1/50 of the cache. The verdicts are given for every sliced form;
on onnxruntime the fused ones are the form to use. Never imported by the package.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MAX_LEN, D_MODEL = 32768, 128
SIZES = (512, 4096, 65536)
SINCOS_TARGET = 0.8
CACHE_TARGETS = {512: 2.5, 4096: 2.5, 65536: 3.5}
CACHE_GOAL = 1.5
SIZE_TARGET = 1 / 50
SCHEMES = ("rope", "sinusoidal")


def _export(config, module, path: Path) -> Path:
    from edgepe.export import prepare

    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    path.write_bytes(buffer.getvalue())
    return path


def _candidates(scheme_name: str, work: Path) -> tuple[Any, dict[str, Path]]:
    """``(module, paths)``: the scheme's candidates exported (module docstring)."""
    from edgepe.contract.config import ExportConfig
    from edgepe.schemes import build, resolve

    scheme = resolve(scheme_name, MAX_LEN, D_MODEL)
    module = build(scheme)
    stem = work / scheme_name
    stem.mkdir(exist_ok=True)
    paths = {
        "sincos": _export(ExportConfig(scheme), module, stem / "sincos.onnx"),
        "sliced": _export(ExportConfig(scheme, mode="sliced"), module, stem / "sliced.onnx"),
        "sliced-ort": _export(ExportConfig(scheme, mode="sliced", extra={"rope_lowering": "ort"}),
                              module, stem / "sliced-ort.onnx"),
        "sliced-rotary23": _export(ExportConfig(scheme, mode="sliced", opset=23,
                                                extra={"rope_lowering": "rotary23"}),
                                   module, stem / "sliced-rotary23.onnx"),
    }
    if scheme_name == "rope":
        paths["sliced-trunc"] = _export(ExportConfig(scheme, mode="sliced", lowering="trunc"),
                                        module, stem / "sliced-trunc.onnx")
    return module, paths


def run(bench, work: Path, reps: int, min_sample_s: float, quick: bool) -> dict[str, Any]:
    """Export the candidates once, check them, time them at every N; rows of ratios (rope's,
    then sinusoidal's: issue 44's fused sinusoidal beside rope)."""
    import torch

    from edgepe.graphs.sliced import bound, default_plan
    from edgepe.schemes.definition import Definition

    limit = bound(default_plan(MAX_LEN))
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {"rows": [], "bytes": {}, "max_abs_err": {}, "bound": limit,
                              "plan": list(default_plan(MAX_LEN))}
    for scheme_name in SCHEMES:
        module, paths = _candidates(scheme_name, work)
        with torch.no_grad():
            exact = Definition(module).encode64(torch.arange(MAX_LEN)).numpy()
        cache = exact.astype(np.float32)
        paths["cache"] = work / scheme_name / "cache.onnx"
        bench.gather_floor(cache, paths["cache"])
        if scheme_name == "rope":
            paths["floor"] = _floor_graph(module, work / "floor.onnx")
            paths.update(_fused_floor_graphs(module, work))
        report["bytes"][scheme_name] = {name: path.stat().st_size for name, path in paths.items()}
        report["cache_bytes"] = int(cache.nbytes)
        errors = report["max_abs_err"].setdefault(scheme_name, {})
        for n in (SIZES[:1] if quick else SIZES):
            positions = rng.integers(0, MAX_LEN, n).astype(np.int64)
            candidates = []
            low = (positions & ((1 << LOW_BITS) - 1)).reshape(-1, 1)
            top = ((positions >> LOW_BITS) & ((1 << (TOP_BITS + 1)) - 1)).reshape(-1, 1)
            for name, path in paths.items():
                feeds = ({"low_ids": low, "top_ids": top} if name == "passes"
                         else {"positions": positions})
                c = bench.Candidate(name, "edgepe", path=path, session=bench.session(path),
                                    feeds=feeds)
                candidates.append(c)
                if name == "floor":
                    continue  # a cost bound, not a PE
                got = c.session.run(None, c.feeds)[0].astype(np.float64)
                err = float(np.abs(got - exact[positions]).max())
                errors[name] = max(errors.get(name, 0.0), err)
                if name != "cache" and name != "sincos" and err > limit:  # a wrong graph: moot
                    raise SystemExit(f"{scheme_name} {name}: error {err:.3g} past the bound "
                                     f"{limit:.3g}")
            print(f"sliced: {scheme_name} N={n}", file=sys.stderr, flush=True)
            bench.time_round_robin(candidates, reps, min_sample_s)
            row: dict[str, Any] = {"scheme": scheme_name, "n": n}
            _ratios(row, {c.name: np.asarray(c.samples) for c in candidates}, "")
            cpu = bench.round_robin(candidates, reps, clock=time.thread_time)
            _ratios(row, {name: np.asarray(v) for name, v in cpu.items()}, "cpu_")
            report["rows"].append(row)
    return report


def _floor_graph(module, path: Path) -> Path:
    """The ``floor`` candidate (module docstring): default plan (8, 7), positions ``>= 0``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgepe.graphs.sliced import default_plan, slice_tables

    (cl, sl), (ch, sh) = slice_tables(module.inv_freq.detach().numpy(), default_plan(MAX_LEN))
    m = len(cl)  # 2^7 rows in the low slice
    tables = {"ch": ch, "sh": sh, "cl": cl, "sl": sl}
    nodes = [helper.make_node("Div", ["positions", "m"], ["hi"]),  # positions >= 0
             helper.make_node("Mod", ["positions", "m"], ["lo"]),
             *(helper.make_node("Gather", [t, "hi" if t[1] == "h" else "lo"], [f"g{t}"])
               for t in tables),
             helper.make_node("Add", ["gch", "gcl"], ["c"]),
             helper.make_node("Add", ["gsh", "gsl"], ["s"]),
             helper.make_node("Concat", ["c", "s"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tables.items()]
    inits.append(numpy_helper.from_array(np.array(m, np.int64), "m"))
    graph = helper.make_graph(
        nodes, "floor", [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", D_MODEL])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


TOP_BITS, LOW_BITS = 8, 7  # default_plan(32768): the fused floors' plan (checked there)


def _fused_floor_graphs(module, work: Path) -> dict[str, Path]:
    """The ``passes`` and ``unfolded`` candidates (module docstring): ``com.microsoft``
    RotaryEmbedding, the plan's own tables, the top caches with ``rotary_columns``' mirrored
    rows for negative positions (the bench feeds none)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgepe.graphs.sliced import default_plan, slice_tables

    assert default_plan(MAX_LEN) == (TOP_BITS, LOW_BITS)
    (cl, sl), (ch, sh) = slice_tables(module.inv_freq.detach().numpy(), default_plan(MAX_LEN),
                                      top_extra=True)
    rows = 1 << TOP_BITS
    inits = {"low": np.hstack([cl, sl]),
             "cos": np.vstack([ch[:rows], ch[rows:0:-1]]),
             "sin": np.vstack([sh[:rows], -sh[rows:0:-1]]),
             "low_mask": np.int64((1 << LOW_BITS) - 1),
             "top_mask": np.int64(((1 << (TOP_BITS + 1)) - 1) << LOW_BITS),
             "step": np.int64(1 << LOW_BITS), "column": np.array([-1, 1], np.int64),
             "rows": np.array([-1, D_MODEL], np.int64)}
    passes = [helper.make_node("Gather", ["low", "low_ids"], ["x"]),
              helper.make_node("RotaryEmbedding", ["x", "top_ids", "cos", "sin"], ["r"],
                               domain="com.microsoft", num_heads=1),
              helper.make_node("Reshape", ["r", "rows"], ["y"])]
    slicing = [helper.make_node("BitwiseAnd", ["positions", "low_mask"], ["low_flat"]),
               helper.make_node("Reshape", ["low_flat", "column"], ["low_ids"]),
               helper.make_node("BitwiseAnd", ["positions", "top_mask"], ["top_bits"]),
               helper.make_node("Div", ["top_bits", "step"], ["top_flat"]),
               helper.make_node("Reshape", ["top_flat", "column"], ["top_ids"])]
    ids = [helper.make_tensor_value_info(name, TensorProto.INT64, ["N", 1])
           for name in ("low_ids", "top_ids")]
    out = {}
    for name, nodes, inputs in (
            ("passes", passes, ids),
            ("unfolded", slicing + passes,
             [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])])):
        used = {i for node in nodes for i in node.input}
        graph = helper.make_graph(
            nodes, name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                ["N", D_MODEL])],
            [numpy_helper.from_array(np.asarray(v, np.float32 if v.dtype.kind == "f"
                                                else np.int64), k)
             for k, v in inits.items() if k in used])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        out[name] = work / f"fused-{name}.onnx"
        onnx.save(model, str(out[name]))
    return out


def _ratios(row: dict[str, Any], by: dict[str, np.ndarray], prefix: str) -> None:
    for name, samples in by.items():
        row[f"{prefix}{name}_us"] = float(np.median(samples) * 1e6)
    for name in ("sliced", "sliced-trunc", "sliced-ort", "sliced-rotary23", "floor", "passes",
                 "unfolded"):
        if name not in by:  # sinusoidal has no trunc or floor candidate
            continue
        for base in ("sincos", "cache"):
            ratio = by[name] / by[base]
            row[f"{prefix}{name}_vs_{base}"] = float(np.median(ratio))
            q1, q3 = np.percentile(ratio, [25, 75])
            row[f"{prefix}{name}_vs_{base}_iqr"] = float(q3 - q1)


def markdown(report: dict[str, Any], machine: dict[str, Any], date: str, reps: int) -> str:
    """The tables of docs/readme/sliced.md: ratios per N with PASS/MISS, bytes, errors; rope's
    table, then sinusoidal's (issue 44)."""
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    lines = [
        f"Run: {date}, `scripts/bench.py --part sliced --reps {reps}`, onnxruntime "
        f"{machine.get('onnxruntime')} CPU, 1 thread; {machine.get('cpu')} "
        f"({machine.get('cores')} cores, shared with other work: ratios of candidates timed "
        "alternately in the same run, median of the per-repetition ratio, its IQR in brackets). "
        f"rope head dim and sinusoidal d_model {D_MODEL}, max_len {MAX_LEN}, plan "
        f"{report['plan']}, N random positions below {MAX_LEN}.",
        "",
        "Targets (issues 34, 44): <= 0.8x Sin/Cos at every N; <= 2.5x the cache at N <= 4096, "
        "<= 3.5x at 65536 (goal 1.5x). `ort`, `rotary23`: `--mode sliced --rope-lowering "
        "ort|rotary23`, onnxruntime's form; `plain`: `--mode sliced` alone (plain ONNX ops, for "
        "targets without RotaryEmbedding); `trunc`: its CoreML lowering; `floor`: the least any "
        "plain-op two-slice graph does (module docstring).",
    ]

    def pair(r: dict, p: str, name: str) -> str:
        a, b = r[f"{p}{name}_vs_sincos"], r[f"{p}{name}_vs_cache"]
        target = CACHE_TARGETS[r["n"]]
        goal = ", goal met" if b <= CACHE_GOAL else ""
        return (f"{a:.2f}x ({r[f'{p}{name}_vs_sincos_iqr']:.2f}) {verdict(a <= SINCOS_TARGET)} | "
                f"{b:.2f}x ({r[f'{p}{name}_vs_cache_iqr']:.2f}) {verdict(b <= target)} "
                f"<= {target}x{goal}")

    for scheme in SCHEMES:
        rows = [r for r in report["rows"] if r.get("scheme", "rope") == scheme]
        if not rows:
            continue
        rope = scheme == "rope"
        names = ("sincos", "cache", "sliced-ort", "sliced-rotary23", "sliced",
                 *(("sliced-trunc", "floor", "passes", "unfolded") if rope else ()))
        lines += [
            "", f"{scheme}:", "",
            "| N | ort / Sin-Cos | ort / cache | rotary23 / Sin-Cos | rotary23 / cache "
            "| plain / Sin-Cos | plain / cache | "
            + ("trunc / Sin-Cos | floor / Sin-Cos | floor / cache | passes / cache | "
               "unfolded / cache | " if rope else "")
            + "us per call: Sin-Cos, cache, ort, rotary23, plain"
            + (", trunc, floor, passes, unfolded |" if rope else " |"),
            "|---:|---|---|---|---|---|---|" + ("---|---|---|---|---|" if rope else "") + "---|",
        ]
        for p, clock in (("", "wall"), ("cpu_", "CPU")):
            for r in rows:
                us = ", ".join(f"{r[f'{p}{name}_us']:.0f}" for name in names)
                extra = (f"{r[f'{p}sliced-trunc_vs_sincos']:.2f}x | "
                         f"{r[f'{p}floor_vs_sincos']:.2f}x | {r[f'{p}floor_vs_cache']:.2f}x | "
                         f"{r[f'{p}passes_vs_cache']:.2f}x | {r[f'{p}unfolded_vs_cache']:.2f}x | "
                         if rope else "")
                lines.append(
                    f"| {r['n']} ({clock}) | {pair(r, p, 'sliced-ort')} | "
                    f"{pair(r, p, 'sliced-rotary23')} | {pair(r, p, 'sliced')} | {extra}{us} |")
    sizes, cache = report["bytes"], report["cache_bytes"]
    if "sincos" in sizes:  # a report from before issue 44: one scheme's sizes
        sizes = {"rope": sizes}
    ratio = max(size for by in sizes.values() for name, size in by.items()
                if name.startswith("sliced")) / cache
    errors = report["max_abs_err"]
    if errors and not isinstance(next(iter(errors.values())), dict):
        errors = {"rope": errors}
    lines += [
        "",
        "| file | bytes | x full cache |",
        "|---|---:|---:|",
        *(f"| {scheme} {name} | {size} | {size / cache:.4f} |" for scheme, by in sizes.items()
          for name, size in by.items() if name not in ("floor", "passes", "unfolded")),
        "",
        f"largest sliced file / full float32 cache: 1/{1 / ratio:.0f} "
        f"({verdict(ratio <= SIZE_TARGET)}, target <= 1/50).",
        "",
        "Max abs error against the float64 definition over the timed positions: "
        + "; ".join(f"{scheme}: " + ", ".join(f"{k} {v:.3g}" for k, v in by.items())
                    for scheme, by in errors.items())
        + f" (sliced bound {report['bound']:.3g}; cache: the definition rounded to float32).",
    ]
    return "\n".join(lines) + "\n"
