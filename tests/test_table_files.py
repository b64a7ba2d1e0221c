"""Reading table artifacts back (edgepe.formats.npy and .bin: check_file, read, open_rows, the npy
header check), called directly on small real exports (issue 33: the mutmut survivors of those
modules; the CLI tests reach them in subprocesses). The header must be exactly what edgepe writes
(dtype, byte order, C order, shape; version 1.0 or 2.0), the data exactly the table's size, and
each refusal is one line naming the file and the numbers.
"""

from __future__ import annotations

import builtins
import io
import struct

import numpy as np
import pytest

from edgepe import api
from edgepe.contract import manifest as manifest_io
from edgepe.contract.errors import ArtifactError
from edgepe.formats import bin as bin_fmt
from edgepe.formats import npy as npy_fmt

ROWS, COLS = 13, 6  # 13 x 6 bits = 78 bits: 10 bytes packed, the last one partly used


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    made = {}
    for fmt in ("npy", "bin"):
        for name, scheme, kw in (("float32", "sinusoidal", {}),
                                 ("float16", "sinusoidal", {"dtype": "float16"}),
                                 ("int8", "sinusoidal", {"quantize": "int8"}),
                                 ("bit", "gray", {"dtype": "bit"}),
                                 ("uint8", "gray", {"dtype": "uint8"})):
            config = api.make_config(scheme, ROWS, d_model=COLS, mode="table", format=fmt,
                                     out=folder / f"{name}.{fmt}", **kw)
            path = api.export(config, verify=False)[0].path
            made[fmt, name] = path, manifest_io.read(path)
    return made


def _values(path, manifest):
    """The table as stored, read independently of edgepe: np.load, or the raw bytes."""
    if manifest["format"] == "npy":
        data = np.load(path, allow_pickle=False)
    else:
        dtype = np.uint8 if manifest["dtype"] == "bit" else np.dtype(manifest["dtype"])
        data = np.fromfile(path, dtype=dtype)
    if manifest["dtype"] == "bit":
        return np.unpackbits(data, count=ROWS * COLS, bitorder="little").reshape(ROWS, COLS)
    return data.reshape(ROWS, COLS)


def _stored(manifest):
    return np.dtype(np.uint8 if manifest["dtype"] == "bit" else manifest["dtype"])


@pytest.mark.parametrize("fmt", ["npy", "bin"])
@pytest.mark.parametrize("name", ["float32", "float16", "int8", "bit", "uint8"])
def test_a_table_reads_back_whole_and_by_rows(tables, fmt, name):
    path, m = tables[fmt, name]
    module = npy_fmt if fmt == "npy" else bin_fmt
    want = _values(path, m)
    assert m["shape"] == [ROWS, COLS] and m["dtype"] == name
    module.check_file(path, m)
    got = module.read(path, m, _stored(m).newbyteorder("<"), (ROWS, COLS))
    assert got.shape == (ROWS, COLS) and np.array_equal(got, want)
    # memory-mapped, not read whole (a bit table is unpacked into memory)
    assert isinstance(got, np.memmap) is (name != "bit"), type(got)
    rows = module.open_rows(path, m)
    try:
        for start, stop in ((0, ROWS), (2, 5), (7, 8), (12, 13)):
            assert np.array_equal(rows.rows(start, stop), want[start:stop]), (start, stop)
    finally:
        rows.close()
    assert rows._file.closed


@pytest.mark.parametrize("fmt", ["npy", "bin"])
def test_a_bit_table_without_a_recorded_bitorder_is_read_little_endian(tables, fmt):
    path, m = tables[fmt, "bit"]
    assert m["bitorder"] == "little"
    module = npy_fmt if fmt == "npy" else bin_fmt
    want = _values(path, m)
    absent = {k: v for k, v in m.items() if k != "bitorder"}
    for changed in (absent, {**m, "bitorder": None}):
        got = module.read(path, changed, np.dtype(np.uint8), (ROWS, COLS))
        assert np.array_equal(got, want)
    big = module.read(path, {**m, "bitorder": "big"}, np.dtype(np.uint8), (ROWS, COLS))
    packed = np.load(path) if fmt == "npy" else np.fromfile(path, dtype=np.uint8)
    assert np.array_equal(big, np.unpackbits(packed, count=ROWS * COLS, bitorder="big")
                          .reshape(ROWS, COLS))


# ---- the npy header -----------------------------------------------------------------------------


