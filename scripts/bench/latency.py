"""Latency and bytes: the grid of cases, each candidate ONNX file (the torch.onnx peers, edgepe's
graphs, the floors) checked against the reference, then timed round-robin (onnxruntime CPU, one
thread)."""

from __future__ import annotations

import contextlib
import io
import math
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import muted

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
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), muted():
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
    from edgepe.contract.config import default_granularity
    from edgepe.export import ExportConfig, export
    from edgepe.schemes import resolve

    # "int8-live[-channel|-tensor]": --quantize int8 --int8-runtime live
    # [--quant-granularity channel|tensor]; not given: the CLI's default
    # (scripts/bench_int8.py)
    quantize, *options = quantize.split("-")
    name = "-".join(["edgepe", *([quantize] if quantize == "int8" else []), *options, mode])
    candidate = Candidate(name, "edgepe", path)
    start = time.perf_counter()
    try:
        scheme = resolve(case.scheme, case.max_len, case.d_model, case.heads)
        runtime = "live" if "live" in options else "fold"
        given = [o for o in options if o in ("channel", "tensor")]
        config = ExportConfig(scheme=scheme, mode=mode, quantize=quantize, int8_runtime=runtime,
                              quant_granularity=given[0] if given else default_granularity(
                                  case.scheme, mode, "onnx", quantize, runtime),
                              out=path)
        result = export(config, force=True)
        candidate.info["quant"] = result.manifest.get("quant")
    except Exception as exc:  # noqa: BLE001 - a missing or failing exporter is recorded
        candidate.error = one_line(exc)
    candidate.export_s = time.perf_counter() - start
    return candidate


def _save_graph(nodes, inputs, output_rank: int, initializers, path: Path,
                elem_type: int = 1) -> None:
    """A one-graph model whose output ``y`` has ``elem_type`` (a TensorProto code: 1 is float)."""
    import onnx
    from onnx import helper

    y = helper.make_tensor_value_info("y", elem_type, [f"d{i}" for i in range(output_rank)])
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
    timed = round_robin(live, reps)
    for c in live:
        c.samples += timed[c.name]


def round_robin(candidates: list[Candidate], reps: int,
                clock=time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call by ``clock`` (``time.thread_time``: the calling thread's CPU time, which
    onnxruntime with one intra-op thread spends in the caller), ``reps`` samples a candidate of
    its calibrated ``inner`` calls each, the first candidate of a repetition rotating."""
    samples: dict[str, list[float]] = {c.name: [] for c in candidates}
    for rep in range(reps):
        for k in range(len(candidates)):
            c = candidates[(rep + k) % len(candidates)]
            run, feeds, inner = c.session.run, c.feeds, c.inner
            start = clock()
            for _ in range(inner):
                run(None, feeds)
            samples[c.name].append((clock() - start) / inner)
    return samples


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
