"""``edgepe patch FOLDER``: a saved transformers model's PE made trig-free, proven, exported.

    edgepe patch FOLDER [--mode table|sliced] [--max-len L]
    edgepe patch FOLDER --out model.onnx|.pte|.tflite [--exporter onnx|pte|pte-xnnpack|tflite]
    edgepe patch FOLDER --verify model.onnx    (rebuilt from FOLDER byte-identical, re-proven)

``edgepe.patch`` does the work (its module doc says how); this prints one line per PE module and
the logits proof, then, with ``--out``, what was written and its parity on the exporter's runtime
against the unpatched model. Exit 0 when every proof held, 1 when one failed (nothing written),
2 for bad input (a model edgepe cannot patch is refused naming the module's class).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgepe.cli.export_cmd import parse_int
from edgepe.contract.errors import BadParameterError

SUFFIXES = {".onnx": "onnx", ".pte": "pte", ".tflite": "tflite"}


def command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(
        metavar="FOLDER", help="A saved transformers model: config.json and *.safetensors "
        "(nothing is downloaded; no code from the folder runs).")],
    mode: Annotated[str, typer.Option(
        "--mode", metavar="table|sliced", help="table: the original's own cos/sin rows, "
        "gathered (exact); sliced: angle addition over bit-slice tables (small).")] = "table",
    max_len: Annotated[str | None, typer.Option(
        "--max-len", metavar="L", help="Positions 0..L-1 the patch covers and proves "
        "(default: max_position_embeddings).")] = None,
    quantize: Annotated[str, typer.Option("--quantize", metavar="none")] = "none",
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE.onnx|FILE.pte|FILE.tflite", help="Export the patched model "
        "there (+ a manifest FILE.json), proven against the unpatched model on the same "
        "runtime.")] = None,
    exporter: Annotated[str | None, typer.Option(
        "--exporter", metavar="onnx|pte|pte-xnnpack|tflite", help="The exporter (default: "
        "from --out's extension; pte-xnnpack: ExecuTorch with the XNNPACK delegate; tflite: "
        "litert-torch).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
    verify: Annotated[Path | None, typer.Option(
        "--verify", metavar="PROGRAM", help="Verify a program 'edgepe patch FOLDER --out' "
        "wrote: rebuilt from FOLDER byte-identical, its parity measured again.")] = None,
) -> None:
    """Make a transformers model's PE trig-free in PyTorch, prove it, and export it."""
    if verify is not None:
        if out is not None or exporter is not None:
            raise BadParameterError("--verify takes no --out or --exporter (the program's "
                                    "manifest records them)")
        from edgepe.patch.verify import verify_program

        manifest = verify_program(folder, verify)
        parity = manifest["parity"]
        typer.echo(f"verified {verify}: rebuilt byte-identical from {folder} (sha256 "
                   f"{manifest['sha256'][:12]}); parity measured again on {manifest['runtime']}"
                   f": max abs {parity['max_abs_err']:.3g} (tolerance "
                   f"{parity['tolerance']:.3g}); Sin/Cos {manifest['trig_ops']['patched'][0]}")
        return
    if exporter is not None and out is None:
        raise BadParameterError("--exporter needs --out (the file to write)")
    if out is not None and exporter is None:
        exporter = SUFFIXES.get(out.suffix)
        if exporter is None:
            raise BadParameterError(f"--out {str(out)!r}: give a .onnx, .pte or .tflite "
                                    "file, or --exporter")
    limit = None if max_len is None else parse_int("--max-len", max_len)
    from edgepe.patch import patch  # torch and transformers load here
    from edgepe.patch.export import EXPORTERS, export
    from edgepe.patch.load import load_folder

    if exporter is not None and exporter not in EXPORTERS:
        raise BadParameterError(f"--exporter must be one of {', '.join(EXPORTERS)}, got "
                                f"{exporter!r}")
    import transformers

    transformers.utils.logging.disable_progress_bar()  # "Loading weights" on stderr: noise here
    model = load_folder(folder)
    report = patch(model, mode=mode, max_len=limit, quantize=quantize)
    quiet = (ctx.obj or {}).get("quiet", False)
    if not quiet:
        typer.echo(str(report))
    if out is None:
        return
    from edgepe.patch.verify import folder_source

    manifest = export(report, out, exporter, force=force, source=folder_source(folder))
    if not quiet:
        parity = manifest["parity"]
        typer.echo(f"wrote {out} ({manifest['bytes']['patched']} bytes, sha256 "
                   f"{manifest['sha256'][:12]}) + {out.name}.json")
        typer.echo(f"parity PASSED on {manifest['runtime']} against the unpatched model's "
                   f"{exporter} program ({manifest['bytes']['unpatched']} bytes): max abs "
                   f"{parity['max_abs_err']:.3g} (tolerance {parity['tolerance']:.3g}); "
                   f"Sin/Cos {manifest['trig_ops']['patched'][0]} (unpatched "
                   f"{manifest['trig_ops']['unpatched'][0]})")
