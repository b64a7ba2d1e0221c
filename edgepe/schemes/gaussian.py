"""``gaussian``: a locality bias ``-(t - u)^2 / (2 sigma^2)`` on attention logits (principles).

"Gaussian bumps inject a prior for locality, making attention behave much like a convolutional
kernel." ``encode(positions [N], key_positions [M]) -> [H, N, M]``, the same for every head.
The distance is an exact integer cast to float32, squared, divided by the float32 constant
``2 sigma^2``. Defined for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, divide
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)


@register(
    SchemeSpec(
        id="gaussian",
        source="principles",
        summary="locality bias -(t - u)^2 / (2 sigma^2) added to attention logits",
        kind="bias",
        # 1e-6 <= sigma <= 1e18 keeps 2 sigma^2 a normal float32 and every bias finite for
        # |t - u| <= 2^25 (2^50 / (2 sigma^2) < 2^128).
        params=(Param("sigma", 8.0, float, "width of the bump, in positions", low=1e-6,
                      high=1e18),),
        d_model=None,
        heads=1,
        tolerance=(0.0, 0.0),
        tolerance_why="a float32 square and a division, each correctly rounded: bitwise equal",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Gaussian(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        sigma = config.params["sigma"]
        self.register_buffer("two_sigma_sq", torch.tensor(2.0 * sigma * sigma, dtype=torch.float32))

    def encode(self, positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions, key_positions)
        d = (positions.unsqueeze(-1) - key_positions).to(torch.float32)  # [N, M]
        bias = -divide(d * d, self.two_sigma_sq)
        return bias.unsqueeze(0).expand(self.config.heads, -1, -1).contiguous()

    def forward(self, scores: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the bias to attention ``scores [..., H, N, M]`` (queries at ``offset ..``)."""
        n, m = scores.shape[-2:]
        q = torch.arange(offset, offset + n, dtype=torch.int64)
        return scores + self.encode(q, torch.arange(m, dtype=torch.int64)).to(scores.dtype)
