"""Helpers shared by the ONNX export tests: build a graph in memory, run it, and its reference."""

from __future__ import annotations

import io

import numpy as np
import torch
from _table_oracle import clamped_reference

from edgepe.contract.config import ExportConfig
from edgepe.export import prepare
from edgepe.graphs import COMPUTE
from edgepe.schemes import build, n_bits, resolve, scheme_ids

BIT_FAMILY = [s for s, (family, _) in COMPUTE.items() if family == "bits"]
INTEGER_FAMILY = [s for s, (family, _) in COMPUTE.items() if family == "integer"]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# max_len = 1, powers of two, 2^k - 1, and one of neither kind.
LENGTHS = [1, 2, 7, 64, 255, 1000]


def odd_width(scheme: str, max_len: int) -> tuple[int | None, dict]:
    """A valid ``(d_model, params)`` for ``scheme`` whose width is not a multiple of 8."""
    n = n_bits(max_len)
    if scheme == "hierarchical":
        widths = (n, 2, 1) if (n + 3) % 8 else (n, 2, 2)
        return None, {"widths": ",".join(map(str, widths))}
    for d in range(max(n, 3), 8 * n + 40):
        if d % 8 == 0:
            continue
        try:
            resolve(scheme, max_len, d)
        except Exception:  # noqa: BLE001 - not a valid width for this scheme: try the next
            continue
        return d, {}
    raise AssertionError(f"no odd width for {scheme} L={max_len}")


def graph(scheme: str, max_len: int, d_model=None, heads=None, params=None, seed=0,
          randomise=False, **options):
    """``(config, module, model_bytes)`` for an export held in memory (nothing on disk).

    ``randomise`` replaces learned parameters by seeded normal values so that a graph cannot
    pass by coincidence (e.g. integer-learnable's init w = 1, b = 0).
    """
    return in_memory(scheme, max_len, d_model, heads, params, seed, randomise, **options)[:3]


def in_memory(scheme: str, max_len: int, d_model=None, heads=None, params=None, seed=0,
              randomise=False, **options):
    """``(config, module, artifact_bytes, manifest)`` of any format, held in memory (``graph``)."""
    s = resolve(scheme, max_len, d_model, heads, params)
    config = ExportConfig(s, mode=options.pop("mode", s.spec.default_mode), seed=seed, **options)
    module = build(s, seed=seed)
    if randomise:
        gen = torch.Generator().manual_seed(1234)
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
    prepared = prepare(config, module)
    buffer = io.BytesIO()
    prepared.write(buffer)
    return config, module, buffer.getvalue(), prepared.manifest


def probe(config) -> np.ndarray:
    """Every position ``0 .. L - 1`` plus an out-of-range probe under the scheme's policy: fixed
    edges (negatives, around ``2^n``, ``2^24``, int64's extremes) and 300 seeded random ones."""
    s = config.scheme
    length, n = s.max_len, s.n_bits
    extra = [-1, -2, -length, length, length + 1, 2 * length + 3, 2**n - 1, 2**n, 2**n + 1,
             -(2**n), 3 * 2**n + 5, 2**24, -(2**24), 2**24 - 1]
    limit = s.spec.position_limit
    if limit is None or config.mode == "table":
        # 2^31 .. 2^32: where onnxruntime 1.31.1's int64 Clip/Min/Max went wrong (issue 19), and
        # where an int32 front end's cast wraps
        extra += [2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 7, 2**62, INT64_MIN,
                  INT64_MAX, INT64_MIN + 1]
    rng = np.random.default_rng(length)
    if limit is None or config.mode == "table":  # 300 random int64 of every magnitude
        random = rng.integers(INT64_MIN, INT64_MAX, 300, dtype=np.int64, endpoint=True)
        random >>= rng.integers(0, 63, 300)
    else:
        random = rng.integers(-limit, limit, 300, dtype=np.int64, endpoint=True)
    values = np.concatenate([np.arange(length), np.asarray(extra, dtype=np.int64), random])
    if limit is not None and config.mode == "compute":
        values = values[np.abs(values) <= limit]
    return np.unique(values).astype(np.int64)


def feeds_for(config) -> dict[str, np.ndarray]:
    """Inputs covering every position (each coordinate for multi-index schemes) and the probe."""
    s = config.scheme
    values = probe(config)
    if s.arity is not None:
        rng = np.random.default_rng(0)
        values = np.stack([rng.permutation(values) for _ in range(s.arity)], axis=1)
    feeds = {"positions": values}
    if s.spec.kind == "bias":
        feeds["key_positions"] = probe(config)[:: max(1, len(values) // 300)]
    return feeds


def reference(config, module, feeds) -> np.ndarray:
    pos = torch.from_numpy(feeds["positions"])
    keys = feeds.get("key_positions")
    keys = None if keys is None else torch.from_numpy(keys)
    with torch.no_grad():
        if config.mode == "table":
            out = clamped_reference(config.scheme, module, pos, keys)
        elif config.mode == "sliced" and config.scheme.scheme in ("rope", "sinusoidal"):
            # checked against the float64 definition (issue 34)
            from edgepe.schemes.definition import Definition

            out = Definition(module).encode(pos)
        elif keys is not None:
            out = module.encode(pos, keys)
        else:
            out = module.encode(pos)
    out = out.numpy()
    if config.dtype != "float16":
        return out
    with np.errstate(over="ignore"):  # |x| > 65504 becomes inf, as Cast to float16 does
        return out.astype(np.float16)


def run_ort(model: bytes, feeds) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def assert_parity(config, got: np.ndarray, expected: np.ndarray) -> None:
    """Exact for exact schemes, ``spec.tolerance`` otherwise."""
    assert got.shape == expected.shape, (got.shape, expected.shape)
    rtol, atol = config.scheme.spec.tolerance
    if config.mode == "sliced" and config.scheme.scheme in ("rope", "sinusoidal"):
        from edgepe.graphs import sliced

        atol = sliced.tolerance(sliced.plan_of(config), 2.0)  # yarn's a below 2 included
    if config.dtype == "float16":
        np.testing.assert_array_equal(got, expected)
    elif (rtol, atol) == (0.0, 0.0):
        np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


__all__ = ["BIT_FAMILY", "INTEGER_FAMILY", "LENGTHS", "assert_parity", "feeds_for", "graph",
           "odd_width", "reference", "run_ort", "scheme_ids"]
