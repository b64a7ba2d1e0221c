"""``integer``: ``pos / C`` on every dimension (guide 2.1), ``C`` defaults to ``max_len``.

Computed as one float32 division of the float32 position, as ``Cast`` then ``Div`` do in a
graph, so artifacts match bitwise. Defined for ``|pos| <= 2^24`` (exact float32 positions).
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, divide
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, Param, SchemeSpec, register


@register(
    SchemeSpec(
        id="integer",
        source="guide 2.1",
        summary="pos / C on every dimension",
        # 1e-30 <= C <= 1e38: float32(C) is normal and finite, and pos / C finite for |pos| <= 2^24.
        params=(Param("C", lambda max_len: float(max_len), float,
                      "scaling constant (default: max_len)", low=1e-30, high=1e38),),
        tolerance=(0.0, 0.0),
        tolerance_why="one correctly rounded float32 division per value: bitwise equal",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Integer(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        value = divide(positions.to(torch.float32), torch.tensor(self.config.params["C"]))
        return value.unsqueeze(-1).expand(-1, self.config.d_model).contiguous()
