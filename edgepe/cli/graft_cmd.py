"""``edgepe graft MODEL.onnx``: put a PE inside a user's ONNX model and prove the model unchanged.

    edgepe graft model.onnx --pe models/binary-compute-L512-d64.onnx --at TENSOR --out out.onnx
    edgepe graft model.onnx --scheme binary [--quantize int8 ...] --out out.onnx
    edgepe graft model.onnx [--max-len L] [--quantize int8] --out out.onnx   (finds the PE itself)

``edgepe.graft.graft`` does the work (its module doc says how); this prints its report. Exit 0
when the grafted model's outputs match the original's within tolerance (then ``--out`` is
written), 1 when they do not (nothing written), 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgepe.cli.export_cmd import parse_int
from edgepe.contract.config import check_not_input
from edgepe.contract.errors import BadParameterError, ParityError
from edgepe.graft import graft

PANEL_SCHEME = "With --scheme (export options)"


def _lengths(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    try:
        values = [int(part) for part in raw.split(",")]
    except ValueError:
        raise BadParameterError(
            f"--lengths must be comma-separated integers, got {raw!r}") from None
    if not values or min(values) < 1:
        raise BadParameterError(f"--lengths must be positive, got {raw!r}")
    return values


def command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Argument(metavar="MODEL.onnx", help="The model to graft into.")],
    out: Annotated[Path, typer.Option("--out", metavar="OUT.onnx", help="The grafted model.")],
    pe: Annotated[Path | None, typer.Option(
        "--pe", metavar="ARTIFACT", help="An edgepe ONNX artifact (from 'edgepe export').")] = None,
    at: Annotated[str | None, typer.Option(
        "--at", metavar="TENSOR", help="The tensor the PE replaces (with --add: is added to).")]
    = None,
    positions: Annotated[str | None, typer.Option(
        "--positions", metavar="INPUT|arange:INPUT[:AXIS]",
        help="A model input (a new int64 [S] one if absent), or 0..S-1 from an input's axis "
        "(default: position_ids/positions if present, else arange of the first input).")] = None,
    add: Annotated[bool, typer.Option(
        "--add", help="Add the PE to --at (a model without a PE) instead of replacing it.")]
    = False,
    scheme: Annotated[str | None, typer.Option(
        "--scheme", metavar="ID", help="Find this scheme's PE in the model (binary) and graft "
        "edgepe's artifact for it.")] = None,
    no_check: Annotated[bool, typer.Option(
        "--no-check", help="Skip the equivalence check on onnxruntime.")] = False,
    lengths: Annotated[str | None, typer.Option(
        "--lengths", metavar="S,...", help="Sequence lengths the check runs (default 2, "
        "max_len/2, max_len).")] = None,
    max_len: Annotated[str | None, typer.Option(
        "--max-len", metavar="L", help="With no --pe/--scheme: the positions the PE graft finds "
        "must cover (default: what the model declares, a table's rows or a constant Range "
        "bound, or --from-hf-config's max_position_embeddings; else 4096).")] = None,
    from_hf_config: Annotated[Path | None, typer.Option(
        "--from-hf-config", metavar="FILE", help="With no --pe/--scheme: the model's "
        "config.json; the PE found must be what it says (RoPE's frequencies edgepe's own for "
        "it), and its max_position_embeddings is the default --max-len.")] = None,
    rope_lowering: Annotated[str | None, typer.Option(
        "--rope-lowering", metavar="ort|rotary23", help="With no --pe/--scheme, RoPE found: "
        "also fuse every layer's rotate-half arithmetic into onnxruntime's RotaryEmbedding (ort) "
        "or ONNX's opset-23 one (rotary23; the model converted up to opset 23).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --out (never the model, --pe or its manifest).")]
    = False,
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", metavar="FILE",
        help="The checkpoint an int8 --pe artifact was exported from: the proof's bound is "
             "rebuilt from it (by its recorded sha256), never read from the artifact.")] = None,
    mode: Annotated[str | None, typer.Option(
        "--mode", metavar="compute|table|sliced", rich_help_panel=PANEL_SCHEME,
        help="With --scheme: the export's mode. With no --pe/--scheme, RoPE found: table or "
        "sliced (default: the table up to 32 MiB, sliced past it); Whisper's encoder "
        "sinusoids: table (default) or sliced.")] = None,
    quantize: Annotated[str | None, typer.Option("--quantize", metavar="none|int8",
                                                 rich_help_panel=PANEL_SCHEME)] = None,
    quant_granularity: Annotated[str | None, typer.Option(
        "--quant-granularity", metavar="channel|tensor", rich_help_panel=PANEL_SCHEME)] = None,
    lowering: Annotated[str | None, typer.Option("--lowering", metavar="bitwise|arith",
                                                 rich_help_panel=PANEL_SCHEME)] = None,
    opset: Annotated[str | None, typer.Option("--opset", metavar="N",
                                              rich_help_panel=PANEL_SCHEME)] = None,
) -> None:
    """Put a PE inside your ONNX model and prove the model's outputs unchanged."""
    options = {"mode": mode, "quantize": quantize, "quant_granularity": quant_granularity,
               "lowering": lowering,
               "opset": None if opset is None else parse_int("--opset", opset)}
    hf_config = None
    if from_hf_config is not None:
        check_not_input(out, [from_hf_config])  # graft's inputs are never its output (issue 41)
        from edgepe.schemes.hf_config import read_hf_config  # (edgepe.schemes loads torch)

        hf_config = read_hf_config(from_hf_config)
    report = graft(model, pe=pe, at=at, positions=positions, out=out, scheme=scheme, add=add,
                   check=not no_check, force=force, lengths=_lengths(lengths),
                   max_len=None if max_len is None else parse_int("--max-len", max_len),
                   **({"rope_lowering": rope_lowering} if rope_lowering else {}),
                   checkpoint=checkpoint, hf_config=hf_config,
                   **{k: v for k, v in options.items() if v is not None})
    if not (ctx.obj or {}).get("quiet", False) or not report:
        for line in report.lines():
            typer.echo(line)
    if not report:
        failed = ", ".join(c.name for c in report.checks if not c.passed)
        raise ParityError(f"the grafted model's outputs differ from the original's beyond "
                          f"tolerance ({failed}); {str(out)!r} was not written")
