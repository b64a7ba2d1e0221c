"""ONNX artifacts: a scheme's reference module -> a checked graph and its manifest.

``prepare`` checks the options an ONNX file can take (``--dtype``, ``--lowering``,
``--quantize``), builds the graph with the scheme's builder (``graphs.builder``; the int8
builder of ``edgepe.graphs.quant`` for ``--quantize int8``) and serialises it once; a float table
graph's table is streamed after it (``graphs.table.streamed``), never held whole. The manifest
written next to the file is the one stored in the graph's ``metadata_props`` plus its sha256 and
what the graph leaves out: its ``onnx`` header, the export record, an int8 graph's per-channel
lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.graphs import COMPUTE, builder
from edgepe.graphs._common import BIT_OUTPUT_SCHEMES, onnx_section, read_manifest_prop
from edgepe.graphs.untrusted import check_untrusted


def output_shape(config: ExportConfig) -> list[Any]:
    """The graph output's shape: ``["N", D]``, or ``[H, "N", "M"]`` for bias schemes."""
    s = config.scheme
    if s.spec.kind == "bias":
        return [s.heads, "N", "M"]
    return ["N", s.d_model]


def check_options(config: ExportConfig) -> None:
    """Refuse ``--dtype``/``--lowering``/``--quantize`` values this scheme's graph cannot take."""
    scheme = config.scheme.scheme
    if config.dtype == "bit":
        raise BadParameterError(
            "--dtype bit packs tables: use --format npy, bin or c (ONNX outputs float32, "
            "float16 or uint8)"
        )
    if config.dtype == "uint8" and scheme not in BIT_OUTPUT_SCHEMES:
        raise BadParameterError(
            f"--dtype uint8 needs outputs that are exactly 0 or 1; scheme '{scheme}' has other "
            f"values. uint8 schemes: {', '.join(BIT_OUTPUT_SCHEMES)}"
        )
    if config.quantize == "int8" and config.dtype != "float32":
        raise BadParameterError(
            f"--quantize int8 graphs output float32 (dequantised), not {config.dtype}"
        )
    if config.mode == "table":
        from edgepe.graphs.table import check_table_size

        check_table_size(config)  # before the table (or a module holding one) is allocated
    if config.mode == "sliced":
        from edgepe.graphs.sliced import LOWERINGS as SLICED_LOWERINGS

        if config.lowering not in SLICED_LOWERINGS:
            raise BadParameterError(
                f"--lowering {config.lowering} does not apply to --mode sliced; it takes: "
                f"{', '.join(SLICED_LOWERINGS)} (trunc: float Mul, truncating Cast, int32)"
            )
        return
    if config.lowering == "clip32":
        raise BadParameterError("--lowering clip32 slices positions for --mode sliced; the bit "
                                "family's compute graphs take bitwise, arith, arith32, float or "
                                "trunc")
    if config.lowering != "bitwise":
        if config.mode != "compute":
            raise BadParameterError(
                f"--lowering {config.lowering} applies to compute graphs; a table graph has no "
                "bitwise ops"
            )
        if COMPUTE.get(scheme, ("",))[0] != "bits":
            bit_family = ", ".join(k for k, (family, _) in COMPUTE.items() if family == "bits")
            raise BadParameterError(
                f"--lowering {config.lowering} applies to the bit family ({bit_family}); "
                f"scheme '{scheme}' has no bitwise ops to lower"
            )


def _int8_builder():
    try:
        from edgepe.graphs.int8 import build_int8
    except ImportError:
        raise BadParameterError(
            "--quantize int8 for ONNX is not available in this build (edgepe.graphs.int8."
            "build_int8 is missing); use --quantize none"
        ) from None
    return build_int8


def prepare(config: ExportConfig, module) -> Prepared:
    """The ONNX artifact for ``config``: manifest (all but sha256) and a writer of its bytes."""
    check_options(config)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    if config.quantize == "int8":
        build = _int8_builder()
    else:
        build = builder(config.scheme.scheme, config.mode)
    write_table = None
    if config.mode == "table" and config.quantize == "none":
        from edgepe.graphs.table import streamed

        model, write_table = streamed(config, module, manifest)  # the table streams after it
    else:
        model = build(config, module, manifest)
    # SerializeToString is deterministic for a given ModelProto (no maps, fixed field order).
    data = model.SerializeToString()
    # The graph stores all but what it says itself (graphs._common.SIDECAR_ONLY) and, for int8,
    # the per-channel lists (edgepe.graphs.int8.embedded): the sidecar gets them back.
    stored = {**read_manifest_prop(model), "onnx": onnx_section(model),
              "inputs": manifest["inputs"], "quant": manifest["quant"]}

    def write(f) -> None:
        f.write(data)
        if write_table is not None:
            write_table(f)

    return Prepared(stored, write)


# -- reading -------------------------------------------------------------------------------


def check_file(path: Path, manifest: dict[str, Any]) -> tuple[tuple[str, ...], set[str]]:
    """Refuse a file that is not a checked edgepe graph (truncated, not ONNX, no ``positions``);
    a streamed table is checked without loading it, and no external-data path is followed.

    Returns the graph's input names and the non-standard op domains it uses.
    """
    import onnx

    from edgepe.formats.onnx_table import split_table

    def refuse(exc: Exception) -> ArtifactError:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return ArtifactError(
            f"{str(path)!r} is not a valid ONNX model (truncated or another file?): {first}"
        )

    split = split_table(path, manifest)  # a streamed table: checked without loading it
    try:
        if split is not None:
            onnx.checker.check_model(split.checkable())
            model = split.model
        else:
            model = onnx.load(path, load_external_data=False)  # opens no path it names
    except Exception as exc:  # noqa: BLE001 - any parse or checker failure: not a model
        raise refuse(exc) from None
    check_untrusted(model, str(path))
    if split is None:
        try:
            # The checker reads the path itself (in C++): passing it the loaded model
            # would serialise a second copy of the graph. No external data is left to follow.
            onnx.checker.check_model(str(path))
        except Exception as exc:  # noqa: BLE001 - any checker failure: not a model
            raise refuse(exc) from None
    if not model.graph.output or "positions" not in [i.name for i in model.graph.input]:
        raise ArtifactError(f"{str(path)!r} is an ONNX model but not an edgepe graph: "
                            "it has no 'positions' input")
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = tuple(i.name for i in graph.input if i.name not in initializers)
    return inputs, {n.domain for n in graph.node if n.domain not in ("", "ai.onnx")}
