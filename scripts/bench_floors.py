"""The runtime floors under two of issue 19's targets, measured (onnxruntime CPU, one thread).

    .venv/bin/python scripts/bench.py --part floors [--reps 41] [--md FILE] [--out FILE]

Issue 19 asks for "table graph <= 1.08x a bare Gather" and "demo compute graph <= 1.05x the
torch.onnx TorchScript peer" at N = 512, 4096, 65536. This part measures what the cheapest
legal graph of each kind costs on onnxruntime's CPU provider, so whether a target can hold at
all is a figure of the run, not an opinion. Per N (``max_len = N``, d_model 64, positions
0 .. N-1 per call), candidates are timed round-robin within each repetition by
``scripts/bench/latency.py`` (sessions with one intra and one inter op thread); every ratio is
the median of the per-repetition ratio, with its IQR.

1. Table clamp (over the same float32 ``[N, 64]`` table, the torch reference's output):
   ``floor-gather`` (bare Gather: the floor, unclamped, wrong or an error for out-of-range
   positions), ``abs-gather`` (one of the cheapest int64 nodes in front: not a clamp, it shows what
   any extra node costs), ``clip64-gather`` (one int64 ``Clip``: the cheapest clamp there is;
   onnxruntime 1.31.1's int64 Clip is wrong in ``[2^31, 2^32)``, see pyproject.toml) and
   edgepe's own table graph. Each also runs once on hostile positions (-2^63, -1, N, 2^31,
   2^32 - 1, 2^32, 2^63 - 1) to record whether it clamps.
2. Compute front end (n = ``n_bits(N)``, the demo's width): the TorchScript peer gathers rows of
   a stored float bit table ``[N, n]`` and runs MatMul; an integer-only graph must instead
   extract n bits per position with an integer op over an ``[n, N]`` tensor, Cast them to float
   and run the float GEMM. Each kernel is a one-node graph at the shapes those graphs run:
   ``masks [n, 1] op positions [N]`` for BitwiseAnd, BitShift (uint32), Div, Mod and Add
   (int32; Add is a plain elementwise op of the same shape, for reference), Cast int32 -> float
   of ``[n, N]``, the peer's Gather of N rows of its ``[N, n]`` table, MatMul ``[N, n] @ [n,
   64]`` and Gemm ``transA=1``; with them, timed in the same round-robin, edgepe's exported
   compute graph, the real ``torch.onnx`` TorchScript peer export, ``call`` (Identity of one
   float: what one ``session.run`` costs with nothing to do) and two hand-made whole graphs at
   the floor, int32 positions in (below edgepe's int64 contract), BitwiseAnd with masks 2^k,
   Cast, and the GEMM with weights scaled by 2^-k: ``floor-int32`` (``[n, N]`` bits, Gemm
   ``transA=1``: edgepe's layout) and ``floor-int32-rows`` (positions ``[N, 1]``, ``[N, n]``
   bits, MatMul: the peer's GEMM). ``BitwiseAnd-rows`` is the bit op in that second layout.

   The floor ratio is (cheapest bit-extracting op + Cast + min(MatMul, Gemm) - 2 call) over
   (Gather + MatMul - 1 call), per repetition: a whole graph pays the per-call cost once, three
   one-node graphs pay it three times. Only BitwiseAnd (with masks 2^k and weights scaled by
   2^-k, what edgepe writes) isolates a bit on its own; BitShift, Div and Mod each need a second
   op, and MatMul wants the bits as ``[N, n]`` (another layout, another broadcast), so taking
   the cheapest of each only lowers the bound. A sum of one-node graphs leaves out what a graph
   adds between its nodes and pays for returning each intermediate, so the cheaper floor graph
   (by median) over the peer is a second estimate of the same floor, as one graph.

The markdown's conclusions are computed from these ratios: a target "cannot hold" at an N where
the cheapest clamp (1), or both floor estimates (2), are over it in three repetitions of four
(lower quartile above it), within reach where they are at or under it in three of four (upper
quartile); otherwise the run does not decide. This script is never imported by the package.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from bench_int8 import GATHER_TARGET, PEER_TARGET, op_shares

SIZES = (512, 4096, 65536)
D_MODEL = 64
HOSTILE = (-(2**63), -1, None, 2**31, 2**32 - 1, 2**32, 2**63 - 1)  # None: N itself
BIT_OPS = ("BitwiseAnd", "BitwiseAnd-rows", "BitShift", "Div", "Mod")
FLOORS = ("floor-int32", "floor-int32-rows")  # hand-made whole graphs at the floor
WHOLE = (*FLOORS, "edgepe-compute", "peer-torchscript")  # graphs of more than one node
TABLE_NAMES = ("floor-gather", "abs-gather", "clip64-gather", "edgepe-table")
COMPUTE_NAMES = (*BIT_OPS, "Add", "Cast", "peer-Gather", "MatMul", "Gemm", "call",
                 *FLOORS, "edgepe-compute", "peer-torchscript")
SHAPES = {"floor-gather": "[N, 64] table, [N] int64", "abs-gather": "Abs [N] int64 -> Gather",
          "clip64-gather": "Clip [N] int64 -> Gather", "edgepe-table": "edgepe table graph",
          "BitwiseAnd": "int32 [n, 1] & [N]", "BitwiseAnd-rows": "int32 [N, 1] & [n]",
          "BitShift": "uint32 [N] >> [n, 1]",
          "Div": "int32 [N] / [n, 1]", "Mod": "int32 [N] mod [n, 1]", "Add": "int32 [n, 1] + [N]",
          "Cast": "int32 -> float [n, N]", "peer-Gather": "float [N, n] table, [N] int64",
          "MatMul": "float [N, n] @ [n, 64]", "Gemm": "float [n, N]^T @ [n, 64] (transA)",
          "call": "Identity of float [1]",
          "floor-int32": "int32 [N] in: BitwiseAnd, Cast, Gemm transA (hand-made)",
          "floor-int32-rows": "int32 [N, 1] in: BitwiseAnd, Cast, MatMul (hand-made)",
          "edgepe-compute": "edgepe compute graph",
          "peer-torchscript": "torch.onnx TorchScript export"}


def one_node(bench, name: str, op: str, path: Path, inputs: list[str], feeds: dict[str, Any],
             consts: dict[str, Any], expected: np.ndarray, **attrs):
    """A graph of one ``op`` node on ``inputs`` (``feeds`` are graph inputs, ``consts``
    initializers), its session open and its output checked against ``expected`` (exact for
    integers; float32 GEMMs of n <= 17 products of 0/1 bits and weights within 1e-5)."""
    from onnx import helper, numpy_helper

    def info(key: str, value: np.ndarray):
        code = helper.np_dtype_to_tensor_dtype(value.dtype)
        return helper.make_tensor_value_info(key, code, [f"{key}{i}" for i in range(value.ndim)])

    bench._save_graph([helper.make_node(op, inputs, ["y"], **attrs)],
                      [info(k, v) for k, v in feeds.items()], expected.ndim,
                      [numpy_helper.from_array(v, k) for k, v in consts.items()], path,
                      helper.np_dtype_to_tensor_dtype(expected.dtype))
    candidate = bench.Candidate(name, "floor", path)
    candidate.feeds = feeds
    _open(bench, candidate)
    if candidate.session is not None:
        got = candidate.session.run(None, feeds)[0]
        ok = got.shape == expected.shape and (
            np.array_equal(got, expected) if expected.dtype.kind in "iu"
            else np.allclose(got, expected, rtol=1e-5, atol=1e-5))
        candidate.info["matches"] = bool(ok)
    return candidate


def _open(bench, candidate) -> None:
    """Open ``candidate``'s session; a graph onnxruntime rejects is recorded, not raised."""
    if candidate.error is not None:
        return
    try:
        candidate.info["nodes"] = bench.graph_info(candidate.path)["ops"]
        candidate.session = bench.session(candidate.path)
    except Exception as exc:  # noqa: BLE001 - a rejected graph is a result
        candidate.error = bench.one_line(exc)


