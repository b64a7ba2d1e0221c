"""Put an edgepe PE artifact inside a user's ONNX model, and prove the model unchanged.

    from edgepe import graft
    report = graft("model.onnx", pe="models/binary-compute-L512-d64.onnx",
                   at="/pe/projection/MatMul_output_0", positions="arange:x", out="out.onnx")
    print(report)               # what was removed and added, bytes, max error per output
    report = graft("model.onnx", scheme="binary", quantize="int8", out="out.onnx")

What happens (issue 18):

- The PE's output replaces tensor ``at`` (``add=True``: is added to it, for a model that has no
  PE yet). The producer subgraph of ``at`` is removed where nothing else uses it, with its
  initializers (a ``[max_len, n_bits]`` float table and its projection weight, typically).
- The PE's ``positions`` input is wired to the model: an existing integer input (``position_ids``;
  any rank, flattened and the encoding reshaped back), a new int64 input ``[S]`` of that name, or
  ``arange:INPUT[:AXIS]``: ``0 .. S - 1`` with ``S`` the size of ``INPUT``'s axis (default 1 for
  ``[B, S, ...]`` inputs, 0 for ``[S]``) by Shape, Squeeze and Range. ``[S, D]`` becomes ``[1, S,
  D]`` when the replaced tensor has more axes.
- Opsets are reconciled by ``onnx.version_converter`` (the lower side converted up; DESIGN: torch's
  dynamo exporter writes IR 10, edgepe IR 8); the result's IR version is the highest of the two
  models' and of what its opsets need. Every PE name gets a prefix (``onnx.compose.add_prefix``)
  that no name in the model starts with, so grafting twice never collides. The PE's manifest goes
  into ``metadata_props`` under ``edgepe.graft.<n>``. The result passes ``onnx.checker`` (full).
- Then ``prove``: onnxruntime CPU runs the original and the grafted model at several sequence
  lengths (up to ``max_len``, so positions reach ``max_len - 1``) on random inputs and compares
  every output within the PE's tolerance propagated through the model (see ``prove``).

``--scheme ID`` finds the PE itself (``detect``): a constant bit table ``[.., L, n_bits(L)]``
sliced or gathered by position, then a MatMul by a constant ``[n_bits, D]`` weight: the demo
notebook's module as both torch.onnx exporters emit it. The weight is read from the model; the
matching artifact is built in memory and grafted.

The artifact is untrusted input: it is read through ``runtime.read_artifact_manifest`` (fields
checked, file checked against its sha256; ``_read_artifact`` is the one call site), its bytes are
bounded and hashed again as read, and a model or artifact that names external data is refused
(no path it names is opened).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgepe.errors import ArtifactError, BadParameterError, did_you_mean

if TYPE_CHECKING:  # numpy loads when a function needs it: `import edgepe` stays light
    import numpy as np

# protobuf refuses messages of 2 GiB and more: no ONNX file without external data is bigger.
MODEL_BYTES_LIMIT = 2**31 - 1
PREFIX = "edgepe_pe{}/"
METADATA_KEY = "edgepe.graft.{}"
# Two float32 graphs that differ in a subgraph are fused and scheduled differently by onnxruntime
# (another summation order in MatMul, LayerNorm, Softmax): allow 64 ulp of each output's largest
# value on top of the propagated PE tolerance (measured: 0 on the tests' and README's models).
FLOAT_ULPS = 64
# The PE is perturbed by this much (times max(1, max|PE|)) to measure the model's gain.
PROBE = 1e-3
TABLE_OPS = ("Slice", "Gather")


@dataclass(frozen=True)
class Positions:
    """Where the PE's positions come from: a model input (``kind='input'``), or ``0 .. S-1``
    from the size of ``name``'s ``axis`` (``kind='arange'``; ``axis`` None: 1, or 0 for rank 1)."""

    kind: str
    name: str
    axis: int | None = None

    @classmethod
    def parse(cls, spec: str | Positions) -> Positions:
        if isinstance(spec, Positions):
            return spec
        text = str(spec)
        if text.startswith("arange:"):
            name, _, axis = text[len("arange:"):].partition(":")
            if not name:
                raise BadParameterError("--positions arange:INPUT needs an input name")
            if axis and not axis.lstrip("-").isdigit():
                raise BadParameterError(f"--positions {text!r}: the axis must be an integer")
            return cls("arange", name, int(axis) if axis else None)
        if not text:
            raise BadParameterError("--positions needs an input name, or arange:INPUT")
        return cls("input", text)

    def __str__(self) -> str:
        if self.kind == "input":
            return self.name
        return f"arange:{self.name}" + ("" if self.axis is None else f":{self.axis}")


