"""``t5-bias``: T5's bucketed relative position bias, a learned ``[num_buckets, H]`` embedding.

``bias[h, t, u] = E[bucket(u - t), h]`` (Raffel et al., 2020, section 2.1; transformers'
``T5Attention.compute_bias``, ``models/t5/modeling_t5.py``), added to attention logits.
``encode(positions [N], key_positions [M]) -> [H, N, M]``. The relative position is
``memory - query``, ``u - t``; ``bucket`` is ``T5Attention._relative_position_bucket`` op for op
(``relative_position_bucket`` below, float32 ``log`` and the truncating ``.to(long)`` included):

- ``direction=bidirectional`` (the encoder): half of the buckets for ``u - t <= 0``, half (offset
  ``num_buckets // 2``) for ``u - t > 0``, each over ``|u - t|``;
- ``direction=causal`` (the decoder, ``is_decoder``): every bucket for ``max(t - u, 0)``;
  a key after the query shares bucket 0 with distance 0 (masked in a decoder anyway).

Within a direction's ``B`` buckets, the first ``B / 2`` hold the exact distances ``0 .. B/2 - 1``
and the rest logarithmically larger ranges up to ``max_distance``. Out of range: every
distance from ``max_distance`` on (and before it, from where the logarithm reaches it) shares the
last bucket, which IS T5's behaviour (its docstring: "All relative positions >= max_distance map to
the same bucket"); so the scheme extrapolates to every position with a constant bias far away.
Defined for ``|pos| <= 2^24`` (the distance is cast to float32 as transformers casts it).

The embedding ``relative_attention_bias`` (an ``nn.Embedding``, as in T5Attention, so a T5
state_dict loads with ``--checkpoint-key encoder.block.0.layer.0.SelfAttention``, or the one
tensor with ``--checkpoint-param ...relative_attention_bias.weight``) is otherwise the seeded
``nn.Embedding`` init. ``magnitude_buckets`` gives the integer lookup the ONNX graph uses in place
of the logarithm (``edgepe/graphs/bias.py``, issue 40).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)

DIRECTIONS = ("bidirectional", "causal")


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> torch.Tensor:
    """transformers' ``T5Attention._relative_position_bucket`` (5.24), op for op: int64 buckets
    of int64 ``relative_position = u - t``."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    return relative_buckets + torch.where(is_small, relative_position, relative_position_if_large)


def direction_buckets(config: SchemeConfig) -> int:
    """``B``: the buckets of one direction (``num_buckets // 2`` when bidirectional)."""
    n = config.params["num_buckets"]
    return n // 2 if config.params["direction"] == "bidirectional" else n


def _check(config: SchemeConfig) -> None:
    p = config.params
    per_direction = direction_buckets(config)
    if per_direction < 2:
        raise BadParameterError(
            f"scheme 't5-bias': num_buckets {p['num_buckets']} leaves {per_direction} bucket(s) "
            f"per direction ({p['direction']}); T5's buckets need at least 2 (use num_buckets >= "
            f"{4 if p['direction'] == 'bidirectional' else 2})")
    if p["max_distance"] <= per_direction // 2:
        raise BadParameterError(
            f"scheme 't5-bias': max_distance {p['max_distance']} must be above the "
            f"{per_direction // 2} exact buckets (T5 divides by log(max_distance / "
            f"{per_direction // 2}))")


@register(
    SchemeSpec(
        id="t5-bias",
        source="T5",
        summary="bias[h, t, u] = E[bucket(u - t), h]: T5's log-bucketed relative bias, learned E",
        kind="bias",
        params=(
            Param("num_buckets", 32, int, "relative_attention_num_buckets (rows of E)", low=2,
                  high=4096),
            Param("max_distance", 128, int, "relative_attention_max_distance: the distance "
                  "from which every bucket is the last", low=1, high=2**20),
            Param("direction", "bidirectional", str, "bidirectional (encoder) or causal "
                  "(decoder, is_decoder)", choices=DIRECTIONS),
        ),
        d_model=None,
        heads=8,
        tolerance=(0.0, 0.0),
        tolerance_why="integer buckets, then rows of E copied: bitwise equal",
        learnable=True,
        position_limit=FLOAT_EXACT_POSITIONS,
        check=_check,
    )
)
class T5Bias(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        p = config.params
        self.relative_attention_bias = nn.Embedding(p["num_buckets"], config.heads)
        self.bidirectional = p["direction"] == "bidirectional"

    def bucket(self, relative_position: torch.Tensor) -> torch.Tensor:
        """T5's bucket of ``u - t`` (``relative_position_bucket`` with this config)."""
        p = self.config.params
        return relative_position_bucket(relative_position, self.bidirectional,
                                        p["num_buckets"], p["max_distance"])

    def magnitude_buckets(self) -> torch.Tensor:
        """``lut [C + 1]`` int64: the bucket of a key ``a`` positions before the query
        (``bucket(-a)``), for ``a = 0 .. C``, with ``C`` the first distance from which every
        bucket up to ``max_distance`` is the last one. So ``bucket(u - t)`` is
        ``lut[min(|u - t|, C)]`` (plus ``num_buckets // 2`` for ``u > t``, bidirectional) or
        ``lut[min(max(t - u, 0), C)]`` (causal); tests/test_t5_mrope.py checks it against
        ``bucket`` at every distance up to 2^25, past which positions are undefined."""
        magnitude = torch.arange(self.config.params["max_distance"] + 1, dtype=torch.int64)
        lut = self.bucket(-magnitude)
        last = int(lut[-1])
        assert last == direction_buckets(self.config) - 1, last  # saturated at max_distance
        below = torch.nonzero(lut != last)
        stop = int(below[-1]) + 2 if len(below) else 1
        return lut[:stop]

    def encode(self, positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions, key_positions)
        relative = key_positions - positions.unsqueeze(-1)  # [N, M], u - t as T5 (memory - query)
        return self.relative_attention_bias.weight[self.bucket(relative)].permute(2, 0, 1)

    def forward(self, scores: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the bias to attention ``scores [..., H, N, M]`` (queries at ``offset ..``)."""
        n, m = scores.shape[-2:]
        q = torch.arange(offset, offset + n, dtype=torch.int64)
        return scores + self.encode(q, torch.arange(m, dtype=torch.int64)).to(scores.dtype)
