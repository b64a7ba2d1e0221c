"""The float64 definition of the trig schemes: what ``--mode sliced`` artifacts are checked against.

The scheme modules compute the float32 recipe every model uses: the angle ``pos * w_i`` rounded to
float32, then sin/cos (``edgepe.schemes.sinusoidal.angles``). That rounding puts cos/sin up to
``|pos w| 2^-24`` off the exact value (9.8e-4 below position 32768 at base 1e4). The definition
evaluates the same formula in float64 on the module's stored float32 frequencies (and yarn's
float32 attention factor): ``pos * w_i`` is exact in float64 for ``|pos| < 2^29``, so the only
error left is float64's sin/cos (< 1e-16). ``Definition(module)`` has the module's ``encode`` and
``apply`` interface, so the verifier's sweeps use it unchanged; ``encode`` rounds to float32 once
(the verifier's tolerance for sliced artifacts counts that rounding: graphs.sliced.tolerance).
``reference_distance`` measures how far the float32 recipe itself is from it (the report shows it
beside the artifact's error).
"""

from __future__ import annotations

import numpy as np
import torch


class Definition:
    """``encode``/``apply`` of a rope or sinusoidal module, from the float64 definition."""

    def __init__(self, module) -> None:
        self.module = module
        self.inv_freq = module.inv_freq.detach().to(torch.float64)
        scale = getattr(module, "scale", None)
        self.scale = None if scale is None else scale.detach().to(torch.float64)
        self.rope = module.config.scheme == "rope"

    def encode64(self, positions: torch.Tensor) -> torch.Tensor:
        """``[N, d]`` float64: rope ``[a cos | a sin]``, sinusoidal sin/cos in its layout."""
        self.module.check_domain(positions)
        offset = 0 if self.rope else self.module.offset  # sinusoidal's fairseq padding offset
        theta = (positions + offset).to(torch.float64).unsqueeze(-1) * self.inv_freq
        cos, sin = torch.cos(theta), torch.sin(theta)
        if self.rope:
            if self.scale is not None:
                cos, sin = cos * self.scale, sin * self.scale
            return torch.cat([cos, sin], dim=-1)
        if self.module.layout == "half":
            return torch.cat([sin, cos], dim=-1)
        return torch.stack([sin, cos], dim=-1).flatten(-2)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        return self.encode64(positions).to(torch.float32)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``Rope.apply`` with the definition's cos/sin (rounded to float32) in place of the
        float32 recipe's: the same float32 rotation."""
        from edgepe.schemes.rope import rotate

        cos, sin = self.encode(positions.reshape(-1)).chunk(2, dim=-1)
        shape = (*positions.shape, -1)
        if positions.dim() == 2:
            shape = (positions.shape[0], *([1] * (x.dim() - 3)), positions.shape[1], -1)
        return rotate(x, cos.reshape(shape), sin.reshape(shape), self.module.layout,
                      self.module.rotary_dim)

    def __getattr__(self, name: str):
        return getattr(self.module, name)


def reference_distance(module, stop: int, chunk: int = 4096) -> float:
    """Max ``|float32 recipe - float64 definition|`` over positions ``0 .. stop - 1``."""
    definition = Definition(module)
    worst = 0.0
    with torch.no_grad():
        for start in range(0, stop, chunk):
            p = torch.arange(start, min(start + chunk, stop), dtype=torch.int64)
            gap = (module.encode(p).to(torch.float64) - definition.encode64(p)).abs().max()
            worst = max(worst, float(gap))
    return worst


def definition_error(values: np.ndarray, module, positions: np.ndarray) -> float:
    """Max ``|values - float64 definition|`` (``values`` [N, d] at ``positions``), in float64."""
    with torch.no_grad():
        exact = Definition(module).encode64(torch.from_numpy(positions)).numpy()
    return float(np.max(np.abs(values.astype(np.float64) - exact)))
