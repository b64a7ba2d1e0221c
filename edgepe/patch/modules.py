"""The trig-free rotary modules ``edgepe.patch`` puts where a model's rotary embedding was.

Both keep the Hugging Face rotary contract (``transformers``' ``LlamaRotaryEmbedding.forward``
and its kin): ``forward(x, position_ids[, layer_type]) -> (cos, sin)``, each ``[B, S, R]`` in
``x.dtype``, ``R = 2 len(inv_freq)``, the halves duplicated (``cat((freqs, freqs))``), times the
module's ``attention_scaling``; ``layer_type`` picks one of Gemma3's per-layer-type sets. No Sin
or Cos runs in ``forward``:

- ``RotaryTable`` gathers rows of ``cos``/``sin`` tables that the original module itself computed
  (float32, before its cast to ``x.dtype``) at positions ``0 .. L - 1``: the same float32 values,
  then the same cast, so the output is bit-identical at every tabled position (bound 0).
- ``RotarySliced`` computes them from per-slice tables of the position's bit slices by angle
  addition (``edgepe.graphs.sliced``: its tables and plan; the slices taken with integer floor
  division and remainder, which every exporter lowers, rather than shifts, which litert-torch
  cannot: issue 42). ``sum_c 2^(w_c)`` rows per set instead of ``L``; off the original by at most
  the bound ``edgepe.patch.prove`` states.

Phi-3's longrope switches between two frequency sets by the batch's largest position
(``max(position_ids) + 1 > original_max_position_embeddings``: transformers'
``dynamic_rope_update``); both modules hold both sets and pick with the same test, as a
``torch.where`` on a scalar (traceable, no data-dependent branch).

Positions are clamped into ``0 .. L - 1``: a position past the patched range reads the last row
(the gather would otherwise read out of bounds in an exported program); the proof covers
``0 .. L - 1`` and says so.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - torch's own spelling


def _pick(position_ids: torch.Tensor, limit: int | None, long: torch.Tensor,
          short: torch.Tensor) -> torch.Tensor:
    """``long`` where the batch's largest position reaches past ``limit`` (longrope), else
    ``short``; ``long`` alone when there is no second set."""
    if limit is None:
        return long
    return torch.where(position_ids.max() + 1 > limit, long, short)


class RotaryTable(nn.Module):
    """cos/sin rows gathered at ``position_ids`` from tables the original computed.

    ``tables``: per layer type (``None`` for a single set), ``(cos, sin)`` float32 ``[L, R]``
    and, for longrope, ``(cos, sin)`` of the short set ``[P, R]`` and ``P``."""

    def __init__(self, tables: dict, attention_scaling: float | dict) -> None:
        super().__init__()
        self.kinds = {}
        for key, (cos, sin, short, limit) in tables.items():
            name = key or "rope"
            self.register_buffer(f"{name}_cos", cos.contiguous(), persistent=False)
            self.register_buffer(f"{name}_sin", sin.contiguous(), persistent=False)
            if short is not None:
                self.register_buffer(f"{name}_short_cos", short[0].contiguous(), persistent=False)
                self.register_buffer(f"{name}_short_sin", short[1].contiguous(), persistent=False)
            self.kinds[key] = (name, cos.shape[0], limit)
        # kept as the original keeps it (the attention layers never read it; a user might)
        self.attention_scaling = attention_scaling

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type=None):
        name, rows, limit = self.kinds[layer_type]
        pos = position_ids.clamp(0, rows - 1)
        cos = F.embedding(pos, getattr(self, f"{name}_cos"))
        sin = F.embedding(pos, getattr(self, f"{name}_sin"))
        if limit is not None:
            short = position_ids.clamp(0, limit - 1)
            cos = _pick(position_ids, limit, cos,
                        F.embedding(short, getattr(self, f"{name}_short_cos")))
            sin = _pick(position_ids, limit, sin,
                        F.embedding(short, getattr(self, f"{name}_short_sin")))
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class RotarySliced(nn.Module):
    """cos/sin of ``position_ids * inv_freq`` by angle addition over bit-slice tables.

    ``sets``: per layer type, ``(inv_freq, short_inv_freq or None, limit or None, scale)``
    (float32 numpy ``[R/2]``; ``scale`` the attention factor, folded into the top tables);
    ``widths``: the slice plan, most significant first; ``max_len``: the clamp."""

    def __init__(self, sets: dict, widths, max_len: int, attention_scaling) -> None:
        super().__init__()
        import numpy as np

        from edgepe.graphs.sliced import slice_tables

        self.widths = tuple(int(w) for w in widths)
        self.max_len = int(max_len)
        self.attention_scaling = attention_scaling
        self.kinds = {}
        for key, (inv_freq, short_freq, limit, scale) in sets.items():
            name = key or "rope"
            for tag, freq in (("", inv_freq), ("short_", short_freq)):
                if freq is None:
                    continue
                scales = np.full(len(freq), scale, dtype=np.float32)
                tables = slice_tables(np.asarray(freq, np.float32), self.widths, scales)
                for c, (cos, sin) in enumerate(tables):  # least significant slice first
                    self.register_buffer(f"{name}_{tag}c{c}", torch.from_numpy(cos),
                                         persistent=False)
                    self.register_buffer(f"{name}_{tag}s{c}", torch.from_numpy(sin),
                                         persistent=False)
            self.kinds[key] = (name, limit)

    def _angles(self, pos: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        shift = 0
        cos = sin = None
        for c, width in enumerate(reversed(self.widths)):
            # floor division and remainder by powers of two: exact on int64, and every exporter
            # here lowers them (litert-torch has no aten.bitwise_right_shift: issue 42)
            part = torch.remainder(torch.div(pos, 1 << shift, rounding_mode="floor"), 1 << width)
            c_t = F.embedding(part, getattr(self, f"{name}c{c}"))
            s_t = F.embedding(part, getattr(self, f"{name}s{c}"))
            if cos is None:
                cos, sin = c_t, s_t
            else:  # cos(a + b), sin(a + b) with b this (higher) slice's angle
                cos, sin = c_t * cos - s_t * sin, s_t * cos + c_t * sin
            shift += width
        return cos, sin

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type=None):
        name, limit = self.kinds[layer_type]
        pos = position_ids.clamp(0, self.max_len - 1)
        cos, sin = self._angles(pos, f"{name}_")
        if limit is not None:
            short_cos, short_sin = self._angles(pos, f"{name}_short_")
            cos = _pick(position_ids, limit, cos, short_cos)
            sin = _pick(position_ids, limit, sin, short_sin)
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class MRope(nn.Module):
    """Multimodal RoPE (Qwen2-VL's ``mrope_section`` and its kin): the rotary contract with
    ``position_ids`` ``[B, S]`` or ``[3, B, S]`` (temporal, height, width streams).

    ``inner`` (a ``RotaryTable`` or ``RotarySliced``) gives each stream's per-slot cos/sin
    ``[3, B, S, >= half]`` (slot ``i`` in column ``i``); ``index`` ``[R]`` picks output column ``c``
    from the flattened ``[3 * half]`` (stream ``s``, slot ``i`` at ``s * half + i``): the
    original's own ``recomposition_frequencies``, read off it by ``edgepe.patch.build`` (a
    selection, so the same values land in the same columns: Qwen2-VL's sections then
    ``[f | f]``, Qwen3-VL's interleave, GLM-4V's ``repeat_interleave`` alike)."""

    def __init__(self, inner: nn.Module, index: torch.Tensor, half: int) -> None:
        super().__init__()
        self.inner = inner
        self.half = int(half)
        self.register_buffer("index", index.to(torch.int64).contiguous(), persistent=False)
        self.attention_scaling = inner.attention_scaling

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        pos = position_ids.expand(3, -1, -1)  # as the original: text ids are one stream thrice
        cos, sin = self.inner(x, pos)
        out = []
        for t in (cos, sin):  # [3, B, S, half] -> [B, S, 3 * half] -> the original's columns
            t = t[..., : self.half].movedim(0, -2).flatten(-2)
            out.append(t.index_select(-1, self.index))
        return out[0], out[1]


class T5RelativeBias(nn.Module):
    """T5's ``compute_bias`` without its logarithm: put in a ``T5Attention``'s instance
    ``__dict__`` as ``compute_bias`` (shadowing the method; not a registered submodule, so the
    model's modules and state dict are unchanged), it returns what the method returns,
    ``[1, H, q, k]`` rows of the attention's own ``relative_attention_bias`` table.

    The bucket of ``u - t`` is a gather of ``lut`` (``edgepe.schemes.t5_bias``'s
    ``magnitude_buckets``: T5's bucket of each distance ``0 .. C``, every one past ``C`` the
    last) at ``min(|u - t|, C)`` plus ``num_buckets // 2`` for a later key (bidirectional: the
    encoder), or at ``min(max(t - u, 0), C)`` (causal: the decoder): integer compares and one
    gather, equal to transformers' float32 ``log`` buckets at every distance below 2^24
    (tests/test_t5_mrope.py checks the lookup to 2^25). The table is the attention's own
    ``nn.Embedding``, held by reference (not registered: the state dict keeps its keys)."""

    def __init__(self, embedding: nn.Embedding, lut: torch.Tensor, bidirectional: bool) -> None:
        super().__init__()
        object.__setattr__(self, "embedding", embedding)  # shared, not a second state-dict key
        self.register_buffer("lut", lut.to(torch.int64).contiguous(), persistent=False)
        self.bidirectional = bool(bidirectional)
        self.later = embedding.num_embeddings // 2 if bidirectional else 0

    def forward(self, query_length, key_length, device=None, past_seen_tokens=0):
        device = self.embedding.weight.device if device is None else device
        lut = self.lut.to(device)  # not moved with the model: it is not registered there
        context = torch.arange(query_length, dtype=torch.long, device=device)[:, None] \
            + past_seen_tokens
        memory = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative = memory - context  # u - t, as T5
        top = self.lut.shape[0] - 1
        if self.bidirectional:
            bucket = lut[relative.abs().clamp(max=top)] \
                + (relative > 0).to(torch.long) * self.later
        else:
            bucket = lut[(-relative).clamp(0, top)]
        values = self.embedding(bucket)  # [q, k, H]
        return values.permute([2, 0, 1]).unsqueeze(0)
