"""``edgepe export``: write an artifact (ONNX graph, npy/bin table, C header) and check its parity.

Prints one line with the path and size, and one with the quick parity check on onnxruntime CPU
(``--no-verify`` skips it); exits 1 when parity fails, 2 on bad input (nothing written).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from edgepe.errors import BadParameterError

PANEL_MORE = "More options"


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` -> ``{KEY: VALUE}``; a malformed or repeated item is refused."""
    params: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BadParameterError(f"--param {item!r} must look like KEY=VALUE (e.g. c=5.0)")
        if key in params:
            raise BadParameterError(f"--param {key!r} is given twice")
        params[key] = value.strip()
    return params


def rope_extra(scheme: str, mode: str | None, graph: str | None,
               lowering: str | None) -> dict[str, str]:
    """``ExportConfig.extra`` for rope's graph choice; defaults are left out, so an explicit
    ``--rope-graph encode`` gives the same bytes as none. Values are checked by the builder."""
    given = {"--rope-graph": graph, "--rope-lowering": lowering}
    if scheme != "rope" and any(v is not None for v in given.values()):
        flag = next(k for k, v in given.items() if v is not None)
        raise BadParameterError(f"{flag} applies to --scheme rope only, not {scheme!r}")
    extra = {key: value for key, value, default in (("rope_graph", graph, "encode"),
                                                    ("rope_lowering", lowering, "onnx"))
             if value is not None and value != default}
    if extra and mode not in (None, "compute"):
        raise BadParameterError(f"--rope-graph/--rope-lowering choose a compute graph; "
                                f"--mode {mode} stores a table")
    return extra


def parse_int(option: str, raw: str) -> int:
    """An integer option value; anything else is refused naming the option and the value."""
    try:
        return int(raw)
    except ValueError:
        raise BadParameterError(f"{option} must be an integer, got {raw!r}") from None


