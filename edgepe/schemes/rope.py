"""``rope``: rotary embeddings, pairs of q/k rotated by ``pos * w_i`` (principles).

Conventions, as the models people deploy define them (issue 16):

- ``layout``: which dimensions form a pair. ``interleaved`` (default) pairs ``(2i, 2i + 1)``
  (GPT-J, rotary-embedding-torch, Meta's original Llama code on complex numbers); ``half`` pairs
  ``(i, i + R/2)`` (GPT-NeoX and every Hugging Face ``rotate_half`` model: Llama, Mistral, Qwen,
  Gemma, Phi). The frequency of pair ``i`` is ``w_i`` either way.
- ``rotary_dim`` ``R`` (0 = all of ``d``): only the first ``R`` dimensions rotate, the rest pass
  through unchanged (GPT-NeoX ``rotary_pct``, Phi ``partial_rotary_factor``). As in Hugging Face,
  the frequencies are those of an ``R``-dimensional rotation: ``w_i = base^(-2i/R)``, ``i < R/2``.
- ``rope_type``: the frequency scalings of Hugging Face's RoPE init functions
  (``transformers/src/transformers/modeling_rope_utils.py``, ``ROPE_INIT_FUNCTIONS``), parameters
  named as in ``rope_scaling``; ``P = original_max_position_embeddings``:
  ``default``; ``linear`` (position interpolation): ``w_i / factor``; ``dynamic`` (NTK) for the
  fixed sequence length ``seq_len`` of a static graph: ``base' = base ((factor s / P) -
  (factor - 1))^(R / (R - 2))`` with ``s = max(seq_len, P)``; ``llama3``: wavelengths
  ``2 pi / w_i`` above ``P / low_freq_factor`` divide ``w_i`` by ``factor``, below
  ``P / high_freq_factor`` keep it, and between them blend with ``(P / wavelen - low) / (high -
  low)``; ``yarn``: ``w_i`` blends ``w_i`` and ``w_i / factor`` by a linear ramp over the
  dimensions between ``find_correction_dim(beta_fast)`` and ``(beta_slow)``, and cos/sin are
  multiplied by the attention factor (``attention_factor``, or ``0.1 ln(factor) + 1`` when 0).

``encode(pos)`` gives ``[N, d] = [cos(theta) | sin(theta)]``, one column per pair slot
``i < d/2``: ``theta_i = pos w_i`` for the ``R/2`` rotated pairs (times the attention factor for
yarn), and ``cos = 1, sin = 0`` for the pass-through slots (``w_i = 0``), so the interleaved
rotation by ``encode`` leaves them exactly unchanged. ``apply(x, pos)`` rotates ``x [..., S, d]``
at positions ``[S]``, or at per-row positions ``[B, S]`` for ``x [B, S, d]`` or
``[B, H, S, d]``; ``apply(q, t) . apply(k, u)`` depends only on ``u - t``. The frequencies are
computed in float64 and stored as float32; the angle is the float32 product ``pos * w_i``.
Defined for ``|pos| <= 2^24``.
"""

from __future__ import annotations

import math

import torch

from edgepe.errors import BadParameterError
from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    TRIG_MODES,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)
from edgepe.schemes.sinusoidal import BASE, angles

LAYOUTS = ("interleaved", "half")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


def rotary_dim(config: SchemeConfig) -> int:
    """``R``: the rotated width (``rotary_dim``, or ``d_model`` when 0)."""
    return config.params["rotary_dim"] or config.d_model


