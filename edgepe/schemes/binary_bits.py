"""``binary-bits``: the raw bits of the position, LSB-first (guide 3.2, 3.3).

``PE(pos, i) = floor(pos / 2^i) mod 2``. Width ``d_model`` when given (columns past ``n`` are 0),
else ``n = ceil(log2(max_len + 1))``. Bits are those of ``pos mod 2^n`` for every int64.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, bits, require_bits
from edgepe.schemes._registry import SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="binary-bits",
        source="guide 3.2",
        summary="raw bits of pos, LSB-first",
        d_model=lambda max_len, params: n_bits(max_len),
        exact=True,
        oob="wrap",
        check=lambda config: require_bits(config, config.d_model),
    )
)
class BinaryBits(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return bits(positions, self.config.d_model, self.config.n_bits)