def command(
    ctx: typer.Context,
    scheme: Annotated[str, typer.Option(
        "--scheme", metavar="ID", help="Scheme id (see 'edgepe list').")],
    max_len: Annotated[str, typer.Option(
        "--max-len", metavar="L", help="Positions 0 .. L-1 the artifact is built for.")],
    d_model: Annotated[str | None, typer.Option(
        "--d-model", metavar="D", help="Encoding width (default: the scheme's).")] = None,
    heads: Annotated[str | None, typer.Option(
        "--heads", metavar="H", help="Heads (bias schemes).")] = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", metavar="KEY=VALUE", help="Scheme parameter; repeatable.")] = None,
    mode: Annotated[str | None, typer.Option(
        "--mode", metavar="compute|table", help="Default: compute where the scheme has it.")]
    = None,
    format: Annotated[str, typer.Option("--format", metavar="onnx|npy|bin|c")] = "onnx",
    dtype: Annotated[str, typer.Option(
        "--dtype", metavar="float32|float16|uint8|bit",
        help="Output dtype (uint8: 0/1 schemes; bit: tables).")] = "float32",
    quantize: Annotated[str, typer.Option("--quantize", metavar="none|int8")] = "none",
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", metavar="FILE",
        help="state_dict for the learned weights (weights_only load).")] = None,
    seed: Annotated[str, typer.Option(
        "--seed", metavar="N", help="Seed of the learned weights' init.")] = "0",
    opset: Annotated[str, typer.Option(
        "--opset", metavar="N", help="ONNX opset (>= 18 for the bitwise ops).")] = "18",
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="PATH", help="Output file (default: under models/).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a different file at --out.")]
    = False,
    lowering: Annotated[str, typer.Option("--lowering", metavar="bitwise|arith",
                                          rich_help_panel=PANEL_MORE,
                                          help="Bit family: arith uses no bitwise ops "
                                          "(GPU runtimes without bitwise kernels).")]
    = "bitwise",
    quant_granularity: Annotated[str, typer.Option("--quant-granularity",
                                                   metavar="channel|tensor",
                                                   rich_help_panel=PANEL_MORE)] = "channel",
    int8_runtime: Annotated[str, typer.Option("--int8-runtime", metavar="fold|live",
                                              rich_help_panel=PANEL_MORE,
                                              help="int8 ONNX graphs: fold to float32 at "
                                              "session load (fast, float32 RAM), or keep int8 "
                                              "in RAM (slower).")] = "fold",
    max_table_bytes: Annotated[str | None, typer.Option("--max-table-bytes", metavar="N",
                                                        rich_help_panel=PANEL_MORE,
                                                        help="Refuse bigger tables "
                                                        "(default 256 MiB).")] = None,
    c_prefix: Annotated[str, typer.Option(
        "--c-prefix", metavar="NAME", rich_help_panel=PANEL_MORE,
        help="Prefix of C symbols.")] = "edgepe",
    c_align: Annotated[str, typer.Option("--c-align", metavar="N", rich_help_panel=PANEL_MORE,
                                         help="Alignment of C arrays, bytes.")] = "16",
    no_verify: Annotated[bool, typer.Option("--no-verify", rich_help_panel=PANEL_MORE,
                                            help="Skip the quick parity check.")] = False,
    rope_graph: Annotated[str | None, typer.Option("--rope-graph", metavar="encode|apply",
                                                   rich_help_panel=PANEL_MORE,
                                                   help="rope: positions -> cos|sin "
                                                   "(default), or x, positions -> rotated y.")]
    = None,
    rope_lowering: Annotated[str | None, typer.Option("--rope-lowering",
                                                      metavar="onnx|ort|rotary23",
                                                      rich_help_panel=PANEL_MORE,
                                                      help="rope apply graph: plain ONNX ops "
                                                      "(default), onnxruntime's com.microsoft."
                                                      "RotaryEmbedding, or ONNX's "
                                                      "RotaryEmbedding (--opset 23).")] = None,
) -> None:
    """Export a positional encoding as an ONNX graph, a table or a C header."""
    from edgepe import api
    from edgepe.export.artifact import DEFAULT_TABLE_CAP
    from edgepe.progress import reporting

    # Scheme-specific export options (e.g. rope's graph choice) travel in ExportConfig.extra.
    extra = rope_extra(scheme, mode, rope_graph, rope_lowering)
    # Sizes stay strings until resolve() checks them, so messages can name the bad value.
    config = api.make_config(
        scheme, max_len, d_model=d_model, heads=heads, params=parse_params(param), mode=mode,
        format=format, dtype=dtype, quantize=quantize, quant_granularity=quant_granularity,
        lowering=lowering, int8_runtime=int8_runtime, checkpoint=checkpoint,
        seed=parse_int("--seed", seed),
        opset=parse_int("--opset", opset), c_prefix=c_prefix,
        c_align=parse_int("--c-align", c_align),
        max_table_bytes=(DEFAULT_TABLE_CAP if max_table_bytes is None
                         else parse_int("--max-table-bytes", max_table_bytes)),
        out=out, extra=extra,
    )
    quiet = (ctx.obj or {}).get("quiet", False)
    # A bar for large tables and the quick check, on a terminal only; short work shows nothing.
    with reporting(not quiet and sys.stderr.isatty()):
        result, report = api.export(config, force=force, verify=not no_verify)
    if not quiet:
        size = result.path.stat().st_size
        state = "unchanged (identical export already there)" if result.unchanged else "wrote"
        typer.echo(f"{state} {result.path} ({size} bytes, sha256 "
                   f"{result.manifest['sha256'][:12]}) + {result.path.name}.json")
        from edgepe.quant.int8 import export_note

        if note := export_note(result.manifest):
            typer.echo(note)
    if report is not None:
        if not report:
            typer.echo(str(report), err=True)
            raise typer.Exit(1)
        if not quiet:
            typer.echo(str(report))
