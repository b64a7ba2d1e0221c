"""Raw tables (``--format bin``), plain or bit-packed (``--dtype bit``): writer and reader.

The table's bytes are defined here once; ``npy`` (``edgepe.formats.npy``) is the same bytes
after a NumPy header, and ``c`` (``edgepe.formats.c``) prints them as an array.

The table is ``table_values``'s ``[rows, cols]`` layout, row-major, streamed chunk by chunk from
``iter_table`` (never held whole). What is stored:

- ``float32`` / ``float16``: the values, little-endian (``float16`` rounds to nearest);
- ``uint8``: the 0/1 entries of a bit scheme (``BIT_SCHEMES``), one byte each;
- ``int8``: ``--quantize int8`` (``edgepe.graphs.quant.table_quant``: symmetric, zero point 0, a
  float32 scale per column or per table; ``value = scale * q``; the manifest's ``quant`` holds the
  scales, the proven bound and the error measured over every row);
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

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.formats.c_schemes import COMPUTE_SCHEMES
from edgepe.graphs.table_values import iter_table, table_shape

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

    ``quant`` is the ``edgepe.graphs.quant.TableQuant`` of an ``int8`` table (from ``quantised``).
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
    """The ``TableQuant`` of the table (``edgepe.graphs.quant``: two passes over ``iter_table``)."""
    from edgepe.graphs.quant import table_quant

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


def checked_table(config: ExportConfig, module) -> tuple[dict[str, Any], str, Any]:
    """``prepared_table`` of an npy or bin export, refusing ``--mode compute`` first."""
    if config.mode != "table":
        raise BadParameterError(
            f"--format {config.format} stores a table: use --mode table "
            "(a computed encoding needs --format onnx or c)"
        )
    return prepared_table(config, module)


def prepare(config: ExportConfig, module) -> Prepared:
    """The bin artifact of ``config``'s table (``--mode table`` only): the stored bytes alone."""
    manifest, dtype, quant = checked_table(config, module)

    def write(f: BinaryIO) -> None:
        for data in data_chunks(config, module, dtype, quant):
            f.write(data)

    return Prepared(manifest, write)


# -- reading -------------------------------------------------------------------------------