def _clamps(candidate, n: int) -> bool:
    """Whether ``candidate`` returns, for the hostile positions, its own rows at the positions
    clamped to ``[0, N - 1]`` (its rows for 0 .. N-1 are checked against the reference apart)."""
    import onnxruntime as ort

    rows = candidate.session.run(None, candidate.feeds)[0]
    hostile = np.array([n if p is None else p for p in HOSTILE], dtype=np.int64)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # an unclamped Gather's index error is expected, not news
    session = ort.InferenceSession(str(candidate.path), options,
                                   providers=["CPUExecutionProvider"])
    try:
        got = session.run(None, {"positions": hostile})[0]
    except Exception:  # noqa: BLE001 - an index error is a "no"
        return False
    return bool(np.array_equal(got, rows[np.clip(hostile, 0, n - 1)]))


def table_candidates(bench, n: int, folder: Path) -> list:
    """Bare Gather, Abs -> Gather, Clip(int64) -> Gather and edgepe's table graph at ``N``."""
    from onnx import helper, numpy_helper

    from edgepe.schemes import build, resolve

    scheme = resolve("binary", n, D_MODEL, None)
    positions = np.arange(n, dtype=np.int64)
    table = bench.reference_output(build(scheme), {"positions": positions})
    case = bench.Case("binary", n, D_MODEL, peers=(), edgepe=(("table", "none"),))
    candidates = [bench.gather_floor(table, folder / "gather.onnx")]
    x = helper.make_tensor_value_info("positions", 7, ["N"])  # 7: int64
    const = [numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array(0, np.int64), "low"),
             numpy_helper.from_array(np.array(n - 1, np.int64), "high")]
    # abs-gather: Abs(positions) -> Gather (one int64 node, no clamp)
    bench._save_graph([helper.make_node("Abs", ["positions"], ["p"]),
                       helper.make_node("Gather", ["table", "p"], ["y"])], [x], 2, const[:1],
                      folder / "abs-gather.onnx")
    # clip64-gather: Clip(positions, 0, N - 1) in int64 -> Gather (the one-node clamp)
    bench._save_graph([helper.make_node("Clip", ["positions", "low", "high"], ["p"]),
                       helper.make_node("Gather", ["table", "p"], ["y"])], [x], 2, const,
                      folder / "clip64-gather.onnx")
    candidates += [bench.Candidate(name, "floor", folder / f"{name}.onnx")
                   for name in ("abs-gather", "clip64-gather")]
    candidates.append(bench.export_edgepe(case, "table", "none", folder / "table.onnx"))
    for c in candidates:
        c.feeds = {"positions": positions}
        _open(bench, c)
        if c.session is not None:
            bench.check_output(c, table, (0.0, 0.0) if c.role == "floor"
                               else scheme.spec.tolerance)
            c.info["clamps"] = _clamps(c, n)
    return candidates


