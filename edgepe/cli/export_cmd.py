"""``edgepe export``: write an artifact (ONNX graph, npy/bin table, C header) and check its parity.

Prints one line with the path and size, and one with the quick parity check on onnxruntime CPU
(``--no-verify`` skips it); exits 1 when parity fails, 2 on bad input (nothing written).

``--from-hf-config config.json`` takes the scheme, its parameters, ``--max-len`` and the width
from a Hugging Face model config (``edgepe.schemes.hf_config``) and prints one line saying what
it read. Options given on the command line override the config's values (``--max-len 4096`` for
a shorter table than the model's context, ``--param freq_dtype=float64``); a ``--scheme`` other
than the config's is refused (exit 2), as the rest of the translation would not apply to it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgepe import api
from edgepe.contract.checkpoint import tensor_shapes
from edgepe.contract.config import (
    DEFAULT_TABLE_CAP,
    check_not_input,
    check_writable,
    default_out,
    infer_format,
)
from edgepe.contract.errors import BadParameterError
from edgepe.contract.progress import reporting
from edgepe.targets import check_file, for_export, form_note

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


def head_dim_alias(scheme: str, d_model: str | None, head_dim: str | None) -> str | None:
    """``--head-dim``: rope's name for ``--d-model`` (a rotary width is the head dimension)."""
    if head_dim is None:
        return d_model
    if scheme != "rope":
        raise BadParameterError(f"--head-dim applies to --scheme rope only (its d_model is the "
                                f"head dimension); use --d-model for {scheme!r}")
    if d_model is not None and d_model != head_dim:
        raise BadParameterError(f"--head-dim {head_dim} and --d-model {d_model} disagree; "
                                "give one (they are the same option for rope)")
    return head_dim


def rope_extra(scheme: str, mode: str | None, graph: str | None,
               lowering: str | None, format: str = "onnx") -> dict[str, str]:
    """``ExportConfig.extra`` for rope's graph choice; defaults are left out, so an explicit
    ``--rope-graph encode`` gives the same bytes as none. Values are checked by the builder;
    a choice of graph for a file that holds no graph (npy, bin, c) is refused."""
    given = {"--rope-graph": graph, "--rope-lowering": lowering}
    if scheme == "sinusoidal" and mode == "sliced" and graph is None:
        given.pop("--rope-lowering")  # issue 44: sinusoidal's sliced graph fuses as rope's
    if scheme != "rope" and any(v is not None for v in given.values()):
        flag = next(k for k, v in given.items() if v is not None)
        fused = flag == "--rope-lowering"
        what = f"{scheme!r}" + (f" --mode {mode or 'compute'}" if fused and
                                scheme == "sinusoidal" else "")
        raise BadParameterError(f"{flag} applies to --scheme rope"
                                f"{' and to sinusoidal --mode sliced' if fused else ' only'}, "
                                f"not {what}")
    extra = {key: value for key, value, default in (("rope_graph", graph, "encode"),
                                                    ("rope_lowering", lowering, "onnx"))
             if value is not None and value != default}
    if extra and mode not in (None, "compute", "sliced"):
        raise BadParameterError(f"--rope-graph/--rope-lowering choose a compute graph; "
                                f"--mode {mode} stores a table")
    if extra and format != "onnx":
        raise BadParameterError(f"--rope-graph/--rope-lowering choose an ONNX graph; "
                                f"--format {format} holds no graph (export --format onnx)")
    return extra


def parse_int(option: str, raw: str) -> int:
    """An integer option value; anything else is refused naming the option and the value."""
    try:
        return int(raw)
    except ValueError:
        raise BadParameterError(f"{option} must be an integer, got {raw!r}") from None


