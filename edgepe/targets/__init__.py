"""Target runtimes: their profiles (``profiles.py``, data), the node-by-node check (``check.py``)
and the choice of a lowering that a target runs (``for_export``).

    from edgepe.targets import check_file
    print(check_file("models/gray-compute-L512-d10.onnx", "qnn"))   # one-line verdict

``edgepe export --target NAME`` picks, for a bit-family compute graph, the first lowering of
``LOWERING_ORDER`` whose graph the target runs whole (or checks the one ``--lowering`` names),
refuses with the blocking op, dtype or rule and what would work, and checks what it wrote;
``edgepe inspect PATH --target NAME`` prints every node's verdict.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from edgepe.audit import describe, load_onnx
from edgepe.contract.config import base_manifest
from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.graphs import COMPUTE
from edgepe.targets.profiles import DEFAULT_TARGET, PROFILES, TFLITE_PROFILES, Profile

# The default first; then int64 integer arithmetic, int32, float32 (narrowest dtypes last: they
# limit the positions an artifact accepts, graphs/lowerings.py).
LOWERING_ORDER = ("bitwise", "arith", "arith32", "float", "trunc")

__all__ = ["DEFAULT_TARGET", "LOWERING_ORDER", "PROFILES", "check_file", "check_model",
           "for_export", "form_note", "profile"]


def profile(name: str) -> Profile:
    """The profile called ``name`` (case-insensitive); an unknown one is refused, listing all."""
    key = str(name).strip().lower()
    if key in TFLITE_PROFILES:  # .tflite targets (edgepe.targets.tflite)
        return TFLITE_PROFILES[key]
    if key not in PROFILES:
        raise BadParameterError(f"--target {name!r} is not a known target; known: "
                                f"{', '.join([*PROFILES, *TFLITE_PROFILES])}")
    return PROFILES[key]


def check_model(model, target: str):
    """``check.check`` of an ``onnx.ModelProto`` against the target called ``target``."""
    from edgepe.targets.check import check

    return check(model, profile(target))


def check_file(path: str | Path, target: str):
    """Check the ONNX artifact at ``path``, read as ``edgepe inspect`` reads it: an artifact
    with its manifest (``audit.describe`` refuses anything else), the graph parsed from its
    bytes (``audit.load_onnx``: no external data, so no path the file names is opened)."""
    info = describe(path)
    if info["manifest"].get("format") == "tflite" or target.strip().lower() in TFLITE_PROFILES:
        from edgepe.targets import tflite

        if info["manifest"].get("format") != "tflite":
            raise BadParameterError(f"--target {target} checks .tflite models; {str(path)!r} "
                                    f"is a {info['manifest'].get('format')} artifact")
        if target.strip().lower() not in TFLITE_PROFILES:
            raise BadParameterError(f"--target {target} checks ONNX graphs; a .tflite is "
                                    f"checked with --target {' or '.join(TFLITE_PROFILES)}")
        return tflite.check_file(path, profile(target))
    if info["manifest"].get("format") != "onnx":
        raise BadParameterError(f"--target checks ONNX graphs; {str(path)!r} is a "
                                f"{info['manifest'].get('format')} artifact")
    return check_model(load_onnx(Path(path)), target)


def _candidate(config, module):
    """The ONNX graph ``config`` would write, in memory (a table graph with a one-row stand-in
    of its table: same ops and dtypes, the rows are not what a target runs or not)."""
    import numpy as np
    import onnx

    if config.mode == "table" and config.quantize == "none":
        from edgepe.formats.onnx import check_options, output_shape
        from edgepe.graphs.table import NP_DTYPES, build
        from edgepe.graphs.table_values import table_shape

        check_options(config)
        cols = table_shape(config.scheme)[1]
        manifest = base_manifest(config, output_shape(config), config.dtype)
        return build(config, module, manifest, table=np.zeros((1, cols), NP_DTYPES[config.dtype]))
    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    return onnx.load_from_string(buffer.getvalue())


def _lowerings(config, lowering_given: bool) -> list[str]:
    """The lowerings to try: every one for a bit-family compute graph unless one was given."""
    if config.mode == "sliced" and not lowering_given:
        from edgepe.graphs.sliced import LOWERINGS as SLICED

        return list(SLICED) if config.scheme.scheme != "binary" else ["bitwise"]
    bits = config.mode == "compute" and COMPUTE.get(config.scheme.scheme, ("",))[0] == "bits"
    return [config.lowering] if lowering_given or not bits else list(LOWERING_ORDER)


def _first_running(config, module, prof: Profile, lowerings: list[str]):
    """``(config, report, why)``: the first lowering whose graph ``prof`` runs whole, else
    ``(None, None, reasons)`` with what blocked each."""
    why: list[str] = []
    for lowering in lowerings:
        candidate = replace(config, lowering=lowering)
        label = (f"--lowering {lowering}" if len(lowerings) > 1 or config.mode == "sliced"
                 else f"--mode {config.mode}")
        try:
            report = check_model(_candidate(candidate, module), prof.name)
        except BadParameterError as exc:  # e.g. a width this lowering does not compute
            why.append(f"{label}: {exc}")
            continue
        if report:
            return candidate, report, why
        why.append(f"{label}: {'; '.join(report.blocking)}")
    return None, None, why


def for_export(config, target: str, lowering_given: bool):
    """``(config, report)``: ``config`` with a lowering the target runs, and the check of its
    graph. Refuses (``BadParameterError``: exit 2) when none does, naming the blocking op,
    dtype or rule of each lowering tried, and the other mode when that one would run."""
    from edgepe.schemes import build

    prof = profile(target)
    if prof.name in TFLITE_PROFILES or config.format == "tflite":
        from edgepe.targets import tflite

        if prof.name not in TFLITE_PROFILES:
            raise BadParameterError(f"--target {prof.name} checks ONNX graphs; a .tflite runs "
                                    f"on --target {' or '.join(TFLITE_PROFILES)}")
        return tflite.for_export(config, prof, lowering_given)
    if config.format != "onnx":
        raise BadParameterError(f"--target {prof.name} checks ONNX graphs; --format "
                                f"{config.format} writes a file no runtime executes as a graph")
    module = build(config.scheme, seed=config.seed, checkpoint=config.checkpoint)
    chosen, report, why = _first_running(config, module, prof, _lowerings(config, lowering_given))
    if chosen is not None:
        return chosen, report
    hint = "no other mode of this scheme runs on it either"
    for other in (m for m in config.scheme.spec.modes if m != config.mode):
        alt = replace(config, mode=other, lowering="bitwise")
        found, _, _ = _first_running(alt, module, prof, _lowerings(alt, False))
        if found is not None:
            hint = f"--mode {other} runs on it" + (
                f" (with --lowering {found.lowering})" if other != "table" else "")
            break
    raise BadParameterError(f"target {prof.name} ({prof.runtime}) cannot run scheme "
                            f"'{config.scheme.scheme}' --mode {config.mode}: {' | '.join(why)}; "
                            f"{hint}")


# Issue 44, measured on an NVIDIA H200 with onnxruntime-gpu 1.31.1 (IOBinding, 65,535 positions
# below 32768, rope head dim 128): Sin/Cos 68.7 us, the cache Gather 56.0, --mode sliced as
# --target ort-cuda writes it 256.5, fused (--rope-lowering ort) 231.3; at 1,048,576 positions
# 695, 578, 2,907 (fused: failed then, a CUDA grid limit since folded away, graphs.sliced.fold).
# On CUDA the trig is cheap and the sliced graph's extra passes are not: compute is its form.
CUDA_FORM = ("Sin/Cos is cheap on CUDA (rope, 65,535 positions on an H200: 68.7 us, where "
             "--mode sliced took 256.5 and its fused form 231.3)")


def form_note(config, target: str) -> str | None:
    """The line ``export --target ort-cuda`` prints for rope and sinusoidal: which form it wrote
    and why (issue 44: sliced is not the GPU's form); ``None`` for other targets and schemes."""
    if profile(target).name != "ort-cuda" or config.scheme.scheme not in ("rope", "sinusoidal"):
        return None
    scheme = config.scheme.scheme
    if config.mode == "compute":
        return (f"ort-cuda: {scheme} --mode compute is the GPU's form: {CUDA_FORM}; --mode "
                "sliced is for targets without Sin/Cos or libm")
    if config.mode == "sliced":
        return (f"ort-cuda: {scheme} --mode sliced as asked (--lowering {config.lowering}); the "
                f"GPU's form is --mode compute: {CUDA_FORM}")
    return None


# Short dtype names for the support table in docs/readme/targets.md.
_SHORT = {"float32": "f32", "float16": "f16", "float64": "f64", "bool": "bool", "int8": "i8",
          "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
          "uint32": "u32", "uint64": "u64"}


def support_markdown() -> str:
    """The op x target table of docs/readme/targets.md, rendered from ``PROFILES`` (a test keeps
    the document equal to it): each cell the dtypes the target runs the op on, ``-`` for none."""
    ops = sorted({op for p in PROFILES.values() for op in p.ops})
    names = list(PROFILES)
    lines = ["| op | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for op in ops:
        cells = []
        for name in names:
            dtypes = PROFILES[name].ops.get(op)
            cells.append(" ".join(_SHORT[d] for d in sorted(dtypes, key=list(_SHORT).index))
                         if dtypes else "-")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines.append("| *opsets* | " + " | ".join(f"{p.opsets[0]}-{p.opsets[1]}"
                                            for p in PROFILES.values()) + " |")
    lines.append("| *Gather indices* | " + " | ".join(
        " ".join(_SHORT[d] for d in sorted(p.index_dtypes)) for p in PROFILES.values()) + " |")
    return "\n".join(lines)
