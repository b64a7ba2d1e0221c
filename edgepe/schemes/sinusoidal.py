"""``sinusoidal``: ``sin/cos(pos / base^(2i/d))`` interleaved, even columns sin (principles).

``PE(pos, 2i) = sin(pos w_i)``, ``PE(pos, 2i + 1) = cos(pos w_i)``, ``w_i = base^(-2i/d)``
(computed in float64, stored as float32: the buffer a graph holds too). The angle is the float32
product ``pos * w_i``; only sin/cos themselves differ between implementations. Defined for
``|pos| <= 2^24``. The guide's 4.3 row prints cos(10) as 0.839; it is -0.839.

Variants of the models people deploy (parameters left out of a manifest at their default, so
earlier artifacts rebuild the same bytes):

- ``layout=half``: ``[sin(pos w) | cos(pos w)]``, the halves side by side (Marian, XGLM, M2M100,
  fairseq) instead of interleaved.
- ``frequencies=fairseq``: ``w_i = exp(-i ln(base) / (d/2 - 1))`` (tensor2tensor / fairseq, as
  XGLM and M2M100 compute it) instead of ``base^(-2i/d)``.
- ``offset``: added to every position before the angle (fairseq's padding offset: XGLM and
  M2M100 read row ``pos + padding_idx + 1``, i.e. ``offset=2`` for ``padding_idx=1``).
- ``freq_dtype=float32``: ``w`` computed in float32 op for op as transformers does (XGLM/M2M100's
  ``torch.exp(arange(half).float() * -(ln(base) / (half - 1)))``; ``1.0 / base ** (arange(0, d,
  2).float() / d)`` otherwise), instead of in float64 and rounded once.
"""

from __future__ import annotations

import math

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    TRIG_MODES,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)

BASE = Param("base", 10000.0, float, "wavelength base", low=1.0, low_open=True)
LAYOUTS = ("interleaved", "half")
FREQUENCIES = ("base", "fairseq")
FREQ_DTYPES = ("float64", "float32")


def inverse_frequencies(d_model: int, base: float, frequencies: str = "base",
                        freq_dtype: str = "float64") -> torch.Tensor:
    """``w_i`` for ``i < d/2`` as float32: ``base^(-2i/d)`` (``frequencies="base"``) or
    ``exp(-i ln(base) / (d/2 - 1))`` (``"fairseq"``), computed in float64 and rounded once, or
    (``freq_dtype="float32"``) in float32 as transformers computes it."""
    half = d_model // 2
    if freq_dtype == "float32":
        if frequencies == "fairseq":  # XGLM / M2M100 get_embedding
            step = math.log(base) / (half - 1)
            return torch.exp(torch.arange(half, dtype=torch.int64).float() * -step)
        return 1.0 / (base ** (torch.arange(0, d_model, 2, dtype=torch.int64).float() / d_model))
    i = torch.arange(half, dtype=torch.float64)
    if frequencies == "fairseq":
        return torch.exp(i * -(math.log(base) / (half - 1))).to(torch.float32)
    return (base ** (-2.0 * i / d_model)).to(torch.float32)


def _check(config: SchemeConfig) -> None:
    if config.params["frequencies"] == "fairseq" and config.d_model < 4:
        raise BadParameterError(
            f"scheme 'sinusoidal': frequencies fairseq divides by d_model/2 - 1: d_model must "
            f"be at least 4, got {config.d_model}")


def angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """``[N, d/2]`` float32 ``pos * w_i``, as ``Cast`` then ``Mul`` compute it."""
    return positions.to(torch.float32).unsqueeze(-1) * inv_freq


@register(
    SchemeSpec(
        id="sinusoidal",
        source="principles",
        summary="sin/cos(pos / base^(2i/d)) interleaved, even = sin",
        params=(
            BASE,
            Param("layout", "interleaved", str, "sin in even columns, cos in odd (interleaved) "
                  "or [sin | cos] halves (Marian, XGLM, M2M100)", choices=LAYOUTS,
                  omit_default=True),
            Param("frequencies", "base", str, "w_i = base^(-2i/d), or fairseq's "
                  "exp(-i ln(base) / (d/2 - 1)) (XGLM, M2M100)", choices=FREQUENCIES,
                  omit_default=True),
            Param("offset", 0, int, "added to positions before the angle (fairseq's padding "
                  "offset: 2 for XGLM/M2M100)", low=-(2**24), high=2**24, omit_default=True),
            Param("freq_dtype", "float64", str, "inverse frequencies computed in float64 and "
                  "rounded once, or in float32 as transformers does", choices=FREQ_DTYPES,
                  omit_default=True),
        ),
        even_d_model=True,
        check=_check,
        modes=TRIG_MODES,
        # sin/cos of the same float32 angle (graphs recompute it op for op, so it is bitwise
        # equal). torch (SLEEF), onnxruntime CPU (MLAS) and numpy (the ONNX reference evaluator)
        # all reduce large arguments correctly: measured max |ort - torch| = 1.19e-7 (2^-23,
        # two ulp of a value just under 1) over 0..2^24 and -2^24..-1, every d tried
        # (docs/readme/float-graphs.md). 1e-6 leaves 8x for kernels with 2-ulp sin/cos.
        tolerance=(0.0, 1e-6),
        tolerance_why="sin/cos kernels differ by <= 2 ulp of a value <= 1: measured 1.19e-7 "
        "(onnxruntime CPU vs torch, |pos| <= 2^24); 1e-6 leaves room for 2-ulp kernels",
        position_limit=FLOAT_EXACT_POSITIONS,
    )
)
class Sinusoidal(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        p = config.params
        self.register_buffer("inv_freq", inverse_frequencies(
            config.d_model, p["base"], p["frequencies"], p["freq_dtype"]))
        self.layout, self.offset = p["layout"], p["offset"]

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        if self.offset:
            positions = positions + self.offset
        theta = angles(positions, self.inv_freq)
        if self.layout == "half":
            return torch.cat([torch.sin(theta), torch.cos(theta)], dim=-1)
        return torch.stack([torch.sin(theta), torch.cos(theta)], dim=-1).flatten(-2)