def from_hf(path: Path | None, scheme: str | None, max_len: str | None, d_model: str | None,
            heads: str | None, params: dict[str, str]):
    """``(scheme, max_len, d_model, heads, params, line)``: the command line's values over those
    of ``--from-hf-config`` (``line`` says what was read; ``None`` without a config)."""
    if path is None:
        missing = [flag for flag, v in (("--scheme", scheme), ("--max-len", max_len)) if v is None]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise BadParameterError(f"{' and '.join(missing)} {verb} required (or give "
                                    "--from-hf-config config.json)")
        return scheme, max_len, d_model, heads, params, None, None
    from edgepe.schemes.hf_config import check_dynamic_ntk, from_hf_config, read_hf_config

    raw = read_hf_config(path)
    t = from_hf_config(raw)
    length = parse_int("--max-len", max_len) if max_len is not None else t.max_len
    if length is not None and "seq_len" not in params and "rope_type" not in params:
        check_dynamic_ntk(t, length, "give --max-len at most that, or --param seq_len=S for a "
                          "table of one running length S's frequencies")
    if scheme is not None and scheme != t.scheme:
        raise BadParameterError(f"--scheme {scheme} disagrees with --from-hf-config, which "
                                f"describes a {t.scheme!r} model; drop --scheme")
    if max_len is None and t.max_len is None:
        raise BadParameterError(f"--from-hf-config {str(path)!r} names no maximum length: give "
                                "--max-len")
    merged = {**{k: (",".join(map(str, v)) if isinstance(v, tuple) else str(v))
                 for k, v in t.params.items()}, **params}
    width = d_model if d_model is not None else (None if t.d_model is None else str(t.d_model))
    n_heads = heads if heads is not None else (None if t.heads is None else str(t.heads))
    shown = {k: v for k, v in merged.items() if k not in ("short_factor", "long_factor")}
    line = (f"from {path.name}: scheme {t.scheme}, max_len "
            f"{max_len if max_len is not None else t.max_len}"
            + (f", d_model {width}" if width is not None else "")
            + (f", heads {n_heads}" if n_heads is not None else "")
            + "".join(f", {k}={v}" for k, v in shown.items())
            + "".join(f"; {note}" for note in t.notes))
    return (t.scheme, max_len if max_len is not None else str(t.max_len), width, n_heads,
            merged, line, raw.get("model_type"))


def learned_weights(model_type, checkpoint: Path | None, key: str | None,
                    param: str | None) -> str | None:
    """``--checkpoint-param`` for a learned table read from an HF config: the given one, or the
    family's table name found in ``--checkpoint``. Without ``--checkpoint`` it is refused: a
    seeded random table is not the model's."""
    from edgepe.schemes.hf_config import LEARNED_TENSORS, learned_tensor

    names = LEARNED_TENSORS.get(str(model_type).lower(), ())
    if checkpoint is None:
        raise BadParameterError(
            f"--from-hf-config describes a learned position table ({model_type}): give the "
            f"model's weights, --checkpoint model.safetensors"
            + (f" (its table: {names[0]})" if names else " --checkpoint-param NAME"))
    if param is not None or key is not None or not checkpoint.is_file():
        return param
    return learned_tensor(model_type, tensor_shapes(checkpoint)) or (names[0] if names else None)


