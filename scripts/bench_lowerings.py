"""What each bit-family lowering costs: file bytes and onnxruntime CPU latency, side by side.

    .venv/bin/python scripts/bench_lowerings.py [--quick] [--reps 30]

For each case (the demo ``binary`` at L = 512, ``gray`` at L = 512, ``binary-2d`` at L = 256),
every lowering (``bitwise``, ``arith``, ``arith32``, ``float``) is exported in memory, checked
against the torch reference over ``0 .. L - 1``, written to a temporary folder, and timed with
``scripts/bench.py``'s round-robin (one thread, ``N = L`` positions a call, the candidates
alternating inside each repetition, medians and IQR). Prints a markdown table: bytes, median
microseconds per call, and both as a ratio to ``bitwise`` measured in the same run
(docs/readme/targets.md quotes it). Never imported by the package.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.latency import Candidate, session, stats, time_round_robin  # noqa: E402

LOWERINGS = ("bitwise", "arith", "arith32", "float")
CASES = (("binary", 512), ("gray", 512), ("binary-2d", 256))


def lowering_rows(reps: int, min_sample_s: float, cases=CASES) -> list[dict]:
    """One row per case x lowering: bytes, median/IQR seconds per call, ratios to bitwise."""
    import io

    import torch

    from edgepe.contract.config import ExportConfig
    from edgepe.export import prepare
    from edgepe.schemes import build, resolve

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scheme, length in cases:
            s = resolve(scheme, length)
            module = build(s, seed=0)
            pos = np.arange(length, dtype=np.int64)
            feeds = {"positions": pos if s.arity is None else np.stack([pos] * s.arity, 1)}
            with torch.no_grad():
                want = module.encode(torch.from_numpy(feeds["positions"])).numpy()
            candidates = []
            for lowering in LOWERINGS:
                buffer = io.BytesIO()
                prepare(ExportConfig(s, lowering=lowering), module).write(buffer)
                path = Path(tmp) / f"{scheme}-{lowering}.onnx"
                path.write_bytes(buffer.getvalue())
                c = Candidate(lowering, "edgepe", path=path, session=session(path), feeds=feeds)
                got = c.session.run(None, feeds)[0]
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # timed = checked
                candidates.append(c)
            time_round_robin(candidates, reps, min_sample_s)
            base_bytes = candidates[0].path.stat().st_size
            base_s = stats(candidates[0].samples)["median_s"]
            for c in candidates:
                st, size = stats(c.samples), c.path.stat().st_size
                rows.append({"case": f"{scheme} L={length}", "lowering": c.name, "bytes": size,
                             "bytes_vs_bitwise": size / base_bytes,
                             "median_us": st["median_s"] * 1e6, "iqr_us": st["iqr_s"] * 1e6,
                             "latency_vs_bitwise": st["median_s"] / base_s})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| case | lowering | bytes | x bitwise | median us/call (IQR) | x bitwise |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['lowering']} | {r['bytes']} | "
                     f"{r['bytes_vs_bitwise']:.2f} | {r['median_us']:.1f} ({r['iqr_us']:.1f}) | "
                     f"{r['latency_vs_bitwise']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions, short samples")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    reps, sample = (3, 0.002) if args.quick else (args.reps, 0.02)
    print(markdown(lowering_rows(reps, sample)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
