"""Fast focused tests of ``edgepe.formats.c_sliced`` (issue 33's mutation testing).

Nine tiny ``--format c --mode sliced`` headers (rope with one, two and three slices and yarn's
attention factor; sinusoidal interleaved, half and with the fairseq offset; binary float32, and
int8 lane-packed per column with an odd width and per tensor) and rope's compute header are
included side by side in ONE C program, compiled once per session by gcc with the project's
flags (``-std=c99 -Werror -pedantic``, no FP contraction) on GNU C's paths at ``-O2`` and once
with ``__GNUC__`` undefined (the strict C99 paths) at ``-O0`` under gcc's address and
undefined-behaviour sanitizers (a read past an array stops it). Every row it prints is checked:

- rope/sinusoidal against the float32 arithmetic the module doc states (slice tables from
  ``graphs.sliced.slice_tables``, ``c' = t_c c - t_s s``, ``s' = t_s c + t_c s`` slice by slice,
  float32 roundings emulated by numpy), bit for bit, and against the float64 definition within
  ``graphs.sliced.bound`` at every position of the plan (negatives too);
- binary float32: the float32 sum, in order, of the float64-summed slice tables, bit for bit;
- binary int8: ``encode_q`` the exact sums of the int8 rows of the set bits of ``pos mod 2^n``,
  ``encode`` their float32 products with the scales, bit for bit.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess

import numpy as np
import pytest
import torch

from edgepe.contract.config import ExportConfig
from edgepe.contract.errors import BadParameterError
from edgepe.formats import c as c_format
from edgepe.formats import c_sliced as cs
from edgepe.graphs import sliced as sl
from edgepe.schemes import build, resolve
from edgepe.schemes.definition import Definition
from edgepe.verify.c_runner import COMPILE_FLAGS, compiler

YARN = {"layout": "half", "rotary_dim": 4, "rope_type": "yarn", "factor": 8.0,
        "original_max_position_embeddings": 8}
# name: (scheme, max_len, d_model, params, options)
HEADERS = {
    "r3": ("rope", 32, 6, None, {"extra": {"slices": "2,1,2"}}),
    "r1": ("rope", 8, 6, None, {}),
    "ry": ("rope", 32, 8, YARN, {"extra": {"slices": "3,2"}}),
    "si": ("sinusoidal", 32, 6, None, {"extra": {"slices": "3,2"}}),
    "sh": ("sinusoidal", 32, 6, {"layout": "half", "offset": "-3"}, {}),
    "so": ("sinusoidal", 16, 4, {"offset": "1"}, {}),
    "bf": ("binary", 511, 6, None, {"extra": {"slices": "3,3,3"}}),
    "b1": ("binary", 32, 4, None, {}),  # 6 bits: one slice
    "bq": ("binary", 511, 9, None, {"quantize": "int8", "extra": {"slices": "4,3,2"}}),
    "bt": ("binary", 511, 6, None, {"quantize": "int8", "quant_granularity": "tensor"}),
}
FAR = [2**40 + 5, -(2**40) - 3, -(2**63), 2**63 - 1]


def config_of(name: str) -> ExportConfig:
    scheme, max_len, d, params, options = HEADERS[name]
    return ExportConfig(scheme=resolve(scheme, max_len, d, None, params), mode="sliced",
                        format="c", c_prefix=name, **options)


def header(name: str):
    """``(config, module, manifest, text)`` of one header, made by ``c_sliced.prepare``."""
    config = config_of(name)
    module = build(config.scheme)
    prepared = cs.prepare(config, module)
    f = io.BytesIO()
    prepared.write(f)
    return config, module, prepared.manifest, f.getvalue().decode()


def fresh(outputs, name: str):
    """The compiled header's outputs, its header made again here: mutmut selects a test by the
    functions it calls itself (the session fixture's calls count for its first test only), and
    the same config gives the same bytes."""
    again = header(name)
    assert again[3] == outputs[name][3] and again[2] == outputs[name][2]
    return outputs[name]


def probes(name: str, manifest: dict) -> np.ndarray:
    if manifest["scheme"] == "binary":
        n = manifest["n_bits"]
        return np.array([*range(-3, (1 << n) + 3), *FAR], dtype=np.int64)
    limit = manifest["positions"]["limit"]
    return np.array([*range(-limit, limit + 1), *FAR], dtype=np.int64)


def _literal(v: int) -> str:
    return "INT64_MIN" if v == -(2**63) else f"INT64_C({v})"


def comment_of(text: str) -> str:
    """The header's leading comment as one line (the `` * `` line starts dropped)."""
    lines = text.split("*/")[0].splitlines()[1:]
    return " ".join(" ".join(re.sub(r"^ \*( |$)", "", line) for line in lines).split())


def program(built: dict) -> str:
    lines = ["#include <stdint.h>", "#include <stdio.h>", "#include <string.h>",
             "PORTABLE", *(f'#include "{n}.h"' for n in built), '#include "compute.h"',
             "static void bits(const float *f, unsigned d) {",
             "    unsigned j; uint32_t u;",
             "    for (j = 0; j < d; ++j) { memcpy(&u, &f[j], 4); printf(\" %lx\", "
             "(unsigned long)u); }",
             "}", "int main(void) {", "    unsigned i, j;"]
    for n, (manifest, p) in built.items():
        d = manifest["shape"][-1]
        lines += [f"    {{ static const int64_t p[{len(p)}] = {{{', '.join(map(_literal, p))}}};",
                  f"      for (i = 0; i < {len(p)}u; ++i) {{ float f[{d}];",
                  f"        {manifest['function']}(p[i], f); printf(\"{n}\"); bits(f, {d}u);"]
        if "codes_function" in manifest:
            lines += [f"        {{ int16_t q[{d}]; {manifest['codes_function']}(p[i], q);",
                      f"          printf(\" q\"); for (j = 0; j < {d}u; ++j) printf(\" %d\", "
                      "(int)q[j]); }"]
        lines += ["        printf(\"\\n\"); } }"]
    lines += ["    (void)j; return 0;", "}"]
    return "\n".join(lines) + "\n"


def sanitizers(cc: str, tmp) -> list[str]:
    """gcc's address and undefined-behaviour sanitizers (an index past an array stops the
    program), where this toolchain has their libraries."""
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    done = subprocess.run([cc, *flags, "-o", str(tmp / "probe"), "probe.c"], cwd=tmp,
                          capture_output=True)
    return flags if done.returncode == 0 else []


@pytest.fixture(scope="session")
def outputs(tmp_path_factory):
    """Per header ``(config, module, manifest, text, positions, floats, codes)`` from the GNU C
    build, and the rows of the strict C99 build."""
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler on this machine")
    tmp = tmp_path_factory.mktemp("c_sliced")
    made, built = {}, {}
    for n in HEADERS:
        made[n] = header(n)
        (tmp / f"{n}.h").write_text(made[n][3])
        built[n] = (made[n][2], probes(n, made[n][2]))
    compute = ExportConfig(scheme=resolve("rope", 32, 6, None, {}), format="c", c_prefix="r3",
                           extra={"slices": "2,1,2"})
    f = io.BytesIO()
    c_format.prepare(compute, build(compute.scheme)).write(f)
    (tmp / "compute.h").write_bytes(f.getvalue())
    rows, preprocessed = {}, {}
    for kind, portable, level in (("gnu", "", ["-O2"]),
                                  ("c99", "#undef __GNUC__\n#undef __BYTE_ORDER__",
                                   ["-O0", *sanitizers(cc, tmp)])):
        (tmp / f"{kind}.c").write_text(program(built).replace("PORTABLE", portable))
        exe = tmp / kind
        subprocess.run([cc, *COMPILE_FLAGS, *level, "-o", str(exe), f"{kind}.c"], check=True,
                       cwd=tmp)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
        rows[kind] = out.splitlines()
        preprocessed[kind] = subprocess.run([cc, *COMPILE_FLAGS, "-E", "-P", f"{kind}.c"],
                                            check=True, cwd=tmp, capture_output=True,
                                            text=True).stdout
    # GNU C on a big-endian target (preprocessed only): no word stored as two int16
    preprocessed["big"] = subprocess.run(
        [cc, *COMPILE_FLAGS, "-E", "-P", "-U__BYTE_ORDER__",
         "-D__BYTE_ORDER__=__ORDER_BIG_ENDIAN__", "gnu.c"], check=True, cwd=tmp,
        capture_output=True, text=True).stdout
    assert rows["gnu"] == rows["c99"]
    result = {"preprocessed": preprocessed}
    for n, (config, module, manifest, text) in made.items():
        lines = [line.split() for line in rows["gnu"] if line.split()[0] == n]
        p = built[n][1]
        assert len(lines) == len(p)
        d = manifest["shape"][-1]
        floats = np.array([[int(v, 16) for v in line[1:1 + d]] for line in lines],
                          dtype=np.uint32).view(np.float32)
        codes = (np.array([line[2 + d:] for line in lines], dtype=np.int64)
                 if "codes_function" in manifest else None)
        result[n] = (config, module, manifest, text, p, floats, codes)
    return result


def emulate_trig(config, module, p: np.ndarray) -> np.ndarray:
    """The module doc's float32 arithmetic, in numpy float32 (each op rounded)."""
    widths = sl.plan_of(config)
    scale = module.scale.numpy().astype(np.float32) if getattr(module, "scaled", False) else None
    tables = sl.slice_tables(module.inv_freq.numpy().astype(np.float32), widths, scale)
    rope = config.scheme.scheme == "rope"
    offset = 0 if rope else int(module.offset)
    pos = [int(v) + offset for v in p]
    pos = [(v + 2**63) % 2**64 - 2**63 for v in pos]  # int64 wrap of pos + offset
    neg = np.array([v < 0 for v in pos])
    a = [(-v) % 2**64 if v < 0 else v for v in pos]  # |pos| as uint64
    low = list(reversed(widths))
    shifts = np.cumsum([0, *low[:-1]]).tolist()
    s = [np.array([(v >> k) & ((1 << w) - 1) for v in a]) for k, w in zip(shifts, low,
                                                                            strict=True)]
    c, sn = tables[0][0][s[0]], tables[0][1][s[0]]
    for idx, (tc, ts) in zip(s[1:], tables[1:], strict=True):
        tc, ts = tc[idx], ts[idx]
        c, sn = tc * c - ts * sn, ts * c + tc * sn
    sn = np.where(neg[:, None], -sn, sn)
    if rope:
        return np.hstack([c, sn])
    if module.layout == "half":
        return np.hstack([sn, c])
    return np.stack([sn, c], axis=-1).reshape(len(p), -1)


@pytest.mark.parametrize("name", ["r3", "r1", "ry", "si", "sh", "so"])
def test_trig_rows_are_the_stated_float32_arithmetic_and_within_the_bound(outputs, name):
    config, module, manifest, text, p, floats, _ = fresh(outputs, name)
    want = emulate_trig(config, module, p)
    np.testing.assert_array_equal(floats.view(np.uint32), want.view(np.uint32))
    limit = manifest["positions"]["limit"]
    inside = (p >= -limit) & (p <= limit)
    with torch.no_grad():
        exact = Definition(module).encode64(torch.from_numpy(p[inside])).numpy()
    widths = sl.plan_of(config)
    a = float(module.scale.max()) if getattr(module, "scaled", False) else 1.0
    assert np.abs(floats[inside].astype(np.float64) - exact).max() <= sl.bound(widths, a)
    assert "sinf(" not in text and "cosf(" not in text and "math.h" not in text


@pytest.mark.parametrize("name,widths", [("bf", (3, 3, 3)), ("b1", (6,))])
def test_binary_float_rows_are_the_in_order_sum_of_the_slice_tables(outputs, name, widths):
    config, module, manifest, text, p, floats, codes = fresh(outputs, name)
    assert codes is None and "codes_function" not in manifest
    assert manifest["sliced"]["slices"] == list(widths)
    weights = module.projection.weight.detach().numpy().astype(np.float32).T
    low = list(reversed(widths))
    tables = sl.binary_tables(weights, low, False)
    u = [int(v) % 2**64 for v in p]
    shifts = np.cumsum([0, *low[:-1]])
    want = None
    for t, k, w in zip(tables, shifts, low, strict=True):
        rows = t[[(v >> int(k)) & ((1 << w) - 1) for v in u]]
        want = rows if want is None else want + rows  # float32, in order
    np.testing.assert_array_equal(floats.view(np.uint32), want.view(np.uint32))
    assert manifest["symbol_dtype"] == "float32"
    assert manifest["symbol_shape"] == [1 << low[0], weights.shape[1]]


@pytest.mark.parametrize("name", ["bq", "bt"])
def test_binary_int8_codes_are_exact_sums_and_floats_their_scaled_values(outputs, name):
    config, module, manifest, text, p, floats, codes = fresh(outputs, name)
    d = manifest["shape"][-1]
    scale = np.broadcast_to(np.asarray(manifest["quant"]["scale"], np.float32), (d,))
    assert (manifest["quant"]["axis"] is None) == (name == "bt")
    w = module.projection.weight.detach().numpy().astype(np.float64).T
    q = np.rint(w / scale.astype(np.float64)).astype(np.int64)
    assert np.abs(q).max() <= 127
    bits = np.array([[(int(v) % 2**64 >> b) & 1 for b in range(9)] for v in p], np.int64)
    np.testing.assert_array_equal(codes, bits @ q)
    np.testing.assert_array_equal(floats.view(np.uint32),
                                  (scale * codes.astype(np.float32)).view(np.uint32))
    assert manifest["codes_function"] == f"{manifest['function']}_q"
    base = cs._names(config)["base"]
    assert manifest["quant"]["tensor"] == f"{base}_t0"
    assert manifest["quant"]["scale_tensor"] == f"{base}_t0_scale"
    assert (f" *   out[c] = {base}_t0_scale[{'0' if name == 'bt' else 'c'}] * (sum of the "
            "slices' int16 sums)\n") in text
    # GNU C takes the XOR and (little-endian) the word-store paths; strict C99 the other ones
    gnu, c99, big = (outputs["preprocessed"][k] for k in ("gnu", "c99", "big"))
    for code in ("w ^ 0x80008000u", "* (float)(int16_t)v;", "__builtin_memcpy(&out[2 * i], &v, 4)"):
        assert code in gnu and code not in c99
    assert "* (float)(int16_t)v;" in big and "__builtin_memcpy" not in big


def test_headers_name_their_guard_and_hash(outputs):
    for name in HEADERS:
        config, module, manifest, text, *_rest = fresh(outputs, name)
        scheme = config.scheme.scheme
        assert comment_of(text).startswith(f"edgepe: {scheme} sliced function scheme {scheme} ")
        assert manifest["dtype"] == "float32"
        base = c_format.names(config)["base"] + "_sliced"
        guard = f"{base.upper()}_ENCODE_H"
        assert cs._names(config) == {"base": base, "macro": base.upper(), "guard": guard}
        assert text.count(guard) == 3  # ifndef, define, endif
        assert c_format.names(config)["guard"] not in text
        assert manifest["function"] == f"{base}_encode"
        assert manifest["macro_prefix"] == base.upper() and manifest["byte_order"] == "little"
        assert manifest["accessor"] is None
        assert text.startswith("/*\n * edgepe: ")
        assert text.rstrip().endswith(f"#endif /* {guard} */")
        digest, size = re.search(r"sha256 of the (\d+) bytes of the slice tables .*?\n.*?\n"
                                 r" \* ([0-9a-f]{64}) \*/", text, re.S).group(2, 1)
        arrays = re.findall(r"const (float|uint32_t) \w+\[(\d+)\]\[(\d+)\] = \{\n(.*?)\};",
                            text, re.S)
        data = b""
        for ctype, rows, cols, body in arrays:
            values = [float(v.rstrip("f")) if ctype == "float" else int(v)
                      for v in re.findall(r"[-0-9.e+]+f?", body)]
            assert len(values) == int(rows) * int(cols)
            data += np.asarray(values, "<f4" if ctype == "float" else "<u4").tobytes()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == int(size)
        assert manifest["sliced"]["table_bytes"] >= len(data) - (
            2 * 4 * module.inv_freq.numel() if config.scheme.scheme != "binary" else 0)


def test_trig_header_manifest_and_comment(outputs):
    config, module, manifest, text, *_ = fresh(outputs, "r3")
    base = cs._names(config)["base"]
    assert manifest["symbol"] == f"{base}_cos0" and manifest["symbol_shape"] == [4, 3]
    assert manifest["symbol_dtype"] == "float32"
    assert manifest["sliced"]["slices"] == [2, 1, 2] and manifest["sliced"]["shifts"] == [3, 2, 0]
    assert manifest["sliced"]["table_bytes"] == 2 * (4 + 2 + 4) * 3 * 4  # no extra top row in C
    assert manifest["tolerance"]["atol"] == sl.tolerance((2, 1, 2), 1.0)
    assert manifest["positions"]["limit"] == 31
    comment = comment_of(text)
    assert (f"{base}_encode: one position's row without libm (no sinf/cosf): out[6] float32, "
            f"out[i] = cos(a_i), out[{base.upper()}_HALF + i] = sin(a_i), a_i = pos * w_i, "
            "from bit slices of |pos| (widths [2, 1, 2], most significant first) and float32 "
            "tables of their cos/sin computed in float64, combined by angle addition. Max abs "
            "error against the float64 definition <= "
            f"{sl.bound((2, 1, 2)):.4g} (graphs.sliced.bound; any position). Defined for "
            "|pos| < 2^5; past it the slices wrap.") in comment
    _, _, half_manifest, half_text, *_ = fresh(outputs, "sh")
    half_base = half_manifest["function"].removesuffix("_encode")
    assert (f"out[i] = sin(a_i), out[{half_base.upper()}_HALF + i] = cos(a_i), a_i = (pos + -3) "
            "* w_i") in comment_of(half_text)
    _, _, _, si_text, *_ = fresh(outputs, "si")
    assert "out[2i] = sin(a_i), out[2i + 1] = cos(a_i), a_i = pos * w_i" in si_text
    _, module, yarn, yarn_text, *_ = fresh(outputs, "ry")
    a = float(module.scale.max())
    assert a > 1 and yarn["sliced"]["bound"] == sl.bound((3, 2), a)
    assert f"<= {sl.bound((3, 2), a):.4g} (graphs.sliced.bound" in comment_of(yarn_text)


def test_binary_header_manifest_and_comment(outputs):
    config, module, manifest, text, *_ = fresh(outputs, "bq")
    base = cs._names(config)["base"]
    assert manifest["symbol"] == f"{base}_t0" and manifest["n_bits"] == 9
    assert manifest["symbol_shape"] == [4, 5] and manifest["symbol_dtype"] == "uint32"
    assert manifest["sliced"]["slices"] == [4, 3, 2] and manifest["sliced"]["shifts"] == [5, 2, 0]
    assert manifest["sliced"]["table_bytes"] == (4 + 8 + 16) * 5 * 4  # 9 columns: 5 words
    assert len(manifest["sliced"]["lane_biases"]) == 3
    assert sum(manifest["sliced"]["lane_biases"]) == cs.LANE_BIAS
    comment = comment_of(text)
    assert (f"{base}_encode: one position's row from 3 bit slices of p = pos mod 2^n (widths "
            "[4, 3, 2], most significant first): out[9] float32 = sum_c T_c[(p >> k_c) & m_c], "
            "T_c[s] the sum of the projection rows of the bits set in s (exact int8 sums; one "
            "float32 multiply by the column's scale, bit for bit the int8 compute header). "
            "Every int64 position is defined, as in the reference (two's complement wrap). "
            f"{base}_encode_q: the same row's exact int16 sums (out[c] * {base}_t0_scale[c] is "
            f"{base}_encode's out[c]), for an int8 pipeline. The tables hold two columns a "
            "uint32_t word (2c low, 2c + 1 high), biased by "
            f"{manifest['sliced']['lane_biases']} so the lanes of a sum carry nothing into "
            "each other and add to the int16 sum + 0x8000. Names are") in comment
    config, module, manifest, text, *_ = fresh(outputs, "bf")
    assert manifest["quant"] is None and "lane_biases" not in manifest["sliced"]
    assert manifest["symbol_dtype"] == "float32" and manifest["symbol_shape"] == [8, 6]
    assert manifest["sliced"]["table_bytes"] == 3 * 8 * 6 * 4
    assert ("T_c[s] the sum of the projection rows of the bits set in s (float64 sums, stored "
            "float32). Every int64 position is defined, as in the reference (two's complement "
            "wrap). Names are") in comment_of(text)


def test_check_refusals():
    def config(scheme="rope", **options):
        return ExportConfig(scheme=resolve(scheme, 64, 8 if scheme != "gray" else None, None,
                                           None), mode="sliced", format="c", **options)

    for bad, message in (
            (config("gray"), r"^--format c --mode sliced has a function for rope, sinusoidal, "
                             r"binary; scheme 'gray' has none$"),
            (config(lowering="trunc"), r"^--lowering trunc chooses the ops of an ONNX graph; a "
                                       r"C header slices with C's shifts and masks: drop "
                                       r"--lowering$"),
            (config(dtype="float16"), r"^C sliced functions write float32 \(--dtype float32\), "
                                      r"got --dtype float16$"),
            (config(quantize="int8"), r"^--quantize int8 applies to a C sliced function only "
                                      r"for 'binary' \(its projection\); rope and sinusoidal "
                                      r"store float32 tables$")):
        with pytest.raises(BadParameterError, match=message):
            cs.check(bad)
        with pytest.raises(BadParameterError, match=message):
            cs.prepare(bad, None)
    cs.check(config("binary", quantize="int8"))
    cs.check(config("sinusoidal"))


def test_pack_lanes_by_hand():
    t0 = np.array([[1, -2, 3], [-4, 5, 0]], np.int16)
    t1 = np.array([[10, -20, 7], [0, 3, -9]], np.int16)
    packed, biases = cs.pack_lanes([t0, t1])
    assert biases == [0x8000 - 20, 20]  # b_1 = max|T_1|, b_0 = 0x8000 - b_1
    lo0, hi0 = t0[:, 0::2] + biases[0], np.hstack([t0[:, 1:2], np.zeros((2, 1), int)])
    hi0 = hi0 + biases[0]
    np.testing.assert_array_equal(packed[0], (lo0 + (hi0 << 16)).astype(np.uint32))
    assert packed[0].dtype == np.uint32 and packed[0].shape == (2, 2)
    assert int(packed[1][1, 1]) == (-9 + 20) | (20 << 16)  # odd last column: high lane = bias
    word = int(packed[0][1, 0]) + int(packed[1][0, 0])  # row 1 of t0 + row 0 of t1, cols 0, 1
    assert (word & 0xFFFF) - 0x8000 == -4 + 10 and (word >> 16) - 0x8000 == 5 - 20
    full = [np.full((2, 2), 8192, np.int16), np.full((2, 2), 8192, np.int16),
            np.full((2, 2), 8191, np.int16), np.full((2, 2), 8191, np.int16)]
    packed, biases = cs.pack_lanes(full)  # 32766 + 0x8000 = 0xFFFE: fits
    assert biases == [0x8000 - (8192 + 8191 + 8191), 8192, 8191, 8191]
    with pytest.raises(BadParameterError, match=r"^the slice sums do not fit two 16-bit lanes: "
                       r"use more, narrower --slices$"):
        cs.pack_lanes([*full, np.full((2, 2), 2, np.int16)])  # 0x8000 + 32768: over 0xFFFF
    with pytest.raises(BadParameterError, match="two 16-bit lanes"):  # |-32768| in int16 is < 0
        cs.pack_lanes([np.full((1, 1), 0, np.int16), np.full((1, 1), -32768, np.int16)])
    # at the edges: every bias fits its table exactly, a column sum of 32767 fills the lanes
    for tables in ([[[16384, 0]], [[0, 16384]]], [[[16383]], [[16384]]], [[[1000]], [[10]]],
                   [[[5]], [[20000]]]):
        tables = [np.array(t, np.int16) for t in tables]
        packed, biases = cs.pack_lanes(tables)
        assert biases[0] == 0x8000 - int(np.abs(tables[1]).max())
        lanes = sum(p.astype(np.int64) for p in packed)
        assert (lanes & 0xFFFF).max() <= 0xFFFF and (lanes >> 32).max() == 0
        np.testing.assert_array_equal((lanes & 0xFFFF)[:, 0] - 0x8000,
                                      sum(t[:, 0].astype(np.int64) for t in tables))
    with pytest.raises(BadParameterError, match="two 16-bit lanes"):  # b_0 < max|T_0|
        cs.pack_lanes([np.full((1, 1), 9000, np.int16), *[np.full((1, 1), 8000, np.int16)] * 3])
