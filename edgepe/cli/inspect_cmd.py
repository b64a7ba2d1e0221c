"""``edgepe inspect PATH``: what an artifact holds, and an audit of what its graph computes with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from edgepe.audit import describe
from edgepe.graphs import COMPUTE
from edgepe.targets import check_file


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"


def command(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(
        help="An artifact: .onnx, .npy, .bin, .h, .pte or .tflite.")],
    target: Annotated[str | None, typer.Option(
        "--target", metavar="NAME",
        help="Check every node against a runtime's profile (exit 1 if one is unsupported).")]
    = None,
) -> None:
    """Show an artifact's ops, sizes, inputs/outputs, manifest and graph audit."""
    from rich.console import Console
    from rich.table import Table

    info = describe(path)
    console = Console(width=120, highlight=False, soft_wrap=True)  # long paths stay on a line
    m = info["manifest"]
    lone = m.get("manifest_source") == "embedded"
    sha = ("(no .json beside it: the manifest its graph embeds rebuilds it byte for byte)"
           if lone else "matches the manifest" if info["sha256_ok"]
           else "[red]DIFFERS from the manifest[/]")
    console.print(f"[bold]{info['path']}[/]  {info['bytes']} bytes  sha256 "
                  f"{info['sha256'][:12]} {sha}")
    params = ", ".join(f"{k}={v}" for k, v in sorted((m.get("params") or {}).items()))
    width = (f"d_model {m.get('d_model')}" if m.get("d_model") is not None
             else f"heads {m.get('heads')}")
    console.print(
        f"scheme {m.get('scheme')} ({params or 'no params'})  mode {m.get('mode')}  format "
        f"{m.get('format')}  max_len {m.get('max_len')}  {width}  dtype {m.get('dtype')}  "
        f"shape {m.get('shape')}"
        + (f"  lowering {m['lowering']}" if m.get("lowering") and _has_bits(m) else "")
    )
    positions = m.get("positions") or {}
    quant = m.get("quant")
    console.print(
        f"positions: out of range -> {positions.get('out_of_range')}, limit "
        f"{positions.get('limit') or 'none'}"
        + (f"; quant int8, max abs err {quant.get('max_abs_err')}, bound {quant.get('bound')}"
           if quant else "")
    )
    if quant:
        from edgepe.graphs.quant import describe as describe_quant

        console.print(describe_quant(quant))
    if "embedded_ok" in info and not lone:
        console.print("manifest in the graph's metadata_props: "
                      + ("matches" if info["embedded_ok"] else "[red]DIFFERS[/]"))
    if "program" in info:
        _print_program(console, info["program"])
    if "tflite" in info:
        _print_tflite(console, info["tflite"])
        if target is not None:
            _print_target(console, path, target)
        return
    graph = info.get("graph")
    if graph is None:
        return
    opsets = ", ".join(f"{d} {v}" for d, v in graph["opsets"].items())
    console.print(f"opset {opsets}  IR version {graph['ir_version']}  producer "
                  f"{graph['producer']}  {graph['nodes']} nodes")

    io = Table(title="inputs / outputs", title_justify="left")
    for column in ("", "name", "dtype", "shape"):
        io.add_column(column)
    for kind, rows in (("input", graph["inputs"]), ("output", graph["outputs"])):
        for name, dtype, dims in rows:
            io.add_row(kind, name, dtype, str(dims))
    console.print(io)

    ops = Table(title="ops", title_justify="left")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for op, count in graph["ops"].items():
        ops.add_row(op, str(count))
    console.print(ops)

    inits = Table(title=f"initializers: {len(graph['initializers'])}, "
                  f"{graph['initializer_bytes']} bytes", title_justify="left")
    for column in ("name", "shape", "dtype"):
        inits.add_column(column)
    for name, dims, dtype in graph["initializers"]:
        inits.add_row(name, str(dims), dtype)
    console.print(inits)

    a = info["audit"]
    boundary = ", ".join(a.float_boundaries) or "none (no float)"
    detail = f" (float from: {boundary})" if a.integer_only else f" ({'; '.join(a.violations)})"
    console.print(f"audit: integer-only up to the first float cast: {_yes(a.integer_only)}"
                  f"{detail}")
    console.print(f"audit: trig-free: {_yes(a.trig_free)}"
                  + (f" ({', '.join(a.transcendental)})" if a.transcendental else ""))
    tables = ", ".join(f"{name} {dims}" for name, dims in a.tables) or "none"
    console.print(f"audit: position-indexed tables: {tables}")
    console.print(f"audit: bitwise ops: {'yes' if a.bitwise else 'none'}")
    if target is not None:
        _print_target(console, path, target)


def _print_tflite(console, model: dict) -> None:
    """A .tflite's inputs/outputs, its builtin ops in graph order, and TFLM's arena."""
    for kind in ("inputs", "outputs"):
        console.print(f"{kind}: " + ", ".join(f"{t['name']} {t['dtype']} {t['shape']}"
                                             for t in model[kind]))
    ops = [op["op"] for op in model["operators"]]
    console.print(f"ops ({len(ops)}): {' '.join(ops)}")
    arena = model["arena_bytes"]
    console.print(f"constants {model['constant_bytes']} bytes; TFLM arena "
                  + (f"{arena} bytes (smallest that allocates on this host's TFLM)"
                     if arena is not None else f"unknown ({model['arena_note']})"))


def _print_target(console, path: Path, target: str) -> None:
    """Every node supported or not by ``target`` and why, then the one-line verdict."""
    from rich.table import Table

    report = check_file(path, target)
    p = report.profile
    how = (f"executed by edgepe's tests on {p.executed}" if p.executed
           else "checked against the published table only (no such runtime on edgepe's CI)")
    nodes = Table(title=f"target {p.name}: {how}; source: {p.source}", title_justify="left")
    for column in ("node", "op", "", "why"):
        nodes.add_column(column)
    for n in report.nodes:
        nodes.add_row(n.name, n.op, _yes(n.supported),
                      "" if n.supported else n.reason)
    console.print(nodes)
    for line in report.problems:
        console.print(f"[red]{line}[/]")
    console.print(("[green]" if report else "[red]") + str(report) + "[/]", markup=True)
    if not report:
        raise typer.Exit(1)


def _print_program(console, program: dict) -> None:
    """An ExecuTorch program's methods: operators, the kernels they need, constants."""
    from rich.table import Table

    for method in program["methods"]:
        ops = Table(title=f"method {method['name']}: {method['instructions']} instructions, "
                    f"{len(method['operators'])} operators", title_justify="left")
        for column in ("operator", "portable kernel", "in this runtime"):
            ops.add_column(column)
        for op, portable, here in method["operators"]:
            ops.add_row(op, _yes(portable), _yes(here))
        console.print(ops)
        need = "portable kernels only" if all(p for _, p, _ in method["operators"]) else (
            "[red]kernels outside the portable library[/]")
        console.print(f"kernels: {need} (a selective build of ExecuTorch needs these "
                      f"{len(method['operators'])} operators)")
    console.print(f"constants: {program['constant_bytes']} bytes")


def _has_bits(manifest: dict) -> bool:
    """Whether the scheme's compute graph has a bit front end (the one thing --lowering picks);
    for the others the manifest's ``lowering`` says nothing about the graph."""
    return COMPUTE.get(manifest.get("scheme"), ("",))[0] == "bits"
