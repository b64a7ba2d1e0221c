"""Proving: the grafted model against the original on onnxruntime CPU (``prove``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edgepe.errors import ArtifactError, BadParameterError
from edgepe.graft.report import OutputCheck
from edgepe.graft.splice import Grafted, _opset, graft_model

if TYPE_CHECKING:  # numpy loads when a function needs it: `import edgepe` stays light
    import numpy as np

# Two float32 graphs that differ in a subgraph are fused and scheduled differently by onnxruntime
# (another summation order in MatMul, LayerNorm, Softmax): allow 64 ulp of each output's largest
# value on top of the propagated PE tolerance (measured: 0 on the tests' and README's models).
FLOAT_ULPS = 64
# The PE is perturbed by this much (times max(1, max|PE|)) to measure the model's gain.
PROBE = 1e-3



def _session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failing run is reported once, by _run, in one line
    return ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                providers=["CPUExecutionProvider"])


def _pe_values(pe, max_len: int) -> np.ndarray:
    """The PE's rows at positions ``0 .. max_len - 1``, from onnxruntime."""
    import numpy as np

    session = _session(pe)
    name = session.get_inputs()[0].name
    return session.run(None, {name: np.arange(max_len, dtype=np.int64)})[0]


def table_pe(table: np.ndarray, opset: int):
    """``positions [N] int64 -> pe [N, D]``: rows of a constant float32 table (a reference)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "positions"], ["pe"], axis=0)], "table_pe",
        [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("pe", TensorProto.FLOAT, ["N", table.shape[1]])],
        [numpy_helper.from_array(np.ascontiguousarray(table, dtype=np.float32), "table")])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, True)
    return model


def _finite(value: Any, where: str) -> float:
    import numpy as np

    values = np.asarray(value if isinstance(value, list) else [value], dtype=object)
    if not values.size or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                  and math.isfinite(v) and v >= 0 for v in values.ravel()):
        raise ArtifactError(f"the artifact's manifest {where} must be non-negative numbers, got "
                            f"{value!r}")
    return float(max(values.ravel()))


def pe_tolerance(manifest: dict[str, Any], values: np.ndarray, quantised: bool) -> float:
    """How far the artifact's outputs may be from its float reference: the scheme's ``atol +
    rtol * max|pe|`` and, for int8 (``quantised``), the manifest's proven ``quant.bound``."""
    import numpy as np

    tol = manifest.get("tolerance") or {}
    if not isinstance(tol, dict):
        raise ArtifactError(f"the artifact's manifest tolerance must be an object, got {tol!r}")
    eps = _finite(tol.get("atol", 0.0), "tolerance.atol") + _finite(
        tol.get("rtol", 0.0), "tolerance.rtol") * float(np.abs(values).max(initial=0.0))
    quant = manifest.get("quant")
    if quantised and isinstance(quant, dict):
        eps += _finite(quant.get("bound", quant.get("max_abs_err")), "quant.bound")
    return eps


def _feeds(session, length: int, seq_dim, grafted: Grafted, max_len: int, rng) -> dict:
    import numpy as np

    feeds = {}
    for value in session.get_inputs():
        # the sequence axis gets the length, other free axes (batch) 2; when the sequence axis
        # is not known by name, every free axis gets the length, so positions still reach it
        shape = [d if isinstance(d, int) else length if seq_dim in (None, d) else 2
                 for d in value.shape]
        if value.name == grafted.positions.name and grafted.positions.kind == "input":
            if grafted.new_input:  # the original gathered 0..S-1 itself
                feeds[value.name] = np.arange(length, dtype=np.int64)
                continue
            ids = rng.integers(0, max_len, size=shape)
            ids.flat[-1] = max_len - 1
            feeds[value.name] = ids.astype(np.dtype(value.type[len("tensor("):-1]))
        elif value.type == "tensor(float)":
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        elif value.type == "tensor(bool)":
            feeds[value.name] = rng.random(shape) < 0.5
        else:  # integer inputs other than positions (token ids): 0 and 1 are always valid
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(
                np.dtype(value.type[len("tensor("):-1]))
    return feeds


