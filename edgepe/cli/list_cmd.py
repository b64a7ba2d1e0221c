"""``edgepe list``: every scheme with its parameters, defaults, export modes and source."""

from __future__ import annotations

import typer


def describe_width(spec) -> str:
    if spec.d_model is None:
        return f"heads {spec.heads}"
    if callable(spec.d_model):
        return "derived"
    return str(spec.d_model)


def command(ctx: typer.Context) -> None:
    """List the scheme catalogue."""
    from rich.console import Console
    from rich.table import Table

    from edgepe.schemes import get_spec, scheme_ids

    table = Table(title="edgepe schemes", show_lines=False)
    for column in ("id", "source", "parameters (default)", "d_model", "modes", "out of range",
                   "tolerance"):
        table.add_column(column)
    for scheme_id in scheme_ids():
        spec = get_spec(scheme_id)
        params = ", ".join(
            f"{p.name} ({p.describe_default()})" for p in spec.params
        )
        modes = ", ".join(f"{m}*" if m == spec.default_mode else m for m in spec.modes)
        rtol, atol = spec.tolerance
        tol = "exact" if (rtol, atol) == (0.0, 0.0) else f"atol {atol:g}, rtol {rtol:g}"
        table.add_row(scheme_id, spec.source, params or "-", describe_width(spec), modes,
                      spec.oob, tol)
    Console(width=160).print(table)
    typer.echo("* default mode. 'derived' widths follow from max_len: see the README's catalogue.")
