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
  multiplied by the attention factor (``attention_factor``, or ``0.1 ln(factor) + 1`` when 0);
  ``longrope`` (Phi-3): ``w_i = 1 / (f_i base^(2i/R))`` with ``f = long_factor`` when ``seq_len >
  P``, else ``short_factor`` (``R/2`` numbers each), and cos/sin times ``attention_factor``, or
  ``sqrt(1 + ln(factor) / ln(P))`` when 0 (1 for ``factor <= 1``).

``freq_dtype``: ``float64`` (the default for ``--scheme rope``) computes ``w`` in float64 and
rounds it to float32 once; ``float32`` computes it as transformers does, op for op on float32
tensors (``1.0 / (base ** (arange(0, R, 2).float() / R))`` and each rope_type's float32 steps;
dynamic NTK past ``P`` in float32 too, as its forward does), so cos/sin are bit-exact with the
model's own rotary embedding. The two differ by up to a few float32 ulp of ``w_i`` (measured:
7.6e-6 in cos at position 511, d 64, base 10000). ``--from-hf-config`` picks ``float32``.

``encode(pos)`` gives ``[N, d] = [cos(theta) | sin(theta)]``, one column per pair slot
``i < d/2``: ``theta_i = pos w_i`` for the ``R/2`` rotated pairs (times the attention factor for
yarn), and ``cos = 1, sin = 0`` for the pass-through slots (``w_i = 0``), so the interleaved
rotation by ``encode`` leaves them exactly unchanged. ``apply(x, pos)`` rotates ``x [..., S, d]``
at positions ``[S]``, or at per-row positions ``[B, S]`` for ``x [B, S, d]`` or
``[B, H, S, d]``; ``apply(q, t) . apply(k, u)`` depends only on ``u - t``. The frequencies
are computed per ``freq_dtype`` (below) and stored as float32; the angle is the float32
product ``pos * w_i``.
Defined for ``|pos| <= 2^24``.
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
from edgepe.schemes.sinusoidal import BASE, angles

LAYOUTS = ("interleaved", "half")
FLOAT32_MAX = 3.4028234663852886e38  # float(torch.finfo(torch.float32).max)
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")
FREQ_DTYPES = ("float64", "float32")
# Parameters added after rope artifacts were first written: left out of a manifest at their
# default, so earlier artifacts rebuild byte-identical (Param.omit_default).
FREQ_DTYPE = Param("freq_dtype", "float64", str, "inverse frequencies computed in float64 and "
                   "rounded once, or in float32 op for op as transformers does",
                   choices=FREQ_DTYPES, omit_default=True)


def rotary_dim(config: SchemeConfig) -> int:
    """``R``: the rotated width (``rotary_dim``, or ``d_model`` when 0)."""
    return config.params["rotary_dim"] or config.d_model


def attention_factor(config: SchemeConfig) -> float:
    """The cos/sin multiplier: yarn's and longrope's attention factor, 1 otherwise."""
    p = config.params
    kind, factor = p["rope_type"], p["factor"]
    if kind == "yarn":
        return p["attention_factor"] or 0.1 * math.log(factor) + 1.0
    if kind == "longrope":
        if p["attention_factor"]:
            return p["attention_factor"]
        original = p["original_max_position_embeddings"]
        return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return 1.0


def _longrope_factors(config: SchemeConfig) -> tuple[float, ...]:
    p = config.params
    long = p["seq_len"] > p["original_max_position_embeddings"]
    return p["long_factor"] if long else p["short_factor"]


def frequencies(config: SchemeConfig) -> tuple[torch.Tensor, float]:
    """``(w [R/2], attention_factor)`` of the config's ``rope_type`` (module docstring): float64
    for ``freq_dtype=float64``, float32 computed as transformers does for ``float32``."""
    if config.params.get("freq_dtype", "float64") == "float32":
        return frequencies_float32(config), attention_factor(config)
    p = config.params
    dim, base, factor = rotary_dim(config), p["base"], p["factor"]
    exponent = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    original = p["original_max_position_embeddings"]
    kind = p["rope_type"]
    if kind == "dynamic":
        seq_len = max(p["seq_len"], original)
        base = base * ((factor * seq_len / original) - (factor - 1)) ** (dim / (dim - 2))
    w = 1.0 / base**exponent
    if kind == "longrope":
        ext = torch.tensor(_longrope_factors(config), dtype=torch.float64)
        return 1.0 / (ext * base**exponent), attention_factor(config)
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
        return w, attention_factor(config)
    return w, 1.0


