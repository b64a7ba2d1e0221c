"""Finding a PE in a user's model (``--scheme``): ``detect`` and the artifact built for it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.export.options import make_config
from edgepe.graft.read import parse_model
from edgepe.graft.splice import Positions

if TYPE_CHECKING:  # numpy loads when a function needs it: `import edgepe` stays light
    import numpy as np

TABLE_OPS = ("Slice", "Gather")

# The ONNX domain's names: "" and its alias "ai.onnx". An ONNX op is (domain, op_type): another
# domain's op of the same name is another op (com.microsoft's own Range, GatherND, Gelu; a
# model-local function a hostile model calls Cos), so graft reads a node as ONNX's op only in
# this domain (``op``).
ONNX_DOMAINS = ("", "ai.onnx")


def op(node) -> str:
    """What ``node`` is, for every match of graft's: its ``op_type`` in the ONNX domain
    (``ONNX_DOMAINS``), else ``"domain.op_type"`` (``com.microsoft.Range``), which no name
    graft matches equals, and which its messages print as the node's real op."""
    return node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"


def foreign_ops(graph) -> list[str]:
    """Nodes of another domain named like an ONNX op (``op``: never read as that op), in words,
    one entry per kind with its count and first output: what graft's "no PE found" refusal names
    as seen (a PE built of them is not found, by design)."""
    from onnx import defs

    kinds: dict[str, list] = {}
    for node in graph.node:
        if node.domain not in ONNX_DOMAINS and defs.has(node.op_type):
            kinds.setdefault(op(node), []).append(node)
    return [f"{name}{f' x{len(nodes)}' if len(nodes) > 1 else ''} at {nodes[0].output[0]!r} "
            f"(domain {nodes[0].domain!r}, another op than ONNX's {nodes[0].op_type}, not "
            "read as it)"
            for name, nodes in kinds.items()]



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
        if op(node) == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        elif op(node) == "Identity" and node.input[0] in found:  # torch shares equal tensors
            found[node.output[0]] = found[node.input[0]]
    return found


def graph_index(graph) -> tuple[dict, dict[str, list]]:
    """``(makers, readers)``: the node making each tensor, the nodes reading each tensor."""
    makers = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return makers, readers


def _trace_length(graph, name: str, inputs: set[str], consts, makers=None
                  ) -> Positions | None:
    """``arange`` of the input axis whose size ``name`` carries (Shape -> Gather/Unsqueeze...).
    ``makers``: ``graph_index``'s, built once by the caller (issue 41: one map per Gather of a
    table read 15,000 times made detection quadratic)."""
    import numpy as np
    from onnx import helper

    if makers is None:
        makers = {o: n for n in graph.node for o in n.output}
    for _ in range(8):
        node = makers.get(name)
        if node is None:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if op(node) in ("Unsqueeze", "Squeeze", "Reshape", "Cast", "Identity"):
            name = node.input[0]
        elif op(node) == "Shape" and node.input[0] in inputs:
            start, end = attrs.get("start", 0), attrs.get("end")
            if end is not None and end - start == 1 and start >= 0:
                return Positions("arange", node.input[0], start)
            return None
        elif op(node) == "Gather" and node.input[1] in consts:
            shape = makers.get(node.input[0])
            index = np.asarray(consts[node.input[1]]).ravel()
            if shape is None or op(shape) != "Shape" or index.size != 1 or \
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
    makers, readers = graph_index(graph)
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
            if node.input[0] == name and op(node) in TABLE_OPS:
                positions = _table_read(graph, node, axis, table.ndim, inputs, consts, makers)
                if positions is not False:
                    reads.append((node.output[0], positions))
        for rows, positions in reads:
            for user in readers.get(rows, []):
                weight = consts.get(user.input[1]) if len(user.input) > 1 else None
                if op(user) == "MatMul" and user.input[0] == rows and weight is not None \
                        and weight.ndim == 2 and weight.shape[0] == width:
                    found.append(Candidate(user.output[0], name, length,
                                           weight.astype(np.float32), user.input[1], positions))
    return found


def _table_read(graph, node, axis: int, ndim: int, inputs, consts, makers):
    """How a Slice/Gather of the table picks rows: Positions, None (unknown), False (not rows)."""
    import numpy as np
    from onnx import helper

    if op(node) == "Gather":
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("axis", 0) % ndim != axis:
            return False
        index = node.input[1]
        if index in inputs:
            return Positions("input", index)
        maker = makers.get(index)
        if maker is not None and op(maker) == "Range":
            return _trace_length(graph, maker.input[1], inputs, consts, makers)
        return None
    args = [*node.input, "", "", ""][:5]
    starts, axes, steps = (consts.get(a) if a else None for a in (args[1], args[3], args[4]))
    axes = np.asarray([0] if axes is None else axes).ravel() % ndim
    if starts is None or list(np.asarray(starts).ravel()) != [0] or list(axes) != [axis] or (
            steps is not None and list(np.asarray(steps).ravel()) != [1]):
        return False
    return _trace_length(graph, args[2], inputs, consts, makers)


DETECTABLE = ("binary",)


def build_detected(candidate: Candidate, scheme: str, **options):
    """``(ModelProto, manifest)``: ``scheme``'s artifact for ``candidate``, built in memory.

    The projection weight comes from the model (it is the checkpoint); ``options`` are
    ``api.make_config``'s export options (mode, quantize, quant_granularity, lowering, opset).
    """
    import io

    import numpy as np
    import torch

    from edgepe.schemes import build

    weight = candidate.weight
    config = make_config(scheme, candidate.max_len, d_model=int(weight.shape[1]), **options)
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
