"""C headers, checked by a real C compiler against the PyTorch reference.

Every header variant is compiled with ``gcc -std=c99 -Wall -Wextra -Werror -pedantic`` plus each
flag set of ``c_runner.flag_variants()`` (``-O0``, ``-O2``, signed/unsigned ``char``, ``-m32``
where this machine builds 32-bit programs), run by a small C program over every position (and,
for compute functions, positions far outside the table, which wrap), and compared: exactly for
bit, uint8, int8 and float tables (floats print as ``%a``), within the scheme's tolerance for
``binary``'s float32 dot product.
"""

from __future__ import annotations

import hashlib
import re
import subprocess

import numpy as np
import pytest
import torch
from _table_oracle import expected_table, int8_expectations

from edgepe.contract.errors import BadParameterError, PositionError
from edgepe.export import ExportConfig, export
from edgepe.schemes import build, resolve
from edgepe.verify.c_runner import (
    COMPILE_FLAGS,
    CompileError,
    compiler,
    flag_variants,
    run_c_header,
)

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler (gcc or $CC) here")

# id -> (scheme, max_len, mode, dtype, quantize, extra ExportConfig fields)
HEADERS = {
    "binary-compute": ("binary", 512, "compute", "float32", "none", {}),
    "binary-compute-int8": ("binary", 512, "compute", "float32", "int8", {}),
    "binary-compute-int8-tensor": (
        "binary", 300, "compute", "float32", "int8", {"quant_granularity": "tensor"}
    ),
    "binary-bits-compute": ("binary-bits", 100, "compute", "float32", "none", {}),
    "binary-signed-compute": ("binary-signed", 100, "compute", "float32", "none", {}),
    "binary-smooth-compute": ("binary-smooth", 100, "compute", "float32", "none", {}),
    "gray-compute": ("gray", 512, "compute", "float32", "none", {}),
    "binary-multilevel-compute": ("binary-multilevel", 64, "compute", "float32", "none", {}),
    "binary-2d-compute": ("binary-2d", 40, "compute", "float32", "none", {}),
    "hierarchical-compute": ("hierarchical", 9, "compute", "float32", "none", {}),
    "hybrid-int-binary-compute": ("hybrid-int-binary", 100, "compute", "float32", "none", {}),
    "binary-gated-compute": ("binary-gated", 300, "compute", "float32", "none", {}),
    "fourier-binary-compute": ("fourier-binary", 512, "compute", "float32", "none", {}),
    "sinusoidal-compute": ("sinusoidal", 256, "compute", "float32", "none", {}),
    "rope-compute": ("rope", 100, "compute", "float32", "none", {}),
    "alibi-compute": ("alibi", 64, "compute", "float32", "none", {}),
    "gray-table-bit": ("gray", 512, "table", "bit", "none", {}),
    "binary-bits-table-uint8": ("binary-bits", 100, "table", "uint8", "none", {}),
    "binary-multilevel-table-bit": ("binary-multilevel", 77, "table", "bit", "none", {}),
    "binary-2d-table-bit": ("binary-2d", 300, "table", "bit", "none", {}),
    "hierarchical-table-uint8": ("hierarchical", 21, "table", "uint8", "none", {}),
    "binary-table-float32": ("binary", 512, "table", "float32", "none", {}),
    "sinusoidal-table-float32": ("sinusoidal", 256, "table", "float32", "none", {}),
    "alibi-table-float32": ("alibi", 64, "table", "float32", "none", {}),
    "sinusoidal-table-int8": ("sinusoidal", 256, "table", "float32", "int8", {}),
    "learned-table-int8-tensor": (
        "learned", 50, "table", "float32", "int8", {"quant_granularity": "tensor"}
    ),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``id -> (path, manifest, scheme config, reference module)``, exported once a module."""
    root = tmp_path_factory.mktemp("headers")
    cache = {}

    def get(key):
        if key not in cache:
            scheme, max_len, mode, dtype, quantize, extra = HEADERS[key]
            cfg = resolve(scheme, max_len)
            config = ExportConfig(cfg, mode=mode, format="c", dtype=dtype, quantize=quantize,
                                  out=root / f"{key}.h", **extra)
            result = export(config)
            cache[key] = (result.path, result.manifest, config, build(cfg))
        return cache[key]

    return get


def probe_positions(max_len: int) -> np.ndarray:
    """Every position 0..L-1, then the wrap: negatives, past L and past 2^n, int64 extremes."""
    rng = np.random.default_rng(max_len)
    far = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 300, dtype=np.int64)
    edges = np.array([-(2**63), 2**63 - 1, 2**62, -(2**40), 2**40 + 3], dtype=np.int64)
    return np.concatenate([np.arange(-3 * max_len, 3 * max_len, dtype=np.int64), far, edges])


def bias_reference(module, max_len: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs [N, 2], reference [N, H])`` for a bias function ``f(t, u)``: every query and key
    in ``0 .. L-1`` and around it, and the edges of the defined range ``|t|, |u| <= limit``."""
    values = np.concatenate([np.arange(-2, max_len + 2), [limit, -limit, limit - 1, -limit + 1]])
    with torch.no_grad():
        ref = module.encode(torch.as_tensor(values), torch.as_tensor(values)).numpy()  # [H, N, M]
    t, u = np.meshgrid(values, values, indexing="ij")
    pairs = np.stack([t.ravel(), u.ravel()], axis=1).astype(np.int64)
    return pairs, ref.reshape(ref.shape[0], -1).T


@pytest.mark.parametrize("variant", ["O0", "O2", "O2-unsigned-char", "Os-signed-char", "m32"])
@pytest.mark.parametrize("key", list(HEADERS))
def test_header_matches_reference(exported, key, variant):
    if variant not in flag_variants():  # .ci/run installs gcc-multilib, so CI runs them
        pytest.skip(f"gcc cannot build and run {variant} programs here: apt-get install "
                    "gcc-multilib")
    path, manifest, config, module = exported(key)
    cfg = config.scheme
    if config.mode == "compute" and cfg.spec.kind == "bias":
        pairs, ref = bias_reference(module, cfg.max_len, manifest["positions"]["limit"])
        got = run_c_header(path, manifest, pairs, flag_variants()[variant])
        np.testing.assert_array_equal(got, ref)  # alibi: exact (one multiply, rounded once)
        return
    if config.mode == "compute":
        pos = probe_positions(cfg.max_len)
        limit = manifest["positions"]["limit"]
        if limit is not None:  # mixed schemes: the linear part is defined up to 2^24
            inside = (pos >= -limit) & (pos <= limit)  # not abs(): |int64 min| overflows
            pos = np.concatenate([pos[inside], [limit, -limit, limit - 1]])
        if cfg.arity is not None:  # every coordinate takes every probe value
            pos = np.stack([np.roll(pos, 7 * i) for i in range(cfg.arity)], axis=1)
        got = run_c_header(path, manifest, pos, flag_variants()[variant])
        with torch.no_grad():
            ref = module.encode(torch.as_tensor(pos)).numpy()
        assert got.dtype == np.float32 and got.shape == ref.shape
        if config.quantize == "int8":
            check_int8_projection(got, ref, pos, manifest, path.read_text(), module)
            return
        rtol, atol = cfg.spec.tolerance
        # (0, 0) for the bit family: an exact comparison, -0.0 == 0.0 aside.
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
        return
    table = expected_table(cfg, module)  # encode at the documented rows, not the writer's
    rows = np.arange(-3, table.shape[0] + 3)  # the C program clamps, as a table artifact does
    got = run_c_header(path, manifest, rows, flag_variants()[variant])
    expected = table[np.clip(rows, 0, table.shape[0] - 1)]
    if config.quantize == "int8":
        int8_expectations(expected, got, manifest["quant"]["scale"])
        scale = np.asarray(manifest["quant"]["scale"], dtype=np.float32)
        assert np.abs(got * scale - expected).max() <= manifest["quant"]["bound"]
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
        assert got.dtype == {"float32": np.float32, "uint8": np.uint8, "bit": np.uint8}[
            manifest["dtype"]
        ]


def check_int8_projection(got, ref, pos, manifest, header_text, module):
    """int8 ``binary``: exactly ``float32(sum of the active int8 rows) * scale`` (the ONNX int8
    graph's arithmetic), within the manifest's proven bounds of the float reference."""
    quant = manifest["quant"]
    n = manifest["n_bits"]
    array = rf"int8_t {manifest['symbol']}\[.*?\] = \{{(.*?)\}};"
    weights = re.search(array, header_text, re.S).group(1)
    q = np.array(re.findall(r"-?\d+", weights), dtype=np.int32).reshape(n, -1)
    bits = (pos[:, None] >> np.arange(n)) & 1
    scale = np.asarray(quant["scale"], dtype=np.float32)
    np.testing.assert_array_equal(got, (bits @ q).astype(np.float32) * scale)
    in_range = (pos >= 0) & (pos < manifest["max_len"])
    err = np.abs(got.astype(np.float64) - ref)
    assert err[in_range].max() == pytest.approx(quant["max_abs_err"], abs=0)
    # The bound, proved here: each active bit's int8 weight is within s/2 of the float one (q a
    # nearest rounding of W / s, the scale float32(max |W| / 127) per output column), so the
    # exact sum is within popcount * s/2; then one float32 product (2^-24 |got|), and the
    # reference's own float32 dot product of n terms (n 2^-24 sum |W_k| over the active bits).
    w = module.projection.weight.detach().double().numpy().T  # [n, d], the float weights
    int8_expectations(w, q, quant["scale"])
    active = bits.astype(np.float64)
    bound = (active.sum(1, keepdims=True) * scale.astype(np.float64) / 2
             + 2.0**-24 * np.abs(got) + n * 2.0**-24 * (active @ np.abs(w)))
    assert (err <= bound).all()
    # edgepe.graphs.quant's manifest bounds (positions 0..L-1: at most max_popcount active bits;
    # every position: n) hold too, and both are recorded.
    assert err[in_range].max() <= quant["bound_in_range"]
    assert err.max() <= quant["bound"]


def test_table_header_anatomy(exported, tmp_path):
    path, manifest, config, _ = exported("gray-table-bit")
    text = path.read_text()
    symbol = manifest["symbol"]
    assert symbol == "edgepe_gray_L512_d10_bit_table"
    assert manifest["accessor"] == "edgepe_gray_L512_d10_bit_table_bit"
    macro = "EDGEPE_GRAY_L512_D10_BIT_TABLE"
    assert text.count(f"#ifndef {macro}_H") == 1 and "#include <stdint.h>" in text
    assert f"#define {macro}_ROWS 512" in text
    assert f"#define {macro}_COLS 10" in text
    assert f"#define {macro}_BYTES 640" in text
    assert f"const uint8_t {symbol}[{macro}_BYTES]" in text
    assert f"static inline uint8_t {symbol}_bit(uint32_t p, uint32_t k)" in text
    assert "scheme gray (guide 3.6)" in text
    # The closing comment's sha256 covers the array's bytes: those of the --format bin export.
    digest = re.search(rf"sha256 of the 640 bytes of {symbol}.*?\* ([0-9a-f]{{64}})",
                       text, re.S).group(1)
    bin_export = export(ExportConfig(config.scheme, mode="table", format="bin", dtype="bit",
                                     out=tmp_path / "gray.bin"))
    assert digest == hashlib.sha256(bin_export.path.read_bytes()).hexdigest()


def test_float_table_anatomy(exported):
    path, manifest, _, _ = exported("sinusoidal-table-float32")
    text = path.read_text()
    symbol, macro = "edgepe_sinusoidal_L256_d64_f32_table", "EDGEPE_SINUSOIDAL_L256_D64_F32_TABLE"
    assert manifest["symbol"] == symbol and manifest["c_type"] == "float"
    assert f"static {macro}_ATTR const float {symbol}[{macro}_ROWS][{macro}_COLS]" in text
    assert '"base": 10000.0' in text
    assert "{0.0f, 1.0f, 0.0f, 1.0f," in text  # row 0: sin 0, cos 0, ... as float literals


def test_int8_header_has_scale_and_zero_point(exported):
    path, manifest, _, _ = exported("sinusoidal-table-int8")
    text = path.read_text()
    assert "#define EDGEPE_SINUSOIDAL_L256_D64_I8_TABLE_ZERO_POINT 0" in text
    assert "#define EDGEPE_SINUSOIDAL_L256_D64_I8_TABLE_SCALES 64" in text
    assert "const int8_t edgepe_sinusoidal_L256_d64_i8_table[" in text
    assert manifest["dtype"] == "int8" and len(manifest["quant"]["scale"]) == 64


def test_binary_compute_stores_n_bits_by_d_model_weights(exported):
    path, manifest, _, _ = exported("binary-compute")
    text = path.read_text()
    base, macro = "edgepe_binary_L512_d64_f32", "EDGEPE_BINARY_L512_D64_F32"
    assert manifest["function"] == f"{base}_encode"
    assert manifest["symbol"] == f"{base}_weights" and manifest["symbol_shape"] == [10, 64]
    assert f"const float {base}_weights[{macro}_N_BITS][{macro}_D]" in text
    assert f"static inline void {base}_encode(int64_t pos, float out[{macro}_D])" in text
    # No position-indexed table: the only array is the [n][d] weights, read under a bit test.
    assert text.count(f"static {macro}_ATTR const") == 1
    assert "if ((u >> k) & 1u)" in text


@pytest.mark.parametrize("align", [4, 64])
def test_table_is_aligned(tmp_path, align):
    cfg = resolve("binary-bits", 30)
    result = export(ExportConfig(cfg, mode="table", format="c", dtype="uint8", c_align=align,
                                 out=tmp_path / "t.h"))
    src = tmp_path / "align.c"
    src.write_text(
        f'#include <stdint.h>\n#include <stdio.h>\n#include "{result.path}"\n'
        "int main(void) {\n"
        f"    printf(\"%u\\n\", (unsigned)((uintptr_t)&{result.manifest['symbol']} % {align}u));\n"
        "    return 0;\n}\n"
    )
    exe = tmp_path / "align"
    subprocess.run([compiler(), *COMPILE_FLAGS, str(src), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "0"


def test_header_links_into_two_translation_units(exported, tmp_path):
    """Self-contained: static arrays and static inline functions, no duplicate symbols."""
    path, manifest, _, _ = exported("gray-table-bit")
    symbol = manifest["symbol"]
    for name, body in (("a", f"return {symbol}_bit(5, 1);"), ("b", f"return (int){symbol}[1];")):
        (tmp_path / f"{name}.c").write_text(
            f'#include "{path}"\n#include "{path}"\nint {name}(void);\n'
            f"int {name}(void) {{ {body} }}\n"
        )
    (tmp_path / "main.c").write_text(
        "int a(void);\nint b(void);\nint main(void) { return a() + b() > 255; }\n"
    )
    sources = [str(tmp_path / f) for f in ("a.c", "b.c", "main.c")]
    subprocess.run([compiler(), *COMPILE_FLAGS, *sources, "-o", str(tmp_path / "ab")], check=True)
    assert subprocess.run([str(tmp_path / "ab")]).returncode == 0


@pytest.mark.parametrize(
    "prefix, symbol",
    [("my-board.v2", "my_board_v2_gray_L40_d6_bit_table"), ("3d", "_3d_gray_L40_d6_bit_table")],
)
def test_prefix_makes_valid_identifiers(tmp_path, prefix, symbol):
    cfg = resolve("gray", 40)
    result = export(ExportConfig(cfg, mode="table", format="c", dtype="bit", c_prefix=prefix,
                                 out=tmp_path / "g.h"))
    assert result.manifest["symbol"] == symbol
    got = run_c_header(result.path, result.manifest, np.arange(40))
    np.testing.assert_array_equal(got, expected_table(cfg, build(cfg)).astype(np.uint8))


def test_a_warning_fails_the_check(exported, tmp_path):
    """-Werror is live: a header with an unused variable does not pass."""
    path, manifest, _, _ = exported("gray-compute")
    broken = tmp_path / "broken.h"
    broken.write_text(path.read_text().replace(
        "const uint64_t g = u ^ (u >> 1);", "const uint64_t g = u ^ (u >> 1); int unused;"
    ))
    with pytest.raises(CompileError, match="unused"):
        run_c_header(broken, manifest, np.arange(4))


@pytest.mark.parametrize(
    "scheme, mode, kw, message",
    [
        ("sinusoidal", "table", {"dtype": "float16"}, "no float16"),
        ("gaussian", "compute", {}, "no function for scheme 'gaussian'"),
        ("gray", "compute", {"lowering": "arith"}, "drop --lowering"),
        ("gray", "table", {"c_align": 3}, "power of two"),
        ("gray", "compute", {"dtype": "bit"}, "write float32"),
        ("gray", "compute", {"quantize": "int8"}, "only for 'binary'"),
    ],
)
def test_refusals(tmp_path, scheme, mode, kw, message):
    out = tmp_path / "x.h"
    with pytest.raises(BadParameterError, match=message):
        export(ExportConfig(resolve(scheme, 16), mode=mode, format="c", out=out, **kw))
    assert not out.exists()


@pytest.mark.parametrize("key", ["binary-compute", "sinusoidal-table-int8", "gray-table-bit"])
def test_headers_are_byte_identical(exported, tmp_path, key):
    path, _, config, _ = exported(key)
    again = export(ExportConfig(**{**config.__dict__, "out": tmp_path / "again.h"}))
    assert again.path.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "key, positions",
    [("binary-2d-compute", np.arange(4)), ("gray-table-bit", np.zeros((3, 2), np.int64)),
     ("gray-compute", np.arange(3.0))],
)
def test_runner_refuses_positions_of_the_wrong_shape(exported, key, positions):
    path, manifest, _, _ = exported(key)
    with pytest.raises(PositionError):
        run_c_header(path, manifest, positions)