def frequencies_float32(config: SchemeConfig) -> torch.Tensor:
    """``w [R/2]`` float32, op for op as transformers' rope init functions compute it
    (``modeling_rope_utils.py``; default: each model's ``compute_default_rope_parameters``)."""
    p = config.params
    dim, base, factor = rotary_dim(config), p["base"], p["factor"]
    original = p["original_max_position_embeddings"]
    kind = p["rope_type"]
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    if kind == "longrope":
        ext = torch.tensor(_longrope_factors(config), dtype=torch.float32)
        return 1.0 / (ext * base**exponent)
    if kind == "dynamic":
        if p["seq_len"] > original:
            # the forward's update: seq_len is the tensor max(position_ids) + 1, so the new base
            # is a float32 tensor
            seq = torch.tensor(p["seq_len"], dtype=torch.int64)
            base = base * ((factor * seq / original) - (factor - 1)) ** (dim / (dim - 2))
        else:  # the init's: python floats, seq_len = max_position_embeddings
            base = base * ((factor * original / original) - (factor - 1)) ** (dim / (dim - 2))
    if kind == "yarn":
        def correction_dim(rotations: float) -> float:
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
        extrapolation_w = 1.0 / pos_freqs
        interpolation_w = 1.0 / (factor * pos_freqs)
        low = max(math.floor(correction_dim(p["beta_fast"])), 0)
        high = min(math.ceil(correction_dim(p["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp.to(dtype=torch.float)
        return interpolation_w * (1 - extrapolation) + extrapolation_w * extrapolation
    w = 1.0 / (base**exponent)
    if kind == "linear":
        w /= factor
    elif kind == "llama3":
        low_wavelen = original / p["low_freq_factor"]
        high_wavelen = original / p["high_freq_factor"]
        wavelen = 2 * math.pi / w
        scaled = torch.where(wavelen > low_wavelen, w / factor, w)
        smooth = (original / wavelen - p["low_freq_factor"]) / (
            p["high_freq_factor"] - p["low_freq_factor"])
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        w = torch.where(medium, blended, scaled)
    return w


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
    if p["rope_type"] == "longrope":
        for name in ("short_factor", "long_factor"):
            if len(p[name]) != r // 2:
                raise BadParameterError(
                    f"scheme 'rope': longrope needs {name} with rotary_dim / 2 = {r // 2} numbers "
                    f"(one per rotated pair), got {len(p[name])}")
    _check_frequencies(config)


def _check_frequencies(config: SchemeConfig) -> None:
    """The frequencies and attention factor these parameters give must be finite float32
    numbers, the attention factor positive: a dynamic NTK base raised to ``R / (R - 2)`` past
    float64 (``factor`` 1e300: Python's ``**`` raises OverflowError) or a cos/sin scale past
    float32 is bad input, named here, not an internal error (issue 41)."""
    kind = config.params["rope_type"]
    try:
        w, attention = frequencies(config)
    except (OverflowError, ZeroDivisionError, ValueError) as exc:
        why = "float64 overflows" if isinstance(exc, OverflowError) else str(exc)
        raise BadParameterError(f"scheme 'rope': rope_type {kind} with these parameters has no "
                                f"finite frequencies ({why})") from None
    w32 = w.to(torch.float32)
    if not bool(torch.isfinite(w32).all()) or bool((w32 < 0).any()):
        raise BadParameterError(f"scheme 'rope': rope_type {kind} with these parameters gives "
                                "frequencies that are not finite non-negative float32 numbers")
    if not (0 < attention <= FLOAT32_MAX):
        raise BadParameterError(f"scheme 'rope': rope_type {kind} with these parameters gives "
                                f"an attention factor of {attention!r}: it must be a positive "
                                "float32 number")


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
            Param("attention_factor", 0.0, float, "yarn, longrope: cos/sin scale (0: yarn "
                  "0.1 ln(factor) + 1, longrope sqrt(1 + ln(factor) / ln(P)))", low=0.0),
            FREQ_DTYPE,
            Param("short_factor", (), "floats", "longrope: R/2 frequency divisors for seq_len "
                  "<= P", low=0.0, low_open=True, omit_default=True, default_text="none"),
            Param("long_factor", (), "floats", "longrope: R/2 frequency divisors for seq_len "
                  "> P", low=0.0, low_open=True, omit_default=True, default_text="none"),
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
        inv_freq = torch.zeros(half, dtype=w.dtype)  # pass-through slots: angle 0
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