def data_size(manifest: dict[str, Any], itemsize: int) -> int:
    """The bytes of a table's data: ``ceil(rows * cols / 8)`` bit-packed, else ``rows * cols *
    itemsize``."""
    rows, cols = (int(s) for s in manifest["shape"])
    return -(-rows * cols // 8) if manifest["dtype"] == "bit" else rows * cols * itemsize


def check_file(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse a bin file whose size is not its manifest's table's (truncated or another file)."""
    rows, cols = (int(s) for s in manifest["shape"])
    dtype = manifest["dtype"]
    size = data_size(manifest, 1 if dtype == "bit" else np.dtype(dtype).itemsize)
    actual = path.stat().st_size
    if actual != size:
        raise ArtifactError(f"{str(path)!r} is {actual} bytes; a {rows} x {cols} {dtype} "
                            f"table is {size} (truncated or another file?)")


def read(path: Path, manifest: dict[str, Any], stored: np.dtype, shape: tuple[int, int]
         ) -> np.ndarray:
    """The ``[rows, cols]`` table of a bin file: memory-mapped, or unpacked when bit-packed."""
    if manifest["dtype"] == "bit":
        return unpack(np.fromfile(path, dtype=np.uint8), shape,
                      manifest.get("bitorder") or "little", path)
    return np.memmap(path, dtype=stored, mode="r", shape=shape)


def unpack(packed: np.ndarray, shape: tuple[int, int], bitorder: str, path: Path) -> np.ndarray:
    """0/1 ``uint8 [rows, cols]`` from a bit stream: entry ``(r, c)`` is bit ``r * cols + c``."""
    rows, cols = shape
    if bitorder not in ("little", "big"):
        raise ArtifactError(f"{str(path)!r}: bitorder must be 'little' or 'big', got {bitorder!r}")
    if packed.ndim != 1 or packed.dtype != np.uint8 or packed.size != -(-rows * cols // 8):
        raise ArtifactError(
            f"{str(path)!r}: a bit-packed [{rows}, {cols}] table is {-(-rows * cols // 8)} "
            f"bytes, got {packed.dtype} {list(packed.shape)}"
        )
    return np.unpackbits(packed, count=rows * cols, bitorder=bitorder).reshape(rows, cols)


class Rows:
    """Rows of a table file read on demand from its manifest alone (the verifier's sweep).

    ``rows(start, stop)`` reads only those rows' bytes from ``f`` past ``offset`` (no memory map:
    pages of a mapped file would stay resident and count against the sweep's bounded memory):
    values as stored, ``bit`` unpacked with the manifest's ``bitorder`` (one bit an entry,
    row-major, no padding between rows). ``close`` closes ``f``.
    """

    def __init__(self, f: BinaryIO, manifest: dict[str, Any], dtype: np.dtype) -> None:
        self.manifest = manifest
        self.shape = tuple(int(s) for s in manifest["shape"])
        self.bit = manifest["dtype"] == "bit"
        self.dtype = dtype
        self._file = f
        self._offset = f.tell()

    def _read(self, first: int, count: int) -> np.ndarray:
        """``count`` items of the stored dtype from item ``first`` on."""
        self._file.seek(self._offset + first * self.dtype.itemsize)
        data = self._file.read(count * self.dtype.itemsize)
        return np.frombuffer(data, dtype=self.dtype, count=len(data) // self.dtype.itemsize)

    def rows(self, start: int, stop: int) -> np.ndarray:
        cols = self.shape[1]
        if self.bit:
            first, last = start * cols, stop * cols
            chunk = self._read(first // 8, -(-last // 8) - first // 8)
            # a null bitorder reads as little-endian, as read() and npy's reader take it
            bits = np.unpackbits(chunk, bitorder=self.manifest.get("bitorder") or "little")
            offset = first % 8
            return bits[offset: offset + last - first].reshape(stop - start, cols)
        return self._read(start * cols, (stop - start) * cols).reshape(stop - start, cols)

    def close(self) -> None:
        self._file.close()


def open_rows(path: Path, manifest: dict[str, Any]) -> Rows:
    """``Rows`` of a bin file (its data starts at byte 0)."""
    bit = manifest["dtype"] == "bit"
    dtype = np.dtype(np.uint8 if bit else manifest["dtype"]).newbyteorder("<")
    return Rows(open(path, "rb"), manifest, dtype)  # noqa: SIM115 - closed by Rows.close()


def dequantise(values: np.ndarray, quant: dict[str, Any] | None, row0: int = 0) -> np.ndarray:
    """``scale * (q - zero_point)`` in float64 (per-tensor, or per channel along ``axis``);
    values that are not quantised come back as stored."""
    if not quant or not np.issubdtype(values.dtype, np.integer) or "scale" not in quant:
        return values
    scale = np.asarray(quant["scale"], dtype=np.float64)
    zero = np.asarray(quant.get("zero_point", 0), dtype=np.float64)
    axis = quant.get("axis")
    if scale.ndim and axis is not None:
        shape = [1] * values.ndim
        shape[axis] = -1
        if axis == 0:  # per-row parameters: only this chunk's rows
            scale = scale[row0: row0 + values.shape[0]]
            zero = zero[row0: row0 + values.shape[0]] if zero.ndim else zero
        scale = scale.reshape(shape)
        zero = zero.reshape(shape) if zero.ndim else zero
    return scale * (values.astype(np.float64) - zero)


def index_columns(manifest: Mapping[str, Any], width: int):
    """Per output column of a multi-index table: (coordinate, bit, column-is-used)."""
    d = int(manifest["d_model"])
    if manifest["scheme"] == "binary-2d":
        column = np.arange(d)
        axis, bit = column % 2, column // 2
    elif manifest["scheme"] == "hierarchical":
        widths = (manifest.get("params") or {}).get("widths")
        if not (isinstance(widths, list) and widths and all(_is_int(w, 1) for w in widths)
                and sum(widths) == d and len(widths) == manifest["positions"]["arity"]):
            raise ArtifactError(
                f"hierarchical table: params.widths must be one positive width a level, "
                f"summing to d_model {d}; got {widths!r}"
            )
        axis = np.repeat(np.arange(len(widths)), widths)
        bit = np.concatenate([np.arange(w) for w in widths])
    else:
        raise ArtifactError(f"no table layout known for multi-index scheme {manifest['scheme']!r}")
    if manifest["scheme"] == "binary-2d" and manifest["positions"]["arity"] != 2:
        raise ArtifactError("binary-2d table: positions.arity must be 2")
    valid = bit < width  # binary-2d: columns past 2n are zero (DESIGN: width d_model >= 2n)
    return axis, np.minimum(bit, width - 1), valid


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low