def compute_candidates(bench, n: int, folder: Path) -> list:
    """The front-end kernels, the peer's two, ``call``, and the two whole graphs at ``N``."""
    from onnx import helper, numpy_helper

    from edgepe.schemes import build, n_bits, resolve

    scheme = resolve("binary", n, D_MODEL, None)
    reference = build(scheme)
    nb = n_bits(n)
    pos64 = np.arange(n, dtype=np.int64)
    pos32, posu32 = pos64.astype(np.int32), pos64.astype(np.uint32)
    k = np.arange(nb, dtype=np.int32)[:, None]
    masks, shifts = (1 << k).astype(np.int32), k.astype(np.uint32)
    bits = ((pos32 & masks) != 0)  # [n, N]
    bit_table = reference.pe_binary[0].detach().numpy()  # the peer's stored [N, n] float table
    weights = reference.projection.weight.detach().numpy().T.copy()  # [n, 64]
    rows = np.ascontiguousarray(bits.T, np.float32)  # [N, n]; C order: no copy per call
    expected = bench.reference_output(reference, {"positions": pos64})

    def node(name, op, inputs, feeds, consts, want, **attrs):
        return one_node(bench, name, op, folder / f"{name}.onnx", inputs, feeds, consts, want,
                        **attrs)

    p32, pu32 = {"positions": pos32}, {"positions": posu32}
    candidates = [
        node("BitwiseAnd", "BitwiseAnd", ["masks", "positions"], p32, {"masks": masks},
             masks & pos32),
        node("BitwiseAnd-rows", "BitwiseAnd", ["positions", "masks"],
             {"positions": pos32[:, None]}, {"masks": masks[:, 0]}, pos32[:, None] & masks[:, 0]),
        node("BitShift", "BitShift", ["positions", "shifts"], pu32, {"shifts": shifts},
             posu32 >> shifts, direction="RIGHT"),
        node("Div", "Div", ["positions", "divisors"], p32, {"divisors": masks}, pos32 // masks),
        node("Mod", "Mod", ["positions", "moduli"], p32, {"moduli": masks << 1},
             pos32 % (masks << 1)),
        node("Add", "Add", ["masks", "positions"], p32, {"masks": masks}, masks + pos32),
        node("Cast", "Cast", ["bits"], {"bits": bits.astype(np.int32)}, {},
             bits.astype(np.float32), to=1),
        node("peer-Gather", "Gather", ["table", "positions"], {"positions": pos64},
             {"table": bit_table}, bit_table[pos64]),
        node("MatMul", "MatMul", ["rows", "weights"], {"rows": rows}, {"weights": weights},
             rows @ weights),
        node("Gemm", "Gemm", ["bits", "weights"], {"bits": rows.T.copy()},
             {"weights": weights}, rows @ weights, transA=1),
        node("call", "Identity", ["x"], {"x": np.ones(1, np.float32)}, {},
             np.ones(1, np.float32)),
    ]
    # The integer-only front end as one graph, int32 positions in (below the int64 contract):
    # BitwiseAnd(masks 2^k) -> Cast -> the GEMM with weights scaled by 2^-k, in both layouts:
    # floor-int32 [n, N] bits and Gemm transA (what edgepe writes); floor-int32-rows [N, 1]
    # positions, [N, n] bits and MatMul (the peer's GEMM)
    scaled = numpy_helper.from_array(weights / masks.astype(np.float32), "scaled")
    for name, shape, mask, gemm in (
            ("floor-int32", ["N"], masks, helper.make_node("Gemm", ["f", "scaled"], ["y"],
                                                          transA=1)),
            ("floor-int32-rows", ["N", 1], masks[:, 0],
             helper.make_node("MatMul", ["f", "scaled"], ["y"]))):
        bench._save_graph([helper.make_node("BitwiseAnd", ["positions", "masks"], ["b"]),
                           helper.make_node("Cast", ["b"], ["f"], to=1), gemm],
                          [helper.make_tensor_value_info("positions", 6, shape)], 2,  # 6: int32
                          [numpy_helper.from_array(mask, "masks"), scaled],
                          folder / f"{name}.onnx")
    case = bench.Case("binary", n, D_MODEL)
    whole = [*(bench.Candidate(name, "floor", folder / f"{name}.onnx") for name in FLOORS),
             bench.export_edgepe(case, "compute", "none", folder / "compute.onnx"),
             bench.export_peer(reference, case, "torchscript", {"positions": pos64},
                               folder / "peer-torchscript.onnx")]
    for c in whole:
        c.feeds = {"positions": {"floor-int32": pos32, "floor-int32-rows": pos32[:, None]}
                   .get(c.name, pos64)}
        _open(bench, c)
        if c.session is not None:
            bench.check_output(c, expected, scheme.spec.tolerance)
    return candidates + whole


def paired(entries: dict[str, Any], num: dict[str, float], den: dict[str, float]) -> dict:
    """Median and IQR over repetitions of ``sum(c * samples_s[name] for num) / (same for den)``
    (the samples as the JSON holds them): each repetition timed every candidate once, back to
    back, so load that hits one sample hits its partners (steadier than a ratio of medians on a
    shared machine)."""

    def total(combo: dict[str, float]) -> np.ndarray:
        return sum(c * np.asarray(entries[name]["samples_s"]) for name, c in combo.items())

    q = np.percentile(total(num) / total(den), [25, 50, 75])
    return {"ratio": float(q[1]), "iqr": float(q[2] - q[0]), "q1": float(q[0]),
            "q3": float(q[2])}


def _entries(bench, candidates: list) -> dict[str, Any]:
    out = {}
    for c in candidates:
        entry: dict[str, Any] = {"error": c.error, **c.info}
        if c.samples:
            entry.update(bench.stats(c.samples), inner=c.inner,
                         samples_s=[float(f"{x:.4g}") for x in c.samples])
        out[c.name] = entry
    return out


def _timed(entries: dict[str, Any], names: tuple[str, ...]) -> bool:
    return all("samples_s" in entries.get(name, {}) for name in names)


def _over(r: dict[str, float], target: float) -> bool:
    """Over ``target`` in at least three repetitions of four: the lower quartile, to the two
    decimals the text prints, is above it."""
    return round(r["q1"], 2) > target


def _within(r: dict[str, float], target: float) -> bool:
    """At or under ``target`` in at least three repetitions of four (the upper quartile, to the
    two decimals the text prints)."""
    return round(r["q3"], 2) <= target


def _meets(r: dict[str, float], target: float) -> str:
    """What a measured graph does with its target, by its median (as the int8 rows judge)."""
    return "meets" if round(r["ratio"], 2) <= target else "misses"


def _q(r: dict[str, float]) -> str:
    return f"{r['ratio']:.2f}x (quartiles {r['q1']:.2f}-{r['q3']:.2f})"


def table_verdict(n: int, r: dict[str, dict[str, float]]) -> str:
    """The table clamp's conclusion at ``N`` from its ratios to the bare Gather: decided by the
    cheapest clamp there is (one int64 Clip)."""
    t = GATHER_TARGET
    a, c, e = r["abs-gather"], r["clip64-gather"], r["edgepe-table"]
    figures = (f"N = {n}: one Abs (any extra node, no clamp) {a['ratio']:.2f}x, one int64 Clip "
               f"(the cheapest clamp) {_q(c)}, edgepe's table graph {e['ratio']:.2f}x a bare "
               "Gather")
    if _over(c, t):
        return (f"{figures}: the one-node clamp is over {t}x in three repetitions of four, so "
                f"no clamped graph meets {t}x here.")
    if _within(c, t):
        return (f"{figures}: the one-node clamp is within {t}x in three repetitions of four "
                f"here; edgepe's graph {_meets(e, t)} it (median).")
    return f"{figures}: {t}x lies inside the one-node clamp's quartiles: this run does not decide."


def compute_verdict(n: int, row: dict[str, Any]) -> str:
    """The compute front end's conclusion at ``N`` from both floor estimates (the kernel sum and
    the hand-made whole graph) and the measured edgepe/peer ratio."""
    t = PEER_TARGET
    bound, graph, measured = row["bound"], row["floor_graph"], row["measured"]
    figures = (f"N = {n}: the integer-only floor is {_q(bound)} the peer's Gather + MatMul from "
               f"its kernels ({bound['bit_op']} + Cast + {bound['gemm']}, net of call cost) and "
               f"{_q(graph)} the TorchScript peer as the cheaper hand-made graph ({graph['graph']}"
               f": {SHAPES[graph['graph']]}); edgepe's compute graph measures "
               f"{measured['ratio']:.2f}x the peer")
    if _over(bound, t) and _over(graph, t):
        return (f"{figures}: both floors are over {t}x in three repetitions of four, so no "
                f"integer-only graph of this form meets {t}x here.")
    if _within(bound, t) and _within(graph, t):
        return (f"{figures}: both floors are within {t}x in three repetitions of four, so a "
                f"graph at the floor would meet it here; edgepe's {_meets(measured, t)} it "
                "(median).")
    return f"{figures}: {t}x lies inside a floor's quartiles: this run does not decide."


def run(bench, work: Path, reps: int, min_sample_s: float, quick: bool) -> dict[str, Any]:
    """Time both floors at every N (``bench`` is ``scripts/bench/latency.py``): medians,
    per-repetition ratios and the conclusions they support."""
    from edgepe.schemes import n_bits

    table_rows, compute_rows = [], []
    for n in (SIZES[:1] if quick else SIZES):
        folder = work / f"floors-L{n}"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"floors: table clamp, N = {n}", file=sys.stderr, flush=True)
        cands = table_candidates(bench, n, folder)
        bench.time_round_robin(cands, reps, min_sample_s)
        entries = _entries(bench, cands)
        row: dict[str, Any] = {"n": n, "target": GATHER_TARGET, "candidates": entries}
        if _timed(entries, TABLE_NAMES):
            row["ratios"] = {name: paired(entries, {name: 1}, {"floor-gather": 1})
                             for name in TABLE_NAMES[1:]}
            row["conclusion"] = table_verdict(n, row["ratios"])
        table_rows.append(row)

        print(f"floors: compute front end, N = {n}", file=sys.stderr, flush=True)
        cands = compute_candidates(bench, n, folder)
        bench.time_round_robin(cands, reps, min_sample_s)
        entries = _entries(bench, cands)
        row = {"n": n, "n_bits": n_bits(n), "target": PEER_TARGET, "candidates": entries,
               "op_shares": {c.name: op_shares(c.path, c.feeds) for c in cands
                             if c.name in WHOLE and c.session is not None}}
        compute_rows.append(row)
        if not _timed(entries, COMPUTE_NAMES):
            continue
        bit_op = min(BIT_OPS, key=lambda name: entries[name]["median_s"])
        gemm = min(("MatMul", "Gemm"), key=lambda name: entries[name]["median_s"])
        bound = paired(entries, {bit_op: 1, "Cast": 1, gemm: 1, "call": -2},
                       {"peer-Gather": 1, "MatMul": 1, "call": -1})
        row["bound"] = {"bit_op": bit_op, "gemm": gemm, **bound}
        graph = min(FLOORS, key=lambda name: entries[name]["median_s"])
        row["floor_graph"] = {"graph": graph,
                              **paired(entries, {graph: 1}, {"peer-torchscript": 1})}
        row["measured"] = paired(entries, {"edgepe-compute": 1}, {"peer-torchscript": 1})
        row["conclusion"] = compute_verdict(n, row)
    return {"table": table_rows, "compute": compute_rows}


