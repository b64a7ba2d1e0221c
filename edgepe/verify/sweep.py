"""What a verification checks: the reference, the inputs in chunks, the extrapolation probe.

- The reference module is the rebuild's (``edgepe.rebuild``): the scheme, sizes, params, seed
  and checkpoint the manifest records, built by the running edgepe.
- ``onnx_chunks`` yields the graph's inputs over every position ``0 .. max_len - 1`` (bias
  schemes: the query x key grid, or every distance when the grid is too big; multi-index schemes:
  the full coordinate grid when small, else every coordinate value in every column), then the
  extrapolation probe, each with the reference outputs under the artifact's out-of-range policy
  (tables clamp: ``table_reference``; compute graphs follow the scheme); then single-position
  calls (``N == 1``, and one query x one key for bias schemes): a graph may be wrong only there.
- ``table_chunks`` yields row ranges of a table with the reference rows (``encoded_rows``): the
  scheme's ``encode`` at the documented index mapping, never the table builder that wrote the file
  (``edgepe.graphs.table_values.table_rows``), so a wrong mapping there is caught (issue 23).

Every chunk holds at most ``CHUNK_ELEMENTS`` output elements and ``CHUNK_POSITIONS`` positions,
so memory stays bounded whatever ``max_len`` is. Past ``SWEEP_FULL`` (2^24) in-range positions a
sweep covers a documented sample plus every edge (``position_spans``), so time stays bounded too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgepe.contract.errors import ArtifactError

CHUNK_ELEMENTS = 1 << 20
CHUNK_POSITIONS = 65536
QUICK_POSITIONS = 4096
GRID_LIMIT = 1 << 16  # multi-index and bias grids up to this many cells are checked in full
SINGLES = 16  # single-position calls: first, second, last, middle, and seeded ones in range
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Up to this many in-range positions (rows) a sweep covers every one; past it (max_len up to 2^40
# for integer schemes: a full sweep would never end) it covers a documented sample plus every
# edge (``position_spans``): the first and last SAMPLE_WIDTH positions, SAMPLE_WIDTH around every
# power of two below max_len (where a bit carries), and SAMPLE_CHUNKS seeded random spans
# (numpy.random.default_rng(2): the same sample every run).
SWEEP_FULL = 1 << 24
SAMPLE_WIDTH = 4096
SAMPLE_CHUNKS = 64


def position_spans(stop: int, step: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: the in-range spans a sweep of ``0 .. stop - 1`` covers, each at
    most ``step`` long: all of them up to ``SWEEP_FULL``, else the sample (see above)."""
    if stop <= SWEEP_FULL:
        return [(a, min(a + step, stop)) for a in range(0, stop, step)]
    width = min(step, SAMPLE_WIDTH)
    starts = {0, stop - width}
    for k in range(1, stop.bit_length()):
        starts.add(min(max(0, 2**k - width // 2), stop - width))
    rng = np.random.default_rng(2)
    starts.update(int(v) for v in rng.integers(0, stop - width, SAMPLE_CHUNKS))
    spans: list[tuple[int, int]] = []
    for start in sorted(starts):
        end = start + width
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return [(a, min(a + step, b)) for a0, b in spans for a in range(a0, b, step)]


def sampled_positions(stop: int) -> np.ndarray:
    """Every position ``0 .. stop - 1`` up to ``SWEEP_FULL``, else ``position_spans``' sample."""
    if stop <= SWEEP_FULL:
        return np.arange(stop, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64)
                           for a, b in position_spans(stop, SAMPLE_WIDTH)])


@dataclass
class Chunk:
    """Inputs for one run, the reference outputs, and how to name an element of them."""

    feeds: dict[str, np.ndarray]
    expected: np.ndarray
    where: Callable[[tuple[int, ...]], str]
    positions: int  # elements' positions compared (bias: query x key pairs; tables: rows)
    probe: bool = False
    progress: int = 0  # in-range positions (queries, rows) it covers, for the progress bar
    start: int = 0  # tables: the first row


def probe_values(config, limit: int | None, count: int, seed: int = 0) -> np.ndarray:
    """Positions outside ``0 .. max_len - 1``: negatives, just past the end, around ``2^n``, the
    float-exact edge ``2^24``, int64's extremes, and ``count`` seeded random ones of every
    magnitude (``2^u``, ``u`` uniform in ``[0, 63)`` from ``numpy.random.default_rng(seed)``,
    capped at ``2^62``, each with a random sign); all within ``|p| <= limit`` when the scheme
    has a limit (then ``limit`` and ``-limit`` themselves are probed too)."""
    length, n = config.max_len, config.n_bits
    fixed = {-1, -2, -3, -length, -length - 1, length, length + 1, length + 2, 2 * length - 1,
             2 * length, 2**n - 1, 2**n, 2**n + 1, 2 ** (n + 1) + 3, 3 * 2**n + 5, 2**24 - 1,
             2**24, 2**24 + 1, -(2**24), 2**31 - 1, 2**31, 2**32 + 3, 2**53 + 1, 2**62,
             INT64_MAX, INT64_MIN, INT64_MIN + 1}
    rng = np.random.default_rng(seed)
    magnitude = np.exp2(rng.uniform(0, 63, count)).astype(np.float64)
    sign = rng.choice([-1, 1], count)
    randoms = {int(min(m, 2.0**62)) * int(s) for m, s in zip(magnitude, sign, strict=True)}
    values = sorted(v for v in fixed | randoms if not 0 <= v < length)
    if limit is not None:
        values = [v for v in values if abs(v) <= limit]
        values += [v for v in (limit, -limit) if not 0 <= v < length and v not in values]
    return np.asarray(sorted(values), dtype=np.int64)


def position_limit(manifest: dict[str, Any], config) -> int | None:
    """``|position|`` up to which the artifact is defined: the manifest's ``positions.limit``."""
    positions = manifest.get("positions") or {}
    return positions["limit"] if "limit" in positions else config.spec.position_limit


def _reference(config, module, table: bool) -> Callable[..., np.ndarray]:
    import torch

    from edgepe.graphs.table_values import table_reference

    def compute(positions: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
        p = torch.from_numpy(np.ascontiguousarray(positions))
        k = None if keys is None else torch.from_numpy(np.ascontiguousarray(keys))
        with torch.no_grad():
            if table:
                out = table_reference(config, module, p, k)
            else:
                out = module.encode(p) if k is None else module.encode(p, k)
        return out.detach().to(torch.float32).numpy()

    return compute


def unit(config, dtype: str) -> str:
    """What a column of the output is called in mismatch reports."""
    return "bit" if config.spec.exact or dtype in ("uint8", "bit") else "column"


def onnx_chunks(config, module, manifest: dict[str, Any], quick: bool,
                inputs: tuple[str, ...] = ("positions",)) -> Iterator[Chunk]:
    """Inputs and reference outputs for a graph artifact, in bounded chunks (see module doc).

    A rope apply graph (an input ``x``) gets ``x [2, N, d]`` drawn uniformly from
    ``[-0.5, 0.5)`` (seeded) with the reference ``module.apply(x, positions)``: with
    ``|x_2i| + |x_2i+1| <= 1`` a cos/sin error within the manifest's atol moves a rotated value
    by at most that atol too, so the same tolerance applies.
    """
    if "x" in inputs:
        yield from _apply_chunks(config, module, manifest, quick)
        return
    # Tables clamp; so do int8 compute graphs of unbounded schemes (manifest positions policy).
    policy = (manifest.get("positions") or {}).get("out_of_range")
    table = manifest["mode"] == "table" or policy == "clamp"
    ref = _reference(config, module, table)
    length = config.max_len
    stop = min(length, QUICK_POSITIONS) if quick else length
    # Table graphs clamp every int64; compute graphs are defined up to the manifest's limit.
    # (A .tflite bias table subtracts int32 positions: defined up to its manifest's limit.)
    limit = (None if table and manifest.get("format") != "tflite"
             else position_limit(manifest, config))
    probe = probe_values(config, limit, 16 if quick else 128)
    col = unit(config, manifest["dtype"])
    if config.spec.kind == "bias":
        yield from _bias_chunks(config, ref, stop, probe)
    elif config.arity is not None:
        yield from _multi_chunks(config, ref, stop, probe, col)
    else:
        width = max(1, config.d_model)
        step = max(1, min(CHUNK_POSITIONS, CHUNK_ELEMENTS // width))
        for start, end in position_spans(stop, step):
            positions = np.arange(start, end, dtype=np.int64)
            yield _pe_chunk(ref, positions, col)
        yield _pe_chunk(ref, probe, col, probe=True)
        for position in single_positions(stop):
            yield _again(_pe_chunk(ref, position[None], col))


def single_positions(stop: int) -> np.ndarray:
    """Up to ``SINGLES`` positions in ``0 .. stop - 1`` for single-position calls: the first,
    second, middle and last, and seeded random ones (a decoder asks for one token at a time)."""
    rng = np.random.default_rng(1)
    fixed = [0, 1, stop // 2, stop - 1]
    picks = rng.integers(0, stop, SINGLES - len(fixed)) if stop > 0 else []
    values = sorted({int(v) for v in [*fixed, *picks] if 0 <= v < stop})
    return np.asarray(values, dtype=np.int64)


def _again(chunk: Chunk) -> Chunk:
    """A single-position call checks again a position the sweep has counted: it adds nothing to
    the progress bar (whose total, ``in_range_total``, counts each in-range position once)."""
    chunk.progress = 0
    return chunk


def _apply_chunks(config, module, manifest, quick) -> Iterator[Chunk]:
    import torch

    length, d = config.max_len, config.d_model
    stop = min(length, QUICK_POSITIONS) if quick else length
    rng = np.random.default_rng(0)
    step = max(1, min(CHUNK_POSITIONS, CHUNK_ELEMENTS // (2 * d)))
    ranges = [np.arange(a, b, dtype=np.int64) for a, b in position_spans(stop, step)]
    probe = probe_values(config, position_limit(manifest, config), 16 if quick else 128)
    four = len(manifest["shape"]) == 4  # apply-4d: x [B, H, S, d], per-row positions [B, S]
    for positions, is_probe in [(r, False) for r in ranges] + [(probe, True)]:
        if four:  # two batch rows at different positions (the second reversed), two heads
            feed = np.stack([positions, positions[::-1]])
            x = rng.uniform(-0.5, 0.5, (2, 2, len(positions), d)).astype(np.float32)
        else:
            feed = positions
            x = rng.uniform(-0.5, 0.5, (2, len(positions), d)).astype(np.float32)
        with torch.no_grad():
            y = module.apply(torch.from_numpy(x), torch.from_numpy(feed)).numpy()

        def where(index: tuple[int, ...], feed: np.ndarray = feed) -> str:
            *batch, row, column = index
            at = feed[batch[0], row] if feed.ndim == 2 else feed[row]
            return f"x{list(batch)} position {at} column {column}"

        yield Chunk({"x": x, "positions": feed}, y, where, len(positions), is_probe,
                    0 if is_probe else len(positions))


def _pe_chunk(ref, positions: np.ndarray, col: str, probe: bool = False) -> Chunk:
    def where(index: tuple[int, ...]) -> str:
        row, column = index
        return f"position {positions[row]} {col} {column}"

    return Chunk({"positions": positions}, ref(positions), where, len(positions), probe,
                 0 if probe else len(positions))


def _multi_chunks(config, ref, stop, probe, col) -> Iterator[Chunk]:
    k = config.arity
    if stop**k <= GRID_LIMIT:  # every combination of coordinates
        grids = np.meshgrid(*[np.arange(stop, dtype=np.int64)] * k, indexing="ij")
        rows = np.stack([g.ravel() for g in grids], axis=1)
    else:  # every value in every column, each column a different shift of 0..stop-1
        base = sampled_positions(stop)
        rows = np.stack([(base + j * (stop // k + 1)) % stop for j in range(k)], axis=1)
    # Probe: each column takes the probe values while the others hold in-range ones.
    inside = np.arange(len(probe), dtype=np.int64) % max(stop, 1)
    probes = []
    for j in range(k):
        block = np.repeat(inside[:, None], k, axis=1)
        block[:, j] = probe
        probes.append(block)
    probes.append(np.stack([np.roll(probe, j) for j in range(k)], axis=1))
    step = max(1, min(CHUNK_POSITIONS, CHUNK_ELEMENTS // max(1, config.d_model)))
    for start in range(0, len(rows), step):
        yield _multi_chunk(ref, rows[start: start + step], col)
    yield _multi_chunk(ref, np.concatenate(probes), col, probe=True)
    for index in single_positions(len(rows)):
        yield _again(_multi_chunk(ref, rows[index][None], col))


def _multi_chunk(ref, positions: np.ndarray, col: str, probe: bool = False) -> Chunk:
    def where(index: tuple[int, ...]) -> str:
        row, column = index
        return f"position {tuple(int(v) for v in positions[row])} {col} {column}"

    positions = np.ascontiguousarray(positions)
    return Chunk({"positions": positions}, ref(positions), where, len(positions), probe,
                 0 if probe else len(positions))


def _bias_chunks(config, ref, stop, probe) -> Iterator[Chunk]:
    heads = config.heads
    all_keys = np.arange(stop, dtype=np.int64)
    if stop * stop <= GRID_LIMIT * 16:  # the full query x key grid, in query chunks
        step = max(1, CHUNK_ELEMENTS // max(1, heads * stop))
        for start in range(0, stop, step):
            queries = np.arange(start, min(start + step, stop), dtype=np.int64)
            yield _bias_chunk(ref, queries, all_keys)
    else:  # too big for the grid: every distance -(L-1)..L-1 is still covered
        step = max(1, min(CHUNK_POSITIONS, CHUNK_ELEMENTS // (2 * heads)))
        edges = np.asarray([0, stop - 1], dtype=np.int64)
        for start, end in position_spans(stop, step):
            queries = np.arange(start, end, dtype=np.int64)
            yield _bias_chunk(ref, queries, edges)
    # Probe: out-of-range queries against in-range keys, and both out of range.
    inside = np.linspace(0, stop - 1, num=min(stop, 16)).astype(np.int64)
    yield _bias_chunk(ref, probe, inside, probe=True)
    yield _bias_chunk(ref, inside, probe, probe=True)
    yield _bias_chunk(ref, probe, probe, probe=True)
    for query in single_positions(stop):  # one query against every key, and one key alone
        yield _again(_bias_chunk(ref, query[None], all_keys))
        yield _again(_bias_chunk(ref, query[None], query[None]))


def _bias_chunk(ref, queries: np.ndarray, keys: np.ndarray, probe: bool = False) -> Chunk:
    def where(index: tuple[int, ...]) -> str:
        head, i, j = index
        return f"head {head} query {queries[i]} key {keys[j]}"

    return Chunk({"positions": queries, "key_positions": keys}, ref(queries, keys), where,
                 len(queries) * len(keys), probe, 0 if probe else len(queries))


def in_range_total(config, manifest: dict[str, Any], quick: bool) -> int:
    """The in-range positions (rows, queries) a sweep covers: the progress bar's total."""
    if manifest["format"] != "onnx" and manifest["mode"] == "table":
        from edgepe.graphs.table_values import table_shape

        rows = table_shape(config)[0]
        rows = min(rows, QUICK_POSITIONS) if quick else rows
        return rows if rows <= SWEEP_FULL else len(sampled_positions(rows))
    stop = min(config.max_len, QUICK_POSITIONS) if quick else config.max_len
    if stop > SWEEP_FULL:
        return len(sampled_positions(stop))
    if config.arity is not None and config.spec.kind != "bias":
        return stop**config.arity if stop**config.arity <= GRID_LIMIT else stop
    return stop


def table_chunks(config, module, shape: tuple[int, int], quick: bool) -> Iterator[Chunk]:
    """Row ranges of a table (``chunk.start``, ``chunk.positions`` rows) with the reference."""
    from edgepe.graphs.table_values import table_shape

    expected_shape = table_shape(config)
    if tuple(shape) != tuple(expected_shape):
        raise ArtifactError(
            f"the manifest's shape {list(shape)} is not the table of scheme "
            f"'{config.scheme}' (expected {list(expected_shape)})"
        )
    rows, cols = shape
    stop = min(rows, QUICK_POSITIONS) if quick else rows
    step = max(1, min(CHUNK_POSITIONS, CHUNK_ELEMENTS // max(1, cols)))
    bias = config.spec.kind == "bias"
    for start, end in position_spans(stop, step):

        def where(index: tuple[int, ...], start: int = start) -> str:
            row, column = index
            row += start
            if bias:
                return f"row {row} (distance {row - (config.max_len - 1)}) head {column}"
            return f"row {row} column {column}"

        yield Chunk({}, encoded_rows(config, module, start, end), where, end - start,
                    progress=end - start, start=start)


def encoded_rows(config, module, start: int, stop: int) -> np.ndarray:
    """Rows ``start .. stop - 1`` of a scheme's table, float32, from its ``encode`` alone at the
    documented mapping (``edgepe.graphs.table_values``'s docstring; written independently of its
    ``table_rows``): a pe/rope row is the position; a bias row ``r`` is the distance
    ``d = r - (max_len - 1)``, read as query ``d``/key 0 when ``d >= 0`` and query 0/key ``-d``
    otherwise; a multi-index row ``p`` holds the bits of coordinate ``p``: the columns that
    ``encode`` gives one coordinate (every coordinate set to ``p``, read at that coordinate's
    columns: binary-2d interleaves x, y; hierarchical concatenates its levels' widths)."""
    import torch

    rows = np.arange(start, stop, dtype=np.int64)
    with torch.no_grad():
        if config.spec.kind == "bias":
            distance = rows - (config.max_len - 1)
            ahead = distance[distance >= 0]
            behind = -distance[distance < 0]
            zero = torch.zeros(1, dtype=torch.int64)
            out = []
            if len(behind):  # [H, 1, M] -> [M, H]
                out.append(module.encode(zero, torch.from_numpy(behind))[:, 0, :].T)
            if len(ahead):  # [H, N, 1] -> [N, H]
                out.append(module.encode(torch.from_numpy(ahead), zero)[:, :, 0].T)
            values = torch.cat(out)
        elif config.arity is not None:
            positions = torch.from_numpy(np.repeat(rows[:, None], config.arity, axis=1))
            encoded = module.encode(positions)
            if config.scheme == "binary-2d":
                values = encoded[:, 0::2][:, : config.n_bits]  # x's bits: the even columns
            else:  # hierarchical: the widest level's columns
                widths = list(config.params["widths"])
                level = widths.index(max(widths))
                first = sum(widths[:level])
                values = encoded[:, first: first + widths[level]]
        else:
            values = module.encode(torch.from_numpy(rows))
    return values.detach().to(torch.float32).contiguous().numpy()


def unswept(config, manifest: dict[str, Any], quick: bool) -> str | None:
    """What positions a sweep of this artifact does NOT compare, in words, or ``None`` when it
    compares every one the artifact can be asked for (a table file's every row). A foreign
    build's report lists it among its unchecked claims (issue 41): a graph can be wrong only
    at a position no sweep visits (``Equal(pos, 1000003) -> Where``), so a numeric check alone
    never proves it."""
    length = config.max_len
    if manifest["format"] != "onnx" and manifest["mode"] == "table":
        from edgepe.graphs.table_values import table_shape

        rows = table_shape(config)[0]
        stop = min(rows, QUICK_POSITIONS) if quick else rows
        if stop >= rows and rows <= SWEEP_FULL:
            return None
        return f"rows: {in_range_total(config, manifest, quick)} of {rows} compared"
    parts = []
    stop = min(length, QUICK_POSITIONS) if quick else length
    covered = in_range_total(config, manifest, quick)
    if stop < length or stop > SWEEP_FULL:
        parts.append(f"{covered} of the {length} positions 0 .. {length - 1}")
    policy = (manifest.get("positions") or {}).get("out_of_range")
    table = manifest["mode"] == "table" or policy == "clamp"
    limit = None if table else position_limit(manifest, config)
    probe = probe_values(config, limit, 16 if quick else 128)
    span = "int64" if limit is None else f"|position| <= {limit}"
    parts.append(f"{len(probe)} probe positions of those outside 0 .. {length - 1} ({span})")
    return "positions: only " + " and ".join(parts) + " compared"