def command(
    ctx: typer.Context,
    scheme: Annotated[str | None, typer.Option(
        "--scheme", metavar="ID", help="Scheme id (see 'edgepe list').")] = None,
    max_len: Annotated[str | None, typer.Option(
        "--max-len", metavar="L", help="Positions 0 .. L-1 the artifact is built for.")] = None,
    from_hf_config: Annotated[Path | None, typer.Option(
        "--from-hf-config", metavar="FILE",
        help="A Hugging Face config.json: scheme, params, --max-len and width from it "
        "(options given here override it).")] = None,
    d_model: Annotated[str | None, typer.Option(
        "--d-model", metavar="D", help="Encoding width (default: the scheme's).")] = None,
    head_dim: Annotated[str | None, typer.Option(
        "--head-dim", metavar="D", help="rope: the head dimension (= --d-model).")] = None,
    heads: Annotated[str | None, typer.Option(
        "--heads", metavar="H", help="Heads (bias schemes).")] = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", metavar="KEY=VALUE", help="Scheme parameter; repeatable.")] = None,
    mode: Annotated[str | None, typer.Option(
        "--mode", metavar="compute|table|sliced",
        help="Default: compute where the scheme (for --format c: a C function) has it; npy/bin: "
        "table. sliced (rope, sinusoidal): sin/cos from position bits and small tables, no "
        "trig op.")]
    = None,
    format: Annotated[str | None, typer.Option(
        "--format", metavar="onnx|npy|bin|c|pte|tflite",
        help="Default: what --out's extension names (.onnx .npy .bin .h .pte .tflite), else onnx.")]
    = None,
    dtype: Annotated[str, typer.Option(
        "--dtype", metavar="float32|float16|uint8|bit",
        help="Output dtype (uint8: 0/1 schemes; bit: tables).")] = "float32",
    quantize: Annotated[str, typer.Option("--quantize", metavar="none|int8")] = "none",
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", metavar="FILE",
        help="state_dict for the learned weights (weights_only load).")] = None,
    checkpoint_key: Annotated[str | None, typer.Option(
        "--checkpoint-key", metavar="PREFIX",
        help="The encoding's prefix in a whole model's state_dict (e.g. pos for "
             "pos.projection.weight).")] = None,
    checkpoint_param: Annotated[str | None, typer.Option(
        "--checkpoint-param", metavar="NAME",
        help="The one tensor to load from --checkpoint (safetensors or state_dict), e.g. "
             "transformer.wpe.weight.")] = None,
    seed: Annotated[str, typer.Option(
        "--seed", metavar="N", help="Seed of the learned weights' init.")] = "0",
    opset: Annotated[str | None, typer.Option(
        "--opset", metavar="N", help="ONNX opset (default 18, the bitwise ops' first; int8: "
        "19).")] = None,
    out: Annotated[str | None, typer.Option(
        "--out", metavar="PATH",
        help="Output file (default: under models/); FOLDER/ writes the default name there.")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a different file at --out.")]
    = False,
    lowering: Annotated[str | None, typer.Option("--lowering",
                                                 metavar="bitwise|arith|arith32|float|trunc",
                                                 rich_help_panel=PANEL_MORE,
                                                 help="Bit family: arith uses no bitwise ops "
                                                 "(int64 Div/Mod), arith32 int32 Div/Mod, "
                                                 "float Floor/Mul/Sub (|pos| <= 2^24), "
                                                 "trunc float Mul + truncating Cast + int32 "
                                                 "(CoreML; sliced also clip32). "
                                                 "Default: bitwise, or what --target runs.")]
    = None,
    target: Annotated[str | None, typer.Option("--target", metavar="NAME",
                                               help="Runtime the graph must run on whole "
                                               "(ort-cpu, ort-cuda, directml, tensorrt, "
                                               "openvino, qnn, coreml, nnapi, xnnpack): picks "
                                               "a lowering or refuses.")] = None,
    quant_granularity: Annotated[str | None, typer.Option(
        "--quant-granularity", metavar="channel|tensor", rich_help_panel=PANEL_MORE,
        help="int8 scales per column, or one per tensor. Default: channel; tensor for a "
        "table kept int8 by --int8-runtime live.")] = None,
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
    rope_graph: Annotated[str | None, typer.Option("--rope-graph",
                                                   metavar="encode|cache|apply|apply-4d",
                                                   rich_help_panel=PANEL_MORE,
                                                   help="rope: positions -> cos|sin "
                                                   "(default), + cos_cache/sin_cache for the "
                                                   "RotaryEmbedding ops, or x, positions -> "
                                                   "rotated y ([B, S, d]; apply-4d: "
                                                   "[B, H, S, d]).")]
    = None,
    rope_lowering: Annotated[str | None, typer.Option("--rope-lowering",
                                                      metavar="onnx|ort|rotary23",
                                                      rich_help_panel=PANEL_MORE,
                                                      help="rope apply graph (and --mode "
                                                      "sliced's angle additions): plain ONNX "
                                                      "ops (default), onnxruntime's "
                                                      "com.microsoft.RotaryEmbedding, or "
                                                      "ONNX's RotaryEmbedding (--opset 23).")]
    = None,
    slices: Annotated[str | None, typer.Option("--slices", metavar="W,W,...",
                                               rich_help_panel=PANEL_MORE,
                                               help="--mode sliced: bit widths of the "
                                               "position slices, most significant first "
                                               "(default: two near-equal slices covering "
                                               "max_len).")] = None,
) -> None:
    """Export a positional encoding as an ONNX graph, a table, a C header or an ExecuTorch
    program."""
    scheme, max_len, d_model, heads, params, hf_line, model_type = from_hf(
        from_hf_config, scheme, max_len, head_dim_alias(scheme or "rope", d_model, head_dim)
        if from_hf_config is not None else d_model, heads, parse_params(param))
    if hf_line is not None and scheme == "learned":
        given = checkpoint_param
        checkpoint_param = learned_weights(model_type, checkpoint, checkpoint_key,
                                           checkpoint_param)
        if checkpoint_param != given:
            hf_line += f"; table {checkpoint_param} of {checkpoint.name}"
    # `--out DIR/` (the trailing separator says "a folder") takes the default name inside it.
    folder = out is not None and out.endswith(("/", os.sep))
    out_path = None if out is None or folder else Path(out)
    if out_path is not None:  # what is wrong with the place itself first, then its name
        check_writable(out_path)
        if checkpoint is not None:
            check_not_input(out_path, [Path(checkpoint)])
    format = infer_format(out_path, format)
    # Scheme-specific export options (e.g. rope's graph choice) travel in ExportConfig.extra.
    extra = rope_extra(scheme, mode, rope_graph, rope_lowering, format)
    if hf_line is not None and model_type:  # the family the translation followed (issue 40)
        extra["hf_model_type"] = str(model_type).lower()
    if slices is not None:
        if mode != "sliced":
            raise BadParameterError("--slices sets the slice plan of --mode sliced; add "
                                    "--mode sliced")
        from edgepe.graphs.sliced import parse_plan, plan_text

        extra["slices"] = plan_text(parse_plan(slices, 1))
    if from_hf_config is None:
        d_model = head_dim_alias(scheme, d_model, head_dim)
    # Sizes stay strings until resolve() checks them, so messages can name the bad value.
    config = api.make_config(
        scheme, max_len, d_model=d_model, heads=heads, params=params, mode=mode,
        format=format, dtype=dtype, quantize=quantize, quant_granularity=quant_granularity,
        lowering=lowering or "bitwise", int8_runtime=int8_runtime, checkpoint=checkpoint,
        checkpoint_key=checkpoint_key, checkpoint_param=checkpoint_param,
        seed=parse_int("--seed", seed),
        opset=None if opset is None else parse_int("--opset", opset), c_prefix=c_prefix,
        c_align=parse_int("--c-align", c_align),
        max_table_bytes=(DEFAULT_TABLE_CAP if max_table_bytes is None
                         else parse_int("--max-table-bytes", max_table_bytes)),
        out=out_path, extra=extra,
    )
    if target is not None:
        # the first lowering whose graph the target runs whole, or exit 2 naming what blocks
        config, _ = for_export(config, target, lowering_given=lowering is not None)
    if folder:  # after --target: the lowering it picks is part of the default name
        config = config.with_out(default_out(config, Path(out)))
    quiet = (ctx.obj or {}).get("quiet", False)
    # A bar for large tables and the quick check, on a terminal only; short work shows nothing.
    with reporting(not quiet and sys.stderr.isatty()):
        result, report = api.export(config, force=force, verify=not no_verify)
    if not quiet:
        if hf_line is not None:  # after the export: a refused one prints its error line only
            typer.echo(hf_line)
        size = result.path.stat().st_size
        state = "unchanged (identical export already there)" if result.unchanged else "wrote"
        typer.echo(f"{state} {result.path} ({size} bytes, sha256 "
                   f"{result.manifest['sha256'][:12]}) + {result.path.name}.json")
        from edgepe.graphs.quant import export_note

        if note := export_note(result.manifest):
            typer.echo(note)
    if target is not None:
        checked = check_file(result.path, target)  # the same check, on what was written
        if not checked:  # for_export checked the same graph: a builder that changed under us
            typer.echo(f"error: {checked}", err=True)
            raise typer.Exit(2)
        if not quiet:
            lowering = result.manifest.get("lowering")  # what the artifact holds (None: none)
            typer.echo(f"{checked}" + (f" (--lowering {lowering})"
                                       if config.mode in ("compute", "sliced") and lowering
                                       else ""))
            if note := form_note(config, target):  # issue 44: which form for the GPU, and why
                typer.echo(note)
    if report is not None:
        if not report:
            typer.echo(str(report), err=True)
            raise typer.Exit(1)
        if not quiet:
            typer.echo(str(report))
