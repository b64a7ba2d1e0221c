"""``sinusoidal-learned``: sinusoidal plus a learned residual, zero past max_len (principles).

"Total PE = fixed sinusoidal PE + learned residual PE": the residual is a ``[max_len, d]``
parameter (init normal, std 0.02, from the seed) that "switches off" outside
``0 .. max_len - 1``, where the encoding is the plain sinusoidal one. Defined for
``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch
from torch import nn

from edgepe.schemes._base import Scheme, require_table_bytes
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeConfig, SchemeSpec, register
from edgepe.schemes.sinusoidal import BASE, angles, inverse_frequencies


@register(
    SchemeSpec(
        id="sinusoidal-learned",
        source="principles",
        summary="sinusoidal + learned residual that is zero past max_len",
        params=(BASE,),
        even_d_model=True,
        tolerance=(0.0, 1e-6),
        tolerance_why="as sinusoidal (sin/cos kernels, measured 1.19e-7 onnxruntime CPU vs "
        "torch for |pos| <= 2^24), plus one float32 addition rounded the same on both sides",
        oob="mixed",
        position_limit=FLOAT_EXACT_POSITIONS,
        learnable=True,
        check=lambda config: require_table_bytes(
            config, config.max_len, config.d_model, "learned residual"),
    )
)
class SinusoidalLearned(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.register_buffer("inv_freq", inverse_frequencies(config.d_model, config.params["base"]))
        self.residual = nn.Parameter(torch.randn(config.max_len, config.d_model) * 0.02)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        theta = angles(positions, self.inv_freq)
        fixed = torch.stack([torch.sin(theta), torch.cos(theta)], dim=-1).flatten(-2)
        inside = (positions >= 0) & (positions < self.config.max_len)
        rows = self.residual[positions.clamp(0, self.config.max_len - 1)]
        return fixed + rows * inside.unsqueeze(-1)
