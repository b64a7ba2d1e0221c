"""``edgepe plot``: pictures of a scheme (or of an artifact) as PNG or SVG, headless.

Kinds: ``heatmap`` (the demo's raw bits next to the encoding), ``similarity`` (``PE(t).PE(u)``),
``hamming`` (bits changed between neighbours: binary against Gray), ``quant-error`` (an int8
artifact's error per dimension against its proven bound). ``--artifact PATH`` draws what an
artifact computes instead of the reference (its manifest gives the scheme). See ``edgepe.plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgepe.cli.export_cmd import parse_params
from edgepe.cli.run_cmd import parse_positions
from edgepe.contract.errors import BadParameterError, CheckpointError

KIND_HELP = "heatmap | similarity | hamming | quant-error (with --artifact)"


def command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", "-o", help="FILE.png or FILE.svg to write.")],
    scheme: Annotated[str | None, typer.Option(help="Scheme id (see 'edgepe list').")] = None,
    max_len: Annotated[int | None, typer.Option("--max-len", help="Positions 0 .. L-1.")] = None,
    d_model: Annotated[int | None, typer.Option("--d-model", help="Width D.")] = None,
    heads: Annotated[int | None, typer.Option(help="Heads (bias schemes).")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", metavar="KEY=VALUE",
                                                    help="Scheme parameter; repeatable.")] = None,
    kind: Annotated[str, typer.Option(help=KIND_HELP)] = "heatmap",
    artifact: Annotated[Path | None, typer.Option(
        help="Draw what this artifact computes (its manifest gives the scheme); int8 ones for "
        "--kind quant-error.")] = None,
    positions: Annotated[str | None, typer.Option(
        "--positions", "-p", help="START:STOP[:STEP] or a list (default: 0 .. min(L, 256)-1).",
    )] = None,
    seed: Annotated[int, typer.Option(help="Seed of learned weights.")] = 0,
    checkpoint: Annotated[Path | None, typer.Option(
        help="Weights to load (learned schemes); with --artifact --kind quant-error, the "
             "checkpoint the artifact was exported from (by its recorded sha256).")] = None,
    checkpoint_key: Annotated[str | None, typer.Option(
        "--checkpoint-key", metavar="PREFIX",
        help="The encoding's prefix in a whole model's state_dict.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --out FILE (never the artifact or the "
                        "checkpoint).")] = False,
) -> None:
    """Draw a scheme's (or an artifact's) encodings, or an int8 error, to a PNG or SVG file."""
    from edgepe.plot import KINDS, image_format

    image_format(out)
    if kind not in KINDS:
        raise BadParameterError(f"--kind {kind!r} is not one of: {', '.join(KINDS)}")
    config = None
    if artifact is not None:
        given = [name for name, value in (("--scheme", scheme), ("--max-len", max_len),
                                          ("--d-model", d_model), ("--heads", heads),
                                          ("--param", param),
                                          ("--checkpoint-key", checkpoint_key))
                 if value]
        if given or seed:
            raise BadParameterError(
                f"--artifact brings its scheme, sizes and weights in its manifest: drop "
                f"{', '.join(given or ['--seed'])}"
            )
    elif kind == "quant-error":
        raise BadParameterError("--kind quant-error draws an artifact: give --artifact PATH")
    else:
        if scheme is None or max_len is None:
            raise BadParameterError(f"--kind {kind} needs --scheme and --max-len (or --artifact)")
        from edgepe.schemes import resolve

        config = resolve(scheme, max_len, d_model=d_model, heads=heads,
                         params=parse_params(param))
    span = None
    if positions is not None:
        span = parse_positions(positions, None)
    if checkpoint is not None and config is not None and not config.spec.learnable:
        raise BadParameterError(
            f"scheme '{config.scheme}' has no learned weights: --checkpoint does not apply"
        )
    if checkpoint_key is not None and checkpoint is None:
        raise BadParameterError("--checkpoint-key names a prefix inside --checkpoint FILE; "
                                "give --checkpoint too")
    if checkpoint is not None and not checkpoint.is_file():
        raise CheckpointError(f"--checkpoint {str(checkpoint)!r} is not a file")

    from edgepe.plot import plot

    written = plot(kind, out, config, artifact=artifact, positions=span, seed=seed,
                   checkpoint=None if checkpoint is None else str(checkpoint),
                   checkpoint_key=checkpoint_key, force=force)
    if not (ctx.obj or {}).get("quiet"):
        typer.echo(f"wrote {written} ({written.stat().st_size} bytes)", err=True)
