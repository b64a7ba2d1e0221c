"""``integer-norm``: ``pos / (L - 1)`` on every dimension (guide 2.2); ``L = 1`` divides by 1.

Positions ``0 .. L - 1`` map into ``[0, 1]``; others extrapolate linearly. Defined for
``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, normalised
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeSpec, register


@register(
    SchemeSpec(
        id="integer-norm",
        source="guide 2.2",
        summary="pos / (L - 1) on every dimension",
        tolerance=(0.0, 0.0),
        tolerance_why="one correctly rounded float32 division per value: bitwise equal",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class IntegerNorm(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        value = normalised(positions, self.config.max_len)
        return value.unsqueeze(-1).expand(-1, self.config.d_model).contiguous()
