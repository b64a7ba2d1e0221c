"""``binary-multilevel``: group ``g`` holds the bits of ``pos >> g`` (guide 3.7).

``PE(pos, g k + i) = bit_i(floor(pos / 2^g))`` with ``k = d_model / groups`` bits a group, so
column ``g k + i`` is bit ``g + i`` of ``pos mod 2^n`` (0 when ``g + i >= n``). The guide's
worked example prints group 0 MSB-first; the formula (LSB-first) wins:
``PE(13) = [1,0,1,1, 0,1,1,0, 1,1,0,0]``.
"""

from __future__ import annotations

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme, bit_select, require_bits
from edgepe.schemes._registry import Param, SchemeConfig, SchemeSpec, n_bits, register


def _check(config: SchemeConfig) -> None:
    groups = config.params["groups"]
    if config.d_model % groups:
        raise BadParameterError(
            f"scheme 'binary-multilevel': d_model {config.d_model} must be a multiple of "
            f"groups {groups}"
        )
    require_bits(config, config.d_model // groups, "bits per group (d_model / groups)")


@register(
    SchemeSpec(
        id="binary-multilevel",
        source="guide 3.7",
        summary="group g holds the bits of pos >> g",
        params=(Param("groups", 3, int, "number of scales (group g shifts by g)", low=1),),
        d_model=lambda max_len, params: params["groups"] * n_bits(max_len),
        exact=True,
        oob="wrap",
        check=_check,
    )
)
class BinaryMultilevel(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        per_group = config.d_model // config.params["groups"]
        column = torch.arange(config.d_model, dtype=torch.int64)
        self.register_buffer("shifts", column // per_group + column % per_group, persistent=False)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return bit_select(positions, self.shifts, self.config.n_bits)
