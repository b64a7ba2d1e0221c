"""``binary-gated``: ``g_i b_i + (1 - g_i) pos / (L - 1)``, ``g = sigmoid(logits)`` (guide 5.3).

The gate logits are parameters (init 0, so ``g = 0.5``): gradients flow to them in training.
An export folds ``g`` and ``1 - g`` into float32 constants (no Exp in the graph); the reference
computes them the same way. Columns past ``n`` have the zero bit. Defined for
``|pos| <= 2^24``.
"""

from __future__ import annotations

import torch
from torch import nn

from edgepe.schemes._base import Scheme, bits, normalised, require_bits
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    SchemeConfig,
    SchemeSpec,
    n_bits,
    register,
)


@register(
    SchemeSpec(
        id="binary-gated",
        source="guide 5.3",
        summary="g_i b_i + (1 - g_i) pos / (L - 1), gates g = sigmoid(learned logits)",
        d_model=lambda max_len, params: n_bits(max_len),
        # Measured bitwise equal (max abs 0) on onnxruntime CPU and the ONNX reference evaluator
        # with random gates, positions up to 2^24. A runtime may fuse a product into the sum (one
        # rounding fewer): an ulp of the result, which is <= ~1 inside the range but grows with
        # x = pos / (L - 1) past it, hence the relative part.
        tolerance=(2.4e-7, 1e-7),
        tolerance_why="two products and a sum in float32, measured bitwise equal on ORT CPU; a "
        "runtime may fuse them: one ulp (2^-23 relative, 1e-7 near 0)",
        oob="mixed",
        position_limit=FLOAT_EXACT_POSITIONS,
        learnable=True,
        check=lambda config: require_bits(config, config.d_model),
    )
)
class BinaryGated(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.gate_logits = nn.Parameter(torch.zeros(config.d_model))

    def gates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(g, 1 - g)`` in float32, the constants an export stores."""
        g = torch.sigmoid(self.gate_logits)
        return g, 1.0 - g

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        g, h = self.gates()
        b = bits(positions, self.config.d_model, self.config.n_bits)
        lin = normalised(positions, self.config.max_len).unsqueeze(-1)
        return b * g + lin * h
