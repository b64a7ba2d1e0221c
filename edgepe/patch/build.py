"""The edgepe module that replaces one rotary module found by ``edgepe.patch.find``.

``build(found, mode, max_len)``: ``mode="table"`` runs the original module once per frequency set
at positions ``0 .. L - 1`` and keeps its float32 cos/sin (``RotaryTable``); ``mode="sliced"``
reads the module's float32 ``inv_freq`` buffers and ``attention_scaling`` and builds the slice
tables of ``edgepe.graphs.sliced`` (``RotarySliced``). Phi-3's longrope holds two sets: the short
one (positions below ``P = original_max_position_embeddings``) and the long one, which the
original swaps into its ``inv_freq`` buffer when a batch reaches ``P`` (``dynamic_rope_update``):
both are read from the module itself, never recomputed from the config.

Multimodal RoPE (``found.mrope``): the same per-slot cos/sin (table: the original's own float32
outputs at text positions, where every stream is the position; sliced: its ``inv_freq``),
computed for each of the three streams and selected by ``MRope``'s column index, which is read
off the original's ``recomposition_frequencies`` by running it on a code tensor (stream ``s``,
slot ``i`` holds ``s * half + i``, exact in float32): a selection only, else refused.

T5's relative bias (``kind == "t5-bias"``): ``T5RelativeBias`` over the attention's own
``relative_attention_bias``, its distance lookup ``edgepe.schemes.t5_bias``'s
``magnitude_buckets`` for the attention's ``num_buckets``, ``max_distance`` and direction
(bidirectional unless ``is_decoder``, as ``compute_bias`` passes it).
"""

from __future__ import annotations

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.graphs.sliced import default_plan
from edgepe.patch.find import Refused
from edgepe.patch.modules import MRope, RotarySliced, RotaryTable, T5RelativeBias
from edgepe.schemes import build as build_scheme
from edgepe.schemes import resolve

MODES = ("table", "sliced")
# A table mode set is L x R float32 cos and as much sin: past this many values it is refused
# (128 M values, 1 GiB: mode="sliced" holds a few hundred rows instead).
MAX_TABLE_VALUES = 1 << 27


def _kwargs(layer_type) -> dict:
    return {} if layer_type is None else {"layer_type": layer_type}


def longrope_limit(module, layer_type) -> int | None:
    """``P`` of a longrope set (its ``original_max_position_embeddings``), ``None`` otherwise."""
    kinds = module.rope_type if isinstance(module.rope_type, dict) else {None: module.rope_type}
    if kinds.get(layer_type) != "longrope":
        return None
    params = module.config.rope_parameters
    params = params[layer_type] if layer_type is not None else params
    return int(params["original_max_position_embeddings"])


def _attention(module, layer_type) -> float:
    name = "attention_scaling" if layer_type is None else f"{layer_type}_attention_scaling"
    return float(getattr(module, name))


def _inv_freq(module, layer_type) -> torch.Tensor:
    name = "inv_freq" if layer_type is None else f"{layer_type}_inv_freq"
    return getattr(module, name).detach().to(torch.float32).clone()


@torch.no_grad()
def run_original(module, layer_type, positions: torch.Tensor):
    """The original's ``(cos, sin)`` float32 ``[N, R]`` at ``positions [N]`` (one batch)."""
    x = torch.zeros(1, 1, dtype=torch.float32)
    cos, sin = module(x, positions[None, :], **_kwargs(layer_type))
    return cos[0].float(), sin[0].float()


def t5_lut(module) -> torch.Tensor:
    """The distance lookup of a T5 attention (module docstring)."""
    direction = "causal" if module.is_decoder else "bidirectional"
    scheme = build_scheme(resolve("t5-bias", 8, heads=1, params={
        "num_buckets": int(module.relative_attention_num_buckets),
        "max_distance": int(module.relative_attention_max_distance), "direction": direction}))
    return scheme.magnitude_buckets()


