"""What a table artifact must hold, from the scheme's ``encode`` at the documented index mapping.

Tests of table files and table graphs compare against this, never against
``edgepe.graphs.table_values`` (``full_table``/``table_rows``), the code that writes the tables
(issue 24: a table shifted by one row passed every test that compared the file with its writer).
The mapping is the one docs/readme/tables.md and DESIGN.md document:

- positions ``[N]`` schemes: row ``p`` is ``encode(p)``, ``p = 0 .. L - 1``;
- ``binary-2d`` / ``hierarchical``: row ``p`` is the bits of one coordinate ``p`` (``n`` columns
  for 2-D, ``max(widths)`` for hierarchical), read here out of ``encode`` of that coordinate;
- bias schemes: ``bias_key_for_row`` says which query/key pair row ``r`` holds; the row is the
  bias of that pair for every head.

``clamped_reference`` is what a table artifact returns for any positions (clamped to the rows).
int8 tables are checked with ``int8_expectations``: the scale rule and the half-step bound,
written out here (not ``edgepe.graphs.quant``'s ``table_quant``).
"""

from __future__ import annotations

import numpy as np
import torch


def bias_rows(max_len: int) -> int:
    """Rows of a bias table: one per distance ``t - u`` in ``-(L - 1) .. L - 1``."""
    return 2 * max_len - 1


def bias_key_for_row(row: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(t, u)`` whose bias row ``row`` holds: the distance ``t - u = row - (L - 1)``, taken as
    query ``t = row - (L - 1)`` against key ``u = 0`` (the bias depends on ``t - u`` only).

    The one place to change if the table's row mapping changes (issue 16 indexes the tables by
    distance; this mapping already is).
    """
    return row - (max_len - 1), np.zeros(1, dtype=np.int64)


def expected_table(config, module) -> np.ndarray:
    """float32 ``[rows, cols]``: the table an artifact of ``config`` must hold."""
    L = config.max_len
    with torch.no_grad():
        if config.spec.kind == "bias":
            t, u = bias_key_for_row(np.arange(bias_rows(L)), L)
            out = module.encode(torch.from_numpy(t), torch.from_numpy(u))  # [H, rows, 1]
            return out[:, :, 0].T.contiguous().numpy()
        p = torch.arange(L, dtype=torch.int64)
        if config.scheme == "binary-2d":  # [x0, y0, x1, ...]: the x columns of (p, 0)
            return module.encode(torch.stack([p, torch.zeros_like(p)], 1))[:, 0::2].numpy()
        if config.scheme == "hierarchical":  # the widest level's columns of (p, p, ...)
            widths = list(config.params["widths"])
            widest = int(np.argmax(widths))
            start = sum(widths[:widest])
            out = module.encode(p.unsqueeze(1).expand(L, len(widths)).contiguous())
            return out[:, start:start + widths[widest]].numpy()
        if config.scheme == "mrope":  # no table mode; int8's rows: (p, p, p)
            return module.encode(p.unsqueeze(1).expand(L, 3)).numpy()
        return module.encode(p).numpy()


def int8_expectations(reference: np.ndarray, q: np.ndarray, scale) -> None:
    """Assert that int8 ``q`` with ``scale`` (one per column, or one) quantises ``reference``:

    - the scale is ``max |x| / 127`` per channel (1 for an all-zero channel), the symmetric
      ``[-127, 127]`` rule of onnxruntime's ``compute_scale_zp``: rounded to nearest float32
      (within 2^-24 relative), or up to a float16 (at most 2^-10 above; edgepe's half scales);
    - ``q`` is in ``[-127, 127]`` and a nearest rounding of ``x / s``: ``|q - x / s| <= 1/2``,
      so dequantised in float64 ``|s q - x| <= s / 2`` (half a step, the proven bound).
    """
    ref = np.asarray(reference, dtype=np.float64)
    s = np.asarray(scale, dtype=np.float32).astype(np.float64).reshape(-1)
    peak = np.abs(ref).max(axis=0) if s.size > 1 else np.array([np.abs(ref).max()])
    exact = peak / 127
    live = peak > 0
    assert (s[~live] == 1.0).all()
    assert (s[live] >= exact[live] * (1 - 2.0**-24)).all(), (s, exact)
    assert (s[live] <= exact[live] * (1 + 2.0**-10)).all(), (s, exact)
    q = np.asarray(q)
    assert q.min() >= -127 and q.max() <= 127
    # |q - x / s| <= 1/2 (+ the float64 division's 2^-52 relative)
    assert (np.abs(q - ref / s) <= 0.5 + 1e-12).all()
    assert (np.abs(q * s - ref) <= s / 2 * (1 + 1e-12)).all()


def clamped_reference(config, module, positions, key_positions=None) -> torch.Tensor:
    """What a table artifact returns for any int64 positions: ``encode`` at the positions clamped
    to the table's ``[0, L - 1]``; for bias tables (issue 16), the bias at the distance
    ``t - u`` clamped to ``[-(L - 1), L - 1]``, each position saturated at ``+-2^61`` first so
    that ``t - u`` cannot overflow int64 (the bias depends on ``t - u`` only)."""
    hi = config.max_len - 1
    with torch.no_grad():
        if key_positions is None:
            return module.encode(torch.as_tensor(positions, dtype=torch.int64).clamp(0, hi))
        t = np.clip(np.asarray(positions, dtype=np.int64), -(2**61), 2**61)
        u = np.clip(np.asarray(key_positions, dtype=np.int64), -(2**61), 2**61)
        d = np.clip(t[:, None] - u[None, :], -hi, hi)  # [N, M]
        bias = module.encode(torch.from_numpy(d.ravel()), torch.zeros(1, dtype=torch.int64))
        return bias.reshape(-1, *d.shape)  # [H, N, M]
