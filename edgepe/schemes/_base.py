"""The base class of every reference module, and the vectorised helpers the schemes share.

Conventions (DESIGN.md):
- positions are int64 tensors ``[N]`` (``[N, k]`` for multi-index schemes);
- bit order is LSB-first: column ``k`` holds ``(pos >> k) & 1``;
- bit schemes wrap: the bits are those of ``pos mod 2^n`` (two's complement for negatives),
  which is what ``Cast(int64 -> uint64)``, ``BitShift`` and ``BitwiseAnd`` compute in a graph.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from edgepe.contract.errors import BadParameterError, PositionError
from edgepe.schemes._registry import MODULE_BYTES_LIMIT, SchemeConfig, SchemeSpec, min_bits
from edgepe.schemes._vml import warm as _warm_vml


class Scheme(nn.Module):
    """A reference positional encoding. Subclasses implement ``encode``."""

    spec: ClassVar[SchemeSpec]
    config: SchemeConfig

    @classmethod
    def from_config(cls, config: SchemeConfig) -> Scheme:
        module = cls(config)
        return module

    def __init__(self, config: SchemeConfig) -> None:
        super().__init__()
        # MKL VML's first call of each function, single-threaded, before any reference is
        # computed: a concurrent first call can run a low-accuracy kernel (issue 41, _vml.py)
        _warm_vml()
        self.config = config

    @property
    def d_out(self) -> int:
        """Width of the encoding (``H`` for bias schemes)."""
        return self.config.heads if self.spec.kind == "bias" else self.config.d_model

    def encode(self, positions: torch.Tensor, *args: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def check_domain(self, *positions: torch.Tensor) -> None:
        """Raise ``PositionError`` for positions past ``spec.position_limit`` (float schemes).

        Skipped while ``torch.export`` traces the module (``--format pte``): a data-dependent
        check cannot be traced, and the runtimes check positions before they run an artifact.
        """
        if self.spec.position_limit is not None and not torch.compiler.is_exporting():
            for p in positions:
                check_float_positions(p, self.spec.position_limit)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x [B, S, D] + encode(offset .. offset + S - 1)``, as the demo's forward adds it."""
        positions = torch.arange(offset, offset + x.shape[-2], dtype=torch.int64)
        return x + self.encode(positions).to(x.dtype)


def check_positions(positions: torch.Tensor, arity: int | None = None) -> torch.Tensor:
    """Positions as int64 ``[N]`` (or ``[N, arity]``); anything else is a ``PositionError``."""
    if not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(positions)
    if positions.dtype.is_floating_point or positions.dtype in (torch.bool, torch.complex64):
        raise PositionError(f"positions must be integers, got dtype {positions.dtype}")
    expected = 1 if arity is None else 2
    if positions.dim() != expected or (arity is not None and positions.shape[-1] != arity):
        shape = "[N]" if arity is None else f"[N, {arity}]"
        raise PositionError(f"positions must have shape {shape}, got {list(positions.shape)}")
    return positions.to(torch.int64)


def bits(positions: torch.Tensor, width: int, n: int) -> torch.Tensor:
    """``[..., width]`` float32 bits of ``positions mod 2^n``, LSB-first; columns ``>= n`` are 0."""
    return bit_select(positions, torch.arange(width, dtype=torch.int64), n)


def bit_select(positions: torch.Tensor, shifts: torch.Tensor, n: int) -> torch.Tensor:
    """``[..., len(shifts)]`` float32: column ``j`` is bit ``shifts[j]`` of ``positions mod 2^n``.

    Columns whose shift is ``>= n`` are 0. Negative positions are read in two's complement
    (``>>`` on int64 is arithmetic), matching ``Cast(int64 -> uint64)`` then ``BitShift``.
    """
    # torch.bitwise_right_shift, not ``>>``: the operator traces to aten.__rshift__, which is not
    # in the Core ATen opset that torch.export / ExecuTorch programs are made of (issue 22).
    shifted = torch.bitwise_right_shift(positions.unsqueeze(-1), shifts.clamp(max=63))
    return ((shifted & 1) * (shifts < n)).to(torch.float32)


def wrap(positions: torch.Tensor, n: int) -> torch.Tensor:
    """``positions mod 2^n`` (two's complement low ``n`` bits), as ``BitwiseAnd`` with a mask."""
    return positions & ((1 << n) - 1)


def require_bits(config: SchemeConfig, width: int, what: str = "d_model") -> None:
    """Refuse a bit width that cannot keep positions ``0 .. max_len - 1`` distinct.

    The guide's minimum ``ceil(log2 L)`` (``min_bits``) is accepted (issue 16: guide 3.7's
    ``L = 16``, 3 groups of 4 bits), though the default widths stay ``n = ceil(log2(L + 1))``.
    The wrap policy is unchanged (bits of ``pos mod 2^n``); at the minimum width, positions
    past ``2^width - 1`` repeat the codes of smaller ones, as any ``width < n`` does.
    """
    need = min_bits(config.max_len)
    if width < need:
        raise BadParameterError(
            f"scheme '{config.scheme}': {what} {width} is too narrow for max_len "
            f"{config.max_len}, which needs ceil(log2 {config.max_len}) = {need} bits; use at "
            f"least {need}"
        )


def normalised(positions: torch.Tensor, max_len: int) -> torch.Tensor:
    """``pos / (L - 1)`` in float32, as ``Cast`` then ``Div`` compute it; ``L = 1`` divides by 1."""
    return divide(positions.to(torch.float32), torch.tensor(float(max(max_len - 1, 1))))


def divide(x: torch.Tensor, divisor: torch.Tensor) -> torch.Tensor:
    """``x / divisor`` (correctly rounded), with the divisor expanded to ``x``'s shape.

    The same values as a broadcast ``x / divisor`` in PyTorch, but a traced program divides
    elementwise: ExecuTorch's ``div`` multiplies by the reciprocal of a broadcast divisor, one
    ulp off at most positions (executorch 1.5.1), while dividing tensors of one shape it rounds
    correctly, as PyTorch, numpy and onnxruntime do (issue 22, ``--format pte``).
    """
    return x / divisor.expand_as(x)


def check_float_positions(positions: torch.Tensor, limit: int) -> None:
    """Refuse positions whose float32 conversion would round (``|pos| > limit``).

    Uses min/max, not ``abs``: ``abs`` of the int64 minimum overflows back to itself.
    """
    if positions.numel():
        low, high = (v.item() for v in positions.aminmax())
        if low < -limit or high > limit:
            worst = high if high > limit else low
            raise PositionError(
                f"positions must be within +-{limit} for this scheme (float32 is exact only up "
                f"to there), got {worst}"
            )


def require_table_bytes(config: SchemeConfig, rows: int, cols: int, what: str) -> None:
    """Refuse a configuration whose module would hold a float32 ``[rows, cols]`` tensor past
    ``MODULE_BYTES_LIMIT`` (checked by ``resolve``, before anything is allocated)."""
    size = 4 * rows * cols
    if size > MODULE_BYTES_LIMIT:
        raise BadParameterError(
            f"scheme '{config.scheme}': max_len {config.max_len} needs a {what} of "
            f"[{rows}, {cols}] float32 ({size / 2**30:.1f} GiB), over the "
            f"{MODULE_BYTES_LIMIT >> 30} GiB a reference module may hold; use a smaller max_len or "
            "d_model"
        )
