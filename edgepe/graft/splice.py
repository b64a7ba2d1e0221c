"""Splicing: a PE's graph put in place of (or added to) a tensor of the user's model, its old
producer cone removed, opsets reconciled, names prefixed, the manifest recorded (``graft_model``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgepe.contract.errors import BadParameterError, did_you_mean

PREFIX = "edgepe_pe{}/"
METADATA_KEY = "edgepe.graft.{}"




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
            if axis and not re.fullmatch(r"-?[0-9]+", axis):
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

    # graft's own names (wiring, constants) under a sub-prefix no name of the PE starts with: the
    # PE's names are prefixed too, and a PE may hold a constant 'one' as graft does
    taken = _names(pe.graph)
    own = next(p for p in (f"{prefix}graft{k}/" for k in range(len(taken) + 1))
               if not any(name.startswith(p) for name in taken))

    def const(name: str, values) -> str:
        inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), own + name))
        return own + name

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
        size = node("Shape", [positions.name], own + "seq_len_1", start=axis, end=axis + 1)
        size = node("Squeeze", [size, const("axis0", [0])], own + "seq_len")
        pos = node("Range", [const("zero", 0), size, const("one", 1)], own + "arange")
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
            pos = node("Cast", [pos], own + "positions_int64", to=TensorProto.INT64)
        seq_dim = p_dims[-1] if p_dims else None
        if p_dims is None or len(p_dims) != 1:
            flat_shape = node("Shape", [pos], own + "positions_shape")
            pos = node("Reshape", [pos, const("flat", [-1])], own + "positions_flat")
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
        shape = node("Concat", [flat_shape, const("d_model", [d_model])], own + "pe_shape",
                     axis=0)
        encoded = node("Reshape", [encoded, shape], own + "pe_shaped")
        rank = len(_value_type(model, positions.name)[1] or [0, 0]) + 1
    if dims is not None and len(dims) < rank:
        raise BadParameterError(f"shape mismatch: tensor {at!r} has shape {dims}, the PE outputs "
                                f"rank {rank} [..., {d_model}]")
    if dims is not None and len(dims) > rank:
        encoded = node("Unsqueeze", [encoded, const("lead", list(range(len(dims) - rank)))],
                       own + "pe_unsqueezed")

    # Rewire: `at` is now made by the last node; the old producer's output gets a dead name.
    kept_input = at in inputs and add
    if kept_input:  # an input keeps its name: its readers take the sum instead
        total = own + "sum"
        for n in graph.node:
            n.input[:] = [total if name == at else name for name in n.input]
        node("Add", [at, encoded], total)
    else:
        old = own + "replaced"
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
                nodes[-1].name = own + "out"
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
    _record_and_check(model, number, record)
    pe_bytes = sum(n.ByteSize() for n in nodes) + sum(t.ByteSize() for t in inits)
    return Grafted(model, at, positions, prefix, add, producer is None, new_input, converted,
                   model.metadata_props[-1].ByteSize(), seq_dim, removed["count"],
                   removed["bytes"], pe_bytes)


def _slim(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as the artifact's graph stores it (without the per-channel int8 lists: the
    model carries the scales as tensors), plus what ``--scheme`` recorded of its weights."""
    from edgepe.graphs._common import embedded_manifest

    if isinstance(manifest.get("quant"), dict):
        from edgepe.graphs.int8 import embedded

        slim = embedded(manifest)
    else:
        slim = embedded_manifest(manifest)
    return {**slim, **({"weights_from": manifest["weights_from"]}
                       if "weights_from" in manifest else {})}


def _remove_dead(graph, nodes: list, old_producer) -> dict[str, Any]:
    """``nodes`` without the replaced producer's cone where nothing else reads it, and the
    initializers only that cone read. Only the old producer (a node, or a list of them) and its
    ancestors are candidates."""
    result = {"nodes": nodes, "names": set(), "count": 0, "bytes": 0}
    if old_producer is None:
        return result
    makers = {out: n for n in nodes for out in n.output}
    cone, todo = set(), list(old_producer) if isinstance(old_producer, list) else [old_producer]
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


