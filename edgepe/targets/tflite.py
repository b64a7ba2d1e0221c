"""``--target litert`` and ``--target tflm`` (issue 43): a ``.tflite`` checked op by op against
the profile of ``profiles.TFLITE_PROFILES``, and the choice of a lowering whose every op the
runtime has (``for_export``), as ``edgepe.targets`` does for ONNX graphs.

The check reads the model's own bytes (``edgepe.formats.tflite.read_model``): each operator's
builtin name, and the types of its data tensors (the indices of ``GATHER`` against the
profile's ``index_dtypes``; shape, permutation and bias operands are not data).
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.targets.check import NodeCheck, TargetReport
from edgepe.targets.profiles import Profile

# Operand positions that are not data: RESHAPE's shape, TRANSPOSE's permutation,
# FULLY_CONNECTED's int32 bias (its type is fixed by the weights'); GATHER's indices.
NOT_DATA = {"RESHAPE": {1}, "TRANSPOSE": {1}, "FULLY_CONNECTED": {2}, "GATHER": {1}}


def check_model(model: dict, prof: Profile) -> TargetReport:
    """Every operator of ``model`` (``read_model``'s dict) against ``prof``."""
    tensors = model["tensors"]
    nodes = []
    for i, op in enumerate(model["operators"]):
        key, name = op["op"], f"{op['op'].lower()}_{i}"
        allowed = prof.ops.get(key)
        if allowed is None:
            nodes.append(NodeCheck(name, key, False, f"{key}: not in {prof.name}'s operator "
                                                     "table"))
            continue
        skip = NOT_DATA.get(key, set())
        data = [j for k, j in enumerate(op["inputs"]) if j >= 0 and k not in skip]
        bad = next((tensors[j]["dtype"] for j in data + op["outputs"]
                    if tensors[j]["dtype"] not in allowed), None)
        if bad is not None:
            nodes.append(NodeCheck(name, key, False, f"{key} on {bad}: {prof.name} runs {key} "
                                                     f"on {', '.join(sorted(allowed))}"))
            continue
        if key == "GATHER":
            index = tensors[op["inputs"][1]]["dtype"]
            if index not in prof.index_dtypes:
                nodes.append(NodeCheck(name, key, False, f"GATHER indices {index}: {prof.name} "
                                       f"takes {', '.join(sorted(prof.index_dtypes))} only"))
                continue
        nodes.append(NodeCheck(name, key, True, prof.runtime))
    return TargetReport(prof, nodes, [], list(prof.notes))


def check_file(path: str | Path, prof: Profile) -> TargetReport:
    from edgepe.formats.tflite import read_file, read_model

    return check_model(read_model(read_file(path)), prof)


def _candidate(config, module) -> dict:
    from edgepe.formats.tflite import read_model

    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    return read_model(buffer.getvalue())


def for_export(config, prof: Profile, lowering_given: bool):
    """``(config, report)`` with the first lowering of ``formats.tflite.LOWERINGS`` whose model
    ``prof`` runs whole (or the one ``--lowering`` names); refuses in one line naming the op."""
    from edgepe.formats.tflite import BIT_SCHEMES, LOWERINGS, SLICED_TRIG
    from edgepe.schemes import build

    if config.format != "tflite":
        raise BadParameterError(f"--target {prof.name} runs .tflite models: use --format tflite")
    module = build(config.scheme, seed=config.seed, checkpoint=config.checkpoint)
    bits = config.mode in ("compute", "sliced") and config.scheme.scheme in BIT_SCHEMES
    lowerings = list(LOWERINGS) if bits and not lowering_given else [config.lowering]
    if config.mode == "sliced" and config.scheme.scheme in SLICED_TRIG:
        lowerings = ["float"]  # rope/sinusoidal slice with float only (formats.tflite)
    why = []
    for lowering in lowerings:
        candidate = replace(config, lowering=lowering)
        label = f"--lowering {lowering}" if bits else f"--mode {config.mode}"
        report = check_model(_candidate(candidate, module), prof)
        if report:
            return candidate, report
        why.append(f"{label}: {'; '.join(report.blocking)}")
    raise BadParameterError(f"target {prof.name} ({prof.runtime}) cannot run scheme "
                            f"'{config.scheme.scheme}' --mode {config.mode}: {' | '.join(why)}")
