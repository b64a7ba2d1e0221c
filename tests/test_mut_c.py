"""edgepe/formats/c.py, fast and focused (issue 33's mutation run reruns this file first).

Helpers are called directly on tiny inputs with results known independently (C99's float literal
syntax, Python's own hex formatting, powers of two); headers are prepared in memory and checked
against their manifest and the reference module's own buffers; the float compute variants the
other C tests do not cover (sinusoidal ``half`` + fairseq offset, rope's yarn attention factor,
``hybrid-int-binary`` at ``max_len`` 2 and ``d_model`` 1, per-tensor int8 ``binary``) are
compiled with gcc under UBSan and run against the PyTorch reference.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch

from edgepe import api
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.export import ExportConfig, prepare
from edgepe.formats import c as cfmt
from edgepe.formats.c_schemes import COMPUTE_SCHEMES
from edgepe.schemes import build, resolve
from edgepe.verify.c_runner import CompileError, compiler, run_c_header

# -- helpers, exact ----------------------------------------------------------------------------

# A C99 decimal floating constant with the f suffix (6.4.4.2): digits with a "." and/or an
# exponent; "1f" is not one.
_C_FLOAT = re.compile(r"-?(\d+\.\d*(e[-+]?\d+)?|\d+e[-+]?\d+)f")


def test_c_rows_writes_float32_values_as_exact_c_float_literals():
    values = np.array([[1.0, -0.0, 0.1, 2.0**-140], [-2.5, 1e10, 3.0, 65504.0]], np.float32)
    text = cfmt.c_rows(values, indent="  ")
    lines = text.splitlines(keepends=True)
    assert len(lines) == 2 and all(line.startswith("  {") and line.endswith("},\n")
                                   for line in lines)
    # float32(0.1) = 0.100000001490116...: 9 significant digits; integers get ".0" before "f"
    assert lines[0].startswith("  {1.0f, -0.0f, 0.100000001f, ")
    assert lines[1] == "  {-2.5f, 1e+10f, 3.0f, 65504.0f},\n"
    cells = [c for line in lines for c in line.strip()[1:-2].split(", ")]
    assert all(_C_FLOAT.fullmatch(c) for c in cells), cells
    back = np.array([float(c[:-1]) for c in cells], np.float32).reshape(values.shape)
    assert back.tobytes() == values.tobytes()  # bit for bit, the sign of -0.0 included


def test_c_rows_writes_integers_as_plain_decimals():
    assert cfmt.c_rows(np.array([[1, -2, 0], [127, -128, 5]], np.int8)) == (
        "    {1, -2, 0},\n    {127, -128, 5},\n")


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_c_rows_refuses_inf_and_nan_in_one_line(bad):
    with pytest.raises(BadParameterError) as info:
        cfmt.c_rows(np.array([[0.0, bad]], np.float32))
    assert str(info.value) == "cannot write a C header: the values include inf or nan"


def test_c_floats_are_exact_float32_literals():
    assert cfmt.c_floats([1.0, 0.5, 0.1, -3.0]) == ["1.0f", "0.5f", "0.100000001f", "-3.0f"]


def test_c_bytes_writes_sixteen_lowercase_hex_bytes_a_line():
    data = bytes(range(0xa0, 0xa0 + 20))
    first = ", ".join(f"0x{b:02x}" for b in data[:16])
    rest = ", ".join(f"0x{b:02x}" for b in data[16:])
    assert cfmt.c_bytes(data) == f"    {first},\n    {rest},\n"
    assert cfmt.c_bytes(data[:16]) == f"    {first},\n"


def test_bit_index_type_holds_the_largest_entry_index():
    # the index p * cols + k reaches rows * cols - 1: 2^32 entries fit uint32_t, one more does not
    assert cfmt._bit_index(2**16, 2**16) == "uint32_t"
    assert cfmt._bit_index(2**32, 1) == "uint32_t"
    assert cfmt._bit_index(2**32 + 1, 1) == "uint64_t"
    assert cfmt._bit_index(2**17, 2**16) == "uint64_t"
    assert cfmt._bit_index(10, 3) == "uint32_t"


def test_default_mode_computes_where_a_function_exists():
    assert cfmt.default_mode("gray") == "compute" and cfmt.default_mode("alibi") == "compute"
    assert cfmt.default_mode("gaussian") == "table" and cfmt.default_mode("learned") == "table"


def test_opening_comment_has_no_trailing_blanks(tmp_path):
    config = ExportConfig(resolve("gray", 8), mode="compute", format="c", out=tmp_path / "g.h")
    text = cfmt._opening(config, "gray compute function", ["first", "", "second"])
    assert "\n * first\n *\n * second\n" in text
    assert not any(line != line.rstrip() for line in text.splitlines())


# -- choices -----------------------------------------------------------------------------------


def _config(tmp_path, scheme="gray", mode="compute", **kw):
    return ExportConfig(resolve(scheme, 16), mode=mode, format="c", out=tmp_path / "x.h", **kw)


@pytest.mark.parametrize("align", [1, 2, 4, 64, 4096])
def test_every_power_of_two_is_an_alignment(tmp_path, align):
    cfmt.check_c_choices(_config(tmp_path, mode="table", c_align=align))  # 1 = 2^0 included


@pytest.mark.parametrize("align", [0, -4, 3, 6, 12, 96])
def test_other_alignments_are_refused(tmp_path, align):
    with pytest.raises(BadParameterError) as info:
        cfmt.check_c_choices(_config(tmp_path, mode="table", c_align=align))
    assert str(info.value) == f"--c-align must be a power of two (bytes), got {align}"


def test_the_refusals_name_what_a_header_can_hold(tmp_path):
    def message(**kw):
        with pytest.raises(BadParameterError) as info:
            cfmt.check_c_choices(_config(tmp_path, **kw))
        return str(info.value)

    assert message(lowering="arith") == (
        "--lowering arith chooses the integer ops of an ONNX graph; a C header holds a table or "
        "computes with C's own shifts and masks: drop --lowering for --format c")
    float16 = ("--format c has no float16 (C99 has no half type): use --dtype float32 (or "
               "--quantize int8 for a quarter of its bytes); --dtype uint8/bit hold 0/1 tables "
               "only")
    assert message(mode="table", dtype="float16") == float16
    assert message(dtype="float16") == float16 + ", with --mode table"
    assert message(scheme="gaussian") == (
        "--format c --mode compute has no function for scheme 'gaussian'; use --mode table, or "
        f"a scheme with one: {', '.join(COMPUTE_SCHEMES)}")


# -- check_file --------------------------------------------------------------------------------


def test_check_file_reads_any_bytes_and_wants_the_symbol(tmp_path):
    path = tmp_path / "h.h"
    path.write_bytes(b"/* \xff\xfe not UTF-8 */\nconst float my_sym[1] = {0.0f};\n")
    cfmt.check_file(path, {"symbol": "my_sym"})  # undecodable bytes are no reason to refuse
    cfmt.check_file(path, {"symbol": None})  # no symbol named: nothing to look for
    with pytest.raises(ArtifactError) as info:
        cfmt.check_file(path, {"symbol": "other_sym"})
    assert str(info.value) == (f"{str(path)!r} does not define 'other_sym', the symbol its "
                               "manifest names")


# -- headers in memory: the manifest describes the array the header holds ------------------------


def _prepared(tmp_path, scheme, max_len, d_model=None, heads=None, params=None, **options):
    config = api.make_config(scheme, max_len, d_model=d_model, heads=heads, params=params or {},
                             format="c", **options)
    prepared = prepare(config)
    path = tmp_path / f"{scheme}.h"
    with path.open("wb") as f:
        prepared.write(f)
    return config, prepared.manifest, path, build(config.scheme, seed=config.seed)


def _array(text: str, name: str) -> tuple[str, np.ndarray]:
    """The C type and the values of the array ``name`` defined in ``text``."""
    found = re.search(rf"const (float|int8_t) {name}(?:\[\w+\])+ = \{{(.*?)\}};", text, re.S)
    assert found, f"{name} is not defined"
    ctype, body = found.groups()
    cells = re.findall(r"-?[\d.]+(?:e[-+]?\d+)?f?", body)
    if ctype == "float":
        return ctype, np.array([float(c.rstrip("f")) for c in cells], np.float32)
    return ctype, np.array([int(c) for c in cells], np.int8)


def _closing_digest(text: str, name: str) -> str:
    return re.search(rf"sha256 of the \d+ bytes of {name}.*?\* ([0-9a-f]{{64}})", text,
                     re.S).group(1)


FLOAT_CASES = {
    "sinusoidal": ("sinusoidal", 8, 4, None, {"layout": "half", "frequencies": "fairseq",
                                              "offset": "2"}),
    "rope-yarn": ("rope", 8, 20, None, {"layout": "half", "rope_type": "yarn", "factor": "2",
                                        "original_max_position_embeddings": "4"}),
    "alibi": ("alibi", 8, None, 3, {}),
}


@pytest.mark.parametrize("case", list(FLOAT_CASES))
def test_float_compute_manifest_names_the_reference_buffer(tmp_path, case):
    scheme, max_len, d_model, heads, params = FLOAT_CASES[case]
    config, manifest, path, module = _prepared(tmp_path, scheme, max_len, d_model, heads, params)
    text = path.read_text()
    base = cfmt.c_identifier(f"edgepe_{scheme}_{cfmt.variant_tag(config)}")
    buffer = (module.slopes if scheme == "alibi" else module.inv_freq).detach().numpy()
    assert manifest["symbol"] == f"{base}_{'slopes' if scheme == 'alibi' else 'inv_freq'}"
    assert manifest["function"] == f"{base}_encode" and manifest["macro_prefix"] == base.upper()
    assert manifest["dtype"] == "float32" and manifest["accessor"] is None
    assert manifest["symbol_shape"] == [buffer.size] and manifest["symbol_dtype"] == "float32"
    ctype, stored = _array(text, manifest["symbol"])
    assert ctype == "float" and stored.tobytes() == buffer.astype(np.float32).tobytes()
    order = {"little": "<", "big": ">"}[manifest["byte_order"]]
    data = stored.astype(np.dtype(manifest["symbol_dtype"]).newbyteorder(order)).tobytes()
    assert _closing_digest(text, manifest["symbol"]) == hashlib.sha256(data).hexdigest()
    assert f"static inline void {manifest['function']}(" in text


@pytest.mark.parametrize("granularity", ["channel", "tensor"])
def test_int8_compute_manifest_names_weights_and_scales(tmp_path, granularity):
    config, manifest, path, module = _prepared(tmp_path, "binary", 8, 4, quantize="int8",
                                               quant_granularity=granularity)
    text = path.read_text()
    symbol, quant = manifest["symbol"], manifest["quant"]
    assert manifest["dtype"] == "float32" and manifest["accessor"] is None
    n = config.scheme.n_bits
    assert manifest["symbol_shape"] == [n, 4] and manifest["symbol_dtype"] == "int8"
    assert quant["tensor"] == symbol and quant["scale_tensor"] == f"{symbol}_scale"
    ctype, q = _array(text, symbol)
    assert ctype == "int8_t" and q.size == n * 4
    _, scale = _array(text, quant["scale_tensor"])
    assert scale.tobytes() == np.asarray(quant["scale"], np.float32).ravel().tobytes()
    assert scale.size == (4 if granularity == "channel" else 1)
    assert (quant["axis"] is None) == (granularity == "tensor")
    order = {"little": "<", "big": ">"}[manifest["byte_order"]]
    data = q.astype(np.dtype("int8").newbyteorder(order)).tobytes()
    assert _closing_digest(text, symbol) == hashlib.sha256(data).hexdigest()
    # how the comment says a value dequantises: the column's scale, or the one scale
    c = "c" if granularity == "channel" else "0"
    which = "one per column c" if granularity == "channel" else "one for every column"
    assert (f"/* int8, symmetric (zero point 0), {which}:\n"
            f" *   out[c] = {symbol}_scale[{c}] *") in text


def test_bit_compute_manifest_has_no_array(tmp_path):
    _, manifest, path, _ = _prepared(tmp_path, "gray", 8)
    assert manifest["symbol"] is None and manifest["symbol_shape"] is None
    assert manifest["symbol_dtype"] is None and manifest["accessor"] is None
    assert manifest["dtype"] == "float32" and manifest["byte_order"] == "little"
    assert "sha256" not in path.read_text()


def test_weighted_compute_manifest_describes_its_float_array(tmp_path):
    config, manifest, path, module = _prepared(tmp_path, "binary", 8, 4)
    text = path.read_text()
    weights = module.projection.weight.detach().numpy().T  # row k: the weights of bit k
    n = config.scheme.n_bits
    assert manifest["symbol_shape"] == [n, 4] and manifest["symbol_dtype"] == "float32"
    assert manifest["quant"] is None and manifest["byte_order"] == "little"
    _, stored = _array(text, manifest["symbol"])
    assert stored.tobytes() == np.ascontiguousarray(weights, np.float32).tobytes()
    data = stored.astype("<f4").tobytes()
    assert _closing_digest(text, manifest["symbol"]) == hashlib.sha256(data).hexdigest()


# -- compiled and run against the reference (gcc, UBSan: no out-of-bounds read hides) ------------

needs_cc = pytest.mark.skipif(compiler() is None, reason="no C compiler (gcc or $CC) here")
UBSAN = ("-O0", "-fsanitize=undefined", "-fno-sanitize-recover=all")


def run_ubsan(path, manifest, positions) -> np.ndarray:
    """``run_c_header`` with UBSan: an out-of-bounds read or overflow ends the program (exit 1),
    which gcc's constant folding could otherwise hide (a 1-element const array read at [j])."""
    try:
        return run_c_header(path, manifest, positions, UBSAN)
    except CompileError as error:
        if re.search(r"ubsan|sanitize", error.stderr):  # not linked: libubsan missing
            pytest.skip(f"this compiler has no UBSan runtime: {error}")
        raise


