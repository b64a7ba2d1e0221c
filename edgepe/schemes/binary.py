"""``binary``: the demo's module. Bits of the position projected by ``Linear(n_bits, d_model)``.

Source: binary-pe-demo-notebook. The class keeps the demo's name, constructor and state_dict keys
(``pe_binary`` ``[1, max_len, n_bits]``, ``projection.weight`` ``[d_model, n_bits]``), so a
checkpoint saved from the notebook loads as it is. The table is built vectorised (the demo's
double loop is the example not to follow). ``encode`` computes the bits from the positions
directly, so it is defined for every int64 position: the bits of ``pos mod 2^n_bits``.
"""

from __future__ import annotations

import torch
from torch import nn

from edgepe.schemes._base import Scheme, bits, require_table_bytes
from edgepe.schemes._registry import (
    ALL_MODES,
    Param,
    SchemeConfig,
    SchemeSpec,
    n_bits,
    register,
)


@register(
    SchemeSpec(
        id="binary",
        source="demo notebook",
        summary="bits(pos, n) @ W, W learned (Linear(n_bits, d_model, bias=False))",
        params=(Param("dropout", 0.0, float, "dropout after adding the encoding", low=0.0,
                      high=1.0),),
        d_model=64,
        exact=False,
        # The projection is a float32 dot product of 0/1 bits with weights: at most n_bits <= 41
        # additions, each rounding by half an ulp of a value |y| <= sum|W_k|. Different runtimes
        # may sum in another order, so allow a few ulp of the largest output (|W| < 1 here).
        tolerance=(1e-6, 1e-6),
        tolerance_why="float32 dot product of n_bits terms: a few ulp, summation order may differ",
        oob="wrap",
        # sliced: the bits' projection as one small table per bit slice (graphs.sliced)
        modes=ALL_MODES,
        learnable=True,
        check=lambda config: require_table_bytes(
            config, config.max_len, n_bits(config.max_len), "demo bit table (pe_binary)"),
    )
)
class BinaryPositionalEncoding(Scheme):
    """Binary PE: position i as its bit pattern, projected n_bits -> d_model by a learned layer."""

    @classmethod
    def from_config(cls, config: SchemeConfig) -> BinaryPositionalEncoding:
        return cls(config.d_model, config.max_len, dropout=config.params["dropout"])

    def __init__(self, d_model: int, max_seq_len: int = 512, dropout: float = 0.1) -> None:
        super().__init__(SchemeConfig("binary", max_seq_len, d_model, None, {"dropout": dropout}))
        self.dropout = nn.Dropout(p=dropout)
        self.n_bits = n_bits(max_seq_len)
        positions = torch.arange(max_seq_len, dtype=torch.int64)
        pe_binary = bits(positions, self.n_bits, self.n_bits)
        self.register_buffer("pe_binary", pe_binary.unsqueeze(0))  # (1, max_seq_len, n_bits)
        self.projection = nn.Linear(self.n_bits, d_model, bias=False)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return self.projection(bits(positions, self.n_bits, self.n_bits))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """The demo's forward: ``x + projection(pe_binary[:, :S])`` then dropout.

        With ``offset`` (streaming decode) the bits come from ``encode`` instead of the table.
        """
        seq_len = x.size(1)
        if offset == 0 and seq_len <= self.pe_binary.shape[1]:
            pe = self.projection(self.pe_binary[:, :seq_len, :])
        else:
            pe = super().forward(torch.zeros_like(x), offset)
        return self.dropout(x + pe)
