"""``mrope``: multimodal RoPE, Qwen2-VL's rotation over three position streams.

Positions are ``[N, 3]``: a temporal, a height and a width index per token (a text token has all
three equal, and then ``mrope`` equals ``rope``). The ``d/2`` frequency slots
``w_i = 1 / base^(2i/d)`` are split into consecutive sections of ``mrope_section`` (Qwen2-VL:
``16, 24, 24`` of 64 slots); section ``j`` takes its angles from stream ``j mod 3``, as
transformers' ``Qwen2VLRotaryEmbedding.recomposition_frequencies`` selects them
(``models/qwen2_vl/modeling_qwen2_vl.py``, 5.24; ``apply_multimodal_rotary_pos_emb`` before it):
``theta_i = pos[stream(i)] * w_i``.

``encode(positions [N, 3]) -> [N, d] = [cos(theta) | sin(theta)]``, one column per slot, as
``rope``'s encode; transformers' ``cos``/``sin`` are these halves duplicated (``[c | c]``) and
rotate pairs ``(i, i + d/2)`` (``rotate_half``, rope's ``layout=half``). ``w`` is computed in
float32 op for op as transformers' ``compute_default_rope_parameters`` (rope's
``freq_dtype=float32``) and the angle is the float32 product, so cos/sin are transformers' up to
the sin/cos kernels. ``d_model`` is ``2 sum(mrope_section)``. Every position extrapolates;
defined for ``|pos| <= 2^24`` in each stream.
"""

from __future__ import annotations

import torch

from edgepe.contract.errors import BadParameterError
from edgepe.schemes._base import Scheme
from edgepe.schemes._registry import (
    FLOAT_EXACT_POSITIONS,
    Param,
    SchemeConfig,
    SchemeSpec,
    register,
)

STREAMS = 3  # temporal, height, width


def streams(section: tuple[int, ...]) -> torch.Tensor:
    """``[d/2]`` int64: the stream each frequency slot takes its position from (``j mod 3``
    for the slots of section ``j``)."""
    ids = torch.arange(len(section), dtype=torch.int64) % STREAMS
    return ids.repeat_interleave(torch.tensor(section, dtype=torch.int64))


def _check(config: SchemeConfig) -> None:
    section = config.params["mrope_section"]
    if config.d_model != 2 * sum(section):
        raise BadParameterError(
            f"scheme 'mrope': d_model {config.d_model} must be 2 x sum(mrope_section) = "
            f"{2 * sum(section)} (one frequency slot per section entry; leave --d-model out)")


@register(
    SchemeSpec(
        id="mrope",
        source="Qwen2-VL",
        summary="multimodal RoPE: frequency sections take (temporal, height, width) positions; "
                "positions [N, 3]",
        kind="pe",
        params=(
            Param("base", 1000000.0, float, "rope_theta (Qwen2-VL: 1e6)", low=1.0,
                  low_open=True),
            Param("mrope_section", (16, 24, 24), "ints", "frequency slots per section; section "
                  "j reads stream j mod 3 (temporal, height, width)", low=1, high=2**14,
                  default_text="16,24,24"),
        ),
        d_model=lambda max_len, params: 2 * sum(params["mrope_section"]),
        even_d_model=True,
        # compute only: a table would be rope's [L, d] read once per stream, which every table
        # reader (runtime, bin, C) places per scheme (binary-2d, hierarchical); not built here
        modes=("compute",),
        tolerance=(0.0, 1e-6),
        tolerance_why="as rope: the float32 angle is bitwise the reference's, sin/cos kernels "
        "differ by <= 2 ulp (1.19e-7 measured for rope, |pos| <= 2^24)",
        position_limit=FLOAT_EXACT_POSITIONS,
        arity=lambda config: STREAMS,
        check=_check,
    )
)
class MRope(Scheme):
    def __init__(self, config: SchemeConfig) -> None:
        super().__init__(config)
        dim = config.d_model
        # transformers' compute_default_rope_parameters, on float32 tensors
        inv_freq = 1.0 / (config.params["base"]
                          ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq.to(torch.float32))
        self.register_buffer("streams", streams(config.params["mrope_section"]),
                             persistent=False)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        self.check_domain(positions)
        # each slot's own stream, then the float32 product, as transformers (its product is
        # taken for all three streams before the selection: the same numbers)
        theta = positions.to(torch.float32)[:, self.streams] * self.inv_freq
        return torch.cat([torch.cos(theta), torch.sin(theta)], dim=-1)
