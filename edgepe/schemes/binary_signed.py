"""``binary-signed``: bits mapped to -1/+1, ``2 b - 1`` (guide 3.5, solution 1).

Columns past ``n`` hold the zero bit, so -1. Bits are those of ``pos mod 2^n``.
"""

from __future__ import annotations

import torch

from edgepe.schemes._base import Scheme, bits, require_bits
from edgepe.schemes._registry import SchemeSpec, n_bits, register


@register(
    SchemeSpec(
        id="binary-signed",
        source="guide 3.5",
        summary="2b - 1: bits as -1/+1",
        d_model=lambda max_len, params: n_bits(max_len),
        exact=True,
        oob="wrap",
        check=lambda config: require_bits(config, config.d_model),
    )
)
class BinarySigned(Scheme):
    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return 2.0 * bits(positions, self.config.d_model, self.config.n_bits) - 1.0
