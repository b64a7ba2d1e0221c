"""``integer-learnable``: ``w_i pos / (L - 1) + b_i``, initialised ``w = 1``, ``b = 0`` (guide 2.4).

``w`` and ``b`` are parameters: gradients flow to them in training. Defined for
``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch
from torch import nn

from edgepe.schemes._base import Scheme, normalised
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeConfig, SchemeSpec, register


@register(
    SchemeSpec(
        id="integer-learnable",
        source="guide 2.4",
        summary="w_i pos / (L - 1) + b_i, w = 1 and b = 0 at init",
        # Measured bitwise equal (max abs 0) on onnxruntime CPU and the ONNX reference evaluator
        # with random w, b (|w| ~ 3), positions up to 2^24. A runtime that fuses w x + b into an
        # FMA skips one rounding: an ulp of |w x|, which past max_len (x up to 2^24 / (L - 1))
        # is far above 1e-7, hence the relative part.
        tolerance=(2.4e-7, 1e-7),
        tolerance_why="a division, a multiplication and an addition in float32, measured bitwise "
        "equal on ORT CPU; a runtime may fuse the last two: one ulp (2^-23 relative, 1e-7 near 0)",
        position_limit=FLOAT_EXACT_POSITIONS,
        learnable=True,
    )
)
class IntegerLearnable(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.weight = nn.Parameter(torch.ones(config.d_model))
        self.bias = nn.Parameter(torch.zeros(config.d_model))

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        return normalised(positions, self.config.max_len).unsqueeze(-1) * self.weight + self.bias
