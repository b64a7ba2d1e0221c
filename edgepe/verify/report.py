"""Rendering a verification ``Report``: a rich table (one row a runtime) and the JSON report.

This module only renders; deciding pass/fail is ``compare``'s job and the exit code the CLI's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgepe.contract.config import write_output


def to_json(report) -> str:
    """The contract's report: ``{"passed": bool, "results": [{"runtime", "max_abs_err",
    "passed", ...}, ...]}`` plus the artifact, its sha256 check and each runtime's details."""
    return json.dumps(_finite(report.as_dict()), indent=2, sort_keys=True) + "\n"


def write_json(report, path, force: bool = False) -> None:
    """The JSON report to ``path`` by the one output rule (``edgepe.contract.config.
    write_output``): atomic, a symlink replaced (never followed), an existing file only with
    ``force``, never the artifact or its manifest."""
    artifact = Path(report.artifact)
    write_output(Path(path), to_json(report).encode(), [artifact], force, "--json")


def _finite(value):
    """JSON has no NaN or Infinity: a non-finite error (an output of the wrong shape) is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _num(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def render(report, console) -> None:
    """Print the report as a table, with mismatch locations and placement notes below it."""
    from rich.table import Table

    m = report.manifest
    title = (f"{report.artifact}: {m.get('scheme')} {m.get('mode')} {m.get('format')} "
             f"{m.get('dtype')}" + (" int8" if m.get("quant") else "")
             + f", max_len {m.get('max_len')}" + (" (quick)" if report.quick else ""))
    table = Table(title=title, title_justify="left",
                  caption="abs, rel: error against the reference", caption_justify="left")
    errors = ("max abs", "mean abs", "max rel", "mean rel")
    for column in ("runtime", "positions", *errors, "mismatching", "tolerance", "placement",
                   "result"):
        table.add_column(column, no_wrap=column in (*errors, "tolerance", "mismatching"),
                         justify="right" if column in (*errors, "positions", "mismatching")
                         else "left")
    sha = "ok" if report.sha256_ok else "MISMATCH"
    rebuilt = report.rebuild
    if rebuilt is not None:
        state = ("[green]PASS[/]" if rebuilt.reproduced else
                 "[yellow]not reproduced[/]" if rebuilt.ok else "[red]FAIL[/]")
        table.add_row("rebuild", "", "", "", "", "", "", "", "", state)
    table.add_row("sha256", "", "", "", "", "", "", "", "",
                  "[green]PASS[/]" if report.sha256_ok else f"[red]FAIL[/] ({sha})")
    for r in report.results:
        verdict = "[green]PASS[/]" if r.passed else "[red]FAIL[/]"
        if r.error:
            table.add_row(r.runtime, "", "", "", "", "", "", str(r.tolerance), "", verdict)
            continue
        table.add_row(r.runtime, str(r.positions), _num(r.max_abs_err), _num(r.mean_abs_err),
                      _num(r.max_rel_err), _num(r.mean_rel_err), f"{r.mismatches} of {r.elements}",
                      str(r.tolerance), _placement(r.placement), verdict)
    console.print(table)
    if rebuilt is not None and not rebuilt.reproduced:
        console.print(f"rebuild: {rebuilt.difference or rebuilt.note}", highlight=False,
                      markup=False)
    if not report.sha256_ok:
        console.print(f"sha256: the file hashes to {report.sha256_actual}, the manifest says "
                      f"{report.sha256_expected}: it is not the artifact its manifest describes",
                      highlight=False)
    for r in report.results:
        if r.error:
            console.print(f"{r.runtime}: {r.error}", highlight=False)
        for mismatch in r.first_mismatches:
            console.print(f"{r.runtime}: {mismatch}", highlight=False)
        if r.mismatches > len(r.first_mismatches):
            console.print(f"{r.runtime}: ... {r.mismatches - len(r.first_mismatches)} more "
                          "mismatching elements", highlight=False)
        if r.mismatches_by_column:
            unit = "head" if report.manifest.get("kind") == "bias" else (
                r.first_mismatches[0].where.split()[-2] if r.first_mismatches else "column")
            counts = sorted(r.mismatches_by_column.items(), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{unit} {c} ({n})" for c, n in counts[:8])
            more = f" and {len(counts) - 8} more" if len(counts) > 8 else ""
            console.print(f"{r.runtime}: mismatching elements by {unit}: {shown}{more}",
                          highlight=False)
        if r.placement_error:
            console.print(f"{r.runtime}: [red]{r.placement_error}[/]", highlight=False)
        elif r.placement_note:
            console.print(f"{r.runtime}: {r.placement_note}", highlight=False)


def _placement(placement) -> str:
    if not placement:
        return "-"
    return ", ".join(
        f"{provider.removesuffix('ExecutionProvider')} {sum(ops.values())}"
        for provider, ops in placement.items()
    )
