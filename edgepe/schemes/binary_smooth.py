"""``binary-smooth``: ``sigmoid(c (2 b - 1))`` (guide 3.5, solution 2).

Each entry is one of two float32 constants, ``lo = sigmoid(-c)`` and ``hi = sigmoid(c)``; the
module holds them as buffers and a graph selects between the same two values, so artifacts are
bitwise equal to the reference. Bits are those of ``pos mod 2^n``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, bits, require_bits
from edgepe.schemes._registry import Param, SchemeConfig, SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="binary-smooth",
        source="guide 3.5",
        summary="sigmoid(c (2b - 1)): bits smoothed by a temperature",
        params=(Param("c", 5.0, float, "temperature: larger is closer to hard bits", low=0.0,
                      low_open=True),),
        d_model=lambda max_len, params: n_bits(max_len),
        tolerance=(0.0, 0.0),
        tolerance_why="a select between the same two float32 constants: bitwise equal",
        oob="wrap",
        check=lambda config: require_bits(config, config.d_model),
    )
)
class BinarySmooth(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        c = torch.tensor(config.params["c"], dtype=torch.float32)
        self.register_buffer("lo", torch.sigmoid(-c))
        self.register_buffer("hi", torch.sigmoid(c))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        b = bits(positions, self.config.d_model, self.config.n_bits)
        return torch.where(b > 0, self.hi, self.lo)
