"""Table artifacts: ``--format npy`` and ``--format bin``, plain or bit-packed (``--dtype bit``).

The table is ``table_values``'s ``[rows, cols]`` layout, row-major, streamed chunk by chunk from
``iter_table`` (never held whole). What is stored:

- ``float32`` / ``float16``: the values, little-endian (``float16`` rounds to nearest);
- ``uint8``: the 0/1 entries of a bit scheme (``BIT_SCHEMES``), one byte each;
- ``int8``: ``--quantize int8`` (``edgepe.quant.table_quant``: symmetric, zero point 0, a float32
  scale per column or per table; ``value = scale * q``; the manifest's ``quant`` holds the scales,
  the proven bound and the error measured over every row);
- ``bit`` (``--dtype bit``, bit schemes only): one bit an entry. Entry ``(r, c)`` is bit
  ``i = r * cols + c`` of the stream; byte ``i // 8`` holds it at bit ``i % 8`` (LSB first,
  ``numpy.packbits(..., bitorder="little")``); the last byte is zero-padded. The file is exactly
  ``ceil(rows * cols / 8)`` bytes (``bin``), or a 1-D ``uint8`` array of that length (``npy``).

``bin`` is the raw data and nothing else; ``npy`` is the same data after a NumPy 1.0 header. The
manifest says everything needed to read either without edgepe (``table_fields``).

Only tables live in these formats: ``--mode compute`` with npy/bin is refused (a computed
encoding needs code, which the ``onnx`` and ``c`` formats carry).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import numpy as np

from edgepe.errors import BadParameterError
from edgepe.export.artifact import ExportConfig, Prepared, base_manifest
from edgepe.export.table_values import iter_table, table_shape

# Schemes whose table entries are exactly 0 or 1 (the only ones that fit one bit or a uint8).
BIT_SCHEMES = ("binary-bits", "gray", "binary-multilevel", "binary-2d", "hierarchical")
BITORDER = "little"  # numpy.packbits bitorder: entry i at bit i % 8 of byte i // 8

# Manifest dtype -> NumPy dtype string of what is in the file (explicit byte order).
NUMPY_DTYPES = {"float32": "<f4", "float16": "<f2", "uint8": "|u1", "int8": "|i1", "bit": "|u1"}
ITEMSIZE = {"float32": 4, "float16": 2, "uint8": 1, "int8": 1}


def stored_dtype(config: ExportConfig) -> str:
    """The dtype a table of ``config`` is stored in (``NUMPY_DTYPES`` keys); refuses the rest."""
    scheme = config.scheme.scheme
    if config.quantize == "int8":
        if config.dtype != "float32":
            raise BadParameterError(
                f"--quantize int8 stores int8: it does not combine with --dtype {config.dtype}"
            )
        return "int8"
    if config.dtype in ("bit", "uint8") and scheme not in BIT_SCHEMES:
        raise BadParameterError(
            f"--dtype {config.dtype} stores 0/1 entries; scheme '{scheme}' has other values. "
            f"Schemes with 0/1 tables: {', '.join(BIT_SCHEMES)}"
        )
    return config.dtype


def check_table_size(config: ExportConfig, dtype: str) -> int:
    """The table's size in bytes; refuses one over ``config.max_table_bytes`` (before any work)."""
    rows, cols = table_shape(config.scheme)
    size = -(-rows * cols // 8) if dtype == "bit" else rows * cols * ITEMSIZE[dtype]
    if size > config.max_table_bytes:
        spec = config.scheme.spec
        ways = []
        if "compute" in spec.modes:
            from edgepe.export.c_header import COMPUTE_SCHEMES  # here: c_header imports us

            formats = "onnx or c" if config.scheme.scheme in COMPUTE_SCHEMES else "onnx"
            ways.append(f"--mode compute (stores no table; --format {formats})")
        if config.scheme.scheme in BIT_SCHEMES and dtype != "bit":
            ways.append("--dtype bit (one bit an entry)")
        elif dtype in ("float32", "float16") and config.quantize == "none":
            ways.append("--quantize int8")
        ways.append("--max-table-bytes to raise the cap")
        raise BadParameterError(
            f"the {rows} x {cols} {dtype} table of '{config.scheme.scheme}' is {size} bytes, over "
            f"the cap of {config.max_table_bytes} bytes; use {' or '.join(ways)}"
        )
    return size


def row_meaning(config: ExportConfig) -> str:
    """What row ``r`` of the table holds, in words (the manifest's ``layout.rows``)."""
    s = config.scheme
    if s.spec.kind == "bias":
        return (
            f"row r is the bias at distance t - u = r - {s.max_len - 1}, one column per head; "
            "query t and key u read row clamp(t - u, -(L - 1), L - 1) + L - 1 (positions "
            "saturated at +-2^61 first)"
        )
    if s.arity is not None:
        return (
            "row p holds the bits of one coordinate p, LSB first (coordinates clamped to "
            f"[0, {s.max_len - 1}]); an encoding takes each coordinate's row and places its columns"
        )
    return f"row p is the encoding of position p (positions clamped to [0, {s.max_len - 1}])"


def table_fields(
    config: ExportConfig, dtype: str, size: int, quant: dict[str, Any] | None
) -> dict[str, Any]:
    """The manifest of a table artifact: ``base_manifest`` plus how to read the bytes."""
    rows, cols = table_shape(config.scheme)
    manifest = base_manifest(config, [rows, cols], dtype)
    manifest.update(
        {
            "quant": quant,
            "numpy_dtype": NUMPY_DTYPES[dtype],
            "byte_order": "little",
            "bitorder": BITORDER if dtype == "bit" else None,
            "layout": {
                "order": "row-major",
                "rows": row_meaning(config),
                "data_bytes": size,
                "packed": dtype == "bit",
            },
        }
    )
    return manifest


def stored_chunks(config: ExportConfig, module, dtype: str, quant=None) -> Iterator[np.ndarray]:
    """The table in ``dtype`` (``bit`` as 0/1 ``uint8``, not yet packed), chunk by chunk.

    ``quant`` is the ``edgepe.quant.TableQuant`` of an ``int8`` table (from ``quantised``).
    """
    chunks = iter_table(config.scheme, module)
    if dtype == "int8":
        yield from quant.chunks(chunks)
        return
    for chunk in chunks:
        if dtype in ("bit", "uint8"):
            # Bit schemes are exactly 0/1 (their specs say exact); a cast cannot lose anything.
            assert np.isin(chunk, (0.0, 1.0)).all(), config.scheme.scheme
            yield chunk.astype(np.uint8)
        else:
            yield chunk.astype(NUMPY_DTYPES[dtype])


def quantised(config: ExportConfig, module):
    """The ``TableQuant`` of the table (``edgepe.quant``: two passes over ``iter_table``)."""
    from edgepe.quant import table_quant

    return table_quant(config, module)


def pack_bits(chunks: Iterable[np.ndarray]) -> Iterator[bytes]:
    """Pack a row-major stream of 0/1 chunks into bytes, carrying leftover bits across chunks.

    The stream is packed as one flat bit sequence, so chunk boundaries that fall inside a byte
    (``rows * cols`` of a chunk not a multiple of 8) change nothing; the last byte is zero-padded.
    """
    carry = np.zeros(0, dtype=np.uint8)
    for chunk in chunks:
        flat = np.concatenate([carry, chunk.reshape(-1).astype(np.uint8)])
        whole = flat.size - flat.size % 8
        if whole:
            yield np.packbits(flat[:whole], bitorder=BITORDER).tobytes()
        carry = flat[whole:]
    if carry.size:
        yield np.packbits(carry, bitorder=BITORDER).tobytes()


def data_chunks(config: ExportConfig, module, dtype: str, quant=None) -> Iterator[bytes]:
    """The bytes of the table as stored (what a ``bin`` file holds), chunk by chunk."""
    chunks = stored_chunks(config, module, dtype, quant)
    if dtype == "bit":
        yield from pack_bits(chunks)
    else:
        for chunk in chunks:
            yield chunk.tobytes()


def prepared_table(config: ExportConfig, module) -> tuple[dict[str, Any], str, Any]:
    """``(manifest, dtype, quant)`` of ``config``'s table, after every check.

    Only an int8 table is computed here (the quantiser's two measuring passes); ``quant`` is
    its ``TableQuant`` (else ``None``), to hand to ``data_chunks``.
    """
    dtype = stored_dtype(config)
    size = check_table_size(config, dtype)
    quant = quantised(config, module) if dtype == "int8" else None
    section = quant.manifest() if quant is not None else None
    return table_fields(config, dtype, size, section), dtype, quant


def npy_header(dtype: str, rows: int, cols: int) -> dict[str, Any]:
    """The NumPy header edgepe writes for a table: explicit little-endian ``descr``, C order,
    ``[rows, cols]`` (a bit-packed table: the 1-D byte stream)."""
    shape = (-(-rows * cols // 8),) if dtype == "bit" else (rows, cols)
    return {"descr": NUMPY_DTYPES[dtype], "fortran_order": False, "shape": shape}


def read_npy_header(f: BinaryIO, manifest: dict[str, Any], where: str) -> np.dtype:
    """Read the header of an npy table from ``f`` (left at the data) and refuse one that is not
    exactly what edgepe writes for ``manifest`` (``npy_header``): a Fortran-order header over
    row-major bytes, another byte order, dtype or shape is read differently by different
    readers (issue 23). Returns the stored dtype."""
    from edgepe.errors import ArtifactError

    rows, cols = (int(n) for n in manifest["shape"])
    want = npy_header(manifest["dtype"], rows, cols)
    try:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read(f)
    except (ValueError, OSError, SyntaxError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArtifactError(f"{where!r} is not a readable .npy table (truncated?): "
                            f"{first}") from None
    got = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran,
           "shape": tuple(shape)}
    if got != want:
        raise ArtifactError(f"{where!r} has the npy header {got}; edgepe writes {want} for its "
                            "manifest: refused")
    return dtype


def prepare(config: ExportConfig, module) -> Prepared:
    """The npy or bin artifact of ``config``'s table (``--mode table`` only)."""
    if config.mode != "table":
        raise BadParameterError(
            f"--format {config.format} stores a table: use --mode table "
            "(a computed encoding needs --format onnx or c)"
        )
    manifest, dtype, quant = prepared_table(config, module)
    rows, cols = manifest["shape"]

    def write(f: BinaryIO) -> None:
        if config.format == "npy":
            np.lib.format.write_array_header_1_0(f, npy_header(dtype, rows, cols))
        for data in data_chunks(config, module, dtype, quant):
            f.write(data)

    if config.format == "npy":
        manifest["layout"]["npy_shape"] = (
            [manifest["layout"]["data_bytes"]] if dtype == "bit" else [rows, cols]
        )
    return Prepared(manifest, write)