@dataclass
class OutputCheck:
    """One model output: the largest ``|grafted - reference|`` and the tolerance it is held to."""

    name: str
    max_abs_err: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return bool(self.max_abs_err <= self.tolerance)

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISMATCH"
        return (f"{self.name}: max abs err {self.max_abs_err:.3g} (tolerance "
                f"{self.tolerance:.3g}) {verdict}")


@dataclass
class Grafted:
    """A grafted model and what the graft did (``graft_model``'s result)."""

    model: Any  # onnx.ModelProto
    at: str
    positions: Positions
    prefix: str
    add: bool
    from_input: bool  # at was a model input: the original never had this PE inside
    new_input: bool  # positions became a new model input
    converted: bool  # the model was converted up to the PE's opset (reconcile)
    metadata_bytes: int  # the PE's record in metadata_props
    seq_dim: str | int | None  # the sequence axis's dim (param name or size), for prove
    removed_nodes: int
    removed_bytes: int
    pe_bytes: int


@dataclass
class GraftReport:
    """What ``graft`` did; truthy unless the equivalence check failed. ``str`` is the report."""

    artifact: str  # what was grafted, in words
    at: str
    positions: str
    prefix: str
    removed_nodes: int
    removed_bytes: int
    pe_bytes: int
    bytes_before: int
    bytes_after: int
    metadata_bytes: int
    converted: str | None = None  # "opset 18 -> 19" when the model itself was converted
    lengths: list[int] = field(default_factory=list)
    checks: list[OutputCheck] | None = None
    out: Path | None = None
    model: Any = field(default=None, repr=False)  # the grafted onnx.ModelProto

    def __bool__(self) -> bool:
        return self.checks is None or all(c.passed for c in self.checks)

    @property
    def saved(self) -> int:
        return self.bytes_before - self.bytes_after

    def lines(self) -> list[str]:
        share = self.pe_bytes / self.bytes_after if self.bytes_after else 0.0
        lines = [
            f"grafted {self.artifact} at {self.at!r} (positions {self.positions}, names "
            f"prefixed {self.prefix})",
            f"removed {self.removed_nodes} nodes and their initializers ({self.removed_bytes:,} B);"
            f" the PE adds {self.pe_bytes:,} B and its manifest {self.metadata_bytes:,} B "
            "(metadata_props)",
            f"bytes: {self.bytes_before:,} -> {self.bytes_after:,} ({-self.saved:+,} B, "
            f"{-self.saved / max(self.bytes_before, 1):+.1%}); the PE is {share:.1%} of the "
            "grafted model",
        ]
        if self.converted:
            lines.append(f"the model was converted {self.converted} by onnx's version converter "
                         "(the PE's ops do not exist at the model's opset)")
        if self.checks is None:
            lines.append("equivalence not checked (--no-check)")
        else:
            lines.append(
                f"equivalence on onnxruntime CPU at sequence lengths "
                f"{', '.join(map(str, self.lengths))}:"
            )
            lines += [f"  {check}" for check in self.checks]
        if self.out is not None:
            lines.append(f"wrote {self.out}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())


# --- reading ----------------------------------------------------------------------------------


def _bounded_bytes(path: Path, what: str) -> bytes:
    from edgepe.errors import EdgepeError

    error = ArtifactError if what == "artifact" else BadParameterError
    if not path.exists():
        raise error(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise error(f"{what} {str(path)!r} is not a regular file")
    size = path.stat().st_size
    if size > MODEL_BYTES_LIMIT:
        raise error(f"{what} {str(path)!r} is {size:,} B; ONNX files stop at 2 GiB (protobuf)")
    try:
        with path.open("rb") as f:
            return f.read(MODEL_BYTES_LIMIT + 1)
    except OSError as exc:
        raise EdgepeError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None


def parse_model(data: bytes, where: str, error: type[Exception] = BadParameterError):
    """An ``onnx.ModelProto`` from ``data``, or one line naming why it is not an ONNX model.

    A model whose tensors live in external files is refused: their paths are never opened.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where} is not an ONNX model: {first}") from None
    if not model.HasField("graph") or not model.opset_import:
        raise error(f"{where} is not an ONNX model: it has no graph or no opset")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_initializers(model.graph)):
        raise error(f"{where} keeps tensors in external files; graft reads self-contained models "
                    "only (onnx.save without save_as_external_data)")
    return model


def _all_initializers(graph) -> Iterable[Any]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _all_initializers(sub)


def load_model(path: str | Path):
    """The user's model at ``path`` (bounded read, no external data) and its size in bytes."""
    path = Path(path)
    data = _bounded_bytes(path, "model")
    return parse_model(data, f"model {str(path)!r}"), len(data)


def _read_artifact(path: Path) -> dict[str, Any]:
    """The artifact's checked manifest: the one safe-reader call site (see the module doc)."""
    from edgepe.runtime import read_artifact_manifest

    return read_artifact_manifest(path)


def load_pe(path: str | Path):
    """``(ModelProto, manifest)`` of an edgepe ONNX ``pe`` artifact, checked as untrusted."""
    path = Path(path)
    manifest = _read_artifact(path)
    if manifest["format"] != "onnx":
        raise ArtifactError(f"{str(path)!r} is a {manifest['format']} artifact; graft takes an "
                            "ONNX one (edgepe export --format onnx)")
    data = _bounded_bytes(path, "artifact")
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:  # changed since it was checked
        raise ArtifactError(f"{str(path)!r} does not match its manifest (sha256 differs)")
    model = parse_model(data, f"artifact {str(path)!r}", ArtifactError)
    # The proof runs the grafted model: the PE may hold only what edgepe's builders emit (no
    # Loop/If/Scan, no external data), as edgepe.load requires of any artifact (issue 23).
    from edgepe.audit import check_untrusted

    check_untrusted(model, str(path))
    return model, manifest


def proof_manifest(path: str | Path, manifest: dict[str, Any],
                   checkpoint: str | Path | None = None) -> dict[str, Any]:
    """``manifest`` with the tolerance and int8 bound the proof holds the grafted model to taken
    from this edgepe's rebuild of the artifact's recorded inputs (``edgepe.rebuild``), never
    from the given file: an artifact whose manifest states a looser tolerance or bound does not
    loosen the proof (issue 30). A checkpoint-based artifact without its ``checkpoint`` takes the
    registry's tolerance; an int8 one needs it (its bound comes from the weights)."""
    from edgepe.errors import CheckpointError
    from edgepe.rebuild import rebuild
    from edgepe.schemes import get_spec

    try:
        ours = rebuild(path, manifest, checkpoint).manifest or {}
    except CheckpointError:
        if manifest.get("quant") is not None or checkpoint is not None:
            raise
        rtol, atol = get_spec(manifest["scheme"]).tolerance
        ours = {"tolerance": {"rtol": rtol, "atol": atol}, "quant": None}
    return {**manifest, "tolerance": ours.get("tolerance"), "quant": ours.get("quant")}


# --- grafting ---------------------------------------------------------------------------------


def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def reconcile(model, pe):
    """``(model, pe, converted)``: both at one default-domain opset, by onnx's version converter.

    The PE (small, edgepe's own) is converted to the model's opset, up or down; only when one of
    its ops does not exist there is the model converted up to the PE's (``converted`` True): the
    converter drops node metadata and adds inferred shapes, so the user's graph is left alone
    whenever it can be.
    """
    from onnx import version_converter

    mine, theirs = _opset(model), _opset(pe)
    if mine == theirs:
        return model, pe, False
    try:
        return model, version_converter.convert_version(pe, mine), False
    except Exception:  # noqa: BLE001, S110 - the converter raises untyped errors; try the model
        pass
    if mine < theirs:
        try:
            return version_converter.convert_version(model, theirs), pe, True
        except Exception as exc:  # noqa: BLE001
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BadParameterError(f"onnx's version converter takes neither the PE (opset "
                                    f"{theirs}) to the model's opset {mine} nor the model up to "
                                    f"{theirs}: {first}") from None
    raise BadParameterError(f"onnx's version converter cannot take the PE (opset {theirs}) to "
                            f"the model's opset {mine}")


def _names(graph) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _names(sub)
    return names


def _free_prefix(model) -> tuple[str, int]:
    names = _names(model.graph)
    keys = {p.key for p in model.metadata_props}
    n = 0
    while any(name.startswith(PREFIX.format(n)) for name in names) or \
            METADATA_KEY.format(n) in keys:
        n += 1
    return PREFIX.format(n), n


def _used(graph) -> set[str]:
    """Every tensor name a node reads, subgraphs included (they may read outer names)."""
    used = set()
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                used |= _used(sub)
    return used


def _value_type(model, name: str):
    """``(elem_type, dims)`` of tensor ``name`` (dims: int, str or None each; None when the rank
    is unknown), from the graph's inputs or onnx's shape inference."""
    import onnx

    graph = model.graph
    for value in graph.input:
        if value.name == name:
            break
    else:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
        value = next((v for v in (*inferred.value_info, *inferred.output) if v.name == name), None)
        if value is None:
            return None, None
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return tensor.elem_type, None
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim]
    return tensor.elem_type, dims


def _tensor_names(graph) -> list[str]:
    return [*(v.name for v in graph.input), *(o for n in graph.node for o in n.output)]


def graft_model(model, pe, manifest: dict[str, Any], at: str, positions: str | Positions | None
                = None, add: bool = False) -> Grafted:
    """``model`` with ``pe``'s output in place of (``add``: added to) tensor ``at``. Pure.

    ``positions``: a ``Positions`` or its text (``NAME``, ``arange:NAME[:AXIS]``); None picks an
    input called ``position_ids`` or ``positions`` if the model has one, else ``arange`` of its
    first input. Raises ``BadParameterError`` for a tensor that is not there, a shape that does
    not fit, or positions that are not integers.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, compose, helper, numpy_helper

    if manifest.get("kind") != "pe" or (manifest.get("positions") or {}).get("arity"):
        raise BadParameterError(
            f"graft takes a 'pe' artifact with positions [N]; this one is "
            f"'{manifest.get('scheme')}' of kind {manifest.get('kind')!r}"
        )
    model, pe, converted = reconcile(model, pe)
    if not converted:  # the converter returns a new model; otherwise edit a copy, never the input
        model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inputs = {v.name: v for v in graph.input}
    producer = next((i for i, n in enumerate(graph.node) if at in n.output), None)
    if producer is None and at not in inputs:
        hint = did_you_mean(at, _tensor_names(graph))
        raise BadParameterError(f"tensor {at!r} is not in the model (--at names a node output or "
                                f"a model input).{hint}")
    if at in {o.name for o in graph.output} and producer is None:
        raise BadParameterError(f"tensor {at!r} is both a model input and output; nothing to graft")
    elem, dims = _value_type(model, at)
    d_model = int(manifest["d_model"])
    made = pe.graph.output[0].type.tensor_type.elem_type
    if elem not in (None, 0, made):
        name = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16",
                TensorProto.UINT8: "uint8"}
        have = name.get(elem, TensorProto.DataType.Name(elem).lower())
        raise BadParameterError(f"tensor {at!r} is {have}; the PE outputs {name.get(made, made)}"
                                + (f": export it with --dtype {have}" if elem in name else ""))
    if dims is not None and (not dims or (isinstance(dims[-1], int) and dims[-1] not in
                                          (0, d_model))):
        raise BadParameterError(f"shape mismatch: tensor {at!r} has shape {dims}, the PE outputs "
                                f"[N, {d_model}] ('{manifest['scheme']}' d_model {d_model})")

    if positions is None:
        found = next((n for n in ("position_ids", "positions") if n in inputs), None)
        positions = found or f"arange:{graph.input[0].name}"
    positions = Positions.parse(positions)
    prefix, number = _free_prefix(model)
    pe = compose.add_prefix(pe, prefix)
    pe_in, pe_out = pe.graph.input[0].name, pe.graph.output[0].name
    nodes, inits, new_inputs = [], [], []

    def const(name: str, values) -> str:
        inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), prefix + name))
        return prefix + name

    def node(op: str, ins: Sequence[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, list(ins), [out], name=out, **attrs))
        return out

    flat_shape = None  # positions of rank > 1: the shape to give the encodings back
    if positions.kind == "arange":
        source = inputs.get(positions.name)
        if source is None:
            raise BadParameterError(f"--positions {positions}: {positions.name!r} is not a model "
                                    f"input; inputs: {', '.join(inputs)}")
        _, src_dims = _value_type(model, positions.name)
        rank = len(src_dims) if src_dims is not None else 2
        axis = positions.axis if positions.axis is not None else (1 if rank >= 2 else 0)
        if not -rank <= axis < rank:
            raise BadParameterError(f"--positions {positions}: axis {axis} is outside "
                                    f"{positions.name!r}'s {rank} axes")
        axis %= rank
        positions = Positions("arange", positions.name, axis)
        seq_dim = src_dims[axis] if src_dims is not None else None
        size = node("Shape", [positions.name], prefix + "seq_len_1", start=axis, end=axis + 1)
        size = node("Squeeze", [size, const("axis0", [0])], prefix + "seq_len")
        pos = node("Range", [const("zero", 0), size, const("one", 1)], prefix + "arange")
        new_input = False
    elif positions.name in inputs:
        elem_p, p_dims = _value_type(model, positions.name)
        if elem_p not in (TensorProto.INT64, TensorProto.INT32, TensorProto.INT16,
                          TensorProto.INT8, TensorProto.UINT8, TensorProto.UINT16,
                          TensorProto.UINT32):
            raise BadParameterError(f"--positions {positions.name!r} is "
                                    f"{TensorProto.DataType.Name(elem_p).lower()}; positions "
                                    "are integers")
        pos = positions.name
        if elem_p != TensorProto.INT64:
            pos = node("Cast", [pos], prefix + "positions_int64", to=TensorProto.INT64)
        seq_dim = p_dims[-1] if p_dims else None
        if p_dims is None or len(p_dims) != 1:
            flat_shape = node("Shape", [pos], prefix + "positions_shape")
            pos = node("Reshape", [pos, const("flat", [-1])], prefix + "positions_flat")
        new_input = False
    else:
        if positions.name in _names(graph):
            raise BadParameterError(f"--positions {positions.name!r} names a tensor inside the "
                                    "model; it must be a model input (or a new name)")
        seq_dim = dims[-2] if dims is not None and len(dims) >= 2 and dims[-2] else "S"
        new_inputs.append(helper.make_tensor_value_info(positions.name, TensorProto.INT64,
                                                        [seq_dim]))
        pos, new_input = positions.name, True

    pe_nodes = list(pe.graph.node)
    for n in pe_nodes:
        n.input[:] = [pos if name == pe_in else name for name in n.input]
    nodes[len(nodes):] = pe_nodes
    inits += list(pe.graph.initializer)
    encoded, rank = pe_out, 2
    if flat_shape is not None:
        shape = node("Concat", [flat_shape, const("d_model", [d_model])], prefix + "pe_shape",
                     axis=0)
        encoded = node("Reshape", [encoded, shape], prefix + "pe_shaped")
        rank = len(_value_type(model, positions.name)[1] or [0, 0]) + 1
    if dims is not None and len(dims) < rank:
        raise BadParameterError(f"shape mismatch: tensor {at!r} has shape {dims}, the PE outputs "
                                f"rank {rank} [..., {d_model}]")
    if dims is not None and len(dims) > rank:
        encoded = node("Unsqueeze", [encoded, const("lead", list(range(len(dims) - rank)))],
                       prefix + "pe_unsqueezed")

    # Rewire: `at` is now made by the last node; the old producer's output gets a dead name.
    kept_input = at in inputs and add
    if kept_input:  # an input keeps its name: its readers take the sum instead
        total = prefix + "sum"
        for n in graph.node:
            n.input[:] = [total if name == at else name for name in n.input]
        node("Add", [at, encoded], total)
    else:
        old = prefix + "replaced"
        if producer is not None:
            target = graph.node[producer]
            target.output[:] = [old if name == at else name for name in target.output]
        else:
            graph.input.remove(inputs[at])
        if add:
            node("Add", [old, encoded], at)
        else:
            nodes[-1].output[:] = [at]  # the last node (Unsqueeze, Reshape or the PE's) makes at
            if nodes[-1].name == encoded:
                nodes[-1].name = prefix + "out"
    where = 0 if producer is None else producer + 1
    all_nodes = list(graph.node)
    all_nodes[where:where] = nodes
    removed = _remove_dead(graph, all_nodes,
                           all_nodes[producer] if producer is not None and not add else None)
    del graph.node[:]
    graph.node.extend(removed["nodes"])
    graph.initializer.extend(inits)
    graph.input.extend(new_inputs)
    graph.value_info.extend(pe.graph.value_info)
    stale = {at, *removed["names"]}
    keep = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    domains = {o.domain for o in model.opset_import}
    model.opset_import.extend(o for o in pe.opset_import if o.domain not in domains)
    model.ir_version = max(model.ir_version, pe.ir_version,
                           helper.find_min_ir_version_for(list(model.opset_import), True))
    record = {"at": at, "positions": str(positions), "add": add, "sha256": manifest.get("sha256"),
              "manifest": _slim(manifest)}
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY.format(number), json.dumps(record, sort_keys=True)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise BadParameterError(f"the grafted model does not pass onnx.checker: {first}") from None
    pe_bytes = sum(n.ByteSize() for n in nodes) + sum(t.ByteSize() for t in inits)
    return Grafted(model, at, positions, prefix, add, producer is None, new_input, converted,
                   model.metadata_props[-1].ByteSize(), seq_dim, removed["count"],
                   removed["bytes"], pe_bytes)


def _slim(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as the artifact's graph stores it (without the per-channel int8 lists: the
    model carries the scales as tensors), plus what ``--scheme`` recorded of its weights."""
    from edgepe.export.graphs._common import embedded_manifest

    if isinstance(manifest.get("quant"), dict):
        from edgepe.quant.graphs import embedded

        slim = embedded(manifest)
    else:
        slim = embedded_manifest(manifest)
    return {**slim, **({"weights_from": manifest["weights_from"]}
                       if "weights_from" in manifest else {})}


def _remove_dead(graph, nodes: list, old_producer) -> dict[str, Any]:
    """``nodes`` without the replaced producer's cone where nothing else reads it, and the
    initializers only that cone read. Only the old producer and its ancestors are candidates."""
    result = {"nodes": nodes, "names": set(), "count": 0, "bytes": 0}
    if old_producer is None:
        return result
    makers = {out: n for n in nodes for out in n.output}
    cone, todo = set(), [old_producer]
    while todo:
        n = todo.pop()
        if id(n) in cone:
            continue
        cone.add(id(n))
        todo += [makers[i] for i in n.input if i in makers]
    outputs = {o.name for o in graph.output}
    live = list(nodes)
    while True:
        reads = {name for n in live for name in n.input} | outputs
        for attr_node in live:  # names read inside subgraphs
            for attr in attr_node.attribute:
                for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                    reads |= _used(sub)
        dead = [n for n in live if id(n) in cone and not reads.intersection(n.output)]
        if not dead:
            break
        for n in dead:
            result["names"].update(n.output)
            result["count"] += 1
            result["bytes"] += n.ByteSize()
        live = [n for n in live if not any(n is d for d in dead)]
    reads = {name for n in live for name in n.input}
    gone = [t for t in graph.initializer if t.name not in reads and t.name not in outputs
            and any(t.name in n.input for n in nodes if not any(n is k for k in live))]
    for t in gone:
        result["bytes"] += t.ByteSize()
        result["names"].add(t.name)
        graph.initializer.remove(t)
    result["nodes"] = live
    return result


# --- proving ----------------------------------------------------------------------------------


def _session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failing run is reported once, by _run, in one line
    return ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                providers=["CPUExecutionProvider"])


