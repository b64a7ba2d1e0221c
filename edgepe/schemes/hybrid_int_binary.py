"""``hybrid-int-binary``: first ``d/2`` dims ``pos / (L - 1)``, the rest the bits (guide 5.1).

With odd ``d`` the integer part takes ``floor(d/2)`` dims. The bit part holds the bits of
``pos mod 2^n`` and must be at least ``n`` wide; the integer part extrapolates.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, bits, normalised, require_bits
from edgepe.schemes._registry import FLOAT_EXACT_POSITIONS, SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="hybrid-int-binary",
        source="guide 5.1",
        summary="first d/2 dims pos / (L - 1), last d/2 the bits",
        d_model=lambda max_len, params: 2 * n_bits(max_len),
        tolerance=(0.0, 0.0),
        tolerance_why="bits are exact; the integer half is one correctly rounded division",
        oob="mixed",
        position_limit=FLOAT_EXACT_POSITIONS,
        check=lambda config: require_bits(
            config, config.d_model - config.d_model // 2, "the bit half (d_model - d_model // 2)"
        ),
    )
)
class HybridIntBinary(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        half = self.config.d_model // 2
        lin = normalised(positions, self.config.max_len).unsqueeze(-1).expand(-1, half)
        b = bits(positions, self.config.d_model - half, self.config.n_bits)
        return torch.cat([lin, b], dim=-1)
