"""The program that prints what a C header computes (edgepe/verify/c_runner.py): its text for
each kind of header, the call it makes, its output parsed back exactly, and each refusal
(issue 33: the mutation run of c_runner.py runs these first). Headers here are written by hand,
a few lines each, so the expected values are known without edgepe's exporter.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgepe.contract.errors import ParityError, PositionError
from edgepe.verify import c_runner

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None,
                               reason="no gcc: apt-get install gcc")

COMPUTE = {"mode": "compute", "kind": "pe", "d_model": 2, "function": "pe_f", "macro_prefix": "F",
           "positions": {"arity": None}}
# f(p) = [p / 2, -p]: exact in float32, printed with %a
COMPUTE_H = """#include <stdint.h>
static void pe_f(int64_t p, float *out) { out[0] = (float)p / 2.0f; out[1] = -(float)p; }
"""
TABLE = {"mode": "table", "kind": "pe", "dtype": "int8", "shape": [3, 2], "symbol": "t",
         "macro_prefix": "T"}
TABLE_H = """#include <stdint.h>
#define T_ROWS 3
#define T_COLS 2
static const int8_t t[3][2] = {{-128, 1}, {2, 127}, {-1, 0}};
"""
BITS = {"mode": "table", "kind": "pe", "dtype": "bit", "shape": [2, 3], "symbol": "b",
        "macro_prefix": "B", "accessor": "b_bit"}
BITS_H = """#include <stdint.h>
#define B_ROWS 2
#define B_COLS 3
static const uint8_t b[1] = {0x35};
static int b_bit(uint32_t r, uint32_t c) { return (b[0] >> (r * 3 + c)) & 1; }
"""
BIAS = {"mode": "compute", "kind": "bias", "heads": 2, "function": "g", "macro_prefix": "G",
        "d_model": 99}
BIAS_H = """#include <stdint.h>
static void g(int64_t t, int64_t u, float *out) { out[0] = (float)(t - u); out[1] = 0.25f; }
"""


def test_record_arity_and_out_width_of_each_kind():
    assert c_runner.record_arity(COMPUTE) is None  # one position, passed as pos[0]
    assert c_runner.record_arity({**COMPUTE, "positions": {"arity": 2}}) == 2
    assert c_runner.record_arity({**COMPUTE, "positions": None}) is None
    assert c_runner.record_arity({**COMPUTE, "mode": "sliced"}) is None
    assert c_runner.record_arity(BIAS) == 2
    assert c_runner.record_arity({**BIAS, "mode": "table"}) is None
    assert c_runner.out_width(COMPUTE) == 2
    assert c_runner.out_width(BIAS) == 2  # heads, not d_model
    assert c_runner.out_width(TABLE) == 2 and c_runner.out_width(BITS) == 3  # shape[1]


def test_call_of_each_kind():
    assert c_runner.call(COMPUTE) == "pe_f(pos[0], out);"
    assert c_runner.call({**COMPUTE, "positions": {"arity": 2}}, "q") == "pe_f(q, out);"
    assert c_runner.call(BIAS) == "g(pos[0], pos[1], out);"


def test_program_text_of_a_table_header():
    text = c_runner.c_program("h.h", TABLE)
    assert text == (
        "#include <stdint.h>\n#include <stdio.h>\n#include \"h.h\"\n\n"
        "/* Reads int64 positions (little-endian, 1 a record) from argv[1]; prints one line "
        "each. */\n"
        "int main(int argc, char **argv)\n{\n"
        "    int64_t pos[1];\n    unsigned j;\n    FILE *f;\n"
        "    if (argc != 2 || (f = fopen(argv[1], \"rb\")) == NULL) return 2;\n"
        "    while (fread(pos, sizeof pos[0], 1, f) == 1) {\n"
        "        const int64_t p = pos[0] < 0 ? 0 : pos[0] > T_ROWS - 1 ? T_ROWS - 1 : pos[0];\n"
        "        for (j = 0; j < T_COLS; ++j) printf(j ? \" %d\" : \"%d\", (int)t[p][j]);\n"
        "        putchar('\\n');\n    }\n    fclose(f);\n    return 0;\n}\n")


def test_program_text_of_a_compute_and_a_bit_header():
    text = c_runner.c_program("h.h", BIAS)
    assert "    int64_t pos[2];\n" in text and "== 2) {\n" in text
    assert ("        float out[2];\n        g(pos[0], pos[1], out);\n"
            "        for (j = 0; j < 2; ++j) printf(j ? \" %a\" : \"%a\", (double)out[j]);\n"
            ) in text
    text = c_runner.c_program("h.h", BITS)
    assert "printf(j ? \" %d\" : \"%d\", (int)b_bit((uint32_t)p, (uint32_t)j));" in text


@needs_gcc
@pytest.mark.parametrize(("manifest", "header", "positions", "expected", "dtype"), [
    (COMPUTE, COMPUTE_H, [0, 3, -5, 2**40], [[0, 0], [1.5, -3], [-2.5, 5], [2**39, -2**40]],
     np.float32),
    (TABLE, TABLE_H, [-7, 0, 1, 2, 3, 2**62], [[-128, 1], [-128, 1], [2, 127], [-1, 0],
                                               [-1, 0], [-1, 0]], np.int8),
    # 0x35 = 0b110101: row 0 bits (1, 0, 1), row 1 bits (0, 1, 1)
    (BITS, BITS_H, [0, 1, 5], [[1, 0, 1], [0, 1, 1], [0, 1, 1]], np.uint8),
    (BIAS, BIAS_H, [[5, 2], [0, 7]], [[3, 0.25], [-7, 0.25]], np.float32),
], ids=["compute", "int8-table", "bit-table", "bias"])
def test_run_c_header_prints_each_value_exactly(tmp_path, manifest, header, positions, expected,
                                                dtype):
    path = tmp_path / "h.h"
    path.write_text(header)
    got = c_runner.run_c_header(path, manifest, np.array(positions, np.int64), flags=("-O0",))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.array(expected, dtype))


@needs_gcc
def test_uint8_and_unsigned_positions(tmp_path):
    manifest = {**TABLE, "dtype": "uint8"}
    path = tmp_path / "h.h"
    path.write_text(TABLE_H.replace("int8_t t", "uint8_t t").replace("-128", "200")
                    .replace("-1", "255"))
    got = c_runner.run_c_header(path, manifest, np.array([0, 2], np.uint32))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [[200, 1], [255, 0]])


@needs_gcc
def test_the_header_is_included_through_a_plain_link(tmp_path):
    folder = tmp_path / 'a "quoted\\ folder'
    folder.mkdir()
    (folder / "h.h").write_text(COMPUTE_H)
    work = tmp_path / "work"
    work.mkdir()
    (work / "edgepe_header.h").write_text("stale")  # replaced by the link
    exe = c_runner.compile_program(folder / "h.h", COMPUTE, work)
    assert exe == work / "edgepe_print" and exe.is_file()
    assert (work / "edgepe_header.h").resolve() == (folder / "h.h").resolve()
    assert '#include "edgepe_header.h"' in (work / "edgepe_print.c").read_text()
    np.testing.assert_array_equal(c_runner.run_program(exe, COMPUTE, np.array([4])),
                                  [[2, -4]])


@needs_gcc
def test_a_warning_is_an_error_and_names_the_flags(tmp_path):
    # (this test's folder has "error" in its name: only gcc's ": error: " lines are quoted)
    path = tmp_path / "warn.h"
    path.write_text(COMPUTE_H + "static int unused_thing;\n")
    with pytest.raises(c_runner.CompileError) as info:
        c_runner.compile_program(path, COMPUTE, tmp_path, flags=("-O2", "-funsigned-char"))
    message = str(info.value)
    assert message.startswith("warn.h does not compile with -O2 -funsigned-char: ")
    assert "unused_thing" in message and ": error: " in message and "\n" not in message
    assert "unused_thing" in info.value.stderr


def test_no_compiler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc-edgepe")
    assert c_runner.compiler() is None
    with pytest.raises(c_runner.CompilerNotFound) as info:
        c_runner.compile_program(tmp_path / "h.h", COMPUTE, tmp_path)
    assert str(info.value) == ("no C compiler found ('no-such-cc-edgepe'): install gcc or "
                               "set CC")


@pytest.mark.parametrize(("manifest", "positions", "message"), [
    (COMPUTE, np.array([1.0]), "positions must be integers, got dtype float64"),
    (COMPUTE, np.array([[1]]), "this C header takes positions [N] (table rows are one index "
     "each), got shape [1, 1]"),
    (BIAS, np.array([1, 2]), "this C header takes positions [N, 2] (table rows are one index "
     "each), got shape [2]"),
    (BIAS, np.array([[1, 2, 3]]), "this C header takes positions [N, 2] (table rows are one "
     "index each), got shape [1, 3]"),
])
def test_positions_of_the_wrong_type_or_shape_are_refused_before_running(manifest, positions,
                                                                          message):
    with pytest.raises(PositionError) as info:
        c_runner.run_program("/nonexistent", manifest, positions)
    assert str(info.value) == message


def test_a_program_that_fails_or_prints_the_wrong_count_is_a_parity_error(tmp_path):
    failing = tmp_path / "fails"
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    failing.chmod(0o755)
    with pytest.raises(ParityError) as info:
        c_runner.run_program(failing, COMPUTE, np.array([1]))
    assert str(info.value) == "fails exited with 3: broken"
    short = tmp_path / "short"
    short.write_text("#!/bin/sh\necho 0x1p+0 0x1p+1 0x1p+2\n")
    short.chmod(0o755)
    with pytest.raises(ParityError) as info:
        c_runner.run_program(short, COMPUTE, np.array([1, 2]))
    assert str(info.value) == "the C program printed 3 values, expected 2 x 2"
    exact = tmp_path / "exact"
    exact.write_text("#!/bin/sh\necho 0x1.8p+0 -0x1p-149\necho 0x1p+127 0x0p+0\n")
    exact.chmod(0o755)
    got = c_runner.run_program(exact, COMPUTE, np.array([1, 2]))
    np.testing.assert_array_equal(got, np.array([[1.5, -2.0**-149], [2.0**127, 0]], np.float32))
    assert got[0, 1] != 0  # the smallest subnormal read back exactly


def test_positions_reach_the_program_as_little_endian_int64(tmp_path):
    dump = tmp_path / "dump"  # prints the positions file's bytes, in decimal
    dump.write_text("#!/bin/sh\nod -An -v -tu1 \"$1\"\n")
    dump.chmod(0o755)
    manifest = {**TABLE, "shape": [3, 8], "dtype": "uint8"}  # 8 values a position: its bytes
    got = c_runner.run_program(dump, manifest, np.array([1, -2], np.int32))
    assert got.tolist() == [[1, 0, 0, 0, 0, 0, 0, 0], [254] + [255] * 7]


@needs_gcc
def test_flag_variants_are_the_four_sets_and_m32_where_it_runs():
    variants = c_runner.flag_variants()
    assert {k: v for k, v in variants.items() if k != "m32"} == {
        "O0": ("-O0",), "O2": ("-O2",), "O2-unsigned-char": ("-O2", "-funsigned-char"),
        "Os-signed-char": ("-Os", "-fsigned-char")}
    probe = subprocess.run(["gcc", "-m32", "-x", "c", "-", "-o", "/tmp/edgepe-m32-test"],
                           input=b"int main(void) { return sizeof(void *) == 4 ? 0 : 1; }\n",
                           capture_output=True)
    runs = probe.returncode == 0 and subprocess.run(["/tmp/edgepe-m32-test"]).returncode == 0
    assert ("m32" in variants) == runs
    if runs:
        assert variants["m32"] == ("-m32", "-O2")
    assert c_runner.COMPILE_FLAGS == ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")
    assert Path(c_runner.compiler()).name == "gcc"


def test_no_compiler_names_gcc_when_cc_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcc on it
    with pytest.raises(c_runner.CompilerNotFound) as info:
        c_runner.compile_program(tmp_path / "h.h", COMPUTE, tmp_path)
    assert str(info.value) == "no C compiler found ('gcc'): install gcc or set CC"


@needs_gcc
def test_headers_calling_libm_link_and_flags_reach_the_compiler(tmp_path):
    # sinf of a volatile value is a libm call at -O0 (not folded): the program links -lm
    path = tmp_path / "m.h"
    path.write_text("#include <stdint.h>\n#include <math.h>\n"
                    "static void pe_f(int64_t p, float *out) {\n"
                    "    volatile float x = (float)p;\n"
                    "    out[0] = sinf(x) * 0.0f + (float)VALUE; out[1] = (float)p;\n}\n")
    got = c_runner.run_c_header(path, COMPUTE, np.array([3]), flags=("-O0", "-DVALUE=7"))
    np.testing.assert_array_equal(got, [[7, 3]])


@needs_gcc
def test_the_positions_file_is_written_in_a_temporary_folder(tmp_path, monkeypatch):
    header = tmp_path / "h.h"
    header.write_text(COMPUTE_H)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    c_runner.run_c_header(header, COMPUTE, np.array([1]))
    assert list(work.iterdir()) == []  # nothing left in the working folder


@pytest.mark.parametrize("stderr, line", [
    # gcc: the first ": error: " line, not a note or a path that merely contains "error"
    ("In file included from /tmp/errors/x.c:1:\nh.h:3:5: error: bad\nh.h:4:1: error: worse\n",
     "h.h:3:5: error: bad"),
    # ld: its own line, not the "in function" context before it or collect2's summary
    ("/usr/bin/ld: pe.o: in function `main':\npe.c:(.text+0x0): multiple definition of `main'\n"
     "collect2: error: ld returned 1 exit status\n",
     "pe.c:(.text+0x0): multiple definition of `main'"),
    # only the summary: it is what there is
    ("collect2: error: ld returned 1 exit status\n", "collect2: error: ld returned 1 exit status"),
    ("\n   \n  first words  \nsecond\n", "first words"),
    ("", "exit status 4"),
])
def test_first_error_line_is_one_line_that_says_what_failed(stderr, line):
    assert c_runner.first_error_line(stderr, 4) == line


def test_a_compiler_that_fails_silently_is_named_by_its_exit_status(tmp_path, monkeypatch):
    """A $CC wrapper that exits 1 and prints nothing (``false``): the one line says so."""
    monkeypatch.setenv("CC", "false")
    (tmp_path / "h.h").write_text("")
    with pytest.raises(c_runner.CompileError) as info:
        c_runner.compile_program(tmp_path / "h.h", COMPUTE, tmp_path)
    assert str(info.value) == "h.h does not compile with -O2: exit status 1"