def splice_found(model, pe, replaces: dict[str, str], positions: str, record: dict[str, Any],
                 condition: str | None = None) -> Grafted:
    """``model`` with ``pe``'s outputs in place of the tensors ``replaces`` names (``{pe output:
    model tensor}``), its one input fed by the model's tensor ``positions``. Pure.

    The old producers' cones are removed where nothing else reads them (``_remove_dead``);
    ``pe`` must be at the model's opset (``find_hf.build_found`` builds it so). ``record`` goes
    into ``metadata_props`` under ``edgepe.graft.<n>``; the result passes the full checker.
    """
    import onnx
    from onnx import compose, helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    prefix, number = _free_prefix(model)
    pe = compose.add_prefix(pe, prefix)
    # the PE's inputs: its first is fed by `positions`, a second (longrope) by `condition`;
    # MPT's bias takes none
    guard, guarded = _range_guard(pe, prefix, positions, record)
    feeds = dict(zip((v.name for v in pe.graph.input), (guarded, condition), strict=False))
    rename = {prefix + out: at for out, at in replaces.items()}
    nodes = [*guard.node, *pe.graph.node]
    for n in nodes:
        n.input[:] = [feeds.get(name, name) for name in n.input]
        n.output[:] = [rename.get(name, name) for name in n.output]
    all_nodes = list(graph.node)
    producers = []
    constants = {t.name: t for t in graph.initializer}
    dropped = 0  # bytes of replaced constants (an initializer the model read as is)
    for k, at in enumerate(replaces.values()):
        if at in constants:
            dropped += constants[at].ByteSize()
            graph.initializer.remove(constants[at])
            continue
        producer = next(i for i, n in enumerate(all_nodes) if at in n.output)
        target = all_nodes[producer]
        target.output[:] = [f"{prefix}replaced{k}" if o == at else o for o in target.output]
        producers.append(producer)
    old = [all_nodes[i] for i in producers]
    where = min(producers, default=0)
    all_nodes[where:where] = nodes
    removed = _remove_dead(graph, all_nodes, old or None)
    removed["bytes"] += dropped
    del graph.node[:]
    graph.node.extend(removed["nodes"])
    graph.initializer.extend([*guard.initializer, *pe.graph.initializer])
    stale = {*replaces.values(), *removed["names"]}
    keep = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    model.ir_version = max(model.ir_version,
                           helper.find_min_ir_version_for(list(model.opset_import), True))
    entry = _record_and_check(model, number, record)
    pe_bytes = sum(n.ByteSize() for n in nodes) + sum(
        t.ByteSize() for t in [*guard.initializer, *pe.graph.initializer])
    return Grafted(model, ", ".join(replaces.values()), Positions("input", positions), prefix,
                   False, False, False, False, entry.ByteSize(), None, removed["count"],
                   removed["bytes"], pe_bytes)


def _range_guard(pe, prefix: str, positions: str, record: dict[str, Any]):
    """``(graph, name)``: for RoPE's PE (tables, or sliced bits, of ``record['max_len']``
    positions), nodes that make ``name`` from ``positions``: the same values, and a failed run
    for a position below 0 or from ``max_len`` on (a Gather of one zero at index 1); other PEs:
    no nodes, ``positions`` itself. The model's own cos/sin answer at any position, the graft's
    tables only at ``0 .. max_len - 1``: past them it must fail, never answer something else
    (issue 41: the table took -1 as its last row, 0.28 off on the tests' Llama; sliced RoPE was
    0.48 off at 64 with --max-len 64)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if record.get("scheme") not in ("rope", "mrope") or not record.get("max_len") or \
            not pe.graph.input:
        return helper.make_graph([], "guard", [], []), positions
    elem = pe.graph.input[0].type.tensor_type.elem_type or TensorProto.INT64
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    g = f"{prefix}range_guard/"
    inits = [numpy_helper.from_array(np.zeros(1, dtype), g + "zero"),
             numpy_helper.from_array(np.asarray(0, dtype), g + "first"),
             numpy_helper.from_array(np.asarray(record["max_len"], dtype), g + "end")]
    nodes = [helper.make_node("Less", [positions, g + "first"], [g + "below"]),
             helper.make_node("Less", [positions, g + "end"], [g + "inside"]),
             helper.make_node("Not", [g + "inside"], [g + "past"]),
             helper.make_node("Or", [g + "below", g + "past"], [g + "outside"]),
             helper.make_node("Cast", [g + "outside"], [g + "index"], to=TensorProto.INT64),
             helper.make_node("Gather", [g + "zero", g + "index"], [g + "naught"]),
             helper.make_node("Add", [positions, g + "naught"], [g + "positions"])]
    return helper.make_graph(nodes, "guard", [], [], inits), g + "positions"


def _record_and_check(model, number: int, record: dict[str, Any]):
    """Store ``record`` as the model's ``edgepe.graft.<number>`` metadata entry (returned), then
    require the grafted model to pass ``onnx.checker`` in full (one line if it does not)."""
    import onnx

    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY.format(number), json.dumps(record, sort_keys=True)
    try:
        onnx.checker.check_model(model, full_check=True)
    # the full check's shape inference raises its own error (a type clash in the user's graph)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise BadParameterError(f"the grafted model does not pass onnx.checker: {first}") from None
    return entry