# What the proof may ask for before it runs anything: the PE's table of max_len rows (float32)
# and each sequence length fed to the model (issue 30: a huge max_len or --lengths was a
# MemoryError, exit 3).
PROOF_TABLE_BYTES = 256 * 2**20
PROOF_MAX_LENGTH = 1 << 16


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
    for length in lengths or ():
        if not 1 <= int(length) <= min(PROOF_MAX_LENGTH, max_len):
            raise BadParameterError(
                f"--lengths {length}: each length must be 1 .. {min(PROOF_MAX_LENGTH, max_len)}"
                f" (the artifact's max_len {max_len}, graft's cap {PROOF_MAX_LENGTH})")


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
    check_proof_size(manifest, lengths)
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
        top = min(max_len, PROOF_MAX_LENGTH)  # positions still reach max_len - 1 (_feeds)
        lengths = sorted({min(2, top), max(1, top // 2), top})
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


# --- finding a PE in a model (--scheme) -------------------------------------------------------


@dataclass
class Candidate:
    """A PE subgraph ``detect`` found: the tensor it makes and what the artifact needs."""

    at: str
    table: str
    max_len: int
    weight: np.ndarray | None  # [n_bits, D], the projection (x @ W)
    weight_name: str | None
    positions: Positions | None


def _constants(graph) -> dict[str, np.ndarray]:

    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:  # in topological order, so an Identity's input is known first
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        elif node.op_type == "Identity" and node.input[0] in found:  # torch shares equal tensors
            found[node.output[0]] = found[node.input[0]]
    return found


def _trace_length(graph, name: str, inputs: set[str], consts) -> Positions | None:
    """``arange`` of the input axis whose size ``name`` carries (Shape -> Gather/Unsqueeze...)."""
    import numpy as np
    from onnx import helper

    makers = {o: n for n in graph.node for o in n.output}
    for _ in range(8):
        node = makers.get(name)
        if node is None:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Unsqueeze", "Squeeze", "Reshape", "Cast", "Identity"):
            name = node.input[0]
        elif node.op_type == "Shape" and node.input[0] in inputs:
            start, end = attrs.get("start", 0), attrs.get("end")
            if end is not None and end - start == 1 and start >= 0:
                return Positions("arange", node.input[0], start)
            return None
        elif node.op_type == "Gather" and node.input[1] in consts:
            shape = makers.get(node.input[0])
            index = np.asarray(consts[node.input[1]]).ravel()
            if shape is None or shape.op_type != "Shape" or index.size != 1 or \
                    shape.input[0] not in inputs:
                return None
            start = {a.name: helper.get_attribute_value(a) for a in shape.attribute}.get("start",
                                                                                         0)
            return Positions("arange", shape.input[0], int(index[0]) + start)
        else:
            return None
    return None


def detect(model, scheme: str) -> list[Candidate]:
    """Every PE subgraph of ``scheme`` in ``model`` (see the module doc for the pattern)."""
    import numpy as np

    from edgepe.schemes._registry import n_bits

    if scheme not in DETECTABLE:
        raise BadParameterError(f"graft --scheme finds {', '.join(DETECTABLE)} in a model; for "
                                f"'{scheme}' export it and pass --pe ARTIFACT --at TENSOR")
    graph = model.graph
    consts = _constants(graph)
    inputs = {v.name for v in graph.input} - set(consts)
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = []
    for name, table in consts.items():
        if table.dtype.kind != "f" or table.ndim < 2 or any(d != 1 for d in table.shape[:-2]):
            continue
        length, width = table.shape[-2:]
        if width != n_bits(length) or not np.array_equal(
                table.reshape(length, width),
                (np.arange(length)[:, None] >> np.arange(width)) & 1):
            continue
        axis = table.ndim - 2
        # rows: (tensor, positions) of the table read by position; an export at a fixed length
        # L reads the whole table (torch drops the no-op slice), at the default positions
        reads = [(name, None)]
        for node in readers.get(name, []):
            if node.input[0] == name and node.op_type in TABLE_OPS:
                positions = _table_read(graph, node, axis, table.ndim, inputs, consts)
                if positions is not False:
                    reads.append((node.output[0], positions))
        for rows, positions in reads:
            for user in readers.get(rows, []):
                weight = consts.get(user.input[1]) if len(user.input) > 1 else None
                if user.op_type == "MatMul" and user.input[0] == rows and weight is not None \
                        and weight.ndim == 2 and weight.shape[0] == width:
                    found.append(Candidate(user.output[0], name, length,
                                           weight.astype(np.float32), user.input[1], positions))
    return found


def _table_read(graph, node, axis: int, ndim: int, inputs, consts):
    """How a Slice/Gather of the table picks rows: Positions, None (unknown), False (not rows)."""
    import numpy as np
    from onnx import helper

    if node.op_type == "Gather":
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("axis", 0) % ndim != axis:
            return False
        index = node.input[1]
        if index in inputs:
            return Positions("input", index)
        maker = next((n for n in graph.node if index in n.output), None)
        if maker is not None and maker.op_type == "Range":
            return _trace_length(graph, maker.input[1], inputs, consts)
        return None
    args = [*node.input, "", "", ""][:5]
    starts, axes, steps = (consts.get(a) if a else None for a in (args[1], args[3], args[4]))
    axes = np.asarray([0] if axes is None else axes).ravel() % ndim
    if starts is None or list(np.asarray(starts).ravel()) != [0] or list(axes) != [axis] or (
            steps is not None and list(np.asarray(steps).ravel()) != [1]):
        return False
    return _trace_length(graph, args[2], inputs, consts)


DETECTABLE = ("binary",)


def build_detected(candidate: Candidate, scheme: str, **options):
    """``(ModelProto, manifest)``: ``scheme``'s artifact for ``candidate``, built in memory.

    The projection weight comes from the model (it is the checkpoint); ``options`` are
    ``api.make_config``'s export options (mode, quantize, quant_granularity, lowering, opset).
    """
    import io

    import numpy as np
    import torch

    from edgepe import api
    from edgepe.export import prepare
    from edgepe.schemes import build

    weight = candidate.weight
    config = api.make_config(scheme, candidate.max_len, d_model=int(weight.shape[1]), **options)
    module = build(config.scheme, seed=config.seed)
    with torch.no_grad():
        module.projection.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight.T)))
    prepared = prepare(config, module)
    buffer = io.BytesIO()
    prepared.write(buffer)
    data = buffer.getvalue()
    manifest = {**prepared.manifest, "sha256": hashlib.sha256(data).hexdigest(),
                "weights_from": {"initializer": candidate.weight_name,
                                 "sha256": hashlib.sha256(weight.tobytes()).hexdigest()}}
    return parse_model(data, "the built artifact"), manifest