def _us(entry: dict[str, Any]) -> str:
    return f"{entry['median_s'] * 1e6:.1f}" if "median_s" in entry else f"error: {entry['error']}"


def _ratio(r: dict[str, float] | None) -> str:
    return "-" if r is None else f"{r['ratio']:.2f}x ({r['iqr']:.2f})"


def markdown(report: dict[str, Any], machine: dict[str, Any], date: str, reps: int) -> str:
    """The section for docs/readme/int8-speed.md: medians per candidate and N, the ratios and the
    conclusions computed from them."""
    table, compute = report["table"], report["compute"]
    head = " | ".join(f"N = {r['n']}" for r in table)
    rule = "|---|---|" + "---|" * len(table)
    lines = [
        f"Run: {date}, `scripts/bench.py --part floors --reps {reps}`, onnxruntime "
        f"{machine.get('onnxruntime')} CPU, 1 thread; {machine.get('cpu')} "
        f"({machine.get('cores')} cores, shared with other work). Candidates timed round-robin "
        "in each repetition; ratios are the median of the per-repetition ratio (its IQR in "
        "parentheses).",
        "",
        f"Table clamp (target: table graph <= {GATHER_TARGET}x a bare Gather), us per call:",
        "",
        f"| candidate | clamps -2^63, -1, N, 2^31, 2^32 - 1, 2^32, 2^63 - 1 | {head} |", rule,
    ]
    for name in TABLE_NAMES:
        seen = {r["candidates"][name].get("clamps") for r in table}
        clamps = "yes" if seen == {True} else "no" if False in seen else "-"
        lines.append(f"| {name} ({SHAPES[name]}) | {clamps} | "
                     + " | ".join(_us(r["candidates"][name]) for r in table) + " |")
    for name in TABLE_NAMES[1:]:
        lines.append(f"| {name} / floor-gather | | "
                     + " | ".join(_ratio(r.get("ratios", {}).get(name)) for r in table) + " |")
    lines += ["", *(f"- {r['conclusion']}" for r in table if "conclusion" in r), "",
              f"Compute front end (target: demo compute graph <= {PEER_TARGET}x the TorchScript "
              "peer), us per call:", "",
              "| kernel | shapes | " + " | ".join(f"N = {r['n']} (n = {r['n_bits']})"
                                                 for r in compute) + " |", rule]
    for name in COMPUTE_NAMES:
        lines.append(f"| {name} | {SHAPES[name]} | "
                     + " | ".join(_us(r["candidates"][name]) for r in compute) + " |")
    lines += ["| floor: (bit op + Cast + GEMM - 2 call) / (Gather + MatMul - call) | cheapest "
              "by median | " + " | ".join(
                  f"{_ratio(r.get('bound'))} {r['bound']['bit_op']}, {r['bound']['gemm']}"
                  if "bound" in r else "-" for r in compute) + " |",
              "| cheaper floor graph / peer-torchscript | whole graphs | " + " | ".join(
                  f"{_ratio(r['floor_graph'])} {r['floor_graph']['graph']}"
                  if "floor_graph" in r else "-" for r in compute) + " |",
              "| edgepe-compute / peer-torchscript | whole graphs | "
              + " | ".join(_ratio(r.get("measured")) for r in compute) + " |",
              "", "What bounds the whole graphs (onnxruntime's profile: share of node time):", ""]
    for r in compute:
        lines.append(f"- N = {r['n']}: " + "; ".join(
            f"{name}: " + ", ".join(f"{op} {100 * x:.0f}%" for op, x in shares.items())
            for name, shares in r["op_shares"].items()))
    lines += ["", *(f"- {r['conclusion']}" for r in compute if "conclusion" in r)]
    return "\n".join(lines) + "\n"