def mrope_index(found) -> torch.Tensor:
    """``[R]``: the flattened (stream, slot) each output column of the original's
    ``recomposition_frequencies`` holds; ``Refused`` when it is not a selection."""
    half = len(_inv_freq(found.module, None))
    codes = torch.arange(3 * half, dtype=torch.float32).reshape(3, 1, 1, half)
    with torch.no_grad():
        out = found.module.recomposition_frequencies(codes.clone())
    flat = out.reshape(-1)
    index = flat.to(torch.int64)
    if out.dim() != 3 or out.shape[:2] != (1, 1) or not torch.equal(index.float(), flat) or (
            index.numel() and (int(index.min()) < 0 or int(index.max()) >= 3 * half)):
        raise Refused(f"cannot patch {found.cls} ({found.name}): its recomposition_frequencies "
                      "is not a selection of the three streams' columns")
    return index


def _build_mrope(found, mode: str, max_len: int) -> torch.nn.Module:
    module, index = found.module, mrope_index(found)
    half = len(_inv_freq(module, None))
    if mode == "sliced":
        inner = RotarySliced({None: (_inv_freq(module, None).numpy(), None, None,
                                     _attention(module, None))},
                             default_plan(max_len), max_len, _attention(module, None))
        return MRope(inner, index, half)
    if max_len * half * 2 > MAX_TABLE_VALUES:
        raise BadParameterError(
            f"{found.cls}: a {max_len} x {half} cos/sin table is too large for mode='table'; "
            "use mode='sliced' or a smaller max_len")
    cos, sin = run_original(module, None, torch.arange(max_len))
    # at text positions every stream is the position: a column holding slot i is slot i's
    # value (the first such column; a slot no column holds is never read)
    cols = torch.zeros(half, dtype=torch.int64)
    for c, code in reversed(list(enumerate(index.tolist()))):
        cols[code % half] = c
    tables = {None: (cos[:, cols], sin[:, cols], None, None)}
    return MRope(RotaryTable(tables, _attention(module, None)), index, half)


def build(found, mode: str, max_len: int) -> torch.nn.Module:
    """The replacement of ``found.module`` (a rotary module covering positions ``0 .. L - 1``,
    or a T5 attention's bias)."""
    module = found.module
    if mode not in MODES:
        raise BadParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if found.kind == "t5-bias":
        return T5RelativeBias(module.relative_attention_bias, t5_lut(module),
                              bidirectional=not module.is_decoder)
    if found.mrope:
        return _build_mrope(found, mode, max_len)
    if mode == "table":
        tables = {}
        for layer_type in found.layer_types:
            limit = longrope_limit(module, layer_type)
            half = len(_inv_freq(module, layer_type))
            if max_len * 2 * half * 2 > MAX_TABLE_VALUES:
                raise BadParameterError(
                    f"{found.cls}: a {max_len} x {2 * half} cos/sin table is too large for "
                    "mode='table'; use mode='sliced' or a smaller max_len")
            short = None
            if limit is not None and max_len > limit:  # two sets: the short one below P
                short = run_original(module, layer_type, torch.arange(limit))
            else:
                limit = None  # one set covers every position patched
            cos, sin = run_original(module, layer_type, torch.arange(max_len))
            tables[layer_type] = (cos, sin, short, limit)
        scaling = getattr(module, "attention_scaling", None)
        return RotaryTable(tables, scaling)
    sets = {}
    for layer_type in found.layer_types:
        limit = longrope_limit(module, layer_type)
        short = None
        if limit is not None:  # a batch below P swaps the short set into inv_freq
            run_original(module, layer_type, torch.arange(min(limit, max_len)))
            if max_len > limit:
                short = _inv_freq(module, layer_type).numpy()
                run_original(module, layer_type, torch.arange(limit + 1))  # the long set
            else:
                limit = None
        sets[layer_type] = (_inv_freq(module, layer_type).numpy(), short, limit,
                            _attention(module, layer_type))
    return RotarySliced(sets, default_plan(max_len), max_len,
                        getattr(module, "attention_scaling", None))