def prove(original, grafted: Grafted, pe, manifest: dict[str, Any],
          lengths: Sequence[int] | None = None, seed: int = 0, trials: int = 2):
    """``(lengths, [OutputCheck])``: the grafted model against the reference on onnxruntime CPU.

    The reference is the original model; where it has no PE there (``add``, or ``at`` a model
    input) it is the original with the artifact's own rows put at ``at`` as a constant table, by
    this same grafting code from ``table_pe``: then the proof is that the graft wires the PE in
    right, and ``edgepe verify`` is the artifact's proof against its reference. Inputs:
    ``trials`` random draws at each sequence length (default 2, ``max_len // 2`` and ``max_len``,
    so positions reach ``max_len - 1``; a static sequence axis gives its one length); a position
    input gets random positions in ``0 .. max_len - 1`` with the last one ``max_len - 1``.

    Tolerance of an output: ``2 * gain * eps + 64 ulp`` of its largest value. ``eps`` is the PE's
    own (``pe_tolerance``; its float tolerance only when the reference uses its rows);
    ``gain`` is the output's change per unit change of the PE, measured by adding random +-1e-3
    (times max|PE|) to the reference table (a linearisation, hence the factor 2).
    """
    import numpy as np

    max_len = int(manifest["max_len"])
    values = _pe_values(pe, max_len)
    opset = _opset(grafted.model)

    def with_table(table):
        return _session(graft_model(original, table_pe(table, opset), manifest, grafted.at,
                                    grafted.positions, grafted.add).model)

    rng = np.random.default_rng(seed)
    step = PROBE * max(1.0, float(np.abs(values).max(initial=0.0)))
    table_ref = with_table(values)
    perturbed = with_table(values + step * rng.choice([-1.0, 1.0], size=values.shape))
    own_rows = grafted.add or grafted.from_input  # the original has no PE to compare with
    reference = table_ref if own_rows else _session(original)
    mine = _session(grafted.model)
    seq = grafted.seq_dim
    if isinstance(seq, int) and seq > 0:
        lengths = [seq]
    elif lengths is None:
        lengths = sorted({min(2, max_len), max(1, max_len // 2), max_len})
    eps = pe_tolerance(manifest, values, quantised=not own_rows)
    names = [o.name for o in mine.get_outputs()]
    err = dict.fromkeys(names, 0.0)
    gain = dict.fromkeys(names, 0.0)
    peak = dict.fromkeys(names, 0.0)
    wanted = {i.name for i in reference.get_inputs()}
    for length in lengths:
        for trial in range(trials):
            feeds = _feeds(mine, length, seq if isinstance(seq, str) else None, grafted, max_len,
                           rng)
            inputs = {k: v for k, v in feeds.items() if k in wanted}
            want = dict(zip(names, _run(reference, names, inputs, length, "original"),
                            strict=True))
            got = dict(zip(names, _run(mine, names, feeds, length, "grafted"), strict=True))
            if length == lengths[-1] and trial == 0:
                base = dict(zip(names, table_ref.run(names, feeds), strict=True))
                moved = dict(zip(names, perturbed.run(names, feeds), strict=True))
                for name in names:
                    gain[name] = _max_diff(moved[name], base[name]) / step
            for name in names:
                err[name] = max(err[name], _max_diff(got[name], want[name]))
                peak[name] = max(peak[name], float(np.abs(np.asarray(want[name], np.float64))
                                                   .max(initial=0.0)))
    checks = [OutputCheck(name, err[name], 2 * gain[name] * eps
                          + FLOAT_ULPS * float(np.spacing(np.float32(peak[name]))))
              for name in names]
    return list(lengths), checks


def _run(session, names: list[str], feeds: dict, length: int, which: str) -> list:
    """``session.run``; a model that fails at ``length`` is one line: the original's is bad input
    (e.g. a torch export that fixed the sequence length), the grafted's a failed proof."""
    from edgepe.errors import ParityError

    try:
        return session.run(names, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        text = str(exc).strip()
        first = text.splitlines()[0][-300:] if text else type(exc).__name__
        if which == "original":
            raise BadParameterError(
                f"the original model does not run at sequence length {length} ({first}); give "
                "lengths it takes with --lengths, or --no-check") from None
        raise ParityError(f"the grafted model fails at sequence length {length}: {first}") from None


def _max_diff(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return math.inf
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0))