def frequencies(config: SchemeConfig) -> tuple[torch.Tensor, float]:
    """``(w [R/2] float64, attention_factor)`` of the config's ``rope_type`` (module docstring)."""
    p = config.params
    dim, base, factor = rotary_dim(config), p["base"], p["factor"]
    exponent = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    original = p["original_max_position_embeddings"]
    kind = p["rope_type"]
    if kind == "dynamic":
        seq_len = max(p["seq_len"], original)
        base = base * ((factor * seq_len / original) - (factor - 1)) ** (dim / (dim - 2))
    w = 1.0 / base**exponent
    if kind == "linear":
        return w / factor, 1.0
    if kind == "llama3":
        low_wavelen = original / p["low_freq_factor"]
        high_wavelen = original / p["high_freq_factor"]
        wavelen = 2 * math.pi / w
        scaled = torch.where(wavelen > low_wavelen, w / factor, w)
        smooth = (original / wavelen - p["low_freq_factor"]) / (
            p["high_freq_factor"] - p["low_freq_factor"])
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, blended, scaled), 1.0
    if kind == "yarn":
        def correction_dim(rotations: float) -> float:
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(correction_dim(p["beta_fast"])), 0)
        high = min(math.ceil(correction_dim(p["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001  # HF: "prevent singularity"
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        w = (w / factor) * (1 - extrapolation) + w * extrapolation
        attention = p["attention_factor"] or 0.1 * math.log(factor) + 1.0
        return w, attention
    return w, 1.0


def _check(config: SchemeConfig) -> None:
    p, d = config.params, config.d_model
    r = rotary_dim(config)
    if r % 2 or r > d:
        raise BadParameterError(
            f"scheme 'rope': rotary_dim {p['rotary_dim']} must be even and at most d_model {d} "
            "(0 rotates all of d_model)"
        )
    if p["rope_type"] == "dynamic" and r <= 2:
        raise BadParameterError("scheme 'rope': rope_type dynamic needs rotary_dim > 2 "
                                "(its base exponent is R / (R - 2))")
    if p["rope_type"] == "llama3" and p["high_freq_factor"] <= p["low_freq_factor"]:
        raise BadParameterError(
            f"scheme 'rope': llama3 needs high_freq_factor > low_freq_factor, got "
            f"{p['high_freq_factor']} and {p['low_freq_factor']}"
        )


@register(
    SchemeSpec(
        id="rope",
        source="principles",
        summary="rotate pairs of q/k by pos * base^(-2i/d); cos/sin caches and an apply graph",
        kind="rope",
        params=(
            BASE,
            Param("layout", "interleaved", str, "pairs (2i, 2i+1) (GPT-J) or (i, i+R/2) "
                  "(GPT-NeoX, Llama, HF rotate_half)", choices=LAYOUTS),
            Param("rotary_dim", 0, int, "rotated width R, the rest passes through (0: d_model)",
                  low=0),
            Param("rope_type", "default", str, "frequency scaling, as Hugging Face's "
                  "rope_scaling.rope_type", choices=ROPE_TYPES),
            Param("factor", 1.0, float, "scaling factor (linear, dynamic, llama3, yarn)",
                  low=1.0),
            Param("original_max_position_embeddings", lambda max_len: max_len, int,
                  "the trained context P (dynamic, llama3, yarn)", low=1,
                  default_text="max_len"),
            Param("seq_len", lambda max_len: max_len, int, "dynamic: the fixed sequence length "
                  "the static graph is built for", low=1, default_text="max_len"),
            Param("low_freq_factor", 1.0, float, "llama3", low=0.0, low_open=True),
            Param("high_freq_factor", 4.0, float, "llama3", low=0.0, low_open=True),
            Param("beta_fast", 32.0, float, "yarn", low=0.0, low_open=True),
            Param("beta_slow", 1.0, float, "yarn", low=0.0, low_open=True),
            Param("attention_factor", 0.0, float, "yarn: cos/sin scale (0: 0.1 ln(factor) + 1)",
                  low=0.0),
        ),
        even_d_model=True,
        modes=TRIG_MODES,
        # For encode ([cos | sin]). apply(x) multiplies the same cos/sin by x: its error scales
        # with |x| (measured 4.8e-7 for |x| <= 5.4: ~2 x 1.19e-7 x |x|).
        tolerance=(0.0, 1e-6),
        tolerance_why="as sinusoidal: sin/cos kernels differ by <= 2 ulp, measured 1.19e-7 "
        "(onnxruntime CPU vs torch, |pos| <= 2^24); apply outputs scale it by |x|",
        position_limit=FLOAT_EXACT_POSITIONS,
        check=_check,
    )
)
class Rope(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        half = config.d_model // 2
        w, attention = frequencies(config)
        inv_freq = torch.zeros(half, dtype=torch.float64)  # pass-through slots: angle 0
        inv_freq[: len(w)] = w
        scale = torch.ones(half, dtype=torch.float64)
        scale[: len(w)] = attention
        self.register_buffer("inv_freq", inv_freq.to(torch.float32))
        # cos/sin multiplier (yarn's attention factor on the rotated slots; 1 otherwise)
        self.register_buffer("scale", scale.to(torch.float32))
        self.layout = config.params["layout"]
        self.rotary_dim = rotary_dim(config)
        # Whether cos/sin are multiplied by an attention factor other than 1 (yarn): decided
        # here, not from the buffer in encode, so torch.export (--format pte) can trace encode.
        self.scaled = bool((scale != 1).any())

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        theta = angles(positions, self.inv_freq)
        cos, sin = torch.cos(theta), torch.sin(theta)
        if self.scaled:
            cos, sin = cos * self.scale, sin * self.scale
        return torch.cat([cos, sin], dim=-1)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., S, d]`` at ``positions [S]``, or ``x [B, S, d]`` / ``[B, H, S, d]``
        at per-row ``positions [B, S]``, in the configured layout."""
        cos, sin = self.encode(positions.reshape(-1)).chunk(2, dim=-1)  # [B S, d/2] each
        shape = (*positions.shape, -1)
        if positions.dim() == 2:  # [B, S] -> [B, 1, ..., S, d/2]: broadcast over the heads
            shape = (positions.shape[0], *([1] * (x.dim() - 3)), positions.shape[1], -1)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        return rotate(x, cos, sin, self.layout, self.rotary_dim)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x [B, S, d]`` (or ``[B, H, S, d]``) at positions ``offset ..``."""
        positions = torch.arange(offset, offset + x.shape[-2], dtype=torch.int64)
        return self.apply(x, positions)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
           rotary_dim: int) -> torch.Tensor:
    """``x [..., d]`` rotated by ``cos``/``sin`` ``[..., d/2]`` (broadcast) in ``layout``.

    ``interleaved``: pair ``(2i, 2i+1)`` by slot ``i`` (pass-through slots have cos 1, sin 0).
    ``half``: pair ``(i, i + R/2)`` of the first ``R`` dimensions by slot ``i``, as Hugging
    Face's ``q * cos + rotate_half(q) * sin``; dimensions ``R ..`` are copied.
    """
    if layout == "interleaved":
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(-2)
    half = rotary_dim // 2
    cos, sin = cos[..., :half], sin[..., :half]
    first, second = x[..., :half], x[..., half:rotary_dim]
    return torch.cat([first * cos - second * sin, first * sin + second * cos,
                      x[..., rotary_dim:]], dim=-1)