def _positions(limit: int) -> np.ndarray:
    return np.concatenate([np.arange(-20, 40), [1000, -999, 12345, limit, -limit, limit - 1]]
                          ).astype(np.int64)


@needs_cc
@pytest.mark.parametrize("case", ["sinusoidal", "sinusoidal-interleaved-offset", "rope",
                                  "rope-yarn"])
def test_float_compute_function_matches_the_reference(tmp_path, case):
    """sinf/cosf are libm's: within the scheme's tolerance (atol 1e-6, rtol 0); the layout
    (interleaved or halves), the fairseq offset and yarn's attention factor must all be right."""
    scheme, max_len, d_model, heads, params = {
        **FLOAT_CASES,
        "sinusoidal-interleaved-offset": ("sinusoidal", 8, 6, None, {"offset": "3"}),
        "rope": ("rope", 8, 6, None, {}),
    }[case]
    config, manifest, path, module = _prepared(tmp_path, scheme, max_len, d_model, heads, params)
    pos = _positions(manifest["positions"]["limit"])
    got = run_ubsan(path, manifest, pos)
    with torch.no_grad():
        ref = module.encode(torch.as_tensor(pos)).numpy()
    assert got.shape == ref.shape == (pos.size, d_model)
    rtol, atol = config.scheme.spec.tolerance
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    if case == "rope-yarn":  # the attention factor is live: |cos 0| is the factor, not 1
        assert module.scaled and np.abs(got[pos == 0, :10] - 1).min() > 1e-3


