"""The precomputed table of a scheme: its layout, and its rows computed in chunks.

Every table is 2-D, ``[rows, cols]``, row-major, one row per index:

- ``pe``/``rope`` schemes with positions ``[N]``: row ``p`` is ``encode(p)``, ``[max_len, D]``;
- multi-index schemes (``binary-2d``, ``hierarchical``): row ``p`` holds the bits of one
  coordinate ``p``, ``[max_len, W]`` (``W = n`` for 2-D, ``max(widths)`` for hierarchical); a
  graph gathers each coordinate's row and places its columns;
- ``mrope`` (compute only; its int8 output scale is measured on these rows): row ``p`` is
  ``encode`` at ``(p, p, p)``, every value one slot takes at an in-range position;
- bias schemes: row ``r`` is the bias of the distance ``t - u = r - (max_len - 1)`` for every
  head, ``[2 max_len - 1, H]``.

Table artifacts clamp each position to ``[0, max_len - 1]``, except bias tables, which are
indexed by the distance alone (a bias depends only on ``t - u``; issue 16): any two positions,
however large, whose distance lies in ``[-(L - 1), L - 1]`` read their exact row, and a distance
past that clamps to the nearest end (the bias of distance ``+-(L - 1)``). So that ``t - u``
cannot overflow int64, each position first saturates at ``+-2^61`` (``BIAS_SATURATION``), which
changes nothing for positions within it. ``bias_rows`` is that index, shared by every reader
(the ONNX table graph and the C header build the same one); ``table_reference`` is the
reference under these policies.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from edgepe.contract.progress import track
from edgepe.schemes._registry import SchemeConfig

CHUNK_ROWS = 4096
# Bias tables saturate positions here before ``t - u``: |t - u| <= 2^62 never overflows int64.
BIAS_SATURATION = 2**61
# Tables from this many entries show a progress bar under
# ``edgepe.contract.progress.reporting`` (the CLI, on a terminal): 2^22 float32 entries take
# 0.15 s as npy, 0.25 s as an ONNX initializer, 6 s as C text (2-core machine).
PROGRESS_ENTRIES = 1 << 22


def table_shape(config: SchemeConfig) -> tuple[int, int]:
    spec = config.spec
    if spec.kind == "bias":
        return (2 * config.max_len - 1, config.heads)
    if config.scheme == "binary-2d":
        return (config.max_len, config.n_bits)
    if config.scheme == "hierarchical":
        return (config.max_len, max(config.params["widths"]))
    return (config.max_len, config.d_model)


def table_bytes(config: SchemeConfig, itemsize: float) -> int:
    """Bytes of the table at ``itemsize`` bytes an entry (1/8 for bit-packed)."""
    rows, cols = table_shape(config)
    return int(np.ceil(rows * cols * itemsize))


def table_rows(config: SchemeConfig, module, start: int, stop: int) -> np.ndarray:
    """Rows ``start .. stop - 1`` of the table as float32 ``[stop - start, cols]``."""
    import torch

    index = torch.arange(start, stop, dtype=torch.int64)
    with torch.no_grad():
        if config.spec.kind == "bias":
            distance = index - (config.max_len - 1)
            rows = module.encode(distance, torch.zeros(1, dtype=torch.int64))[:, :, 0].T
        elif config.scheme in ("binary-2d", "hierarchical"):
            width = table_shape(config)[1]
            from edgepe.schemes import bits

            rows = bits(index, width, 64)
        elif config.scheme == "mrope":  # no table mode; int8 measures these rows (issue 40)
            rows = module.encode(index.unsqueeze(-1).expand(-1, 3))
        else:
            rows = module.encode(index)
    return rows.detach().to(torch.float32).contiguous().numpy()


def iter_table(config: SchemeConfig, module, chunk_rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
    """The whole table in chunks of at most ``chunk_rows`` rows (bounded memory).

    A large table reports each pass over it to ``edgepe.contract.progress`` (int8 makes three).
    """
    rows, cols = table_shape(config)
    advance = track(f"{config.scheme} table [{rows}, {cols}]", rows) if (
        rows * cols >= PROGRESS_ENTRIES) else None
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        yield table_rows(config, module, start, stop)
        if advance is not None:
            advance(stop - start)


def full_table(config: SchemeConfig, module) -> np.ndarray:
    """The whole table at once (for small tables and tests)."""
    return table_rows(config, module, 0, table_shape(config)[0])


def bias_rows(positions, key_positions, max_len: int) -> np.ndarray:
    """``[N, M]`` int64 rows of a bias table for queries ``positions [N]`` and keys ``[M]``:
    ``clamp(t - u, -(L - 1), L - 1) + L - 1``, each position saturated at ``+-2^61`` first."""
    hi = max_len - 1
    t = np.clip(np.asarray(positions, dtype=np.int64), -BIAS_SATURATION, BIAS_SATURATION)
    u = np.clip(np.asarray(key_positions, dtype=np.int64), -BIAS_SATURATION, BIAS_SATURATION)
    return np.clip(t[:, None] - u[None, :], -hi, hi) + hi


def table_reference(config: SchemeConfig, module, positions, key_positions=None):
    """The reference output of a table artifact: ``encode`` at positions clamped to the table;
    for bias schemes, at the distance ``t - u`` clamped to the table (``bias_rows``)."""
    import torch

    hi = config.max_len - 1
    with torch.no_grad():
        if config.spec.kind == "bias":
            rows = bias_rows(positions, key_positions, config.max_len)  # [N, M]
            distance = torch.from_numpy(rows.ravel() - hi)
            bias = module.encode(distance, torch.zeros(1, dtype=torch.int64))  # [H, N M, 1]
            return bias.reshape(-1, *rows.shape)
        return module.encode(torch.as_tensor(positions, dtype=torch.int64).clamp(0, hi))
