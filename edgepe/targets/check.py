"""A graph against a target profile: every node supported or not, and why; one verdict.

A node is supported when its op is in the profile (``domain.Op`` outside the default domain),
every tensor it reads or writes has an element type the profile lists for that op (shape
operands, e.g. Unsqueeze's axes, are int64 by the ONNX spec and not judged; Gather's indices are
judged against ``index_dtypes``), and the profile's rules hold. The graph itself must fall in
the profile's opset range. Types come from ONNX shape inference (``edgepe.audit``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from edgepe.audit import _elem_types
from edgepe.targets.profiles import RULES, Profile

# Inputs that are shapes, axes or indices, per op (position -> what it is); not data. ONNX's
# RotaryEmbedding takes (X, cos_cache, sin_cache, position_ids), onnxruntime's contrib one
# (X, position_ids, cos_cache, sin_cache).
SHAPE_OPERANDS = {
    "Unsqueeze": {1: "axes"}, "Squeeze": {1: "axes"}, "Reshape": {1: "shape"},
    "Expand": {1: "shape"}, "Tile": {1: "repeats"}, "Split": {1: "split"},
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"}, "Gather": {1: "indices"},
    "RotaryEmbedding": {3: "position_ids"}, "com.microsoft.RotaryEmbedding": {1: "position_ids"},
}
# Producers of computed Gather indices that edgepe's table graphs use to clamp them to
# [0, L - 1] (graphs/_common.clamp_int64): enough for "nonnegative-gather-indices".
CLAMPS = frozenset({"Where", "Clip", "Max"})


@dataclass
class NodeCheck:
    name: str
    op: str
    supported: bool
    reason: str  # why not; for a supported node, what it runs on


@dataclass
class TargetReport:
    """What ``check(model, profile)`` found; truthy when the target runs every node."""

    profile: Profile
    nodes: list[NodeCheck]
    problems: list[str] = field(default_factory=list)  # graph-level: opset, initializers
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems and all(n.supported for n in self.nodes)

    @property
    def blocking(self) -> list[str]:
        """Distinct reasons the target refuses the graph, graph-level ones first."""
        seen: dict[str, None] = dict.fromkeys(self.problems)
        for node in self.nodes:
            if not node.supported:
                seen.setdefault(node.reason, None)
        return list(seen)

    def __str__(self) -> str:
        p = self.profile
        bad = sum(not n.supported for n in self.nodes)
        if self:
            return (f"target {p.name}: all {len(self.nodes)} nodes supported by {p.runtime}"
                    + (f" (note: {'; '.join(self.notes)})" if self.notes else ""))
        return (f"target {p.name}: NOT supported, {bad} of {len(self.nodes)} nodes unsupported "
                f"by {p.runtime}: {'; '.join(self.blocking)}")


def _dtype(types: dict[str, int], name: str) -> str | None:
    elem = types.get(name)
    if not elem:
        return None
    return onnx.helper.tensor_dtype_to_np_dtype(elem).name


def _key(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _check_node(node, key, types, consts, producers, profile: Profile) -> NodeCheck:
    name = node.name or node.output[0]
    allowed = profile.ops.get(key)
    if allowed is None:
        return NodeCheck(name, key, False, f"{key}: not in {profile.name}'s operator table")
    operands = SHAPE_OPERANDS.get(key, {})
    data = [t for i, t in enumerate(node.input) if t and i not in operands] + list(node.output)
    for tensor in data:
        dtype = _dtype(types, tensor)
        if dtype is not None and dtype not in allowed:
            return NodeCheck(name, key, False, f"{key} on {dtype}: {profile.name} runs {key} on "
                             f"{', '.join(sorted(allowed))}")
    if key == "Gather" and len(node.input) > 1:
        indices = node.input[1]
        dtype = _dtype(types, indices)
        if dtype is not None and dtype not in profile.index_dtypes:
            return NodeCheck(name, key, False, f"Gather indices {dtype}: {profile.name} takes "
                             f"{', '.join(sorted(profile.index_dtypes))} indices only")
        if "nonnegative-gather-indices" in profile.rules:
            if indices in consts:
                if (onnx.numpy_helper.to_array(consts[indices]) < 0).any():
                    return NodeCheck(name, key, False, "Gather with negative constant indices: "
                                     f"{RULES['nonnegative-gather-indices']}")
            elif producers.get(indices) not in CLAMPS:
                return NodeCheck(name, key, False, "Gather indices not clamped (cannot show "
                                 f">= 0): {RULES['nonnegative-gather-indices']}")
    return NodeCheck(name, key, True, f"{profile.runtime}")


def check(model: onnx.ModelProto, profile: Profile) -> TargetReport:
    """Every node of ``model`` against ``profile``; see the module docstring."""
    types = _elem_types(model)
    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    producers = {o: n.op_type for n in graph.node for o in n.output}
    nodes = [_check_node(n, _key(n), types, consts, producers, profile) for n in graph.node]
    problems: list[str] = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    lo, hi = profile.opsets
    if opset is not None and not lo <= opset <= hi:
        problems.append(f"opset {opset}: {profile.name} loads opsets {lo} to {hi}")
    if "no-uint64-initializers" in profile.rules:
        wide = [t.name for t in graph.initializer if t.data_type == onnx.TensorProto.UINT64]
        if wide:
            problems.append(f"uint64 initializers ({', '.join(wide)}): "
                            f"{RULES['no-uint64-initializers']}")
    notes = list(profile.notes)
    if "static-shapes" in profile.rules:
        dynamic = [v.name for v in graph.input
                   if any(d.dim_param or not d.dim_value for d in v.type.tensor_type.shape.dim)]
        if dynamic:
            notes.insert(0, f"inputs {', '.join(dynamic)} have dynamic dims: "
                            f"{RULES['static-shapes']}")
    return TargetReport(profile, nodes, problems, notes)
