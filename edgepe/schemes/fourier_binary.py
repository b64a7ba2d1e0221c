"""``fourier-binary``: the DFT of the bit vector over the bit index (guide 5.2, made precise).

The guide writes ``sum_j b_j e^{2 pi i j / d}``, which has no frequency index and would give one
complex number. edgepe defines it as the discrete Fourier transform of the ``n`` bits of
``pos mod 2^n`` over the bit index ``j``, at frequencies ``k = 0 .. d/2 - 1``:

    F_k(pos) = sum_j b_j(pos) exp(-2 pi i j k / n)
    PE(pos) = [Re F_0, ..., Re F_{d/2-1}, Im F_0, ..., Im F_{d/2-1}]

It is a fixed linear map of the bits, ``bits @ M`` with ``M = [cos | -sin]`` (float64, stored as
float32, with the entries that are mathematically 0 exactly 0), exported as one MatMul. The bits
are real, so ``F_{n-k}`` is the conjugate of ``F_k`` and frequencies ``0 .. floor(n/2)`` already
determine them: the encoding is unique per position when ``d/2 > n/2``, which is checked.
``d_model`` defaults to ``2 n`` and must be even; frequencies ``k >= n`` alias ``k mod n``.
"""

from __future__ import annotations

import math

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme, bits
from edgepe.schemes._registry import SchemeConfig, SchemeSpec, n_bits, register


def _check(config: SchemeConfig) -> None:
    needed = 2 * (config.n_bits // 2 + 1)
    if config.d_model < needed:
        raise BadParameterError(
            f"scheme 'fourier-binary': d_model {config.d_model} is too small to keep the "
            f"{config.n_bits} bits of max_len {config.max_len} distinct; use at least {needed}"
        )


@register(
    SchemeSpec(
        id="fourier-binary",
        source="guide 5.2",
        summary="DFT of the bits over the bit index: [Re F_k | Im F_k], k < d/2",
        d_model=lambda max_len, params: 2 * n_bits(max_len),
        even_d_model=True,
        tolerance=(1e-6, 1e-6),
        tolerance_why="float32 dot product of n 0/1 bits with |M| <= 1: a few ulp of <= n, "
        "summation order may differ between runtimes",
        oob="wrap",
        check=_check,
    )
)
class FourierBinary(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        n = config.n_bits
        j = torch.arange(n, dtype=torch.float64).unsqueeze(-1)
        k = torch.arange(config.d_model // 2, dtype=torch.float64)
        angle = 2 * math.pi * torch.remainder(j * k, n) / n
        basis = torch.cat([torch.cos(angle), -torch.sin(angle)], dim=-1)
        # cos/sin of a multiple of pi/2 are exactly 0, not float64's ~1e-16: every other entry
        # is at least sin(pi / (2n)) >= 1/n in magnitude, so the snap changes nothing else. Noise
        # would pass as signal downstream (an int8 scale of 1e-18 for an all-zero column).
        basis = torch.where(basis.abs() < 1e-9, 0.0, basis)
        self.register_buffer("basis", basis.to(torch.float32))  # [n, d]

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return bits(positions, self.config.n_bits, self.config.n_bits) @ self.basis
