"""NumPy tables (``--format npy``): the ``bin`` bytes after a NumPy 1.0 header; writer and reader.

The header is exactly ``npy_header``'s (explicit little-endian ``descr``, C order, ``[rows,
cols]``; a bit-packed table: the 1-D byte stream), and a reader refuses any other: a
Fortran-order header over row-major bytes is read differently by different readers (issue 23).
The data after it is ``edgepe.formats.bin``'s, byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from edgepe.contract.config import ExportConfig, Prepared
from edgepe.contract.errors import ArtifactError
from edgepe.formats.bin import NUMPY_DTYPES, Rows, checked_table, data_chunks, data_size, unpack


def npy_header(dtype: str, rows: int, cols: int) -> dict[str, Any]:
    """The NumPy header edgepe writes for a table: explicit little-endian ``descr``, C order,
    ``[rows, cols]`` (a bit-packed table: the 1-D byte stream)."""
    shape = (-(-rows * cols // 8),) if dtype == "bit" else (rows, cols)
    return {"descr": NUMPY_DTYPES[dtype], "fortran_order": False, "shape": shape}


def prepare(config: ExportConfig, module) -> Prepared:
    """The npy artifact of ``config``'s table (``--mode table`` only)."""
    manifest, dtype, quant = checked_table(config, module)
    rows, cols = manifest["shape"]

    def write(f: BinaryIO) -> None:
        np.lib.format.write_array_header_1_0(f, npy_header(dtype, rows, cols))
        for data in data_chunks(config, module, dtype, quant):
            f.write(data)

    manifest["layout"]["npy_shape"] = (
        [manifest["layout"]["data_bytes"]] if dtype == "bit" else [rows, cols]
    )
    return Prepared(manifest, write)


# -- reading -------------------------------------------------------------------------------


def read_npy_header(f: BinaryIO, manifest: dict[str, Any], where: str) -> np.dtype:
    """Read the header of an npy table from ``f`` (left at the data) and refuse one that is not
    exactly what edgepe writes for ``manifest`` (``npy_header``): a Fortran-order header over
    row-major bytes, another byte order, dtype or shape is read differently by different
    readers (issue 23). Returns the stored dtype."""
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


def check_file(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse an npy file whose header is not edgepe's or whose data is not the table's size."""
    with path.open("rb") as f:  # the header must be exactly what edgepe writes
        dtype = read_npy_header(f, manifest, str(path))
        data = path.stat().st_size - f.tell()
    size = data_size(manifest, dtype.itemsize)
    if data != size:
        raise ArtifactError(f"{str(path)!r} holds {data} data bytes; its header describes "
                            f"{size} (truncated?)")


def read(path: Path, manifest: dict[str, Any], stored: np.dtype, shape: tuple[int, int]
         ) -> np.ndarray:
    """The ``[rows, cols]`` table of an npy file (header checked, memory-mapped; a bit-packed one
    unpacked as ``bin`` unpacks it)."""
    with open(path, "rb") as f:  # the header must be exactly what edgepe writes
        read_npy_header(f, manifest, str(path))
    data = np.load(path, mmap_mode="r", allow_pickle=False)
    if manifest["dtype"] == "bit":
        data = unpack(np.asarray(data), shape, manifest.get("bitorder") or "little", path)
    return data


def open_rows(path: Path, manifest: dict[str, Any]) -> Rows:
    """``bin.Rows`` over the data after an npy file's (checked) header."""
    f = open(path, "rb")  # noqa: SIM115 - closed by Rows.close()
    try:
        dtype = read_npy_header(f, manifest, str(path))
    except BaseException:
        f.close()
        raise
    return Rows(f, manifest, dtype)