# --- the whole command ------------------------------------------------------------------------


def graft(model: str | Path, pe: str | Path | None = None, at: str | None = None,
          positions: str | Positions | None = None, out: str | Path | None = None,
          scheme: str | None = None, add: bool = False, check: bool = True, force: bool = False,
          lengths: Sequence[int] | None = None, seed: int = 0,
          checkpoint: str | Path | None = None, **export_options) -> GraftReport:
    """Graft a PE into the model at ``model`` and prove it; write ``out`` if the proof holds.

    Either ``pe`` (an edgepe ONNX artifact) with ``at``, or ``scheme`` (found by ``detect``;
    ``export_options`` go to ``api.make_config``). ``check=False`` skips ``prove``. Returns a
    ``GraftReport``, falsy when an output differs beyond its tolerance (then nothing is written).
    Bad input raises an ``EdgepeError`` before anything is written; an existing ``out`` is only
    replaced with ``force``, and never the model, ``pe`` or its manifest. The proof's tolerance
    comes from this edgepe's rebuild of ``pe`` (``proof_manifest``; ``checkpoint``: the weights
    an int8 ``pe`` was exported from), never from ``pe``'s manifest.
    """
    from edgepe.export.artifact import check_output, write_output

    if (pe is None) == (scheme is None):
        raise BadParameterError("graft needs --pe ARTIFACT --at TENSOR, or --scheme ID (not both)")
    if pe is not None and not at:
        raise BadParameterError("--pe needs --at TENSOR: the tensor the PE replaces")
    if export_options and scheme is None:
        raise BadParameterError(f"{', '.join(sorted(export_options))}: export options go with "
                                "--scheme (an artifact given with --pe is already exported)")
    # The one output rule: never the model, the artifact or its manifest, --force or not.
    inputs = [Path(model), *([Path(pe)] if pe is not None else [])]
    if out is not None:
        out = Path(out)
        check_output(out, inputs, force)
    original, size = load_model(model)
    if scheme is not None:
        candidates = detect(original, scheme)
        if not candidates:
            raise BadParameterError(
                f"no '{scheme}' PE found in {str(model)!r}: looked for a constant bit table "
                "[.., L, n_bits(L)] sliced or gathered by position, then MatMul by a constant "
                "[n_bits, D] weight; pass --pe ARTIFACT --at TENSOR instead")
        if at is not None:
            chosen = [c for c in candidates if c.at == at]
            if not chosen:
                raise BadParameterError(
                    f"no '{scheme}' PE makes tensor {at!r}; found at "
                    f"{', '.join(repr(c.at) for c in candidates)}")
            candidates = chosen
        if len(candidates) > 1:
            raise BadParameterError(
                f"{len(candidates)} '{scheme}' PE subgraphs found in {str(model)!r} (at "
                f"{', '.join(repr(c.at) for c in candidates)}); graft one with --at TENSOR")
        found = candidates[0]
        pe_model, manifest = build_detected(found, scheme, **export_options)
        at, positions = found.at, positions or found.positions
        kind = "int8" if manifest["inputs"]["quantize"] == "int8" else manifest["dtype"]
        name = f"{scheme} ({manifest['mode']}, {kind}) built from {found.table!r} and " \
               f"{found.weight_name!r}"
    else:
        pe_model, manifest = load_pe(pe)
        name = f"{manifest['scheme']} ({manifest['mode']}) from {str(pe)!r}"
    grafted = graft_model(original, pe_model, manifest, at, positions, add)
    data = grafted.model.SerializeToString()
    report = GraftReport(name, at, str(grafted.positions), grafted.prefix,
                         grafted.removed_nodes, grafted.removed_bytes, grafted.pe_bytes, size,
                         len(data), grafted.metadata_bytes,
                         f"opset {_opset(original)} -> {_opset(grafted.model)}"
                         if grafted.converted else None, model=grafted.model)
    if check:
        held_to = manifest if pe is None else proof_manifest(pe, manifest, checkpoint)
        report.lengths, report.checks = prove(original, grafted, pe_model, held_to,
                                              lengths=lengths, seed=seed)
    if report and out is not None:
        write_output(out, data, inputs, force)
        report.out = out
    return report


__all__ = ["GraftReport", "Positions", "detect", "graft", "graft_model", "prove"]
