"""Proving: the grafted model against the original on onnxruntime CPU (``prove``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from edgepe.contract.errors import ArtifactError, BadParameterError, CheckpointError, ParityError
from edgepe.graft.find import op
from edgepe.graft.report import OutputCheck
from edgepe.graft.splice import Grafted, _opset, graft_model
from edgepe.rebuild import rebuild

if TYPE_CHECKING:  # numpy loads when a function needs it: `import edgepe` stays light
    import numpy as np

# Two float32 graphs that differ in a subgraph are fused and scheduled differently by onnxruntime
# (another summation order in MatMul, LayerNorm, Softmax): allow 64 ulp of each output's largest
# value on top of the propagated PE tolerance (measured: 0 on the tests' and README's models).
FLOAT_ULPS = 64
# The PE is perturbed by this much (times max(1, max|PE|)) to measure the model's gain.
PROBE = 1e-3
# An element's float allowance is FLOAT_ULPS ulp of the larger of its own |value| and this
# quantile of its output's |values| (issue 41: it was 64 ulp of the output's largest value, which
# one element at finfo.min made 2e33, infinite in effect, and a seen mismatch of 2.79 passed; a
# quantile moves only when a tenth of the elements do, and small elements keep the allowance of
# the values their sums cancel, the reason for a per-output scale).
SCALE_QUANTILE = 0.9
# Wall-clock seconds the whole proof may run the user's model (issue 41: a Loop of 10^12
# iterations ran forever); a run past it is stopped (onnxruntime's RunOptions.terminate).
PROOF_SECONDS = 600.0
# Bytes the tensors of one proof run may hold at once, in all (issue 41: a user model's own
# Expand to 5 GB ran): graft's sessions allocate from one onnxruntime arena of this size
# (``_arena``), so a run that would need more fails at once, in one line. The model's weights
# are not counted (they are bounded where they are read, ``read.EXTERNAL_BYTES_LIMIT``).
PROOF_MEMORY_BYTES = 4 << 30
_ARENA: list[int] = []  # the arena's size once registered (once per process)


def _arena(ort) -> None:
    """Register onnxruntime's shared CPU arena of ``PROOF_MEMORY_BYTES`` (once per process;
    only sessions that ask for it with ``session.use_env_allocators`` use it: graft's)."""
    if _ARENA:
        return
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(
        {"max_mem": PROOF_MEMORY_BYTES, "arena_extend_strategy": 1}))  # 1: as requested
    _ARENA.append(PROOF_MEMORY_BYTES)



def check_run_bound(model, shapes: dict[str, list[int]], which: str, length,
                    budget: int | None = None) -> None:
    """Refuse (one line) a run of ``model`` on inputs of ``shapes`` whose tensors would hold
    more than ``budget`` bytes (default ``PROOF_MEMORY_BYTES``) in all, before any session runs
    it (issue 41: a user model's own Expand to 5 GB ran until the arena stopped it): ONNX shape
    inference with data propagation over a copy with those input shapes, then the bytes of every
    tensor it bounds (graph inputs, every node output) summed, not each alone (onnxruntime reuses
    buffers, so the sum bounds the peak from above). A tensor shape inference cannot bound (a
    size read from input values, a Loop's outputs) is not counted: the proof's arena
    (``PROOF_MEMORY_BYTES``) and deadline (``PROOF_SECONDS``) stay the backstop for those.
    The refusal names the largest tensor and its size; the original's is bad input, the
    grafted's a failed proof."""
    import numpy as np
    from onnx import helper, shape_inference

    def element_bytes(elem_type: int) -> int:  # onnx's own numpy mapping; strings: 8 (a pointer)
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
        except (KeyError, TypeError, ValueError):  # UNDEFINED or a type onnx has no numpy for
            return 8

    budget = PROOF_MEMORY_BYTES if budget is None else budget
    copy = _weightless(model)
    for value in copy.graph.input:
        if value.name in shapes and value.type.HasField("tensor_type"):
            shape = value.type.tensor_type.shape
            shape.Clear()
            for size in shapes[value.name]:
                shape.dim.add().dim_value = int(size)
    del copy.graph.value_info[:]
    error = BadParameterError if which == "original" else ParityError
    try:
        inferred = shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference that fails bounds nothing: the arena does
        return
    graph = inferred.graph
    weights = {t.name for t in graph.initializer}
    total, largest, seen = 0, (0, ""), set(weights)
    for value in (*graph.input, *graph.value_info, *graph.output):
        t = value.type.tensor_type
        if value.name in seen or not t.HasField("shape") or any(
                not d.HasField("dim_value") for d in t.shape.dim):
            continue
        seen.add(value.name)
        size = element_bytes(t.elem_type)
        for d in t.shape.dim:
            size *= max(int(d.dim_value), 0)
        total += size
        if size > largest[0]:  # the first of the largest, in graph order
            largest = (size, value.name)
    if total > budget:
        raise error(f"the {which} model's tensors would hold {total:,} B in all at sequence "
                    f"length {length} (the largest, {largest[1]!r}, {largest[0]:,} B), over "
                    f"graft's proof memory limit of {budget:,} B; refused before running it")



# Float initializers over this many elements are copied for shape inference without their data:
# inference reads an initializer's values only where it is a size (integer shapes, repeats, a
# few Resize scales), and a user model's weights would be copied once per proof run, and past
# protobuf's 2 GiB make inference fail (then nothing would be bounded).
_WEIGHT_ELEMENTS = 1024
_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16


def _weightless(model):
    """A copy of ``model`` whose large float initializers keep their name, type and dims only
    (the rest of the model copied field by field: its weights are never copied whole)."""
    import onnx

    def copy_fields(source, target, skip: str) -> None:
        for field, value in source.ListFields():
            if field.name == skip:
                continue
            if hasattr(value, "extend"):  # a repeated field
                getattr(target, field.name).extend(value)
            elif hasattr(value, "ListFields"):  # a message
                getattr(target, field.name).CopyFrom(value)
            else:
                setattr(target, field.name, value)

    copy = onnx.ModelProto()
    copy_fields(model, copy, "graph")
    copy_fields(model.graph, copy.graph, "initializer")
    for tensor in model.graph.initializer:
        if tensor.data_type in _FLOAT_TYPES and math.prod(tensor.dims) > _WEIGHT_ELEMENTS:
            copy.graph.initializer.add(name=tensor.name, dims=tensor.dims,
                                       data_type=tensor.data_type)
        else:
            copy.graph.initializer.add().CopyFrom(tensor)
    return copy


class _GraphInputs:
    """A model's graph inputs as an onnxruntime session lists them (``name``, ``shape`` of ints
    and names, ``type``), so the proof's input shapes are known before a session exists."""

    def __init__(self, model) -> None:
        from types import SimpleNamespace

        self.inputs = []
        weights = {t.name for t in model.graph.initializer}
        for value in model.graph.input:
            t = value.type.tensor_type
            if value.name in weights or not value.type.HasField("tensor_type"):
                continue
            shape = [d.dim_value if d.HasField("dim_value") else d.dim_param or None
                     for d in t.shape.dim]
            self.inputs.append(SimpleNamespace(name=value.name, shape=shape))

    def get_inputs(self) -> list:
        return self.inputs


