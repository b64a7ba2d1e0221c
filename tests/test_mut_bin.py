"""edgepe.formats.bin called directly on tiny tables (issue 33: the fast tests its mutants run).

Writers: the stored dtype and its refusals, the size cap and the ways out it names, the
manifest's reading fields, and the bytes ``prepare`` writes, compared with the scheme's own
``encode`` (tests/_table_oracle.py) packed or cast by NumPy. Readers: files written here by NumPy
(``tofile``, ``packbits``), read back whole and by rows; ``dequantise`` and ``index_columns`` on
hand-made manifests whose results are worked out by hand in each test. Every table here is a few
rows, so each test takes milliseconds.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from _table_oracle import expected_table, int8_expectations

from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.export import ExportConfig
from edgepe.formats import bin as bin_fmt
from edgepe.schemes import build, resolve

ROWS, COLS = 13, 6  # 78 entries: 10 bytes bit-packed, the last one 6 bits used
BITS = "binary-bits, gray, binary-multilevel, binary-2d, hierarchical"


@pytest.fixture(scope="module")
def gray():
    cfg = resolve("gray", ROWS, d_model=COLS)
    module = build(cfg)
    return cfg, module, expected_table(cfg, module)


@pytest.fixture(scope="module")
def sinus():
    cfg = resolve("sinusoidal", ROWS, d_model=COLS)
    module = build(cfg)
    return cfg, module, expected_table(cfg, module)


def _config(cfg, **kw):
    return ExportConfig(cfg, **{"mode": "table", "format": "bin", **kw})


def _written(config, module) -> bytes:
    out = io.BytesIO()
    bin_fmt.prepare(config, module).write(out)
    return out.getvalue()


# ---- what is stored ------------------------------------------------------------------------------


def test_stored_dtype_of_each_choice(gray, sinus):
    assert bin_fmt.stored_dtype(_config(sinus[0])) == "float32"
    assert bin_fmt.stored_dtype(_config(sinus[0], dtype="float16")) == "float16"
    assert bin_fmt.stored_dtype(_config(sinus[0], quantize="int8")) == "int8"
    assert bin_fmt.stored_dtype(_config(gray[0], dtype="bit")) == "bit"
    assert bin_fmt.stored_dtype(_config(gray[0], dtype="uint8")) == "uint8"
    assert bin_fmt.stored_dtype(_config(gray[0], quantize="int8")) == "int8"


def test_stored_dtype_refusals_name_the_choice(sinus):
    with pytest.raises(BadParameterError) as exc:
        bin_fmt.stored_dtype(_config(sinus[0], dtype="float16", quantize="int8"))
    assert str(exc.value) == ("--quantize int8 stores int8: it does not combine with "
                              "--dtype float16")
    for dtype in ("bit", "uint8"):
        with pytest.raises(BadParameterError) as exc:
            bin_fmt.stored_dtype(_config(sinus[0], dtype=dtype))
        assert str(exc.value) == (f"--dtype {dtype} stores 0/1 entries; scheme 'sinusoidal' has "
                                  f"other values. Schemes with 0/1 tables: {BITS}")


@pytest.mark.parametrize(("dtype", "quantize", "size"), [
    ("float32", "none", ROWS * COLS * 4), ("float16", "none", ROWS * COLS * 2),
    ("float32", "int8", ROWS * COLS), ("uint8", "none", ROWS * COLS), ("bit", "none", 10)])
def test_check_table_size_is_the_stored_bytes_and_the_cap_is_inclusive(gray, dtype, quantize,
                                                                      size):
    stored = "int8" if quantize == "int8" else dtype
    at_cap = _config(gray[0], dtype=dtype, quantize=quantize, max_table_bytes=size)
    assert bin_fmt.check_table_size(at_cap, stored) == size
    with pytest.raises(BadParameterError) as exc:
        bin_fmt.check_table_size(_config(gray[0], dtype=dtype, quantize=quantize,
                                         max_table_bytes=size - 1), stored)
    assert f"the {ROWS} x {COLS} {stored} table of 'gray' is {size} bytes, over the cap of " \
           f"{size - 1} bytes; use " in str(exc.value)


def test_bit_table_size_rounds_up_to_whole_bytes():
    for rows, cols, size in ((4, 4, 2), (8, 3, 3), (3, 3, 2), (5, 5, 4)):  # 16, 24, 9, 25 bits
        cfg = resolve("gray", rows, d_model=cols)
        assert bin_fmt.check_table_size(_config(cfg, dtype="bit"), "bit") == size


COMPUTE_C = "--mode compute (stores no table; --format onnx or c)"
COMPUTE_ONNX = "--mode compute (stores no table; --format onnx)"
CAP = "--max-table-bytes to raise the cap"


@pytest.mark.parametrize(("scheme", "kw", "dtype", "ways"), [
    # a scheme with a C compute function, float32, not quantised
    ("sinusoidal", {}, "float32", [COMPUTE_C, "--quantize int8", CAP]),
    # compute mode but no C compute function (ONNX only); float16 can still be quantised
    ("integer", {"dtype": "float16"}, "float16", [COMPUTE_ONNX, "--quantize int8", CAP]),
    # a 0/1 table not yet packed: bit packing, not int8
    ("gray", {"dtype": "uint8"}, "uint8", [COMPUTE_C, "--dtype bit (one bit an entry)", CAP]),
    ("gray", {}, "float32", [COMPUTE_C, "--dtype bit (one bit an entry)", CAP]),
    ("gray", {"dtype": "bit"}, "bit", [COMPUTE_C, CAP]),
    # no compute mode at all; already int8
    ("learned", {"quantize": "int8"}, "int8", [CAP]),
    ("learned", {}, "float32", ["--quantize int8", CAP]),
])
def test_the_size_refusal_names_every_way_out(scheme, kw, dtype, ways):
    cfg = resolve(scheme, ROWS, d_model=COLS)
    config = _config(cfg, max_table_bytes=3, **kw)
    size = -(-ROWS * COLS // 8) if dtype == "bit" else ROWS * COLS * bin_fmt.ITEMSIZE[dtype]
    with pytest.raises(BadParameterError) as exc:
        bin_fmt.check_table_size(config, dtype)
    assert str(exc.value) == (f"the {ROWS} x {COLS} {dtype} table of '{scheme}' is {size} bytes, "
                              f"over the cap of 3 bytes; use {' or '.join(ways)}")


def test_row_meaning_of_each_layout(sinus):
    assert bin_fmt.row_meaning(_config(sinus[0])) == (
        f"row p is the encoding of position p (positions clamped to [0, {ROWS - 1}])")
    assert bin_fmt.row_meaning(_config(resolve("binary-2d", 10))) == (
        "row p holds the bits of one coordinate p, LSB first (coordinates clamped to [0, 9]); "
        "an encoding takes each coordinate's row and places its columns")
    assert bin_fmt.row_meaning(_config(resolve("alibi", 5, heads=2))) == (
        "row r is the bias at distance t - u = r - 4, one column per head; query t and key u "
        "read row clamp(t - u, -(L - 1), L - 1) + L - 1 (positions saturated at +-2^61 first)")


def test_table_fields_say_how_to_read_the_bytes(gray, sinus):
    bit = bin_fmt.table_fields(_config(gray[0], dtype="bit"), "bit", 10, None)
    assert bit["shape"] == [ROWS, COLS] and bit["dtype"] == "bit" and bit["quant"] is None
    assert bit["numpy_dtype"] == "|u1" and bit["byte_order"] == "little"
    assert bit["bitorder"] == "little"
    assert bit["layout"] == {"order": "row-major", "rows": bin_fmt.row_meaning(
        _config(gray[0])), "data_bytes": 10, "packed": True}
    quant = {"scale": [0.5]}
    half = bin_fmt.table_fields(_config(sinus[0], dtype="float16"), "float16", 156, quant)
    assert half["quant"] is quant and half["numpy_dtype"] == "<f2" and half["bitorder"] is None
    assert half["layout"]["packed"] is False and half["layout"]["data_bytes"] == 156


# ---- the bytes written -------------------------------------------------------------------------


def test_bit_table_bytes_are_the_reference_bits_packed_lsb_first(gray):
    cfg, module, ref = gray
    config = _config(cfg, dtype="bit")
    data = _written(config, module)
    assert data == np.packbits(ref.astype(np.uint8).reshape(-1), bitorder="little").tobytes()
    assert len(data) == 10
    manifest, dtype, quant = bin_fmt.checked_table(config, module)
    assert dtype == "bit" and quant is None and manifest["quant"] is None
    assert manifest["layout"]["data_bytes"] == 10 and manifest["format"] == "bin"
    assert bin_fmt.prepare(config, module).manifest == manifest


def test_uint8_float32_and_float16_bytes_are_the_reference_cast(gray, sinus):
    assert _written(_config(gray[0], dtype="uint8"), gray[1]) == gray[2].astype("|u1").tobytes()
    for dtype, numpy_dtype in (("float32", "<f4"), ("float16", "<f2")):
        config = _config(sinus[0], dtype=dtype)
        assert _written(config, sinus[1]) == sinus[2].astype(numpy_dtype).tobytes(), dtype
        manifest, stored, quant = bin_fmt.prepared_table(config, sinus[1])
        assert stored == dtype and quant is None and manifest["quant"] is None
        assert manifest["layout"]["data_bytes"] == ROWS * COLS * np.dtype(numpy_dtype).itemsize


def test_stored_chunks_of_a_bit_table_are_unpacked_0_1_bytes(gray):
    cfg, module, ref = gray
    for dtype in ("bit", "uint8"):
        chunks = list(bin_fmt.stored_chunks(_config(cfg, dtype=dtype), module, dtype))
        got = np.concatenate(chunks)
        assert got.dtype == np.uint8 and np.array_equal(got, ref.astype(np.uint8))


@pytest.mark.parametrize("granularity", ["channel", "tensor"])
def test_int8_table_bytes_quantise_the_reference(sinus, granularity):
    cfg, module, ref = sinus
    config = _config(cfg, quantize="int8", quant_granularity=granularity)
    manifest, dtype, quant = bin_fmt.checked_table(config, module)
    assert dtype == "int8" and quant is not None
    assert manifest["quant"] == quant.manifest() and manifest["dtype"] == "int8"
    assert manifest["layout"]["data_bytes"] == ROWS * COLS
    scale = manifest["quant"]["scale"]
    assert np.shape(scale) == ((COLS,) if granularity == "channel" else ())
    q = np.frombuffer(_written(config, module), dtype=np.int8).reshape(ROWS, COLS)
    int8_expectations(ref, q, scale)


def test_pack_bits_carries_a_partial_byte_to_the_end():
    stream = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=np.uint8)  # 11 bits
    chunks = [stream[:3], stream[3:10], stream[10:]]  # 3 + 7 + 1 bits
    got = list(bin_fmt.pack_bits(chunks))
    # bits 0..7 LSB first: 1 + 4 + 8 + 64 = 77; bits 8..10 then zero padding: 1 + 2 + 4 = 7;
    # each whole byte is yielded as soon as its chunk completes it (streamed, not held)
    assert got == [bytes([77]), bytes([7])]
    assert list(bin_fmt.pack_bits([stream[:8]])) == [bytes([77])]  # a whole byte: no padding
    assert list(bin_fmt.pack_bits([])) == []


def test_a_computed_encoding_is_refused_by_the_table_formats(sinus):
    cfg, module, _ = sinus
    for fmt in ("bin", "npy"):
        with pytest.raises(BadParameterError) as exc:
            bin_fmt.checked_table(ExportConfig(cfg, mode="compute", format=fmt), module)
        assert str(exc.value) == (f"--format {fmt} stores a table: use --mode table "
                                  "(a computed encoding needs --format onnx or c)")


# ---- reading ------------------------------------------------------------------------------------


def _manifest(dtype, rows=ROWS, cols=COLS, **kw):
    return {"shape": [rows, cols], "dtype": dtype, **kw}


def test_data_size_of_each_dtype():
    assert bin_fmt.data_size(_manifest("bit"), 1) == 10  # ceil(78 / 8)
    assert bin_fmt.data_size(_manifest("bit", 8, 2), 1) == 2
    assert bin_fmt.data_size(_manifest("bit", 3, 3), 1) == 2  # 9 bits
    assert bin_fmt.data_size(_manifest("float16", 3, 5), 2) == 30
    assert bin_fmt.data_size(_manifest("float32", 3, 5), 4) == 60


@pytest.mark.parametrize(("dtype", "size"), [("float32", ROWS * COLS * 4),
                                             ("float16", ROWS * COLS * 2), ("int8", ROWS * COLS),
                                             ("uint8", ROWS * COLS), ("bit", 10)])
def test_check_file_accepts_the_exact_size_only(tmp_path, dtype, size):
    path = tmp_path / "t.bin"
    for actual in (size - 1, size, size + 1):
        path.write_bytes(bytes(actual))
        if actual == size:
            bin_fmt.check_file(path, _manifest(dtype))
            continue
        with pytest.raises(ArtifactError) as exc:
            bin_fmt.check_file(path, _manifest(dtype))
        assert str(exc.value) == (f"{str(path)!r} is {actual} bytes; a {ROWS} x {COLS} {dtype} "
                                  f"table is {size} (truncated or another file?)")


def _bit_file(tmp_path, bitorder="little"):
    bits = (np.arange(ROWS * COLS) * 7 % 3 == 1).astype(np.uint8)  # an irregular 0/1 pattern
    path = tmp_path / "bit.bin"
    np.packbits(bits, bitorder=bitorder).tofile(path)
    return path, bits.reshape(ROWS, COLS)


def test_read_memory_maps_a_plain_table_read_only(tmp_path):
    want = (np.arange(ROWS * COLS, dtype="<f2") / 8).reshape(ROWS, COLS)
    path = tmp_path / "t.bin"
    want.tofile(path)
    got = bin_fmt.read(path, _manifest("float16"), np.dtype("<f2"), (ROWS, COLS))
    assert isinstance(got, np.memmap) and np.array_equal(got, want)
    assert not got.flags.writeable  # mode "r": a reader never writes into the artifact


@pytest.mark.parametrize("recorded", [{"bitorder": "little"}, {"bitorder": None}, {}])
def test_read_unpacks_a_bit_table_little_endian_unless_told(tmp_path, recorded):
    path, want = _bit_file(tmp_path)
    got = bin_fmt.read(path, _manifest("bit", **recorded), np.dtype(np.uint8), (ROWS, COLS))
    assert np.array_equal(got, want)
    path, want = _bit_file(tmp_path, "big")
    got = bin_fmt.read(path, _manifest("bit", bitorder="big"), np.dtype(np.uint8), (ROWS, COLS))
    assert np.array_equal(got, want)


def test_read_of_a_short_bit_file_names_the_file(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(9))
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.read(path, _manifest("bit"), np.dtype(np.uint8), (ROWS, COLS))
    assert str(exc.value) == (f"{str(path)!r}: a bit-packed [{ROWS}, {COLS}] table is 10 bytes, "
                              "got uint8 [9]")


def test_unpack_checks_bitorder_and_size(tmp_path):
    path = tmp_path / "t.bin"
    packed = np.array([0b00000101, 0b1], dtype=np.uint8)
    assert np.array_equal(bin_fmt.unpack(packed, (3, 3), "little", path),
                          [[1, 0, 1], [0, 0, 0], [0, 0, 1]])
    assert np.array_equal(bin_fmt.unpack(packed, (3, 3), "big", path),
                          [[0, 0, 0], [0, 0, 1], [0, 1, 0]])
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.unpack(packed, (3, 3), "LITTLE", path)
    assert str(exc.value) == f"{str(path)!r}: bitorder must be 'little' or 'big', got 'LITTLE'"
    for bad in (packed[:1], np.zeros(3, np.uint8), packed.reshape(1, 2), packed.view(np.int8)):
        with pytest.raises(ArtifactError) as exc:
            bin_fmt.unpack(bad, (3, 3), "little", path)
        assert str(exc.value) == (f"{str(path)!r}: a bit-packed [3, 3] table is 2 bytes, got "
                                  f"{bad.dtype} {list(bad.shape)}")


SPANS = [(0, ROWS), (0, 1), (1, 2), (3, 6), (5, 9), (12, 13), (4, 4)]


@pytest.mark.parametrize("recorded", [{"bitorder": "little"}, {"bitorder": None}, {},
                                      {"bitorder": "big"}])
def test_open_rows_of_a_bit_table_reads_any_span(tmp_path, recorded):
    path, want = _bit_file(tmp_path, recorded.get("bitorder") or "little")
    rows = bin_fmt.open_rows(path, _manifest("bit", **recorded))
    try:
        assert rows.bit and rows.shape == (ROWS, COLS) and rows.dtype == np.uint8
        for start, stop in SPANS:  # 6-bit rows start mid-byte from row 2 on
            got = rows.rows(start, stop)
            assert got.shape == (stop - start, COLS) and np.array_equal(got, want[start:stop])
    finally:
        rows.close()
    assert rows._file.closed


@pytest.mark.parametrize("dtype", ["<f4", "<f2", "|i1", "|u1"])
def test_open_rows_of_a_plain_table_reads_any_span(tmp_path, dtype):
    name = {"<f4": "float32", "<f2": "float16", "|i1": "int8", "|u1": "uint8"}[dtype]
    want = ((np.arange(ROWS * COLS) % 97) - 40).astype(np.float64)
    want = (want / 4 if dtype[1] == "f" else want % 100).astype(dtype).reshape(ROWS, COLS)
    path = tmp_path / "t.bin"
    want.tofile(path)
    rows = bin_fmt.open_rows(path, _manifest(name))
    try:
        assert not rows.bit and rows.dtype == np.dtype(dtype)
        for start, stop in SPANS:
            got = rows.rows(start, stop)
            assert got.dtype == np.dtype(dtype) and np.array_equal(got, want[start:stop])
    finally:
        rows.close()


def test_rows_reads_from_the_file_offset_and_returns_whole_items_only(tmp_path):
    path = tmp_path / "t.bin"
    want = np.arange(6, dtype="<f2")
    path.write_bytes(b"HEAD" + want.tobytes() + b"\x01")  # 4 bytes before, a half item after
    f = open(path, "rb")  # noqa: SIM115 - closed by Rows.close()
    f.seek(4)
    rows = bin_fmt.Rows(f, _manifest("float16", 3, 2), np.dtype("<f2"))
    try:
        assert np.array_equal(rows.rows(1, 3), want[2:].reshape(2, 2))
        assert np.array_equal(rows._read(4, 5), want[4:])  # 5 asked, 2.5 there: 2 whole items
    finally:
        rows.close()


# ---- dequantise ---------------------------------------------------------------------------------

Q = np.array([[1, -2, 3], [4, 0, -6]], dtype=np.int8)


def test_dequantise_leaves_what_is_not_quantised_as_stored():
    floats = Q.astype(np.float32)
    assert bin_fmt.dequantise(Q, None) is Q
    assert bin_fmt.dequantise(Q, {}) is Q
    assert bin_fmt.dequantise(floats, {"scale": [2.0]}) is floats
    assert bin_fmt.dequantise(Q, {"zero_point": 0, "axis": 1}) is Q


def test_dequantise_per_tensor():
    got = bin_fmt.dequantise(Q, {"scale": 0.5})  # zero point absent: 0
    assert got.dtype == np.float64 and np.array_equal(got, [[0.5, -1, 1.5], [2, 0, -3]])
    got = bin_fmt.dequantise(Q, {"scale": [0.25], "zero_point": 2})
    assert np.array_equal(got, [[-0.25, -1, 0.25], [0.5, -0.5, -2]])
    # float64 throughout: 2^30 + 1 survives (float32 would round it)
    big = np.array([[2**30 + 1]], dtype=np.int64)
    assert bin_fmt.dequantise(big, {"scale": 1.0})[0, 0] == 2**30 + 1


def test_dequantise_per_column():
    got = bin_fmt.dequantise(Q, {"scale": [1.0, 0.5, 2.0], "zero_point": [0, 2, -1],
                                 "axis": 1})
    assert np.array_equal(got, [[1, -2, 8], [4, -1, -10]])
    got = bin_fmt.dequantise(Q, {"scale": [1.0, 0.5, 2.0], "axis": 1})
    assert np.array_equal(got, [[1, -1, 6], [4, 0, -12]])


def test_dequantise_per_row_takes_the_chunks_rows():
    quant = {"scale": [1.0, 0.5, 2.0, 4.0], "zero_point": [0, 1, -1, 2], "axis": 0}
    # rows 0, 1 (row0 defaults to 0): scales 1, 0.5; zero points 0, 1
    assert np.array_equal(bin_fmt.dequantise(Q, quant), [[1, -2, 3], [1.5, -0.5, -3.5]])
    # rows 1, 2: scales 0.5, 2; zero points 1, -1
    assert np.array_equal(bin_fmt.dequantise(Q, quant, row0=1),
                          [[0, -1.5, 1], [10, 2, -10]])
    # rows 2, 3: scales 2, 4; zero points -1, 2
    assert np.array_equal(bin_fmt.dequantise(Q, quant, row0=2), [[4, -2, 8], [8, -8, -32]])
    # a scalar zero point with per-row scales: rows 2, 3
    got = bin_fmt.dequantise(Q, {"scale": [1.0, 0.5, 2.0, 4.0], "zero_point": 1, "axis": 0},
                             row0=2)
    assert np.array_equal(got, [[0, -6, 4], [12, -4, -28]])


# ---- index_columns ------------------------------------------------------------------------------


def _multi(scheme, d, arity, **params):
    return {"scheme": scheme, "d_model": d, "positions": {"arity": arity},
            "params": params or None}


def test_index_columns_of_binary_2d_interleave_the_coordinates():
    axis, bit, valid = bin_fmt.index_columns(_multi("binary-2d", 8, 2), 3)
    assert axis.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert bit.tolist() == [0, 0, 1, 1, 2, 2, 2, 2]  # column // 2, capped at width - 1
    assert valid.tolist() == [True] * 6 + [False] * 2  # columns past 2 * width are zero
    axis, bit, valid = bin_fmt.index_columns(_multi("binary-2d", 6, 2), 3)
    assert bit.tolist() == [0, 0, 1, 1, 2, 2] and valid.all()
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.index_columns(_multi("binary-2d", 8, 3), 3)
    assert str(exc.value) == "binary-2d table: positions.arity must be 2"


def test_index_columns_of_hierarchical_levels():
    axis, bit, valid = bin_fmt.index_columns(_multi("hierarchical", 6, 3, widths=[1, 3, 2]), 3)
    assert axis.tolist() == [0, 1, 1, 1, 2, 2]
    assert bit.tolist() == [0, 0, 1, 2, 0, 1] and valid.all()
    axis, bit, valid = bin_fmt.index_columns(_multi("hierarchical", 6, 3, widths=[1, 3, 2]), 2)
    assert bit.tolist() == [0, 0, 1, 1, 0, 1]
    assert valid.tolist() == [True, True, True, False, True, True]


@pytest.mark.parametrize("widths", [None, (2, 3), [], [0, 5], [-1, 6], [True, 4], [2.0, 3],
                                    [2, 2], [1, 1, 3], "23"])
def test_index_columns_refuses_bad_hierarchical_widths(widths):
    manifest = _multi("hierarchical", 5, 2)
    manifest["params"] = None if widths is None else {"widths": widths}
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.index_columns(manifest, 4)
    assert str(exc.value) == ("hierarchical table: params.widths must be one positive width a "
                              f"level, summing to d_model 5; got {widths!r}")


def test_index_columns_knows_only_the_multi_index_layouts():
    with pytest.raises(ArtifactError) as exc:
        bin_fmt.index_columns(_multi("gray", 5, 1), 4)
    assert str(exc.value) == "no table layout known for multi-index scheme 'gray'"
