"""npy / bin / bit-packed table artifacts: read back with NumPy and the manifest alone.

Every read here uses only ``numpy`` and the manifest JSON (``numpy_dtype``, ``shape``,
``bitorder``, ``quant``): what a user without edgepe has.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _table_oracle import bias_rows, expected_table, int8_expectations
from hypothesis import given, settings
from hypothesis import strategies as st

from edgepe.contract.errors import BadParameterError
from edgepe.export import ExportConfig, export
from edgepe.formats.bin import BIT_SCHEMES, pack_bits
from edgepe.schemes import build, resolve


def read_without_edgepe(path) -> tuple[np.ndarray, dict]:
    """The table as a user reads it: NumPy plus the manifest, nothing from edgepe."""
    manifest = json.loads(open(f"{path}.json").read())
    rows, cols = manifest["shape"]
    if manifest["format"] == "npy":
        data = np.load(path)
    else:
        data = np.fromfile(path, dtype=manifest["numpy_dtype"])
    if manifest["dtype"] == "bit":
        data = np.unpackbits(data, bitorder=manifest["bitorder"], count=rows * cols)
    table = data.reshape(rows, cols)
    if manifest["quant"] is not None:
        q = manifest["quant"]
        table = (table.astype(np.float64) - q["zero_point"]) * np.asarray(q["scale"], np.float64)
    return table, manifest


def reference(scheme, max_len, **kw):
    """The config and the table its artifact must hold: ``encode`` at the documented row mapping
    (tests/_table_oracle.py), never the exporter's own ``full_table``."""
    cfg = resolve(scheme, max_len, **kw)
    table = expected_table(cfg, build(cfg))
    rows = bias_rows(max_len) if cfg.spec.kind == "bias" else max_len
    assert table.shape[0] == rows
    return cfg, table


def export_table(tmp_path, cfg, fmt, dtype="float32", **kw):
    out = tmp_path / f"{cfg.scheme}-{dtype}-{kw.get('quantize', 'none')}.{fmt}"
    return export(ExportConfig(cfg, mode="table", format=fmt, dtype=dtype, out=out, **kw))


@pytest.mark.parametrize("fmt", ["npy", "bin"])
@pytest.mark.parametrize(
    "scheme, max_len, dtype",
    [
        ("sinusoidal", 300, "float32"),
        ("sinusoidal", 300, "float16"),
        ("learned", 77, "float32"),
        ("alibi", 50, "float32"),  # bias: [2L - 1, H]
        ("gaussian", 20, "float32"),
        ("gray", 512, "uint8"),
        ("binary-2d", 100, "uint8"),  # per-coordinate rows
        ("hierarchical", 33, "float32"),
        ("binary-smooth", 40, "float32"),
    ],
)
def test_round_trip_equals_reference(tmp_path, fmt, scheme, max_len, dtype):
    cfg, ref = reference(scheme, max_len)
    result = export_table(tmp_path, cfg, fmt, dtype)
    table, manifest = read_without_edgepe(result.path)
    assert manifest["dtype"] == dtype and manifest["byte_order"] == "little"
    assert table.dtype == np.dtype(dtype)
    # float16 is the reference rounded to nearest; everything else is the reference exactly.
    np.testing.assert_array_equal(table, ref.astype(dtype))
    if fmt == "bin":
        assert result.path.stat().st_size == manifest["layout"]["data_bytes"] == table.nbytes


@pytest.mark.parametrize("fmt", ["npy", "bin"])
@pytest.mark.parametrize(
    "scheme, max_len", [("gray", 512), ("binary-bits", 1000), ("binary-multilevel", 77),
                        ("binary-2d", 300), ("hierarchical", 21)]
)
def test_bit_packed_unpacks_to_the_reference_bits(tmp_path, fmt, scheme, max_len):
    cfg, ref = reference(scheme, max_len)
    result = export_table(tmp_path, cfg, fmt, "bit")
    rows, cols = ref.shape
    table, manifest = read_without_edgepe(result.path)
    assert manifest["bitorder"] == "little" and manifest["dtype"] == "bit"
    np.testing.assert_array_equal(table, ref.astype(np.uint8))
    packed = math.ceil(rows * cols / 8)
    assert manifest["layout"]["data_bytes"] == packed
    if fmt == "bin":
        assert result.path.stat().st_size == packed
    else:
        assert np.load(result.path).shape == (packed,)


def test_gray_512_is_640_bytes(tmp_path):
    """The issue's figure: a 512 x 10 Gray table is ceil(5120 / 8) = 640 bytes bit-packed."""
    cfg = resolve("gray", 512)
    result = export_table(tmp_path, cfg, "bin", "bit")
    assert result.manifest["shape"] == [512, 10]
    assert result.path.stat().st_size == 640


