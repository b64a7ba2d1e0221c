"""``edgepe run PATH --positions SPEC``: encode positions with an artifact; print or save them.

``--positions`` is a comma-separated list of items, each an integer or a Python-style range
``START:STOP[:STEP]`` (STOP excluded):

- schemes with positions ``[N]``: the items are concatenated (``0:4,10`` is 0, 1, 2, 3, 10);
- multi-index schemes (positions ``[N, k]``, e.g. binary-2d): exactly ``k`` items, one per
  coordinate, and the rows are their grid, last coordinate fastest (``0:2,5:7`` is (0, 5),
  (0, 6), (1, 5), (1, 6));
- any scheme: a JSON array, ``[3, 5, 8]`` or ``[[0, 1], [4, 2]]``, for arbitrary rows.

Bias schemes also take ``--key-positions`` (same syntax, ``[M]``; default: the positions) and
give ``[H, N, M]``. Without ``--out`` the encodings print as a table (long or wide ones are cut
in the middle, saying so); ``--out FILE.npy`` or ``FILE.csv`` writes every value, streamed in
chunks with a progress bar when that takes a while, atomically; an existing FILE (or a symlink
there, replaced and never followed) only with ``--force``, never the artifact or its manifest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgepe.contract.config import check_output, write_output
from edgepe.contract.errors import BadParameterError, PositionError
from edgepe.contract.progress import reporting, track

MAX_POSITIONS = 2**24  # rows one run encodes; past this a user wants a table export instead
MAX_VALUES = 2**28  # values of a bias [H, N, M] (1 GiB of float32), computed at once
CHUNK_ROWS = 65536  # rows encoded and written per step (bounded memory for --out)
# ... and at most this many values per step: a row of d 2048 made 65536-row steps of 134M
# values, whose CSV text (and its copies) peaked at 8.5 GB (issue 41)
CHUNK_VALUES = 1 << 20
SHOW_ROWS = 20  # printed rows at each end of a long table
OUT_SUFFIXES = (".npy", ".csv")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _item(text: str, option: str):
    """One item: an int, or ``range(START, STOP[, STEP])`` from ``START:STOP[:STEP]``; every
    number an int64 (a position is one), so no value wraps around when it becomes an array."""
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        raise PositionError(
            f"{option}: {text!r} is not an integer or START:STOP[:STEP]"
        ) from None
    for part in parts:
        if not INT64_MIN <= part <= INT64_MAX:
            raise PositionError(f"{option}: {part} in {text!r} is outside int64 "
                                f"[{INT64_MIN}, {INT64_MAX}]")
    if len(parts) == 1:
        return range(parts[0], parts[0] + 1)
    if len(parts) > 3:
        raise PositionError(f"{option}: {text!r} has more than START:STOP:STEP")
    if len(parts) == 3 and parts[2] == 0:
        raise PositionError(f"{option}: {text!r} has STEP 0")
    return range(*parts)


def _int64_range(r: range):
    """``r`` as int64, exactly: computed modulo 2^64 (every value of ``r`` is an int64, so the
    wrapped uint64 sum is its two's-complement bit pattern); np.arange near 2^63 is not exact."""
    import numpy as np

    step = np.uint64(r.step % 2**64)
    offsets = np.arange(len(r), dtype=np.uint64) * step
    return (offsets + np.uint64(r.start % 2**64)).view(np.int64)


def parse_positions(text: str, arity: int | None, option: str = "--positions"):
    """int64 ``[N]`` (or ``[N, arity]``) from the ``--positions`` syntax (module docstring)."""
    import numpy as np

    text = text.strip()
    if text.startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as exc:
            raise PositionError(f"{option}: not valid JSON: {exc}") from None
        except RecursionError:
            raise PositionError(f"{option}: the JSON is nested too deeply; give a list of "
                                "positions or of rows") from None
        from edgepe.runtime import check_positions

        return check_positions(rows, arity, None, option)
    items = [_item(part.strip(), option) for part in text.split(",")]
    if arity is None:
        count = sum(len(r) for r in items)
    else:
        if len(items) != arity:
            raise PositionError(
                f"{option}: this scheme takes {arity} coordinates a position; give {arity} "
                f"comma-separated items (one per coordinate), got {len(items)} in {text!r}"
            )
        count = 1
        for r in items:
            count *= len(r)
    if count == 0:
        raise PositionError(f"{option}: {text!r} selects no positions")
    if count > MAX_POSITIONS:
        raise PositionError(
            f"{option}: {text!r} selects {count} positions; at most {MAX_POSITIONS} a run "
            "(export a table for more)"
        )
    arrays = [_int64_range(r) for r in items]
    if arity is None:
        return np.concatenate(arrays)
    grid = np.meshgrid(*arrays, indexing="ij")
    return np.stack([g.reshape(-1) for g in grid], axis=1)


def _labels(arity: int | None) -> list[str]:
    if arity is None:
        return ["pos"]
    return ["x", "y"] if arity == 2 else [f"p{i}" for i in range(arity)]


def _formatter(values):
    """A cell formatter: integers for integer-valued outputs, else 4 decimals (or 4 digits)."""
    import numpy as np

    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if values.dtype.kind in "iub" or (finite.size and np.all(finite == np.round(finite))):
        return lambda v: f"{v + 0:.0f}" if np.isfinite(v) else str(v)
    big = finite.size and np.abs(finite).max() >= 1e4
    # + 0.0 turns -0.0 (alibi's bias at distance 0) into 0.0
    return (lambda v: f"{v + 0.0:.4g}") if big else (lambda v: f"{v + 0.0:.4f}")


def _cut(count: int, room: int) -> list[int | None]:
    """Indices to show out of ``count``: all when they fit, else both ends with ``None`` between."""
    if count <= room:
        return list(range(count))
    head = (room + 1) // 2
    return [*range(head), None, *range(count - (room - head), count)]


def _kept(count: int, room: int) -> list[int]:
    return [i for i in _cut(count, room) if i is not None]


def _gaps(local: list[int | None], ids: list[int]) -> list[int | None]:
    """``local`` indices with ``None`` wherever the original ids they stand for skip some."""
    out: list[int | None] = []
    for i in local:
        if out and i is not None and out[-1] is not None and ids[i] != ids[out[-1]] + 1:
            out.append(None)
        out.append(i)
    return out


def render(console, values, row_ids, col_ids, row_labels, label_names, column_names, title,
           total: tuple[int, int]) -> None:
    """Print ``values``, rows ``row_ids`` and columns ``col_ids`` of a ``total`` table.

    Columns are cut further to the console's width; cuts show as ``⋮`` and ``…`` and a note.
    """
    from rich.table import Table

    fmt = _formatter(values)
    cells = [[fmt(v) for v in row] for row in values]
    labels = [[str(v) for v in row] for row in row_labels]
    label_width = sum(max(len(n), *(len(x[i]) for x in labels)) + 2
                      for i, n in enumerate(label_names))
    cell_width = max(len(c) for c in [*column_names, *(x for row in cells for x in row)]) + 2
    room = max(2, (console.width - label_width - 3) // cell_width)
    columns = _gaps(_cut(len(col_ids), room), list(col_ids))
    rows = _gaps(list(range(len(row_ids))), list(row_ids))
    table = Table(box=None, pad_edge=False)
    for name in label_names:
        table.add_column(name, justify="right", style="bold", no_wrap=True)
    for c in columns:
        table.add_column("…" if c is None else column_names[c], justify="right", no_wrap=True)
    for r in rows:
        if r is None:
            table.add_row(*(["⋮"] * (len(label_names) + len(columns))))
        else:
            table.add_row(*labels[r], *("…" if c is None else cells[r][c] for c in columns))
    console.print(title, highlight=False, soft_wrap=True)
    console.print(table)
    cut = []
    if len(row_ids) < total[0]:
        cut.append(f"{len(row_ids)} of {total[0]} rows")
    shown = sum(c is not None for c in columns)
    if shown < total[1]:
        cut.append(f"{shown} of {total[1]} columns")
    if cut:
        console.print(f"showing {' and '.join(cut)}; --out FILE.npy or FILE.csv writes all",
                      style="dim", highlight=False, soft_wrap=True)


def write_out(out: Path, runtime, positions, keys, show_progress: bool,
              inputs: list[Path] | None = None, force: bool = False) -> tuple[int, ...]:
    """Encode and write to ``out`` (npy or csv) atomically, in chunks; returns the shape.
    The one output rule (``edgepe.contract.config.write_output``): never one of ``inputs``, an
    existing file or symlink only with ``force``, a symlink replaced and never followed."""
    import numpy as np

    if runtime.kind == "bias":
        whole = runtime.encode(positions, keys)
        shape, dtype, starts = whole.shape, whole.dtype, [0]
    else:
        first = runtime.encode(positions[:1])
        shape, dtype = (len(positions), first.shape[1]), first.dtype
        step = rows_per_step(first.shape[1])
        starts = list(range(0, len(positions), step))

    def block(start: int):
        if runtime.kind == "bias":
            return whole
        return runtime.encode(positions[start : start + step])

    def write(f) -> None:
        if out.suffix.lower() == ".npy":
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                      "shape": tuple(shape)}
            np.lib.format.write_array_header_1_0(f, header)
        else:
            f.write(_csv_header(runtime, shape, keys).encode())
        with reporting(show_progress and len(starts) > 1):
            advance = track(f"encoding {len(positions)} positions", len(starts))
            for start in starts:
                values = block(start)
                if out.suffix.lower() == ".npy":
                    f.write(np.ascontiguousarray(values).tobytes())
                else:
                    f.write(_csv_rows(runtime, positions, start, values).encode())
                advance(1)

    write_output(out, write, list(inputs or []), force)
    return tuple(shape)


def rows_per_step(width: int) -> int:
    """Rows encoded and written per step of ``--out``: ``CHUNK_ROWS``, fewer for wide rows so a
    step holds at most ``CHUNK_VALUES`` values (at least one row)."""
    return max(1, min(CHUNK_ROWS, CHUNK_VALUES // max(1, width)))


def _csv_header(runtime, shape, keys) -> str:
    if runtime.kind == "bias":
        return ",".join(["head", "pos", *(f"key{int(k)}" for k in keys)]) + "\n"
    return ",".join([*_labels(runtime.arity), *(f"d{i}" for i in range(shape[1]))]) + "\n"


def _csv_rows(runtime, positions, start, values) -> str:
    """CSV lines: labels as exact integers, floats with 9 significant digits (float32 round-trips).

    Bias blocks ``[H, N, M]`` become ``H * N`` lines ``head, pos, bias...``.
    """
    import io

    import numpy as np

    if runtime.kind == "bias":
        heads, n, m = values.shape
        labels = np.stack([np.repeat(np.arange(heads), n), np.tile(positions, heads)], axis=1)
        values = values.reshape(heads * n, m)
    else:
        labels = positions[start : start + len(values)].reshape(len(values), -1)
    parts = []
    for array, fmt in ((labels, "%d"), (values, "%d" if values.dtype.kind in "iub" else "%.9g")):
        buffer = io.StringIO()
        np.savetxt(buffer, array, fmt=fmt, delimiter=",")
        parts.append(buffer.getvalue().splitlines())
    return "".join(f"{a},{b}\n" for a, b in zip(*parts, strict=True))


def command(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="An artifact (onnx, npy or bin) with its manifest.")],
    positions: Annotated[
        str,
        typer.Option(
            "--positions", "-p",
            help="START:STOP[:STEP] or a list 0,5,9; multi-index schemes take one item a "
            "coordinate (0:4,0:2 is a grid); or a JSON array of positions or rows.",
        ),
    ],
    key_positions: Annotated[
        str | None,
        typer.Option("--key-positions", "-k",
                     help="Bias schemes: key positions, same syntax (default: --positions)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write every value to FILE.npy or FILE.csv instead."),
    ] = None,
    providers: Annotated[
        str | None,
        typer.Option(help="onnxruntime providers for ONNX artifacts, e.g. cpu or cuda,cpu."),
    ] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --out FILE (never the artifact or its "
                        "manifest).")] = False,
) -> None:
    """Encode positions with an artifact: print them as a table, or save them (npy, csv)."""
    options = ctx.obj or {}
    quiet, verbose = options.get("quiet", False), options.get("verbose", False)
    if out is not None:
        if out.suffix.lower() not in OUT_SUFFIXES:
            raise BadParameterError(
                f"--out {str(out)!r}: the file name must end in .npy or .csv"
            )
        check_output(out, [path], force)

    from edgepe.runtime import check_positions, load

    runtime = load(path, providers=providers)
    limit = (runtime.manifest["positions"] or {}).get("limit")
    rows = check_positions(parse_positions(positions, runtime.arity), runtime.arity, limit,
                           "--positions")
    keys = None
    if runtime.kind == "bias":
        keys = rows if key_positions is None else parse_positions(
            key_positions, None, "--key-positions")
        keys = check_positions(keys, None, limit, "--key-positions")
    elif key_positions is not None:
        raise BadParameterError(
            f"--key-positions is for bias schemes; '{runtime.scheme}' is a {runtime.kind} scheme"
        )
    if runtime.rotates:
        raise BadParameterError(
            f"{str(path)!r} is rope's apply graph (x, positions -> y): it has no encodings "
            "to print or save; use the encode graph (export without --rope-graph apply)"
        )
    from rich.console import Console

    err = Console(stderr=True)
    if verbose:
        where = f" on {', '.join(runtime.providers)}" if hasattr(runtime, "providers") else ""
        err.print(f"{runtime!r}{where}", highlight=False, soft_wrap=True)

    if out is not None:
        if keys is not None and runtime.width * len(rows) * len(keys) > MAX_VALUES:
            raise PositionError(
                f"a bias of [{runtime.width}, {len(rows)}, {len(keys)}] is more than "
                f"{MAX_VALUES} values: ask for fewer positions or key positions"
            )
        shape = write_out(out, runtime, rows, keys,
                          show_progress=not quiet and sys.stderr.isatty(),  # bar: terminals
                          inputs=[path], force=force)
        if not quiet:
            err.print(f"wrote {out} {list(shape)}", highlight=False, soft_wrap=True)
        return

    # Only the rows (and key columns) that can be shown are encoded: --positions may ask for
    # millions, and a terminal shows 40.
    m = runtime.manifest
    what = f"{m['scheme']} ({m['mode']} {m['format']}, {m['dtype']})"
    console = Console()
    labels = _labels(runtime.arity)
    row_ids = _kept(len(rows), 2 * SHOW_ROWS)
    row_labels = rows.reshape(len(rows), -1)[row_ids]
    if runtime.kind == "bias":
        col_ids = _kept(len(keys), 4 * SHOW_ROWS)
        values = runtime.encode(rows[row_ids], keys[col_ids])
        names = [f"k{int(keys[k])}" for k in col_ids]
        for h in range(values.shape[0]):
            render(console, values[h], row_ids, col_ids, row_labels, labels, names,
                   f"{what} head {h}: bias[{h}, pos, key]", (len(rows), len(keys)))
        return
    values = runtime.encode(rows[row_ids])
    width = values.shape[1]
    render(console, values, row_ids, range(width), row_labels, labels,
           [f"d{i}" for i in range(width)], f"{what}: {[len(rows), width]}", (len(rows), width))
