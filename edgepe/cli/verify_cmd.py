"""``edgepe verify PATH``: prove an artifact equal to its reference on every runtime it targets.

Prints one table row per runtime (max/mean absolute and max relative error, mismatching elements,
tolerance, where the nodes ran, pass/fail), the first mismatching elements, and placement notes.
``--json FILE`` follows the one output rule (atomic, a symlink replaced and never followed, an
existing file only with ``--force``, never the artifact or its manifest). Exit 0 when everything
passed (or ``--accept-foreign`` accepted an artifact that is not this edgepe's rebuild: ACCEPTED,
never PASSED), 1 when the rebuild, a comparison, the sha256 or
``--strict-placement`` failed, 2 on bad input (no manifest, a truncated or non-ONNX file, an
unknown runtime, a checkpoint-based artifact without its ``--checkpoint``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgepe.contract.config import check_output


def command(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The artifact (its manifest is PATH.json).",
                                         show_default=False)],
    providers: Annotated[str | None, typer.Option(
        "--providers", metavar="LIST",
        help="Comma-separated runtimes: onnxruntime providers (cpu, cuda, trt, openvino, dml, "
             "...), ref (ONNX reference evaluator), c (C compiler), file (npy/bin), litert, "
             "tflm (.tflite). Default: cpu,ref for ONNX, file for tables, c for C headers, "
             "litert and tflm where its op resolver runs the model.")] = None,
    json_file: Annotated[Path | None, typer.Option(
        "--json", metavar="FILE",
        help="Also write the report as JSON ('-': to stdout, the table then goes to stderr).")]
    = None,
    strict_placement: Annotated[bool, typer.Option(
        "--strict-placement",
        help="Fail a GPU provider on which some nodes ran on the CPU.")] = False,
    quick: Annotated[bool, typer.Option(
        "--quick", help="Only the first 4096 positions and a small probe, on the default "
                        "runtime.")] = False,
    accept_foreign: Annotated[bool, typer.Option(
        "--accept-foreign",
        help="An artifact that is not byte-identical to this edgepe's rebuild (another "
             "version's build): verify it numerically with this edgepe's values instead of "
             "failing; the report lists each unchecked claim and says ACCEPTED, never PASSED.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --json FILE (never the artifact or its "
                        "manifest).")] = False,
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", metavar="FILE",
        help="The checkpoint a checkpoint-based artifact was exported from (its sha256 must be "
             "the recorded one); no path from a manifest is ever opened.")] = None,
) -> None:
    """Verify an artifact against its PyTorch reference on each runtime."""
    from rich.console import Console

    from edgepe.verify import verify_artifact
    from edgepe.verify.report import render

    names = providers.split(",") if providers is not None else None
    quiet = (ctx.obj or {}).get("quiet")
    to_stdout = json_file is not None and str(json_file) == "-"
    if json_file is not None and not to_stdout:
        check_output(json_file, [path], force, "--json")
    report = verify_artifact(path, providers=names, quick=quick,
                             json_path=None if to_stdout else json_file,
                             strict_placement=strict_placement, checkpoint=checkpoint,
                             accept_foreign=accept_foreign, force=force,
                             progress=False if quiet else None)  # a bar only on a terminal
    if to_stdout:
        from edgepe.verify.report import to_json

        typer.echo(to_json(report), nl=False)
    if not quiet:
        # with --json -, stdout holds the JSON alone
        render(report, Console(width=max(140, Console().width), highlight=False,
                               stderr=to_stdout))
    if not (report or report.accepted):
        typer.echo(str(report), err=True)  # the one line that says what failed, even with -q
        raise typer.Exit(1)
    if not quiet:
        typer.echo(str(report), err=to_stdout)
