"""``rope``: rotary embeddings, pairs of q/k rotated by ``pos * base^(-2i/d)`` (principles).

``encode(pos)`` gives ``[N, d] = [cos(theta) | sin(theta)]`` with ``theta = pos w_i``,
``i < d/2`` (the two caches a rotary kernel takes). ``apply(x, pos)`` rotates consecutive pairs
``(x_{2i}, x_{2i+1})`` of ``x [..., N, d]`` by ``theta_i`` (the interleaved convention), so that
``apply(q, t) . apply(k, u)`` depends only on ``u - t``. Defined for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeConfig, SchemeSpec, register
from edgepe.schemes.sinusoidal import BASE, angles, inverse_frequencies


@register(
    SchemeSpec(
        id="rope",
        source="principles",
        summary="rotate pairs of q/k by pos * base^(-2i/d); cos/sin caches and an apply graph",
        kind="rope",
        params=(BASE,),
        even_d_model=True,
        # For encode ([cos | sin]). apply(x) multiplies the same cos/sin by x: its error scales
        # with |x| (measured 4.8e-7 for |x| <= 5.4: ~2 x 1.19e-7 x |x|).
        tolerance=(0.0, 1e-6),
        tolerance_why="as sinusoidal: sin/cos kernels differ by <= 2 ulp, measured 1.19e-7 "
        "(onnxruntime CPU vs torch, |pos| <= 2^24); apply outputs scale it by |x|",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Rope(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.register_buffer("inv_freq", inverse_frequencies(config.d_model, config.params["base"]))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        theta = angles(positions, self.inv_freq)
        return torch.cat([torch.cos(theta), torch.sin(theta)], dim=-1)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., N, d]`` at ``positions [N]``: pair ``i`` by ``theta_i``."""
        cos, sin = self.encode(positions).chunk(2, dim=-1)  # [N, d/2] each
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(-2)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x [B, S, d]`` (or ``[B, H, S, d]``) at positions ``offset ..``."""
        positions = torch.arange(offset, offset + x.shape[-2], dtype=torch.int64)
        return self.apply(x, positions)