def test_pack_bits_carries_bits_across_chunk_boundaries():
    """Chunks whose sizes are not multiples of 8 pack exactly like the whole stream at once."""
    rng = np.random.default_rng(7)
    stream = rng.integers(0, 2, size=(97, 13), dtype=np.uint8)
    cuts = [0, 1, 2, 9, 10, 40, 41, 97]  # chunks of 1, 1, 7, 1, 30, 1, 56 rows x 13 bits
    chunks = [stream[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    packed = b"".join(pack_bits(chunks))
    assert packed == np.packbits(stream.reshape(-1), bitorder="little").tobytes()
    assert len(packed) == math.ceil(97 * 13 / 8)


@settings(max_examples=60, deadline=None)
@given(
    cols=st.integers(1, 17),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_pack_bits_any_chunking_equals_packing_at_once(cols, cuts, seed):
    stream = np.random.default_rng(seed).integers(0, 2, size=(40, cols), dtype=np.uint8)
    bounds = [0, *sorted(cuts), 40]
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    expected = np.packbits(stream.reshape(-1), bitorder="little").tobytes()
    assert b"".join(pack_bits(chunks)) == expected


@pytest.mark.parametrize("scheme, max_len, kw", [("sinusoidal", 200, {"d_model": 32}),
                                                  ("alibi", 30, {}), ("learned", 20, {})])
def test_int8_table_reads_back_within_the_bound(tmp_path, scheme, max_len, kw):
    cfg, ref = reference(scheme, max_len, **kw)
    for fmt in ("npy", "bin"):
        result = export_table(tmp_path, cfg, fmt, quantize="int8")
        raw = (
            np.load(result.path) if fmt == "npy"
            else np.fromfile(result.path, dtype=result.manifest["numpy_dtype"])
        )
        assert raw.dtype == np.int8 and raw.size == ref.size
        assert raw.min() >= result.manifest["quant"]["qmin"]
        table, manifest = read_without_edgepe(result.path)
        int8_expectations(ref, raw.reshape(ref.shape), manifest["quant"]["scale"])
        err = np.abs(table - ref).max()
        assert err <= manifest["quant"]["bound"]
        # manifest measured with a float32 dequant (one rounding, <= 2^-24 |x|), here float64
        assert abs(err - manifest["quant"]["max_abs_err"]) <= 2**-23 * max(1, np.abs(ref).max())


def test_too_big_is_refused_before_anything_is_written(tmp_path):
    cfg = resolve("sinusoidal", 4096, d_model=256)  # 4 MiB of float32
    out = tmp_path / "big.bin"
    config = ExportConfig(cfg, mode="table", format="bin", out=out, max_table_bytes=2**20)
    with pytest.raises(BadParameterError, match="4194304 bytes, over the cap of 1048576") as err:
        export(config)
    assert "--mode compute" in str(err.value) and "--quantize int8" in str(err.value)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_too_big_bit_scheme_suggests_bit_packing(tmp_path):
    cfg = resolve("gray", 2**16)
    config = ExportConfig(cfg, mode="table", format="npy", out=tmp_path / "g.npy",
                          max_table_bytes=100_000)
    with pytest.raises(BadParameterError, match="--dtype bit"):
        export(config)


@pytest.mark.parametrize("dtype", ["bit", "uint8"])
def test_bit_dtypes_refuse_non_bit_schemes(tmp_path, dtype):
    cfg = resolve("sinusoidal", 16)
    with pytest.raises(BadParameterError) as err:
        export_table(tmp_path, cfg, "bin", dtype)
    assert "'sinusoidal'" in str(err.value)
    assert all(s in str(err.value) for s in BIT_SCHEMES)


def test_compute_mode_is_refused_for_npy_and_bin(tmp_path):
    cfg = resolve("gray", 16)
    with pytest.raises(BadParameterError, match="--mode table"):
        export(ExportConfig(cfg, mode="compute", format="npy", out=tmp_path / "g.npy"))


@pytest.mark.parametrize("fmt, dtype", [("npy", "float32"), ("bin", "bit"), ("npy", "float16")])
def test_exports_are_byte_identical(tmp_path, fmt, dtype):
    cfg = resolve("binary-multilevel", 1000) if dtype == "bit" else resolve("sinusoidal", 1000)
    first = export(ExportConfig(cfg, mode="table", format=fmt, dtype=dtype,
                                out=tmp_path / f"a.{fmt}"))
    second = export(ExportConfig(cfg, mode="table", format=fmt, dtype=dtype,
                                 out=tmp_path / f"b.{fmt}"))
    assert first.path.read_bytes() == second.path.read_bytes()
    assert (tmp_path / f"a.{fmt}.json").read_bytes() == (tmp_path / f"b.{fmt}.json").read_bytes()


def test_streamed_table_spans_several_chunks(tmp_path):
    """A table of more rows than one chunk (4096) is written whole and in order."""
    cfg, ref = reference("gray", 10_000)
    table, _ = read_without_edgepe(export_table(tmp_path, cfg, "bin", "bit").path)
    np.testing.assert_array_equal(table, ref.astype(np.uint8))
