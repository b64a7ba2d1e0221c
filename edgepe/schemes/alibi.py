"""``alibi``: ``bias[h, t, u] = -m_h |t - u|``, ``m_h = 2^(-8 (h + 1) / H)`` (principles).

``encode(positions [N], key_positions [M]) -> [H, N, M]``, added to attention logits. The
slopes are computed in float64 and stored as float32; ``|t - u|`` is an integer cast to
float32 once (exact up to 2^24; distances up to 2^25 round in that cast, as in a graph). Defined
for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeConfig, SchemeSpec, register


def slopes(heads: int) -> torch.Tensor:
    """``m_h = 2^(-8 (h + 1) / H)`` as float32."""
    h = torch.arange(heads, dtype=torch.float64)
    return (2.0 ** (-8.0 * (h + 1) / heads)).to(torch.float32)


@register(
    SchemeSpec(
        id="alibi",
        source="principles",
        summary="bias[h, t, u] = -m_h |t - u|, m_h = 2^(-8 (h + 1) / H)",
        kind="bias",
        d_model=None,
        heads=8,
        tolerance=(0.0, 0.0),
        tolerance_why="an exact integer distance times a float32 slope, rounded once",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Alibi(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.register_buffer("slopes", slopes(config.heads))

    def encode(self, positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions, key_positions)
        distance = (positions.unsqueeze(-1) - key_positions).abs().to(torch.float32)  # [N, M]
        return -(self.slopes.view(-1, 1, 1) * distance)

    def forward(self, scores: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the bias to attention ``scores [..., H, N, M]`` (queries at ``offset ..``)."""
        n, m = scores.shape[-2:]
        q = torch.arange(offset, offset + n, dtype=torch.int64)
        return scores + self.encode(q, torch.arange(m, dtype=torch.int64)).to(scores.dtype)
