"""``alibi``: ``bias[h, t, u] = -m_h |t - u|`` with the ALiBi paper's slopes (principles).

Slopes (``--param slopes``):

- ``paper`` (default): the rule of the ALiBi paper (Press et al., 2022, section 3 and its
  reference code ``get_slopes``), which BLOOM, MPT and the common attention libraries follow.
  For ``H`` a power of two, ``m_h = 2^(-8 (h + 1) / H)``. Otherwise, with ``c`` the largest power
  of two below ``H``: heads ``h < c`` take the ``c``-head slopes ``2^(-8 (h + 1) / c)``, and the
  remaining ``H - c`` heads take every other slope of the ``2c``-head sequence, starting from the
  first: ``2^(-8 (2 j + 1) / (2 c))`` for ``j = 0 .. H - c - 1``. ``H = 12``:
  ``[2^-1 .. 2^-8, 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5]``.
- ``geometric``: ``m_h = 2^(-8 (h + 1) / H)`` for every ``H`` (edgepe before issue 16; equal to
  ``paper`` when ``H`` is a power of two).

``encode(positions [N], key_positions [M]) -> [H, N, M]``, added to attention logits. The
slopes are computed in float64 and stored as float32; ``|t - u|`` is an integer cast to
float32 once (exact up to 2^24; distances up to 2^25 round in that cast, as in a graph). Defined
for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)

SLOPE_RULES = ("paper", "geometric")


def slopes(heads: int, rule: str = "paper") -> torch.Tensor:
    """The ``H`` slopes ``m_h`` of ``rule`` (module docstring) as float32, computed in float64."""
    h = torch.arange(heads, dtype=torch.float64)
    closest = 1 << (heads.bit_length() - 1)  # the largest power of two <= heads
    if rule == "geometric" or closest == heads:
        exponent = -8.0 * (h + 1) / heads
    else:
        # heads past `closest` take the odd-numbered slopes of the 2c-head sequence
        extra = 2 * (h - closest) + 1
        exponent = torch.where(h < closest, -8.0 * (h + 1) / closest, -8.0 * extra / (2 * closest))
    return (2.0**exponent).to(torch.float32)


@register(
    SchemeSpec(
        id="alibi",
        source="principles",
        summary="bias[h, t, u] = -m_h |t - u|, slopes by the ALiBi paper's rule",
        kind="bias",
        params=(Param("slopes", "paper", str, "slope rule: paper (ALiBi, BLOOM, MPT) or "
                      "geometric (2^(-8 (h + 1) / H) for every H)", choices=SLOPE_RULES),),
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
        self.register_buffer("slopes", slopes(config.heads, config.params["slopes"]))

    def encode(self, positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions, key_positions)
        distance = (positions.unsqueeze(-1) - key_positions).abs().to(torch.float32)  # [N, M]
        return -(self.slopes.view(-1, 1, 1) * distance)

    def forward(self, scores: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the bias to attention ``scores [..., H, N, M]`` (queries at ``offset ..``)."""
        n, m = scores.shape[-2:]
        q = torch.arange(offset, offset + n, dtype=torch.int64)
        return scores + self.encode(q, torch.arange(m, dtype=torch.int64)).to(scores.dtype)
