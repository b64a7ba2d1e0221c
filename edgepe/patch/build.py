"""The edgepe module that replaces one rotary module found by ``edgepe.patch.find``.

``build(found, mode, max_len)``: ``mode="table"`` runs the original module once per frequency set
at positions ``0 .. L - 1`` and keeps its float32 cos/sin (``RotaryTable``); ``mode="sliced"``
reads the module's float32 ``inv_freq`` buffers and ``attention_scaling`` and builds the slice
tables of ``edgepe.graphs.sliced`` (``RotarySliced``). Phi-3's longrope holds two sets: the short
one (positions below ``P = original_max_position_embeddings``) and the long one, which the
original swaps into its ``inv_freq`` buffer when a batch reaches ``P`` (``dynamic_rope_update``):
both are read from the module itself, never recomputed from the config.
"""

from __future__ import annotations

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.graphs.sliced import default_plan
from edgepe.patch.modules import RotarySliced, RotaryTable

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


def build(found, mode: str, max_len: int) -> torch.nn.Module:
    """The replacement of ``found.module`` (a rotary module) covering positions ``0 .. L - 1``."""
    module = found.module
    if mode not in MODES:
        raise BadParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
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
