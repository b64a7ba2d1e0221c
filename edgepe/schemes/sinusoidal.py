"""``sinusoidal``: ``sin/cos(pos / base^(2i/d))`` interleaved, even columns sin (principles).

``PE(pos, 2i) = sin(pos w_i)``, ``PE(pos, 2i + 1) = cos(pos w_i)``, ``w_i = base^(-2i/d)``
(computed in float64, stored as float32: the buffer a graph holds too). The angle is the float32
product ``pos * w_i``; only sin/cos themselves differ between implementations. Defined for
``|pos| <= 2^24``. The guide's 4.3 row prints cos(10) as 0.839; it is -0.839.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    TRIG_MODES,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)

BASE = Param("base", 10000.0, float, "wavelength base", low=1.0, low_open=True)


def inverse_frequencies(d_model: int, base: float) -> torch.Tensor:
    """``base^(-2i/d)`` for ``i < d/2``: float64 math, float32 result."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return (base ** (-2.0 * i / d_model)).to(torch.float32)


def angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``[N, d/2]`` float32 ``pos * w_i``, as ``Cast`` then ``Mul`` compute it."""
    return positions.to(torch.float32).unsqueeze(-1) * inv_freq


@register(
    SchemeSpec(
        id="sinusoidal",
        source="principles",
        summary="sin/cos(pos / base^(2i/d)) interleaved, even = sin",
        params=(BASE,),
        even_d_model=True,
        modes=TRIG_MODES,
        # sin/cos of the same float32 angle (graphs recompute it op for op, so it is bitwise
        # equal). torch (SLEEF), onnxruntime CPU (MLAS) and numpy (the ONNX reference evaluator)
        # all reduce large arguments correctly: measured max |ort - torch| = 1.19e-7 (2^-23,
        # two ulp of a value just under 1) over 0..2^24 and -2^24..-1, every d tried
        # (docs/readme/float-graphs.md). 1e-6 leaves 8x for kernels with 2-ulp sin/cos.
        tolerance=(0.0, 1e-6),
        tolerance_why="sin/cos kernels differ by <= 2 ulp of a value <= 1: measured 1.19e-7 "
        "(onnxruntime CPU vs torch, |pos| <= 2^24); 1e-6 leaves room for 2-ulp kernels",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Sinusoidal(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.register_buffer("inv_freq", inverse_frequencies(config.d_model, config.params["base"]))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        theta = angles(positions, self.inv_freq)
        return torch.stack([torch.sin(theta), torch.cos(theta)], dim=-1).flatten(-2)
