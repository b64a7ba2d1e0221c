"""``hierarchical``: the bits of each level concatenated (guide 5.4, 6.4).

Positions are ``[N, levels]`` (e.g. section, paragraph, sentence); level ``l`` contributes
``widths[l]`` bits of ``pos_l mod 2^widths[l]``, LSB-first. ``widths`` defaults to three levels
of ``n`` bits; ``d_model`` is ``sum(widths)``. Guide 6.4: section 2, paragraph 3, sentence 5
with widths ``2,2,3`` give ``[0,1, 1,1, 1,0,1]``.
"""

from __future__ import annotations

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import Param, SchemeConfig, SchemeSpec, n_bits, register


def _check(config: SchemeConfig) -> None:
    widths = config.params["widths"]
    if config.d_model != sum(widths):
        raise BadParameterError(
            f"scheme 'hierarchical': d_model {config.d_model} must equal sum(widths) = "
            f"{sum(widths)} (widths {','.join(map(str, widths))})"
        )
    if max(widths) > 63:
        raise BadParameterError(f"scheme 'hierarchical': widths must be <= 63, got {max(widths)}")


@register(
    SchemeSpec(
        id="hierarchical",
        source="guide 5.4, 6.4",
        summary="bits of each level concatenated; positions [N, levels]",
        params=(
            Param(
                "widths",
                lambda max_len: (n_bits(max_len),) * 3,
                "ints",
                "bits per level, comma-separated (default: 3 levels of n bits)",
                low=1,
                default_text="3 levels of n bits",
            ),
        ),
        d_model=lambda max_len, params: sum(params["widths"]),
        exact=True,
        oob="wrap",
        arity=lambda config: len(config.params["widths"]),
        check=_check,
    )
)
class Hierarchical(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        widths = config.params["widths"]
        self.register_buffer(
            "level", torch.repeat_interleave(torch.arange(len(widths)), torch.tensor(widths)),
            persistent=False,
        )
        self.register_buffer(
            "shifts", torch.cat([torch.arange(w) for w in widths]), persistent=False
        )

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        # bit shifts[j] of level[j]
        shifted = torch.bitwise_right_shift(positions[:, self.level], self.shifts)
        return (shifted & 1).to(torch.float32)
