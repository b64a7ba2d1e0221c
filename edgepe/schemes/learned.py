"""``learned``: a learned ``[max_len, d]`` table (principles: learned absolute encodings).

Positions past the end clamp to the last row and negative ones to the first: "the most common
strategy, clamping, reuses the vector for the last known position". The table is a parameter
(init normal, std 0.02, from the seed, or a model's own table: ``--checkpoint`` with
``--checkpoint-param transformer.wpe.weight``); only a table export exists. ``offset``: leading
rows of the checkpoint's tensor that are no position (OPT's ``embed_positions`` has 2); the
table holds the rows after them, position 0 first.
"""

from __future__ import annotations

import torch
from torch import nn

from edgepe.schemes._base import Scheme, require_table_bytes
from edgepe.schemes._registry import Param, SchemeConfig, SchemeSpec, register


@register(
    SchemeSpec(
        id="learned",
        source="principles",
        summary="learned table; positions past the end clamp to the last row",
        modes=("table",),
        params=(Param("offset", 0, int, "leading rows of a --checkpoint-param tensor before "
                      "position 0 (OPT: 2)", low=0, high=2**20, omit_default=True),),
        tolerance=(0.0, 0.0),
        tolerance_why="rows are copied, never computed: bitwise equal",
        oob="clamp",
        learnable=True,
        check=lambda config: require_table_bytes(
            config, config.max_len, config.d_model, "learned table"),
    )
)
class Learned(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        self.table = nn.Parameter(torch.randn(config.max_len, config.d_model) * 0.02)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions.clamp(0, self.config.max_len - 1)]