@needs_cc
@pytest.mark.parametrize("d_model", [1, 4])
def test_hybrid_int_binary_at_two_positions_is_exact(tmp_path, d_model):
    """max_len 2: the linear part is pos / 1; d_model 1: no linear column at all (d/2 = 0)."""
    config, manifest, path, module = _prepared(tmp_path, "hybrid-int-binary", 2, d_model)
    pos = _positions(manifest["positions"]["limit"])
    got = run_ubsan(path, manifest, pos)
    with torch.no_grad():
        ref = module.encode(torch.as_tensor(pos)).numpy()
    np.testing.assert_array_equal(got, ref)  # tolerance (0, 0): exact
    if d_model == 4:
        np.testing.assert_array_equal(got[:, 0], pos.astype(np.float32))  # x = pos / (2 - 1)


@needs_cc
@pytest.mark.parametrize("granularity", ["channel", "tensor"])
def test_int8_binary_reads_only_its_scales(tmp_path, granularity):
    """out[c] = scale * (exact int32 sum of the set bits' int8 rows); with one scale for the
    tensor every column reads scale[0] (UBSan refuses a read past the array)."""
    config, manifest, path, _ = _prepared(tmp_path, "binary", 8, 4, quantize="int8",
                                          quant_granularity=granularity)
    n = config.scheme.n_bits
    pos = _positions(2**24)
    got = run_ubsan(path, manifest, pos)
    q = _array(path.read_text(), manifest["symbol"])[1].astype(np.int32).reshape(n, 4)
    bits = (pos[:, None] >> np.arange(n)) & 1  # pos mod 2^n, two's complement
    scale = np.asarray(manifest["quant"]["scale"], np.float32)
    np.testing.assert_array_equal(got, (bits @ q).astype(np.float32) * scale)