def _case_shapes(inputs, seq: int, past: int) -> dict[str, list[int]]:
    """The shapes ``hf_feeds`` gives ``inputs`` at ``seq`` new tokens after ``past`` cached."""
    sizes = _dim_sizes(inputs, PROOF_BATCH, seq, past)
    return {v.name: [d if isinstance(d, int) else sizes.get(d, seq) for d in v.shape]
            for v in inputs}


def _session(model, which: str = "original"):
    """An onnxruntime CPU session of ``model``, silent (its logger off: a failure is one line,
    ours). A model onnxruntime cannot load (an op it lacks) is one line too (issue 41: exit 3
    before): the original's is bad input, the grafted's a failed proof."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failing run is reported once, by _run, in one line
    _arena(ort)
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
    try:
        return ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        text = str(exc).strip()
        first = text.splitlines()[0][-300:] if text else type(exc).__name__
        error = BadParameterError if which == "original" else ParityError
        raise error(f"onnxruntime cannot load the {which} model: {first}") from None


# Elements per block of one comparison (``_Worst.add``): 8 MiB per float64 temporary.
WORST_BLOCK = 1 << 20


class _Worst:
    """One output's comparison across runs, element by element: the element furthest beyond its
    float allowance (``FLOAT_ULPS`` ulp of ``max(|reference|, SCALE_QUANTILE of |reference|)``;
    none for an integer or boolean reference)
    and the element of the largest error; ``check`` adds the output's PE allowance. A NaN where
    the reference has none, or another shape, is an infinite error; equal values (the same
    infinity, NaN against NaN) none."""

    def __init__(self, ulps: float = FLOAT_ULPS) -> None:
        self.ulps = ulps
        self.over = (-math.inf, 0.0, 0.0)  # (error - allowance, error, allowance)
        self.top = (-1.0, 0.0)  # (error, allowance) of the largest error

    def add(self, got, want) -> None:
        import numpy as np

        a, b = np.asarray(got), np.asarray(want)
        if a.shape != b.shape:
            self.over, self.top = (math.inf, math.inf, 0.0), (math.inf, 0.0)
            return
        a, b = a.reshape(-1), b.reshape(-1)
        if not a.size:
            return
        # the scale from every element; |b| in its own float type (exact, and "lower" picks one
        # of its elements: the same value as in float64), integers in float64 (|min| overflows)
        mag = np.abs(b) if b.dtype.kind == "f" else np.abs(b.astype(np.float64))
        finite = mag[np.isfinite(mag)]
        scale = float(np.quantile(finite, SCALE_QUANTILE, method="lower")) if finite.size \
            else 0.0
        del mag, finite
        # the rest in blocks of WORST_BLOCK elements: float64 temporaries of a whole output at
        # 2^20 positions were 0.5 GB of Bloom's 1.0 GB peak (issue 41); the worst element of
        # the blocks is the worst of the whole (ties: the first, as one argmax over all)
        for start in range(0, a.size, WORST_BLOCK):
            self._block(a[start:start + WORST_BLOCK], b[start:start + WORST_BLOCK], scale,
                        exact=b.dtype.kind in "iub")

    def _block(self, a, b, scale: float, exact: bool) -> None:
        """``add``'s comparison of one block; ``exact``: the reference is integers (T5's
        buckets), allowed no error."""
        import numpy as np

        a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            err = np.where(same, 0.0, np.abs(a - b))
        err = np.where(np.isnan(err), np.inf, err)
        mag = np.abs(b)
        finite = np.isfinite(mag)
        top = 2.0**127  # float32's largest power of two: its spacing is finite
        size = np.minimum(np.maximum(np.where(finite, mag, 0.0), scale), top)
        allow = np.where(finite, self.ulps * np.spacing(size.astype(np.float32))
                         .astype(np.float64), 0.0)
        if exact:
            allow = np.zeros_like(allow)
        excess = err - allow
        k = int(np.argmax(excess))
        if excess[k] > self.over[0]:
            self.over = (float(excess[k]), float(err[k]), float(allow[k]))
        peak = err.max()
        j = int(np.argmax(np.where(err == peak, allow, -1.0)))  # ties: the largest allowance
        if (err[j], allow[j]) > self.top:
            self.top = (float(err[j]), float(allow[j]))

    def check(self, name: str, extra: float) -> OutputCheck:
        """The output's line: the worst element beyond ``allowance + extra`` when one is, else
        the element of the largest error, with its own tolerance."""
        if self.over[0] > extra or math.isnan(extra):
            return OutputCheck(name, self.over[1], self.over[2] + extra)
        return OutputCheck(name, max(self.top[0], 0.0), self.top[1] + extra)


def check_overridable(original, grafted_model) -> None:
    """Refuse (``BadParameterError``) a graft that removed an initializer the original also
    lists as a graph input (a caller may override it at run time): the grafted model would
    ignore the value given (issue 41: frozen silently, 4.86 off)."""
    kept = {t.name for t in grafted_model.graph.initializer}
    inits = {t.name for t in original.graph.initializer}
    for value in original.graph.input:
        if value.name in inits and value.name not in kept:
            raise BadParameterError(
                f"the model's input {value.name!r} is also an initializer (a caller may "
                "override it) that the graft removes with the PE's subgraph: the grafted model "
                "would ignore the value given; refused (make it an initializer only)")


def _int_high(model, name: str, default: int) -> int:
    """The values an integer input plausibly takes: ``0 ..`` the rows of a constant table it
    indexes directly (a Gather), else ``0 .. default - 1`` (the PE's positions)."""
    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    high = default
    for node in model.graph.node:
        if op(node) == "Gather" and len(node.input) > 1 and node.input[1] == name \
                and node.input[0] in tables:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = tables[node.input[0]]
            if -len(dims) <= axis < len(dims):
                high = min(high, max(1, int(dims[axis])))
    return max(2, high)


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


def _feeds(session, length: int, seq_dim, grafted: Grafted, max_len: int, rng,
           highs: dict[str, int] | None = None) -> dict:
    """Random inputs; an integer input other than the positions takes values in ``0 ..
    highs[name] - 1`` (both ends included; issue 41: 0 and 1 only before, so a model reading
    one as an offset was never compared at 2 and more), else 0 and 1."""
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
        else:  # integer inputs other than positions (token ids, offsets)
            dtype = np.dtype(value.type[len("tensor("):-1])
            high = min((highs or {}).get(value.name, 2), int(np.iinfo(dtype).max) + 1)
            ids = rng.integers(0, high, size=shape)
            if ids.size > 1:
                ids.flat[0], ids.flat[-1] = 0, high - 1
            feeds[value.name] = ids.astype(dtype)
    return feeds


def proof_manifest(path, manifest: dict[str, Any], checkpoint=None) -> dict[str, Any]:
    """``manifest`` with the tolerance and int8 bound the proof holds the grafted model to taken
    from this edgepe's rebuild of the artifact's recorded inputs (``edgepe.rebuild``), never
    from the given file: an artifact whose manifest states a looser tolerance or bound does not
    loosen the proof (issue 30). A checkpoint-based artifact without its ``checkpoint`` takes the
    registry's tolerance; an int8 one needs it (its bound comes from the weights)."""
    from edgepe.schemes import get_spec

    try:
        ours = rebuild(path, manifest, checkpoint).manifest or {}
    except CheckpointError:
        if manifest.get("quant") is not None or checkpoint is not None:
            raise
        rtol, atol = get_spec(manifest["scheme"]).tolerance
        ours = {"tolerance": {"rtol": rtol, "atol": atol}, "quant": None}
    return {**manifest, "tolerance": ours.get("tolerance"), "quant": ours.get("quant")}


# What the proof may ask for before it runs anything: the PE's table of max_len rows (float32)
# and each sequence length fed to the model (issue 30: a huge max_len or --lengths was a
# MemoryError, exit 3).
PROOF_TABLE_BYTES = 256 * 2**20
PROOF_MAX_LENGTH = 1 << 16


def check_lengths(lengths: Sequence[int] | None, max_len: int) -> None:
    """Refuse (``BadParameterError``, exit 2) a sequence length below 1 or over
    ``min(PROOF_MAX_LENGTH, max_len)``, naming the cap."""
    for length in lengths or ():
        if not 1 <= int(length) <= min(PROOF_MAX_LENGTH, max_len):
            raise BadParameterError(
                f"--lengths {length}: each length must be 1 .. {min(PROOF_MAX_LENGTH, max_len)}"
                f" (the PE's max_len {max_len}, graft's cap {PROOF_MAX_LENGTH})")


def check_proof_size(manifest: dict[str, Any], lengths: Sequence[int] | None) -> None:
    """Refuse (``BadParameterError``, exit 2) a proof over more than ``PROOF_TABLE_BYTES`` of
    PE rows or a sequence length over ``PROOF_MAX_LENGTH`` (or below 1), naming the cap."""
    max_len = int(manifest["max_len"])
    width = int(manifest.get("d_model") or manifest.get("heads") or 1)
    if max_len * width * 4 > PROOF_TABLE_BYTES:
        raise BadParameterError(
            f"max_len {max_len} x width {width}: the proof's float32 PE table would be "
            f"{max_len * width * 4} bytes, over graft's cap of {PROOF_TABLE_BYTES}; graft a "
            "shorter artifact, or pass --no-check")
    check_lengths(lengths, max_len)


def prove(original, grafted: Grafted, pe, manifest: dict[str, Any],
          lengths: Sequence[int] | None = None, seed: int = 0, trials: int = 2):
    """``(lengths, [OutputCheck])``: the grafted model against the reference on onnxruntime CPU.

    The reference is the original model; where it has no PE there (``add``, or ``at`` a model
    input) it is the original with the artifact's own rows put at ``at`` as a constant table, by
    this same grafting code from ``table_pe``: then the proof is that the graft wires the PE in
    right, and ``edgepe verify`` is the artifact's proof against its reference. Inputs:
    ``trials`` random draws at each sequence length (default 2, ``max_len // 2`` and ``max_len``,
    so positions reach ``max_len - 1``; a static sequence axis gives its one length); a position
    input gets random positions in ``0 .. max_len - 1`` with the last one ``max_len - 1``; other
    integer inputs values over ``0 ..`` the rows of the table they index, else ``max_len - 1``
    (``_int_high``; divided by 8 until the original runs, down to 0 and 1). Issue 41: a position
    input is also fed positions past ``max_len - 1`` and negative ones (``_outside``); every output
    of the original must be one of the grafted model's, and no initializer a caller may override
    is removed (``check_overridable``).

    Tolerance of an output element: ``2 * gain * eps`` plus 64 ulp of the larger of the element's
    own reference value and the 90th percentile of its output's (``_Worst``); the report line
    shows the element furthest beyond its tolerance, else the one of the largest error. ``eps``
    is the PE's own (``pe_tolerance``; its float tolerance only when the reference uses its rows);
    ``gain`` is the output's change per unit change of the PE, measured by adding random +-1e-3
    (times max|PE|) to the reference table (a linearisation, hence the factor 2).
    """
    import time

    import numpy as np

    max_len = int(manifest["max_len"])
    check_proof_size(manifest, lengths)
    check_overridable(original, grafted.model)
    # the user's model at the proof's longest run, bounded before any session (issue 41)
    seq, given = grafted.seq_dim, _GraphInputs(original).get_inputs()
    longest = seq if isinstance(seq, int) and seq > 0 else max(lengths) if lengths else min(
        max_len, PROOF_MAX_LENGTH)
    named = seq if isinstance(seq, str) and any(seq in v.shape for v in given) else None
    check_run_bound(original, {v.name: [d if isinstance(d, int) else longest if named in (
        None, d) else 2 for d in v.shape] for v in given}, "original", longest)
    deadline = time.monotonic() + PROOF_SECONDS
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
    mine = _session(grafted.model, "grafted")
    check_outputs(original, grafted.model)
    seq = grafted.seq_dim
    if isinstance(seq, int) and seq > 0:
        lengths = [seq]
    elif lengths is None:
        top = min(max_len, PROOF_MAX_LENGTH)  # positions still reach max_len - 1 (_feeds)
        lengths = sorted({min(2, top), max(1, top // 2), top})
    eps = pe_tolerance(manifest, values, quantised=not own_rows)
    names = [o.name for o in mine.get_outputs()]
    worst = {name: _Worst() for name in names}
    gain = dict.fromkeys(names, 0.0)
    wanted = {i.name for i in reference.get_inputs()}
    highs = {i.name: _int_high(original, i.name, max_len) for i in mine.get_inputs()}
    # the sequence axis is known by name when an input carries it: not a name shape inference
    # made up for the replaced tensor ('unk__0'), which only a new positions input has
    named = seq if isinstance(seq, str) and any(
        seq in i.shape for i in mine.get_inputs()
        if not (grafted.new_input and i.name == grafted.positions.name)) else None
    feeds: dict = {}
    for length in lengths:
        for trial in range(trials):
            while True:  # integer inputs over their range, narrowed until the original runs
                feeds = _feeds(mine, length, named, grafted, max_len, rng, highs)
                inputs = {k: v for k, v in feeds.items() if k in wanted}
                try:
                    want = dict(zip(names, _run(reference, names, inputs, length, "original",
                                                deadline), strict=True))
                    break
                except BadParameterError:
                    wide = {k: v for k, v in highs.items() if v > 2}
                    if not wide:
                        raise
                    highs.update({k: max(2, v // 8) for k, v in wide.items()})
            got = dict(zip(names, _run(mine, names, feeds, length, "grafted", deadline),
                           strict=True))
            if length == lengths[-1] and trial == 0:
                base = dict(zip(names, _run(table_ref, names, feeds, length, "original",
                                            deadline), strict=True))
                moved = dict(zip(names, _run(perturbed, names, feeds, length, "original",
                                             deadline), strict=True))
                for name in names:
                    gain[name] = _max_diff(moved[name], base[name], finite=True) / step
            for name in names:
                worst[name].add(got[name], want[name])
    label = list(lengths)
    if grafted.positions.kind == "input" and not grafted.new_input and not own_rows and feeds:
        label.append(_outside(reference, mine, names, feeds, grafted.positions.name, max_len,
                              worst, deadline))
    checks = [worst[name].check(name, 2 * gain[name] * eps) for name in names]
    return label, checks


def check_outputs(original, grafted_model) -> None:
    """Refuse (``ParityError``) a grafted model that lacks one of the original's outputs, or
    names one twice: every output is compared (issue 41)."""
    theirs = [o.name for o in original.graph.output]
    mine = [o.name for o in grafted_model.graph.output]
    lost = [n for n in theirs if n not in mine]
    if lost or len(set(mine)) != len(mine):
        raise ParityError(f"the grafted model's outputs ({', '.join(mine)}) are not the "
                          f"original's ({', '.join(theirs)}); every output must be compared")


# Positions outside the PE's rows the proof also feeds (issue 41), each in a run of its own (a
# position the grafted model refuses must not hide another it answers wrongly): past the last row
# (just and far), and negative (onnxruntime's Gather takes -n .. -1 as rows from the end).
def _outside_positions(max_len: int) -> list[int]:
    return [max_len, max_len + 1, 2 * max_len + 3, -1, -2, -max_len]


def _both(original, grafted) -> tuple[str, tuple | None]:
    """``(refused, (want, got))``: ``original()``, then ``grafted()``, at a position outside the
    rows. A refusal of either (its one-line error) is an outcome, named ``refused`` ("the
    original", "the grafted model") with no pair; a run stopped at the deadline or the memory
    limit is no answer about the position and is raised."""
    for who, run, error in (("the original", original, BadParameterError),
                            ("the grafted model", grafted, ParityError)):
        try:
            result = run()
        except error as exc:
            if "did not finish" in str(exc) or "memory limit" in str(exc):
                raise
            return who, None
        if who == "the original":
            want = result
    return "", (want, result)


def _outside(reference, mine, names, feeds: dict, positions: str, max_len: int, worst, deadline
             ) -> str:
    """The last run's inputs with their first position replaced by each of
    ``_outside_positions``, as the original treats it (clamp, wrap, error): where the original
    computes outputs, the grafted model must compute the same (added to ``worst``; an error of
    the grafted model there is allowed: its PE covers ``0 .. max_len - 1``, the table's rows,
    and says so by failing), where the original fails, nothing is compared. Returns the runs'
    label for the report: the positions, grouped by what happened."""
    import numpy as np

    wanted = {i.name for i in reference.get_inputs()}
    said: list[tuple[str, list[int]]] = []
    for odd in _outside_positions(max_len):
        ids = np.array(feeds[positions], copy=True)
        ids.reshape(-1)[0] = odd
        run = {**feeds, positions: ids}
        where = f"position {odd}"
        refused, pair = _both(
            partial(_run, reference, names, {k: v for k, v in run.items() if k in wanted}, where,
                    "original", deadline),
            partial(_run, mine, names, run, where, "grafted", deadline))
        outcome = f" ({refused} refuses them)" if refused else ""
        if pair is not None:
            want, got = pair
            for name, a, b in zip(names, got, want, strict=True):
                worst[name].add(a, b)
        if said and said[-1][0] == outcome:
            said[-1][1].append(odd)
        else:
            said.append((outcome, [odd]))
    return ", ".join(f"positions {', '.join(map(str, odds))}{outcome}" for outcome, odds in said)


def _outside_cone(cones, names: Sequence[str], declared, shaped: frozenset[str], max_len: int,
                  rng, highs, worst, deadline) -> str:
    """The cones' decode step (``_cone_plan``) after each non-negative count of
    ``_outside_positions`` cached tokens: positions past the table's rows where the positions
    come from the cache's length (issue 41; none is negative there), the cache fed as its
    shape. As ``_outside``: where the original's cone computes the replaced tensors, the
    grafted's must compute the same (added to ``worst``) or fail (its rows end at
    ``max_len - 1``, and it says so by failing, as the whole model would at that node); where
    the original's fails, nothing is compared. Returns the runs' label."""
    said: list[tuple[str, list[int]]] = []
    for past in (p for p in _outside_positions(max_len) if p >= max_len):
        feeds = _cone_feeds(cones, declared, shaped, 1, past, max_len, rng, 0, highs)
        where = f"1+{past}"
        refused, pair = _both(
            partial(_cone_feed, cones[0], names, feeds, where, "original", deadline),
            partial(_cone_feed, cones[1], names, feeds, where, "grafted", deadline))
        outcome = f": {refused} refuses them" if refused else ""
        if pair is not None:
            want, got = pair
            for name in names:
                worst[name].add(got[name], want[name])
        if said and said[-1][0] == outcome:
            said[-1][1].append(past)
        else:
            said.append((outcome, [past]))
    return ", ".join(f"{', '.join(f'1+{p}' for p in pasts)} (the replaced tensors{outcome})"
                     for outcome, pasts in said)


def _run(session, names: list[str], feeds: dict, length, which: str,
         deadline: float | None = None) -> list:
    """``session.run``; a model that fails at ``length`` is one line: the original's is bad input
    (e.g. a torch export that fixed the sequence length), the grafted's a failed proof. A run
    still going at ``deadline`` (``time.monotonic``; default ``PROOF_SECONDS`` from now) is
    stopped (``RunOptions.terminate``) and is one line too."""
    import threading
    import time

    import onnxruntime as ort

    options = ort.RunOptions()
    left = (time.monotonic() + PROOF_SECONDS if deadline is None else deadline) \
        - time.monotonic()
    timer = threading.Timer(max(left, 0.0), setattr, (options, "terminate", True))
    timer.daemon = True
    timer.start()
    try:
        return session.run(names, feeds, options)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        text = str(exc).strip()
        first = text.splitlines()[0][-300:] if text else type(exc).__name__
        error = BadParameterError if which == "original" else ParityError
        if options.terminate:
            raise error(f"the {which} model did not finish a run at sequence length {length} "
                        f"within graft's proof limit of {PROOF_SECONDS:g} s; refused") from None
        if "Available memory of" in text:  # the arena's refusal (_arena)
            raise error(f"the {which} model needs more than graft's proof memory limit of "
                        f"{_ARENA[0] if _ARENA else PROOF_MEMORY_BYTES:,} B at sequence length "
                        f"{length}; give shorter --lengths, or --no-check") from None
        if which == "original":
            raise BadParameterError(
                f"the original model does not run at sequence length {length} ({first}); give "
                "lengths it takes with --lengths, or --no-check") from None
        raise ParityError(f"the grafted model fails at sequence length {length}: {first}") from None
    finally:
        timer.cancel()


def _max_diff(a, b, finite: bool = False) -> float:
    """The largest ``|a - b|`` (float64: int8 does not wrap): equal values none (the same
    infinity, NaN against NaN), a NaN against a number infinite; ``finite``: over the elements
    where both are finite only (a gain, which one overflowing element must not make infinite)."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
    if finite:
        diff = np.where(np.isfinite(a) & np.isfinite(b), diff, 0.0)
    return float(np.where(np.isnan(diff), np.inf, diff).max(initial=0.0))


# --- proving a PE found in a transformers export (issue 29) ----------------------------------

# Batch rows in every proof run; the second row is left-padded where the model takes a mask.
PROOF_BATCH = 2
ONNX_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(bool)": "bool"}


def _dim_sizes(inputs, batch: int, seq: int, past: int) -> dict[str, int]:
    """Sizes of the symbolic axes of a transformers export's inputs, by the inputs' roles:
    ``input_ids``/``position_ids`` ``[batch, seq]``, ``past_*`` ``[batch, heads, past, d]``,
    ``attention_mask`` ``[batch, past + seq]``. An encoder-decoder (``decoder_input_ids``): the
    decoder's ``[batch, seq]`` after ``past`` cached tokens, the encoder's ``input_ids`` and mask
    ``[batch, past + seq]`` (its lengths differ from the decoder's in a decode step). A
    cross-attention cache (Optimum's ``past_key_values.i.encoder.key``: ``encoder`` a part of
    its name) holds the encoder's ``past + seq`` keys, not the decoder's cached tokens (a T5
    decoder with past, issue 40: at past 0 an empty cross cache made the original fail)."""
    sizes: dict[str, int] = {}

    def put(dim, value):
        if isinstance(dim, str) and dim not in sizes:
            sizes[dim] = value

    for value in inputs:
        if "past" in value.name and len(value.shape) == 4:
            put(value.shape[0], batch)
            cross = "encoder" in value.name.split(".")
            put(value.shape[2], past + seq if cross else past)
    decoder = [v for v in inputs if v.name == "decoder_input_ids" and len(v.shape) == 2]
    for value in decoder:
        put(value.shape[0], batch)
        put(value.shape[1], seq)
    for value in inputs:
        if value.name in ("input_ids", "inputs_embeds", "position_ids") and len(value.shape) >= 2:
            # multimodal RoPE's position_ids [3, batch, seq] (Qwen2-VL, issue 40)
            lead = 1 if value.name == "position_ids" and len(value.shape) == 3 and \
                value.shape[0] == STREAMS else 0
            put(value.shape[lead], batch)
            put(value.shape[lead + 1], past + seq if decoder else seq)
    for value in inputs:
        if value.name == "attention_mask" and len(value.shape) == 2:
            put(value.shape[0], batch)
            put(value.shape[1], past + seq)
    return sizes


STREAMS = 3  # multimodal RoPE's position streams: temporal, height, width (Qwen2-VL)


def three_streams(positions, max_len: int):
    """``[3, *positions.shape]``: stream ``s`` holds ``(positions + s * (max_len // 3)) mod
    max_len``, three different positions at every token once ``max_len >= 3`` (a vision input's
    temporal, height and width indices differ so), each stream all of ``0 .. max_len - 1`` when
    ``positions`` are (graft's every-position pass); in range when ``positions`` are."""
    import numpy as np

    shifts = np.arange(STREAMS, dtype=np.int64) * (max_len // STREAMS)
    shifts = shifts.reshape(STREAMS, *[1] * np.ndim(positions))
    return (np.asarray(positions, np.int64)[None] + shifts) % max_len


def hf_feeds(session, seq: int, past: int, pad: int, max_len: int, rng, shift: int = 0,
             highs: dict[str, int] | None = None) -> dict:
    """Inputs for a transformers export at ``seq`` new tokens after ``past`` cached ones: the
    mask all ones but ``pad`` left-padding zeros in row 1 (when ``past`` is 0), ``position_ids``
    as transformers makes them from the mask (``cumsum - 1``, 1 at padding), other integer
    inputs (token ids) over ``0 .. highs[name] - 1`` (both ends; default 0 and 1), past
    keys/values standard normal. ``shift`` is added to ``position_ids`` (a model without a
    cache input reaches the table's last rows so). A ``position_ids [3, B, S]`` (multimodal
    RoPE) holds three different streams of those positions (``three_streams``)."""
    import numpy as np

    inputs = session.get_inputs()
    sizes = _dim_sizes(inputs, PROOF_BATCH, seq, past)
    mask = np.ones((PROOF_BATCH, past + seq), np.int64)
    if pad and not past:
        mask[1, :pad] = 0
    positions = np.cumsum(mask, axis=1)[:, past:] - 1
    positions[mask[:, past:] == 0] = 1
    positions += shift
    feeds = {}
    for value in inputs:
        shape = [d if isinstance(d, int) else sizes.get(d, seq) for d in value.shape]
        dtype = np.dtype(ONNX_DTYPES.get(value.type, value.type[len("tensor("):-1]))
        if value.name == "attention_mask" and shape == list(mask.shape):
            feeds[value.name] = mask.astype(dtype)
        elif value.name == "position_ids" and shape == list(positions.shape):
            feeds[value.name] = positions.astype(dtype)
        elif value.name == "position_ids" and shape == [STREAMS, *positions.shape]:
            feeds[value.name] = three_streams(positions, max_len).astype(dtype)
        elif dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = np.ones(shape, bool)
        else:
            high = min((highs or {}).get(value.name, 2), int(np.iinfo(dtype).max) + 1)
            ids = rng.integers(0, high, size=shape)
            if ids.size > 1 and high > 2:
                ids.flat[0], ids.flat[-1] = 0, high - 1
            feeds[value.name] = ids.astype(dtype)
    return feeds


# the KV cache length of graft's decode step at the table's last position (issue 41): constant,
# so the step's memory does not grow with max_len
DECODE_PAST = 8


def proof_cases(session, max_len: int, lengths: Sequence[int] | None = None,
                cone_decode: bool = False) -> list[tuple[int, int, int, int]]:
    """``(seq, past, pad, shift)`` runs: prefills at several lengths (one left-padded), and with
    a KV cache input a decode step at the table's last position (with ``position_ids``:
    ``DECODE_PAST`` cached tokens, the positions shifted so the new token is at ``max_len - 1``;
    without: ``max_len - 1`` cached tokens, unless ``cone_decode``: the PE's cone takes that
    step (``_cone_plan``), and the whole model's last step keeps ``DECODE_PAST`` cached tokens,
    unshifted), or without a cache but with ``position_ids``, positions shifted to end at
    ``max_len - 1``."""
    names = {i.name for i in session.get_inputs()}
    has_past = any("past" in n for n in names)
    has_mask = "attention_mask" in names
    seqs = list(lengths) if lengths else sorted({1, min(7, max_len), min(16, max_len)})
    cases = [(s, 0, 0, 0) for s in seqs]
    if has_mask:
        cases.append((max(seqs), 0, min(3, max(seqs) - 1), 0))
    if has_past:
        # steps after at least one cached token (a past below 0 passed the length filter below)
        # the last step at position max_len - 1: with a position_ids input, after a short cache
        # and the positions shifted there (a cache of max_len - 1 tokens made the proof's memory
        # grow with max_len, issue 41: 4.8 GB RSS at 2^20); without one the model makes its
        # positions from the cache's length (or the mask's), so the cache is max_len - 1 long,
        # unless the PE's cone takes the step at max_len - 1 with the cache given as its shape
        # (cone_decode: 4.7 GB RSS at 2^20 before), and the whole model a step after 8 tokens
        short = "position_ids" in names or cone_decode
        last = min(DECODE_PAST if short else max_len, max_len - 1)
        cases += [c for c in ((3, min(5, max_len - 3), 0, 0),
                              (1, last, 0, max_len - 1 - last if "position_ids" in names
                               else 0)) if c[1] > 0]
    elif "position_ids" in names and max(seqs) < max_len:
        cases.append((max(seqs), 0, 0, max_len - max(seqs)))
    return [c for c in cases if c[0] + c[1] + c[3] <= max_len]


def prove_found(original, grafted: Grafted, replaces: Sequence[str], max_len: int,
                bound: float = 0.0, lengths: Sequence[int] | None = None, seed: int = 0,
                bounds: dict[str, float] | None = None, exact_outputs: bool = False):
    """``(cases, [OutputCheck])``: every output of the grafted model against the original's on
    onnxruntime CPU, and the replaced tensors themselves (made graph outputs of both for the
    proof), on ``proof_cases``; the replaced tensors also at every position below ``max_len``
    (``_cone_run``: each model's PE alone, over one sequence of ``max_len`` tokens or chunks of
    ``CONE_CHUNK``), and where the positions come from a cache's length, in the decode step
    after ``max_len - 1`` cached tokens (the cache fed to the cones as its shape; the whole
    model's last step then after ``DECODE_PAST``: ``_cone_plan``, issue 41).

    Tolerances, per element (``_Worst``, as ``prove``): a replaced tensor's, ``bound`` (the
    artifact's quantisation bound; 0 for float tables) plus 4 ulp of the larger of its value and
    its tensor's 90th percentile (the table holds correctly rounded cos/sin of the model's own
    float32 angle; onnxruntime's Cos/Sin are within a few ulp of that); a model output's,
    FLOAT_ULPS ulp of the same plus, for int8 tables, twice its measured gain times ``bound``
    (``bounds``: a replaced tensor's own, where PEs of different bounds went in together: a
    decoder's exact table is not held to the encoder's sliced bound; ``bound`` their largest)
    (the gain: the output's change per unit change of the replaced tensors, from a run with the
    tensors perturbed by +-``PROBE``). ``exact_outputs``: every output held to 0 (T5's
    buckets, issue 40: the replaced tensors are integers compared exactly, and every float node
    that reads them is the original's own node, so onnxruntime computes the same floats; no
    other fusion or summation order to allow for: measured 0 on every T5 export tried).
    Issue 41: no initializer a caller may override removed
    (``check_overridable``), every output of the original compared (``check_outputs``), token
    ids over their range (``_int_high``), every run within ``PROOF_SECONDS`` in all.
    """
    import numpy as np
    import onnx

    def with_outputs(model, which="original"):
        model = onnx.ModelProto.FromString(model.SerializeToString())
        have = {o.name for o in model.graph.output}
        # (an initializer the original reads as is, Whisper's encoder table: its output too)
        made = {o for n in model.graph.node for o in n.output} | {
            t.name for t in model.graph.initializer}
        for name in replaces:  # (a lowered model no longer makes them: no check of those)
            if name not in have and name in made:  # untyped: T5's buckets are int64
                model.graph.output.append(onnx.ValueInfoProto(name=name))
        return _session(model, which)

    import time

    check_overridable(original, grafted.model)
    check_outputs(original, grafted.model)
    # the user's model at every proof run, bounded before any session (issue 41)
    check_lengths(lengths, max_len)
    given = _GraphInputs(original)
    planned, shaped, cone_decode = _cone_plan(original, grafted.model, replaces)
    for seq, past, _pad, _shift in proof_cases(given, max_len, lengths, cone_decode):
        check_run_bound(original, _case_shapes(given.get_inputs(), seq, past), "original",
                        f"{seq}+{past}" if past else seq)
    deadline = time.monotonic() + PROOF_SECONDS
    reference, mine = with_outputs(original), with_outputs(grafted.model, "grafted")
    # a replaced tensor the original does not make at run time (MPT's bias slice of a constant,
    # which onnxruntime folds away) is compared through the model's outputs only
    theirs = {o.name for o in reference.get_outputs()}
    names = [o.name for o in mine.get_outputs() if o.name in theirs]
    rng = np.random.default_rng(seed)
    cases = proof_cases(mine, max_len, lengths, cone_decode)
    # a replaced tensor: 4 ulp per element; a model output FLOAT_ULPS, or 0 where the
    # replaced tensors are exact integers (see the docstring)
    worst = {name: _Worst(4 if name in replaces else 0 if exact_outputs else FLOAT_ULPS)
             for name in names}
    masks = ("attention_mask", "position_ids")
    highs = {i.name: _int_high(original, i.name, max_len) for i in mine.get_inputs()
             if i.name not in masks}
    for seq, past, pad, shift in cases:
        label = f"{seq} (past {past}{', left pad ' + str(pad) if pad else ''})"
        while True:  # token ids over their range, narrowed until the original runs (as prove)
            feeds = hf_feeds(mine, seq, past, pad, max_len, rng, shift, highs)
            try:
                want = dict(zip(names, _run(reference, names, feeds, label, "original",
                                            deadline), strict=True))
                break
            except BadParameterError:
                wide = {k: v for k, v in highs.items() if v > 2}
                if not wide:
                    raise
                highs.update({k: max(2, v // 8) for k, v in wide.items()})
        got = dict(zip(names, _run(mine, names, feeds, label, "grafted", deadline),
                       strict=True))
        for name in names:
            worst[name].add(got[name], want[name])
    # The replaced tensors at every position the tables cover, not only those the runs reach:
    # each model's cone of them (the PE and the shape arithmetic of its inputs) at one sequence
    # of max_len tokens; in chunks of CONE_CHUNK positions, so that memory stays constant in
    # max_len (issue 41: 5.5 GB at 2^20 in one run): position_ids start .. start + C - 1 where
    # both cones read position_ids, C tokens after start cached where both read nothing but
    # shapes, among them a cache's (fed as its shape: _cone_plan). With cone_decode the cones
    # also take the decode step at the table's last position (1 token after max_len - 1), which
    # the whole model then takes after DECODE_PAST tokens (proof_cases).
    every = [n for n in names if n in planned]
    outside = []
    if every:
        theirs_cone = _cone_session(original, every, shaped=shaped)
        mine_cone = _cone_session(grafted.model, every, "grafted", shaped)
        declared = [*_GraphInputs(grafted.model).get_inputs(), *given.get_inputs()]
        reads = {i.name for c in (theirs_cone, mine_cone) for i in c.get_inputs()}
        chunked = all("position_ids" in {i.name for i in c.get_inputs()}
                      for c in (theirs_cone, mine_cone))
        by_past = not chunked and reads <= shaped and any("past" in n for n in reads)
        step = CONE_CHUNK if chunked or by_past else max_len
        runs = [(min(step, max_len - start), start) for start in range(0, max_len, step)]
        if cone_decode:
            runs.append((1, -1))
        for size, start in runs:
            past, shift = (max_len - 1, 0) if start < 0 else (start, 0) if by_past else \
                (0, start)
            label = f"{size} (positions {past + shift}..{past + shift + size - 1})"
            feeds = _cone_feeds((theirs_cone, mine_cone), declared, shaped, size, past, max_len,
                                rng, shift, highs)
            want = _cone_feed(theirs_cone, every, feeds, label, "original", deadline)
            got = _cone_feed(mine_cone, every, feeds, label, "grafted", deadline)
            for name in every:
                worst[name].add(got[name], want[name])
        cases = [*cases, (max_len, 0, 0, -1)]  # (shift -1: the label says what it was)
        if cone_decode:
            cases.append((1, max_len - 1, 0, -2))
            outside.append(_outside_cone((theirs_cone, mine_cone), every, declared, shaped,
                                         max_len, rng, highs, worst, deadline))
    # position_ids past max_len - 1 and negative, as the original takes them (issue 41): the
    # grafted model computes the same there or fails (graft's RoPE: splice._range_guard)
    if "position_ids" in {i.name for i in mine.get_inputs()}:
        feeds = hf_feeds(mine, 3, 0, 0, max_len, rng, highs=highs)
        if "position_ids" in feeds:
            outside.append(_outside(reference, mine, names, feeds, "position_ids", max_len,
                                    worst, deadline))
    gain = _gain(original, replaces, [c for c in cases if c[3] >= 0], max_len, names, seed,
                 highs, deadline) if bound else {}
    checks = [worst[name].check(name, (bounds or {}).get(name, bound) if name in replaces
                                else 2 * gain.get(name, 0.0) * bound) for name in names]
    return [f"every position 0..{s - 1} (the replaced tensors)" if shift == -1 else
            f"{s}+{p} (the replaced tensors)" if shift < 0 else
            f"{s}+{p} (positions {p + shift}..{p + shift + s - 1})" if p and shift else
            f"{s}+{p}" if p else f"{s} (left pad {pad})" if pad else
            f"{s} (positions {shift}..{shift + s - 1})" if shift else str(s)
            for s, p, pad, shift in cases] + outside, checks


# Positions per run of the every-position pass (a few MB of cos/sin at rotary dim 128).
CONE_CHUNK = 1 << 12


def _cone_run(model, names: Sequence[str], feeds: dict, length: int, which: str,
              deadline: float | None = None) -> dict:
    """``names`` computed by ``model``'s cone of them alone (the nodes they depend on, the
    inputs and initializers those read; no attention, no MLP), on ``feeds`` (those of its
    inputs): cheap at every position of a long table."""
    return _cone_feed(_cone_session(model, names, which), names, feeds, length, which, deadline)


def _cone_feed(session, names: Sequence[str], feeds: dict, length, which: str,
               deadline: float | None = None) -> dict:
    mine = {i.name for i in session.get_inputs()}
    out = _run(session, list(names), {k: v for k, v in feeds.items() if k in mine}, length,
               which, deadline)
    return dict(zip(names, out, strict=True))


def cone_of(graph, names: Sequence[str], cut: frozenset[str] = frozenset()
            ) -> tuple[list, set[str]]:
    """The nodes ``names`` are computed from, in graph order, and every tensor name they read
    (``names`` included): one walk up from the names, linear in the nodes. A node that makes
    a name in ``cut`` is left out (the walk stops there: that name is fed instead)."""
    makers = {o: n for n in graph.node if cut.isdisjoint(n.output) for o in n.output}
    kept, todo, seen = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = makers.get(name)
        if node is not None:
            kept.add(id(node))
            todo += [i for i in node.input if i]
    nodes = [n for n in graph.node if id(n) in kept]
    return nodes, {i for n in nodes for i in n.input} | set(names)


def cone_model(model, names: Sequence[str], cut: Sequence = ()):
    """``model``'s cone of ``names`` as a model of its own: the nodes (``cone_of``), the graph
    inputs and initializers they read, ``model``'s opsets, IR version and functions (a node may
    call one), ``names`` its outputs, untyped (T5's buckets are int64, a table float). Each
    ``ValueInfoProto`` in ``cut`` is an input of that name, its maker left out (the tensor is
    fed instead of made)."""
    import onnx
    from onnx import helper

    graph = model.graph
    cuts = frozenset(v.name for v in cut)
    nodes, used = cone_of(graph, names, cuts)
    inputs = [v for v in graph.input if v.name in used and v.name not in cuts] + list(cut)
    made = helper.make_graph(nodes, "cone", inputs, [onnx.ValueInfoProto(name=n) for n in names],
                             [t for t in graph.initializer if t.name in used])
    out = helper.make_model(made, opset_imports=list(model.opset_import),
                            ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


def _cone_session(model, names: Sequence[str], which: str = "original",
                  shaped: frozenset[str] = frozenset()):
    """An onnxruntime session of ``model``'s cone of ``names`` (see ``_cone_run``); each input
    in ``shaped`` (one ``_shape_read`` gives: read by ``Shape`` nodes alone) becomes an int64
    ``[rank]`` input of the same name holding that shape, each ``Shape`` of it a ``Slice`` of it
    with the same start and end (ONNX's Shape clamps them as Slice does), so a KV cache of
    ``max_len`` tokens is fed as 4 numbers (issue 41)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    cone = cone_model(model, names)
    graph = cone.graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in graph.input if v.name in shaped}
    for value in graph.input:
        if value.name in shaped:
            value.CopyFrom(helper.make_tensor_value_info(value.name, onnx.TensorProto.INT64,
                                                         [ranks[value.name]]))
    for k, node in enumerate(graph.node):
        if op(node) != "Shape" or node.input[0] not in shaped:
            continue
        rank = ranks[node.input[0]]
        attrs = {a.name: a.i for a in node.attribute}
        ends = (f"edgepe_shape{k}/start", attrs.get("start", 0)), \
            (f"edgepe_shape{k}/end", attrs.get("end", rank))
        graph.initializer.extend(numpy_helper.from_array(np.asarray([v], np.int64), n)
                                 for n, v in ends)
        node.CopyFrom(helper.make_node("Slice", [node.input[0], ends[0][0], ends[1][0]],
                                       list(node.output), name=node.name))
    return _session(cone, which)


def _shape_read(model, names: Sequence[str]) -> set[str]:
    """The graph inputs that ``model``'s cone of ``names`` reads through ``Shape`` nodes alone
    (never their values: a KV cache whose length makes the positions), each of a declared
    rank; none where a cone node holds a subgraph (it may read any name) or the model's opset
    is below 10 (Slice's starts and ends as inputs)."""
    graph = model.graph
    nodes, used = cone_of(graph, names)
    if _opset(model) < 10 or any(a.type in (5, 10) for n in nodes for a in n.attribute):
        return set()  # 5: GRAPH, 10: GRAPHS (onnx.AttributeProto)
    weights = {t.name for t in graph.initializer}
    readers: dict[str, set[str]] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, set()).add(op(node))
    return {v.name for v in graph.input if v.name in used and v.name not in weights
            and v.name not in names and readers.get(v.name) == {"Shape"}
            and v.type.tensor_type.HasField("shape")}


def _cone_plan(original, grafted_model, replaces: Sequence[str]
               ) -> tuple[list[str], frozenset[str], bool]:
    """``(every, shaped, decode)`` for the every-position pass, from the graphs alone (before
    any session): ``every``, the replaced tensors both models make (those it compares);
    ``shaped``, the inputs both cones of them read by shape alone (``_shape_read``), fed as
    their shapes; ``decode``, whether the cones take the decode step at the table's last
    position in memory that does not grow with the cache: every replaced tensor is in
    ``every`` (one that is not is compared through the whole model's outputs alone, which must
    then take that step), the model has a cache input (``past`` in its name) and no
    ``position_ids`` to shift, and every cache input either cone reads is shaped (none read:
    Bloom's cone reads the mask, MPT's nothing)."""
    def made(model):
        return {o for n in model.graph.node for o in n.output} | {
            o.name for o in model.graph.output}

    ours, theirs = made(grafted_model), made(original)
    every = [n for n in replaces if n in ours and n in theirs]
    if not every:
        return [], frozenset(), False
    shaped = frozenset(_shape_read(original, every) & _shape_read(grafted_model, every))
    reads = cone_of(original.graph, every)[1] | cone_of(grafted_model.graph, every)[1]
    inputs = {v.name for v in original.graph.input} | {v.name for v in grafted_model.graph.input}
    cache = {n for n in inputs if "past" in n}
    decode = (set(every) == set(replaces) and bool(cache) and cache & reads <= shaped
              and "position_ids" not in inputs)
    return every, shaped, decode


def _cone_feeds(sessions, declared, shaped: frozenset[str], seq: int, past: int, max_len: int,
                rng, shift: int = 0, highs: dict[str, int] | None = None) -> dict:
    """The inputs of cone ``sessions`` (one value each, whichever reads it) at ``seq`` new
    tokens after ``past`` cached: those in ``shaped`` their shape alone (int64, as ``hf_feeds``
    would size the tensor from its ``declared`` axes: ``_case_shapes``), the others as
    ``hf_feeds`` makes them."""
    from types import SimpleNamespace

    import numpy as np

    inputs = list({i.name: i for s in sessions for i in s.get_inputs()}.values())
    wanted = {i.name for i in inputs}
    shapes = _case_shapes([v for v in declared if v.name in wanted], seq, past)
    feeds = {name: np.asarray(shapes[name], np.int64) for name in shaped if name in wanted}
    valued = SimpleNamespace(get_inputs=lambda: [i for i in inputs if i.name not in feeds])
    return {**feeds, **hf_feeds(valued, seq, past, 0, max_len, rng, shift, highs)}


def _gain(original, replaces: Sequence[str], cases, max_len: int, names, seed: int,
          highs: dict[str, int] | None = None, deadline: float | None = None):
    """Each output's largest change per unit change of the replaced tensors: the original run
    with each replaced tensor plus ``PROBE * max(1, max|t|) * (+-1)`` (a fixed random sign per
    element of its last axis), against the original."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto.FromString(original.SerializeToString())
    graph = model.graph
    rng = np.random.default_rng(seed + 1)
    nodes = list(graph.node)
    for k, name in enumerate(replaces):
        producer = next((i for i, n in enumerate(nodes) if name in n.output), None)
        raw = f"edgepe_probe{k}/raw"
        if producer is None:  # an initializer (Whisper's encoder table): renamed, probed first
            next(t for t in graph.initializer if t.name == name).name = raw
            producer = -1
        else:
            nodes[producer].output[:] = [raw if o == name else o for o in nodes[producer].output]
        width = 4096  # the last axis is at most this wide in every model graft proves
        signs = rng.choice([-1.0, 1.0], size=width).astype(np.float32) * PROBE
        graph.initializer.append(numpy_helper.from_array(signs, f"edgepe_probe{k}/signs"))
        nodes.insert(producer + 1, helper.make_node("Shape", [raw], [f"edgepe_probe{k}/shape"],
                                                    start=-1))
        nodes.insert(producer + 2, helper.make_node(
            "Slice", [f"edgepe_probe{k}/signs", f"edgepe_probe{k}/zero",
                      f"edgepe_probe{k}/shape"], [f"edgepe_probe{k}/step"]))
        graph.initializer.append(numpy_helper.from_array(np.asarray([0], np.int64),
                                                         f"edgepe_probe{k}/zero"))
        nodes.insert(producer + 3, helper.make_node("Add", [raw, f"edgepe_probe{k}/step"],
                                                    [name]))
    del graph.node[:]
    graph.node.extend(nodes)
    base, moved = _session(original), _session(model)
    rng = np.random.default_rng(seed)
    out_names = [n for n in names if n not in replaces]
    gain = dict.fromkeys(out_names, 0.0)
    for seq, past, pad, shift in cases[-1:]:
        feeds = hf_feeds(base, seq, past, pad, max_len, rng, shift, highs)
        a = _run(base, out_names, feeds, seq, "original", deadline)
        b = _run(moved, out_names, feeds, seq, "original", deadline)
        for name, x, y in zip(out_names, a, b, strict=True):
            gain[name] = max(gain[name], _max_diff(x, y, finite=True) / PROBE)
    return gain
