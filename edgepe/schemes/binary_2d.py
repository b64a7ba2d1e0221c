"""``binary-2d``: bits of ``x`` and ``y`` interleaved ``[x0, y0, x1, y1, ...]`` (guide 6.2).

Positions are ``[N, 2]`` (x, y), each in ``0 .. max_len - 1``; column ``2 i`` is bit ``i`` of
``x mod 2^n`` and column ``2 i + 1`` bit ``i`` of ``y mod 2^n``. ``d_model`` defaults to ``2 n``
(columns past it are 0). The guide's example prints the bits MSB-first; the formula wins:
``PE(5, 3) = [1,1, 0,1, 1,0, 0,0]``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, require_bits
from edgepe.schemes._registry import SchemeConfig, SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="binary-2d",
        source="guide 6.2",
        summary="bits of x and y interleaved [x0, y0, x1, y1, ...]; positions [N, 2]",
        d_model=lambda max_len, params: 2 * n_bits(max_len),
        exact=True,
        oob="wrap",
        arity=lambda config: 2,
        check=lambda config: require_bits(config, config.d_model // 2, "d_model / 2"),
    )
)
class Binary2D(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        column = torch.arange(config.d_model, dtype=torch.int64)
        self.register_buffer("shifts", column // 2, persistent=False)
        self.register_buffer("axis", column % 2, persistent=False)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        coordinate = positions[:, self.axis]  # [N, d]: x for even columns, y for odd
        shifted = torch.bitwise_right_shift(coordinate, self.shifts.clamp(max=63))
        return ((shifted & 1) * (self.shifts < self.config.n_bits)).to(torch.float32)
