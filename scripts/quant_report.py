"""Figures for docs/readme/quant.md: every float scheme x mode exported float32 and int8.

    python scripts/quant_report.py [--max-len 512] [--out-dir DIR]

Prints a markdown table: file bytes float32 vs int8, the manifest's bound and measured error,
and the error measured here on onnxruntime (CPU) over every position 0..L-1 (every query x key
pair for bias schemes). Never imported by the package.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    import onnxruntime as ort
    import torch

    from edgepe.contract.config import ExportConfig
    from edgepe.export import export
    from edgepe.schemes import build, get_spec, resolve, scheme_ids

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="where the graphs go (default: a fresh temporary folder, removed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgepe-quant-") as tmp:
        if args.out_dir is None:
            args.out_dir = Path(tmp)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        _report(args, export, ExportConfig, build, get_spec, resolve, scheme_ids, ort, torch)


def _report(args, export, ExportConfig, build, get_spec, resolve, scheme_ids, ort, torch):
    length = args.max_len
    print("| scheme | mode | float32 B | int8 B | ratio | bound | max err (manifest) "
          "| max err (onnxruntime) | out of range |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for scheme in scheme_ids():
        spec = get_spec(scheme)
        if spec.exact:
            continue
        cfg = resolve(scheme, length)
        module = build(cfg)
        pos = np.arange(length, dtype=np.int64)
        if cfg.arity is not None:  # mrope: (p, p, p), every value each slot takes in range
            pos = np.repeat(pos[:, None], cfg.arity, axis=1)
        t = torch.from_numpy(pos)
        with torch.no_grad():
            bias = spec.kind == "bias"
            ref = module.encode(t, t).numpy() if bias else module.encode(t).numpy()
        for mode in (m for m in spec.modes if m != "sliced"):  # sliced: docs/readme/sliced.md
            sizes, result = [], None
            for q in ("none", "int8"):
                out = args.out_dir / f"{scheme}-{mode}-{q}.onnx"
                for old in (out, Path(f"{out}.json")):  # else an earlier export is kept as is
                    old.unlink(missing_ok=True)
                result = export(ExportConfig(scheme=cfg, mode=mode, quantize=q, out=out))
                sizes.append(out.stat().st_size)
            session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
            feeds = {"positions": pos, **({"key_positions": pos} if bias else {})}
            err = float(np.abs(session.run(None, feeds)[0].astype(np.float64) - ref).max())
            quant = result.manifest["quant"]
            print(f"| {scheme} | {mode} | {sizes[0]} | {sizes[1]} | {sizes[1] / sizes[0]:.3f} "
                  f"| {quant['bound']:.4g} | {quant['max_abs_err']:.4g} | {err:.4g} "
                  f"| {result.manifest['positions']['out_of_range']} |")


if __name__ == "__main__":
    main()
