"""Cortex-M costs of the C headers: flash, RAM and instructions per position on an emulated M4F.

For each scheme (the binary demo at L=512, d=64 first) and each C variant it has (float32
table, int8 table, bit-packed table, float compute function, int8 compute function, and the
``--mode sliced`` functions: float, int8, and the demo with four slices, as floats and as the
int16 codes of its ``encode_q``), exports the
header, runs it with ``edgepe.verify.cortex_m.run_header`` on QEMU's ``mps2-an386`` (Cortex-M4F,
``-Os``) and records flash and RAM (linker map) and instructions per position (SysTick under
``-icount shift=0``; instructions, not cycles: see that module). Ratios are against the scheme's
float32 table. The values the emulated core printed are compared with the header's own table or
the PyTorch reference before a figure is kept (exact for tables, the scheme's tolerance for
compute functions).

    .venv/bin/python scripts/bench_cortexm.py [--md docs/readme/cortex-m.md] [--tflm-only]

Beside the headers, the demo as a ``.tflite`` on TensorFlow Lite Micro (issue 43; ``tflm``):
model bytes (what flash holds as a const array), TFLM's arena (the smallest in which its
interpreter allocates the model, ``edgepe.formats.tflite.arena_bytes``) and ops, each model run
on TFLM's reference kernels over positions 0 .. L-1 against the reference first. The TFLM
library's own code is not counted (it depends on which kernels a build registers).

``scripts/bench.py`` calls ``run`` and appends ``markdown`` to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the bench package
from bench.common import progress  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# scheme -> (max_len, d_model or None); the demo first.
SCHEMES = {
    "binary": (512, 64),
    "gray": (512, None),
    "hybrid-int-binary": (512, 64),
    "fourier-binary": (512, 64),
    "sinusoidal": (512, 64),
    "rope": (512, 64),
    "alibi": (512, None),
}
# variant -> (mode, dtype, quantize)
VARIANTS = {
    "float32 table": ("table", "float32", "none"),
    "int8 table": ("table", "float32", "int8"),
    "bit-packed table": ("table", "bit", "none"),
    "float compute": ("compute", "float32", "none"),
    "int8 compute": ("compute", "float32", "int8"),
    # --mode sliced (issue 34): small tables per bit slice, no libm (rope, sinusoidal, binary)
    "float sliced": ("sliced", "float32", "none"),
    "int8 sliced": ("sliced", "float32", "int8"),
    "int8 sliced 3,3,2,2": ("sliced", "float32", "int8", "3,3,2,2"),
    # the same header's encode_q: the exact int16 sums an int8 pipeline adds (no float out)
    "int8 sliced 3,3,2,2 codes": ("sliced", "float32", "int8", "3,3,2,2", "codes"),
}


def _check(run, config, module, manifest) -> None:
    """The emulated values equal the reference (exact tables; compute within tolerance)."""
    from edgepe.graphs.quant import table_quant
    from edgepe.graphs.table_values import full_table

    cfg = config.scheme
    if config.mode == "table":
        expected = full_table(cfg, module)
        if config.quantize == "int8":
            expected = table_quant(config, module).quantize(expected)
        ok = np.array_equal(run.values, expected.astype(run.values.dtype))
    elif config.mode == "sliced" and cfg.scheme in ("rope", "sinusoidal"):
        import torch

        from edgepe.schemes.definition import Definition

        with torch.no_grad():  # the float64 definition, within the sliced tolerance
            ref = Definition(module).encode64(torch.arange(cfg.max_len)).numpy()
        ok = np.abs(run.values - ref).max() <= manifest["tolerance"]["atol"]
    elif config.quantize == "int8":  # within the proven bound over 0 .. L-1
        quant = manifest["quant"]
        ref = _reference(module, cfg)
        ok = np.abs(run.values - ref).max() <= quant.get("bound_in_range", quant["bound"])
    else:
        ref = _reference(module, cfg)
        rtol, atol = cfg.spec.tolerance
        ok = np.allclose(run.values, ref, rtol=rtol, atol=atol)
    if not ok:
        raise AssertionError(f"{cfg.scheme} {config.mode} {config.quantize}: the emulated "
                             "values differ from the reference")


def run(schemes: tuple[str, ...] | None = None, board: str = "m4f") -> dict[str, Any]:
    """``{"rows": [...], "toolchain": ..., "skipped": reason or None}``; one row per
    (scheme, variant) that exports, with flash, RAM, instructions and ratios. ``schemes``: a
    subset of ``SCHEMES`` (default all)."""
    from edgepe.contract.errors import BadParameterError
    from edgepe.export import ExportConfig, export
    from edgepe.schemes import build, resolve
    from edgepe.verify.cortex_m import BOARDS, INSTALL, OPT, run_header, tools

    found = tools()
    if found is None:
        return {"rows": [], "skipped": f"Cortex-M toolchain or QEMU missing: {INSTALL}"}
    versions = [
        subprocess.run([found[t], "--version"], capture_output=True, text=True)
        .stdout.splitlines()[0] for t in ("arm-none-eabi-gcc", "qemu-system-arm")
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgepe-bench-cortexm-") as tmp:
        for scheme in schemes or SCHEMES:
            max_len, d_model = SCHEMES[scheme]
            cfg = resolve(scheme, max_len, d_model=d_model)
            module = build(cfg)
            base = None
            for variant, (mode, dtype, quantize, *slices) in VARIANTS.items():
                codes = slices[1:] == ["codes"]
                if slices and scheme != "binary":
                    continue  # the demo's 4 KB point
                config = ExportConfig(cfg, mode=mode, format="c", dtype=dtype,
                                      quantize=quantize,
                                      out=Path(tmp, f"{scheme}-{len(rows)}.h"),
                                      extra={"slices": slices[0]} if slices else {})
                try:
                    result = export(config)
                except BadParameterError:
                    continue  # the scheme has no such variant
                progress(f"cortex-m {board}: {scheme} {variant}")
                got = run_header(result.path.read_bytes(), result.manifest,
                                 probes(result.manifest), board, codes=codes)
                if codes:  # checked as the floats they scale to (bit for bit encode's)
                    scale = np.asarray(result.manifest["quant"]["scale"], np.float32)
                    got = dataclasses.replace(got, values=scale * got.values.astype(np.float32))
                _check(got, config, module, result.manifest)
                row = {"scheme": scheme, "max_len": max_len, "d_model": cfg.d_model,
                       "variant": variant, "flash": got.flash, "ram": got.ram,
                       "instructions": round(got.instructions, 1)}
                if variant == "float32 table":
                    base = row
                if base is not None:
                    row["flash_ratio"] = got.flash / base["flash"]
                    row["instructions_ratio"] = got.instructions / base["instructions"]
                rows.append(row)
    return {"rows": rows, "skipped": None, "board": f"{board} ({BOARDS[board].machine})",
            "flags": " ".join((*BOARDS[board].cpu_flags, OPT)), "toolchain": versions,
            "date": datetime.date.today().isoformat(), "tflm": tflm()}


# The demo's .tflite variants on TFLM: variant -> quantize (both with --target tflm's lowering).
TFLM_VARIANTS = {"float compute (.tflite)": "none", "int8 compute (.tflite)": "int8"}


def tflm() -> dict[str, Any]:
    """``{"rows": [...], "tflite_micro": version}`` or ``{"skipped": reason}``: the demo
    (binary, L=512, d=64) as ``.tflite`` models TFLM runs, each checked on TFLM first."""
    from edgepe.contract.errors import BadParameterError
    from edgepe.export import ExportConfig, export
    from edgepe.formats.tflite import Program, arena_bytes, require_runtime
    from edgepe.schemes import build, resolve

    try:
        version = require_runtime("tflm")
    except BadParameterError as exc:
        return {"rows": [], "skipped": str(exc)}
    max_len, d_model = SCHEMES["binary"]
    cfg = resolve("binary", max_len, d_model=d_model)
    module = build(cfg)
    reference = _reference(module, cfg)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgepe-bench-tflm-") as tmp:
        for variant, quantize in TFLM_VARIANTS.items():
            progress(f"tflm: binary {variant}")
            result = export(ExportConfig(cfg, mode="compute", format="tflite", quantize=quantize,
                                         lowering="float", out=Path(tmp, f"{quantize}.tflite")))
            data = result.path.read_bytes()
            got = Program(data, dict(result.manifest), "tflm").run(
                {"positions": np.arange(max_len)})
            quant = result.manifest["quant"]
            err = float(np.abs(got - reference).max())
            limit = quant["bound"] if quant else result.manifest["tolerance"]["atol"] + float(
                result.manifest["tolerance"]["rtol"] * np.abs(reference).max())
            assert err <= limit, f"{variant}: {err} > {limit} on TFLM"
            rows.append({"scheme": "binary", "max_len": max_len, "d_model": d_model,
                         "variant": variant, "model_bytes": len(data),
                         "arena_bytes": arena_bytes(data),
                         "ops": result.manifest["tflite"]["operators"],
                         "op_count": len(_ops_in_order(data)), "max_abs_err": err})
    return {"rows": rows, "tflite_micro": version, "skipped": None,
            "date": datetime.date.today().isoformat()}


def _ops_in_order(data: bytes) -> list[str]:
    from edgepe.formats.tflite import read_model

    return [op["op"] for op in read_model(data)["operators"]]


def tflm_markdown(report: dict[str, Any], headers: list[dict[str, Any]]) -> str:
    """The TFLM table: each .tflite beside the C header of the same variant (its flash/RAM)."""
    if not report or report.get("skipped"):
        return "" if not report else f"\nTFLM: not measured: {report['skipped']}.\n"
    c = {r["variant"]: r for r in headers if r["scheme"] == "binary"}
    text = (
        f"\n### The demo on TensorFlow Lite Micro (issue 43)\n\nMeasured {report['date']} with "
        f"tflite-micro {report['tflite_micro']} (its Python interpreter, reference kernels; "
        "CMSIS-NN replaces the int8 ones on a Cortex-M). A `.tflite` sits in flash as a const "
        "array (model bytes) and runs in a tensor arena in RAM (the smallest in which TFLM "
        "allocates it, 16 positions a call); the TFLM library's own code is not counted. Each "
        "model ran on TFLM over positions 0 .. L-1 within its bound first. Beside: the C "
        "header's function of the same variant (flash, RAM above).\n\n"
        "| scheme | variant | model bytes | TFLM arena bytes | ops | C header flash "
        "| C header RAM |\n|---|---|---:|---:|---|---:|---:|\n"
    )
    for r in report["rows"]:
        header = c.get(r["variant"].removesuffix(" (.tflite)"), {})
        text += (f"| {r['scheme']} (L={r['max_len']}, d={r['d_model']}) | {r['variant']} | "
                 f"{r['model_bytes']} | {r['arena_bytes']} | {r['op_count']}: "
                 f"{', '.join(r['ops'])} | {header.get('flash', '-')} | "
                 f"{header.get('ram', '-')} |\n")
    return text


def probes(manifest) -> np.ndarray:
    """What the run reads back: every table row, or positions 0 .. L-1 (a bias function's
    (query t, key 0) pairs: every distance 0 .. L-1)."""
    if manifest["mode"] == "table":
        return np.arange(manifest["shape"][0])
    positions = np.arange(manifest["max_len"])
    if manifest["kind"] == "bias":
        return np.stack([positions, np.zeros_like(positions)], axis=1)
    return positions


def _reference(module, cfg) -> np.ndarray:
    """The reference at ``probes``: ``[L, D]``, or ``[L, H]`` for a bias function."""
    import torch

    positions = torch.arange(cfg.max_len)
    with torch.no_grad():
        if cfg.spec.kind == "bias":
            return module.encode(positions, torch.zeros(1, dtype=torch.int64))[:, :, 0].T.numpy()
        return module.encode(positions).numpy()


def markdown(report: dict[str, Any]) -> str:
    """The Cortex-M section of BENCHMARKS.md (and docs/readme/cortex-m.md)."""
    text = "\n## Cortex-M4F (emulated): flash, RAM, instructions per position (issue 20)\n\n"
    if report.get("skipped"):
        return text + f"Not measured: {report['skipped']}.\n"
    text += (
        f"Measured {report['date']} by `scripts/bench_cortexm.py` on {report['board']}, "
        f"`{report['flags']}`; {'; '.join(report['toolchain'])}. Flash: `.text` + `.rodata` + "
        "`.data` of the object that turns a position into its float32 row (the header's arrays "
        "and that function) and of the library code it pulls in, from the linker map. RAM: "
        "`.data` + `.bss` of the same plus that function's stack frame. Instructions: per "
        "position over 0 .. L-1, counted by QEMU (`-icount shift=0`, SysTick around the loop, "
        "the empty loop subtracted). QEMU counts instructions, not cycles: no pipeline, flash "
        "wait states, FPU or divider latency. Ratios: against the scheme's float32 table. "
        "Every figure comes from a run whose values equal the reference.\n\n"
        "| scheme | variant | flash bytes | x float table | RAM bytes | instructions / position "
        "| x float table |\n|---|---|---:|---:|---:|---:|---:|\n"
    )
    for r in report["rows"]:
        size = f"L={r['max_len']}" + (f", d={r['d_model']}" if r["d_model"] else "")
        text += (
            f"| {r['scheme']} ({size}) | {r['variant']} | {r['flash']} | "
            f"{r.get('flash_ratio', float('nan')):.4f} | {r['ram']} | {r['instructions']:.1f} | "
            f"{r.get('instructions_ratio', float('nan')):.2f} |\n"
        )
    return text + tflm_markdown(report.get("tflm"), report["rows"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--md", type=Path, help="write the section here (default: print it)")
    parser.add_argument("--tflm-only", action="store_true",
                        help="measure only the TFLM part and print it as JSON (no QEMU run)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.tflm_only:
        import json

        print(json.dumps(tflm(), indent=1))
        return 0
    text = markdown(run())
    if args.md:
        args.md.write_text(text.lstrip("\n").replace("## ", "# ", 1))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
