"""``integer-multiscale``: ``pos / (L - 1) * s_i`` with ``s_i = (i / (d - 1))^alpha`` (guide 2.3).

``s`` is computed in float64 and stored as float32 (a buffer, the same constant a graph holds);
``d = 1`` uses ``s_0 = 1``. Defined for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, normalised
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)


@register(
    SchemeSpec(
        id="integer-multiscale",
        source="guide 2.3",
        summary="pos / (L - 1) * (i / (d - 1))^alpha",
        params=(Param("alpha", 1.0, float, "exponent of the per-dimension scale", low=0.0),),
        tolerance=(0.0, 0.0),
        tolerance_why="a division then a multiplication, each correctly rounded: bitwise equal",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class IntegerMultiscale(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        d = config.d_model
        i = torch.arange(d, dtype=torch.float64)
        if d > 1:
            scale = (i / (d - 1)) ** config.params["alpha"]
        else:
            scale = torch.ones(1, dtype=torch.float64)
        self.register_buffer("scale", scale.to(torch.float32))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        return normalised(positions, self.config.max_len).unsqueeze(-1) * self.scale
