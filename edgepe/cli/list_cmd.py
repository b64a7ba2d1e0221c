"""``edgepe list``: every scheme with its parameters, defaults, export modes and source.

The table fits an 80-column terminal (cells wrap; tolerances abbreviated); ``--wide`` prints it
on one line a scheme (about 160 columns), ``--json`` prints the same facts as JSON.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

NARROW = 80
WIDE = 160
FOOTNOTE = ("* default mode; 'derived' widths follow from max_len: docs/readme/catalogue.md\n"
            "--wide: one line a scheme, every column in full; --json: the same as JSON")


def describe_width(spec) -> str:
    if spec.d_model is None:
        return f"heads {spec.heads}"
    if callable(spec.d_model):
        return "derived"
    return str(spec.d_model)


def rows() -> list[dict]:
    """One dict a scheme: what the table shows, as data."""
    from edgepe.schemes import get_spec, scheme_ids

    out = []
    for scheme_id in scheme_ids():
        spec = get_spec(scheme_id)
        rtol, atol = spec.tolerance
        out.append({
            "id": scheme_id, "source": spec.source,
            "parameters": {p.name: p.describe_default() for p in spec.params},
            "d_model": describe_width(spec), "modes": list(spec.modes),
            "default_mode": spec.default_mode, "out_of_range": spec.oob,
            "tolerance": {"rtol": rtol, "atol": atol},
        })
    return out


def command(
    ctx: typer.Context,
    wide: Annotated[bool, typer.Option(
        "--wide", help="One line a scheme, every column in full (about 160 columns).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="The catalogue as JSON on stdout.")] = False,
) -> None:
    """List the scheme catalogue (fits 80 columns; --wide, --json for everything)."""
    from rich.console import Console
    from rich.table import Table

    data = rows()
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    if not wide:
        typer.echo(narrow(data))
        typer.echo(FOOTNOTE)
        return
    table = Table(title="edgepe schemes", show_lines=False)
    for column in ("id", "source", "parameters (default)", "d_model", "modes", "out of range",
                   "tolerance"):
        table.add_column(column)
    for row in data:
        table.add_row(row["id"], row["source"], _params(row) or "-", row["d_model"],
                      _modes(row, ", "), row["out_of_range"], _tolerance(row, wide=True))
    Console(width=WIDE).print(table)
    typer.echo(FOOTNOTE)


def narrow(data: list[dict]) -> str:
    """The catalogue in at most ``NARROW`` columns: a line of short columns a scheme, then its
    source and parameters, wrapped and indented."""
    import textwrap

    head = ("id", "d_model", "modes", "out of range", "tolerance")
    cells = [(r["id"], r["d_model"], _modes(r, ","), r["out_of_range"], _tolerance(r))
             for r in data]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]

    def line(values) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    for row, cell in zip(data, cells, strict=True):
        out.append(line(cell))
        detail = f"{row['source']}; " + (f"parameters: {_params(row)}" if row["parameters"]
                                          else "no parameters")
        out += textwrap.wrap(detail, NARROW, initial_indent="    ", subsequent_indent="    ")
    out.append("tolerance: exact, or atol/rtol against the reference")
    return "\n".join(out)


def _params(row: dict) -> str:
    return ", ".join(f"{k} ({v})" for k, v in row["parameters"].items())


def _modes(row: dict, sep: str) -> str:
    return sep.join(f"{m}*" if m == row["default_mode"] else m for m in row["modes"])


def _tolerance(row: dict, wide: bool = False) -> str:
    rtol, atol = row["tolerance"]["rtol"], row["tolerance"]["atol"]
    if (rtol, atol) == (0.0, 0.0):
        return "exact"
    return f"atol {atol:g}, rtol {rtol:g}" if wide else f"{atol:g}/{rtol:g}"
