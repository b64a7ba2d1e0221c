"""``gray``: the bits of the Gray code ``g = p ^ (p >> 1)`` of ``p = pos mod 2^n`` (guide 3.6).

Wrapping before the code keeps it cyclic: positions ``2^n - 1`` and ``2^n`` (read as 0) differ
in one bit too, so adjacent positions are at Hamming distance 1 for every int64.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, bits, require_bits, wrap
from edgepe.schemes._registry import SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="gray",
        source="guide 3.6",
        summary="bits of the Gray code pos ^ (pos >> 1): neighbours differ in one bit",
        d_model=lambda max_len, params: n_bits(max_len),
        exact=True,
        oob="wrap",
        check=lambda config: require_bits(config, config.d_model),
    )
)
class Gray(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        p = wrap(positions, self.config.n_bits)
        return bits(p ^ torch.bitwise_right_shift(p, 1), self.config.d_model, self.config.n_bits)