def _npy_with_header(tmp_path, tables, name, header=None, version=(1, 0), data=None):
    path, m = tables["npy", name]
    want = npy_fmt.npy_header(m["dtype"], ROWS, COLS)
    f = io.BytesIO()
    writer = {(1, 0): np.lib.format.write_array_header_1_0,
              (2, 0): np.lib.format.write_array_header_2_0}[version]
    writer(f, {**want, **(header or {})})
    with open(path, "rb") as original:
        np.lib.format.read_magic(original)
        np.lib.format.read_array_header_1_0(original)
        body = original.read()
    out = tmp_path / f"{name}.npy"
    out.write_bytes(f.getvalue() + (body if data is None else data))
    return out, m


def test_the_header_edgepe_writes(tables):
    assert npy_fmt.npy_header("float32", 13, 6) == {"descr": "<f4", "fortran_order": False,
                                                    "shape": (13, 6)}
    assert npy_fmt.npy_header("bit", 13, 6) == {"descr": "|u1", "fortran_order": False,
                                                "shape": (10,)}  # ceil(78 / 8)
    assert npy_fmt.npy_header("bit", 8, 2)["shape"] == (2,)  # 16 bits: exactly 2 bytes
    path, m = tables["npy", "bit"]
    assert m["layout"]["npy_shape"] == [10] and m["layout"]["data_bytes"] == 10
    assert tables["npy", "int8"][1]["layout"]["npy_shape"] == [ROWS, COLS]


def test_a_version_2_header_of_the_same_content_is_read(tmp_path, tables):
    path, m = _npy_with_header(tmp_path, tables, "float32", version=(2, 0))
    npy_fmt.check_file(path, m)
    assert np.array_equal(npy_fmt.read(path, m, np.dtype("<f4"), (ROWS, COLS)),
                          _values(*tables["npy", "float32"]))


@pytest.mark.parametrize(("change", "got"), [
    ({"fortran_order": True}, "{'descr': '<f4', 'fortran_order': True, 'shape': (13, 6)}"),
    ({"descr": ">f4"}, "{'descr': '>f4', 'fortran_order': False, 'shape': (13, 6)}"),
    ({"descr": "<f8"}, "{'descr': '<f8', 'fortran_order': False, 'shape': (13, 6)}"),
    ({"shape": (6, 13)}, "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 13)}"),
    ({"shape": (78,)}, "{'descr': '<f4', 'fortran_order': False, 'shape': (78,)}"),
])
def test_a_header_other_than_edgepes_is_refused_naming_both(tmp_path, tables, change, got):
    path, m = _npy_with_header(tmp_path, tables, "float32", header=change)
    want = "{'descr': '<f4', 'fortran_order': False, 'shape': (13, 6)}"
    message = (f"{str(path)!r} has the npy header {got}; edgepe writes {want} for its "
               "manifest: refused")
    for call in (lambda: npy_fmt.check_file(path, m),
                 lambda: npy_fmt.read(path, m, np.dtype("<f4"), (ROWS, COLS)),
                 lambda: npy_fmt.open_rows(path, m)):
        with pytest.raises(ArtifactError) as exc:
            call()
        assert str(exc.value) == message


@pytest.mark.parametrize(("data", "first"), [
    (b"", "EOF: reading magic string, expected 8 bytes got 0"),
    (b"\x93NUMPY\x01", "EOF: reading magic string, expected 8 bytes got 7"),
    (b"\x93NUMPY\x01\x00", "EOF: reading array header length, expected 2 bytes got 0"),
    (b"\x93NUMPY\x01\x00" + struct.pack("<H", 16) + b"{'descr'",
     "EOF: reading array header, expected 16 bytes got 8"),
])
def test_a_truncated_header_is_refused_with_numpys_first_line(tmp_path, tables, data, first):
    path = tmp_path / "t.npy"
    path.write_bytes(data)
    m = tables["npy", "float32"][1]
    with pytest.raises(ArtifactError) as exc:
        npy_fmt.check_file(path, m)
    assert str(exc.value) == f"{str(path)!r} is not a readable .npy table (truncated?): {first}"


def test_an_unreadable_header_without_a_message_is_named_by_its_type(tmp_path, tables,
                                                                    monkeypatch):
    def silent(f):
        raise ValueError()

    monkeypatch.setattr(np.lib.format, "read_magic", silent)
    path, m = tables["npy", "float32"]
    with pytest.raises(ArtifactError) as exc:
        npy_fmt.check_file(path, m)
    assert str(exc.value) == f"{str(path)!r} is not a readable .npy table (truncated?): ValueError"


@pytest.mark.parametrize("extra", [-1, 1])
def test_npy_data_one_byte_short_or_long_is_refused(tmp_path, tables, extra):
    path, m = tables["npy", "int8"]
    body = path.read_bytes()
    header = len(body) - ROWS * COLS
    bad = tmp_path / "t.npy"
    bad.write_bytes(body[:extra] if extra < 0 else body + b"\0")
    with pytest.raises(ArtifactError) as exc:
        npy_fmt.check_file(bad, m)
    assert str(exc.value) == (f"{str(bad)!r} holds {ROWS * COLS + extra} data bytes; its header "
                              f"describes {ROWS * COLS} (truncated?)")
    assert header % 64 == 0  # numpy's 1.0 header (magic, length, dict) pads to 64 bytes


def test_open_rows_closes_the_file_when_the_header_is_refused(tmp_path, tables, monkeypatch):
    path, m = _npy_with_header(tmp_path, tables, "float32", header={"fortran_order": True})
    opened = []

    def tracking(*args, **kwargs):
        f = builtins.open(*args, **kwargs)
        opened.append(f)
        return f

    monkeypatch.setattr(npy_fmt, "open", tracking, raising=False)
    with pytest.raises(ArtifactError):
        npy_fmt.open_rows(path, m)
    assert len(opened) == 1 and opened[0].closed


# ---- bin ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "size"), [
    ("float32", ROWS * COLS * 4), ("float16", ROWS * COLS * 2), ("int8", ROWS * COLS),
    ("uint8", ROWS * COLS), ("bit", 10)])
def test_bin_data_one_byte_short_or_long_is_refused(tmp_path, tables, name, size):
    path, m = tables["bin", name]
    assert path.stat().st_size == size == bin_fmt.data_size(m, _stored(m).itemsize)
    for extra in (-1, 1):
        bad = tmp_path / f"{name}.bin"
        data = path.read_bytes()
        bad.write_bytes(data[:extra] if extra < 0 else data + b"\0")
        with pytest.raises(ArtifactError) as exc:
            bin_fmt.check_file(bad, m)
        assert str(exc.value) == (f"{str(bad)!r} is {size + extra} bytes; a {ROWS} x {COLS} "
                                  f"{name} table is {size} (truncated or another file?)")


def test_unpack_refuses_another_bitorder_or_size(tmp_path):
    packed = np.zeros(10, dtype=np.uint8)
    assert bin_fmt.unpack(packed, (ROWS, COLS), "big", tmp_path).shape == (ROWS, COLS)
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.unpack(packed, (ROWS, COLS), "middle", tmp_path / "t.bin")
    assert str(exc.value) == (f"{str(tmp_path / 't.bin')!r}: bitorder must be 'little' or "
                              "'big', got 'middle'")
    for bad in (np.zeros(11, np.uint8), np.zeros(9, np.uint8), np.zeros((2, 5), np.uint8),
                np.zeros(10, np.int8)):
        with pytest.raises(ArtifactError) as exc:
            bin_fmt.unpack(bad, (ROWS, COLS), "little", tmp_path / "t.bin")
        assert str(exc.value) == (f"{str(tmp_path / 't.bin')!r}: a bit-packed [13, 6] table is "
                                  f"10 bytes, got {bad.dtype} {list(bad.shape)}")


def test_bit_rows_start_mid_byte(tables):
    """Rows 3 .. 5 of a 6-wide bit table are bits 18 .. 35: from bit 2 of byte 2 to byte 4."""
    path, m = tables["bin", "bit"]
    want = _values(path, m)
    rows = bin_fmt.open_rows(path, m)
    try:
        assert np.array_equal(rows.rows(3, 6), want[3:6])
        assert np.array_equal(rows.rows(1, 2), want[1:2])  # bits 6 .. 11 straddle bytes 0 and 1
    finally:
        rows.close()


@pytest.mark.parametrize(("scheme", "kw", "shape"), [
    ("gray", {"dtype": "bit"}, [10]),  # 13 x 6 bits packed: ceil(78 / 8) bytes, one axis
    ("gray", {"dtype": "uint8"}, [ROWS, COLS]),
    ("sinusoidal", {"quantize": "int8"}, [ROWS, COLS]),
])
def test_the_manifest_records_the_shape_np_load_gives(scheme, kw, shape):
    """``layout.npy_shape`` is what ``np.load`` of the written bytes returns (prepare is called
    here, in the test, so mutmut's run of npy.py attributes it to this test, not to a fixture)."""
    from edgepe.schemes import build

    config = api.make_config(scheme, ROWS, d_model=COLS, mode="table", format="npy", **kw)
    prepared = npy_fmt.prepare(config, build(config.scheme))
    assert prepared.manifest["layout"]["npy_shape"] == shape
    f = io.BytesIO()
    prepared.write(f)
    assert list(np.load(io.BytesIO(f.getvalue()), allow_pickle=False).shape) == shape
