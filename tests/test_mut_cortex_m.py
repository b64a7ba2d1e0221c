"""``edgepe.verify.cortex_m`` piece by piece (issue 33): the linker-map and stack-usage readers on
hand-written GNU ld output, the build step's error line, the input checks, and small real runs on
QEMU whose values come from the scheme (tables, bit tables, int8 codes, compute functions with
int64 extremes, a bias function over pairs) and whose instruction count follows from the board
clock, not from the module's own constant.

The readers' expected sizes are sums of the hex sizes written in the map below, by hand.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from edgepe.contract.errors import BadParameterError, ParityError, PositionError
from edgepe.export import ExportConfig, export
from edgepe.graphs.table_values import full_table
from edgepe.schemes import build, resolve
from edgepe.verify import cortex_m
from edgepe.verify.c_runner import CompileError

needs_tools = pytest.mark.skipif(
    cortex_m.tools() is None, reason=f"Cortex-M toolchain or QEMU missing: {cortex_m.INSTALL}")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LIBM = "/usr/lib/arm-none-eabi/lib/libm.a"
LIBC = "/usr/lib/arm-none-eabi/lib/libc.a"

# A map in GNU ld's layout: pe.o pulls sin.o, which pulls k.o (also wanted by main.o); main.o
# pulls printf.o, which is not the encoding's. Discarded sections come before the layout.
MAP = f"""Archive member included to satisfy reference by file (symbol)

{LIBM}(sin.o)
                              pe.o (sinf)
{LIBM}(k.o)
                              {LIBM}(sin.o) (__kernel_sinf)
{LIBC}(printf.o)
                              main.o (printf)
{LIBM}(k.o)
                              main.o (__kernel_sinf)

Discarded input sections

 .text          0x00000000      0x400 pe.o
 .bss           0x00000000      0x400 pe.o

Memory Configuration

Name             Origin             Length             Attributes
FLASH            0x00000000         0x00400000         xr

Linker script and memory map

LOAD pe.o
 .text.pe_row   0x000001c8       0x40 pe.o
 .text.pe_raw   0x00000208        0x8 pe.o
 .text.pe_none  0x00000210        0x2 pe.o
 .text.now      0x00000214       0x24 main.o
 .rodata.edgepe_binary_L512_table
                0x00000238      0x100 pe.o
 .text          0x00000338       0x74 {LIBM}(sin.o)
 .rodata        0x000003ac       0x38 {LIBM}(k.o)
 .text          0x000003e4      0x500 {LIBC}(printf.o)
 .data.pe_scale
                0x20000000       0x10 pe.o
 .data.pe_more  0x20000010        0x4 pe.o
 .bss.pe_state  0x20000010       0x20 pe.o
 COMMON         0x20000030        0x8 pe.o
 .bss.out       0x20000038       0x14 main.o
 .debug_info    0x00000000      0x224 pe.o
 .comment       0x00000026       0x27 pe.o
 .ARM.attributes
                0x00000000       0x2e pe.o
"""


def test_map_costs_count_the_object_and_what_it_pulls_in_transitively():
    """flash: pe_row 0x40 + the table 0x100 + sin.o's text 0x74 + k.o's rodata 0x38 + the two
    data sections' initial values 0x10 + 0x4 (pe_raw and pe_none are the harness's, main.o and
    printf.o not the encoding's, discarded and debug sections not in flash); ram: data 0x10 + 0x4
    + bss 0x20 + COMMON 0x8."""
    assert cortex_m._map_costs(MAP, "pe.o") == (0x40 + 0x100 + 0x74 + 0x38 + 0x10 + 0x4,
                                                0x10 + 0x4 + 0x20 + 0x8)
    assert cortex_m._map_costs(MAP, "main.o") == (0x24 + 0x500 + 0x38, 0x14)
    assert cortex_m._map_costs(MAP, "other.o") == (0, 0)


def test_stack_reads_pe_rows_frame_only():
    su = ("pe.c:7:6:pe_raw\t40\tstatic\npe.c:3:6:pe_row\t16\tstatic\n"
          "pe.c:11:6:pe_none\t0\tstatic\n")
    assert cortex_m._stack(su) == 16
    assert cortex_m._stack("pe.c:3:6:pe_rows\t8\tstatic\n") == 0
    assert cortex_m._stack("") == 0


def test_a_failed_step_raises_its_first_error_line():
    script = "import sys; sys.stderr.write('note: x\\nfile.c:1: error: bad thing\\n" \
             "file.c:2: error: second\\n'); sys.exit(3)"
    with pytest.raises(CompileError) as err:
        cortex_m._run([sys.executable, "-c", script], "compiling the header")
    assert str(err.value) == "compiling the header failed: file.c:1: error: bad thing"
    assert "second" in err.value.stderr
    with pytest.raises(CompileError) as err:  # no line says "error": the first line
        cortex_m._run([sys.executable, "-c", "import sys; sys.stderr.write('\\n ld: no\\n"
                       "more\\n'); sys.exit(1)"], "linking")
    assert str(err.value) == "linking failed: ld: no"
    with pytest.raises(CompileError) as err:  # nothing on stderr: the exit status
        cortex_m._run([sys.executable, "-c", "raise SystemExit(5)"], "linking")
    assert str(err.value) == "linking failed: exit status 5"
    with pytest.raises(CompileError) as err:  # ld: the line after its context, not collect2's
        cortex_m._run([sys.executable, "-c", "import sys; sys.stderr.write("
                       "'ld: pe.o: in function `f\\':\\npe.c: undefined reference to `g\\'\\n"
                       "collect2: error: ld returned 1 exit status\\n'); sys.exit(1)"],
                      "linking")
    assert str(err.value) == "linking failed: pe.c: undefined reference to `g'"
    with pytest.raises(CompileError) as err:  # only a summary: it is what there is
        cortex_m._run([sys.executable, "-c", "import sys; sys.stderr.write("
                       "'collect2: error: ld returned 1 exit status\\n'); sys.exit(1)"],
                      "linking")
    assert str(err.value) == "linking failed: collect2: error: ld returned 1 exit status"
    done = cortex_m._run([sys.executable, "-c", "print('ok')"], "x")
    assert done.stdout == "ok\n"


def test_tools_are_none_when_one_is_missing(monkeypatch):
    found = {"arm-none-eabi-gcc": "/x/gcc", "qemu-system-arm": None}
    monkeypatch.setattr(cortex_m.shutil, "which", found.get)
    assert cortex_m.tools() is None
    with pytest.raises(cortex_m.ToolsNotFound) as err:
        cortex_m.run_header(b"", {"mode": "table"}, [0])
    assert str(err.value) == ("the Cortex-M toolchain or QEMU is missing: apt-get install "
                              "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm "
                              "(Debian/Ubuntu)")
    found["qemu-system-arm"] = "/x/qemu"
    assert cortex_m.tools() == {"arm-none-eabi-gcc": "/x/gcc", "qemu-system-arm": "/x/qemu"}


def test_record_is_one_position_the_arity_or_a_pair():
    assert cortex_m._record({"mode": "compute", "positions": {"arity": None}}) == 1
    assert cortex_m._record({"mode": "compute", "positions": {"arity": 3}}) == 3
    assert cortex_m._record({"mode": "compute", "kind": "bias"}) == 2
    assert cortex_m._record({"mode": "table"}) == 1


# --- real runs ----------------------------------------------------------------------------------

def _header(tmp_path, scheme, max_len, d_model=None, **options):
    config = ExportConfig(resolve(scheme, max_len, d_model), format="c",
                          out=tmp_path / f"{scheme}.h", **options)
    result = export(config)
    return result.path.read_bytes(), result.manifest, config


@needs_tools
def test_positions_are_checked_before_anything_is_built(tmp_path):
    header, manifest, _ = _header(tmp_path, "binary-2d", 8, mode="compute")
    with pytest.raises(PositionError) as err:
        cortex_m.run_header(header, manifest, np.arange(4))
    assert str(err.value) == "this C header takes positions [N, 2], got [4]"
    with pytest.raises(PositionError) as err:
        cortex_m.run_header(header, manifest, np.zeros((4, 3), np.int64))
    assert str(err.value) == "this C header takes positions [N, 2], got [4, 3]"
    with pytest.raises(PositionError) as err:
        cortex_m.run_header(header, manifest, np.zeros((4, 2)))
    assert str(err.value) == "positions must be integers, got dtype float64"
    table, tmanifest, _ = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    with pytest.raises(PositionError) as err:
        cortex_m.run_header(table, tmanifest, np.zeros((4, 1), np.int64))
    assert str(err.value) == "this C header takes positions [N], got [4, 1]"
    with pytest.raises(BadParameterError) as err:
        cortex_m.run_header(table, tmanifest, np.arange(4), codes=True)
    assert str(err.value) == ("codes: this header has no codes_function (int8 --mode sliced "
                              "binary has)")


@needs_tools
@pytest.mark.parametrize("board", ["m4f", "m3"])
def test_a_table_runs_with_clamped_rows_and_instructions_from_the_clock(tmp_path, board):
    """gray's uint8 table at L = 8: rows -3 .. 11 read back as the stored rows at clamped
    indices, exactly. Instructions: QEMU's ``-icount shift=0`` runs one instruction a ns; the
    mps2-an386 clocks SysTick at 25 MHz (40 instructions a tick); the lm3s6965evb leaves reset
    with RCC = 0x078e3ac0 (BYPASS set, SYSDIV 15), which QEMU's stellaris.c turns into
    5 x (15 + 1) = 80 ns a tick (12.5 MHz). The 400,000-instruction calibration loop reads
    10,000 or 5,000 ticks."""
    header, manifest, config = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    table = full_table(config.scheme, build(config.scheme)).astype(np.uint8)
    rows = np.arange(-3, 12)
    run = cortex_m.run_header(header, manifest, rows, board)
    assert run.board == board and run.values.dtype == np.uint8
    np.testing.assert_array_equal(run.values, table[np.clip(rows, 0, 7)])
    per_tick = {"m4f": 40, "m3": 80}[board]
    calib, row, none, count = run.ticks
    assert count == 8 and row > none
    assert calib == 400000 // per_tick  # exactly: the loop and the clock are deterministic
    assert run.instructions == (row - none) * per_tick / count
    assert 0 < run.flash < 4096 and run.ram >= 0


@needs_tools
def test_a_float32_table_reads_back_its_rows_bit_for_bit(tmp_path):
    header, manifest, config = _header(tmp_path, "sinusoidal", 8, 6, mode="table")
    table = full_table(config.scheme, build(config.scheme))
    rows = np.array([-1, 0, 3, 7, 8, 2**32])
    run = cortex_m.run_header(header, manifest, rows)
    assert run.values.dtype == np.float32
    np.testing.assert_array_equal(run.values.view(np.uint32),
                                  table[np.clip(rows, 0, 7)].astype(np.float32).view(np.uint32))


@needs_tools
def test_a_compute_function_that_calls_libm_links_it(tmp_path):
    """sinusoidal's function calls sinf/cosf: the program links libm (its flash counts them,
    over 2 KB) and the values are within the scheme's tolerance of ``encode``."""
    header, manifest, config = _header(tmp_path, "sinusoidal", 16, 8, mode="compute")
    p = np.arange(-3, 20, dtype=np.int64)
    run = cortex_m.run_header(header, manifest, p)
    with torch.no_grad():
        expected = build(config.scheme).encode(torch.from_numpy(p)).numpy()
    tolerance = manifest["tolerance"]
    np.testing.assert_allclose(run.values, expected, rtol=tolerance["rtol"],
                               atol=tolerance["atol"])
    assert run.flash > 2048


@needs_tools
def test_a_program_that_stops_early_is_a_parity_error_with_what_it_said(tmp_path):
    """A compute function that prints a line and exits through semihosting with a failure
    (ADP_Stopped_RunTimeErrorUnknown): QEMU exits 1 before the values; the error quotes the
    output."""
    header, manifest, _ = _header(tmp_path, "binary-signed", 8, mode="compute")
    stop = (b"\nint edgepe_semihost(int op, const void *arg);\n"
            b"void edgepe_stop(int64_t p, float *out);\n"
            b"void edgepe_stop(int64_t p, float *out)\n{\n    (void)p;\n    (void)out;\n"
            b"    edgepe_semihost(0x04, \"stopped early\\n\");\n"
            b"    edgepe_semihost(0x18, (const void *)(uintptr_t)0x20024u);\n}\n")
    with pytest.raises(ParityError) as err:
        cortex_m.run_header(header + stop, {**manifest, "function": "edgepe_stop"},
                            np.arange(4))
    assert str(err.value) == "the m4f program failed (QEMU exit 1): stopped early"
    # ADP_Stopped_ApplicationExit: QEMU exits 0, but the values never came
    clean = stop.replace(b"0x20024u", b"0x20026u")
    with pytest.raises(ParityError) as err:
        cortex_m.run_header(header + clean, {**manifest, "function": "edgepe_stop"},
                            np.arange(4))
    assert str(err.value) == "the m4f program failed (QEMU exit 0): stopped early"


@needs_tools
def test_a_header_larger_than_the_boards_flash_fails_at_the_link(tmp_path):
    """The M3 board has 256 KiB of flash: sinusoidal's float32 table of 1100 x 64 (281,600
    bytes) does not fit, and the linker script's region says so."""
    header, manifest, _ = _header(tmp_path, "sinusoidal", 1100, 64, mode="table")
    assert 1100 * 64 * 4 > cortex_m.BOARDS["m3"].flash_kib * 1024
    with pytest.raises(CompileError) as err:
        cortex_m.run_header(header, manifest, np.arange(2), "m3")
    assert str(err.value).startswith("linking failed: ")
    assert "will not fit in region `FLASH'" in str(err.value)


@needs_tools
def test_a_per_tensor_int8_table_reads_one_scale(tmp_path):
    from edgepe.graphs.quant import table_quant

    header, manifest, config = _header(tmp_path, "sinusoidal", 8, 4, mode="table",
                                       quantize="int8", quant_granularity="tensor")
    module = build(config.scheme)
    expected = table_quant(config, module).quantize(full_table(config.scheme, module))
    run = cortex_m.run_header(header, manifest, np.arange(8))
    np.testing.assert_array_equal(run.values, expected)


@needs_tools
def test_flash_is_the_row_function_and_the_table_alone(tmp_path):
    """gray's uint8 table at L = 8 (8 x 4 bytes): the flash counted is ``pe_row``'s code plus
    the table, the two symbol sizes ``arm-none-eabi-nm`` reads from the object compiled here
    with the M4F's flags, ``-Os``, one section a function and a datum. Not counted: the
    harness's ``pe_raw`` and ``pe_none`` (nor a ``memcpy`` a row copy could turn into)."""
    import subprocess

    header, manifest, _ = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    run = cortex_m.run_header(header, manifest, np.arange(8))
    pe_c, pe_h = cortex_m._pe_source(manifest)
    (tmp_path / "edgepe_header.h").write_bytes(header)
    (tmp_path / "pe.c").write_text(pe_c)
    (tmp_path / "pe.h").write_text(pe_h)
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-mcpu=cortex-m4", "-mthumb",
                    "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-Os", "-ffunction-sections",
                    "-fdata-sections", "-fno-tree-loop-distribute-patterns", "-ffreestanding",
                    "-c", "pe.c", "-o", "pe.o"], cwd=tmp_path, check=True)
    symbols = subprocess.run(["arm-none-eabi-nm", "-S", "pe.o"], cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout
    sizes = {line.split()[-1]: int(line.split()[1], 16) for line in symbols.splitlines()
             if len(line.split()) == 4}
    assert sizes[manifest["symbol"]] == 8 * 4
    assert run.flash == sizes["pe_row"] + sizes[manifest["symbol"]]


@needs_tools
def test_a_header_that_clashes_with_the_harness_fails_at_the_link(tmp_path):
    header, manifest, _ = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    with pytest.raises(CompileError) as err:
        cortex_m.run_header(header + b"\nint main(void);\nint main(void) { return 0; }\n",
                            manifest, np.arange(4))
    # ld's own line, not collect2's summary or the "in function" line before it
    assert str(err.value).startswith("linking failed: pe.c:(.text.startup.main+0x0): multiple "
                                     "definition of `main'; main.o:")


@needs_tools
def test_a_bit_table_reads_through_its_accessor(tmp_path):
    header, manifest, config = _header(tmp_path, "binary-bits", 16, mode="table", dtype="bit")
    table = full_table(config.scheme, build(config.scheme)).astype(np.uint8)
    rows = np.array([0, 5, 15, 16, 2**31, 2**32 + 3, -1])
    run = cortex_m.run_header(header, manifest, rows)
    np.testing.assert_array_equal(run.values, table[np.clip(rows, 0, 15)])


@needs_tools
def test_an_int8_table_reads_back_its_codes_and_counts_its_scales(tmp_path):
    """The read-back is the stored int8 codes (exact); ``pe_row`` multiplies them by the
    per-column scales, so the scales are in the flash with the codes."""
    from edgepe.graphs.quant import table_quant

    header, manifest, config = _header(tmp_path, "sinusoidal", 8, 64, mode="table",
                                       quantize="int8")
    module = build(config.scheme)
    expected = table_quant(config, module).quantize(full_table(config.scheme, module))
    run = cortex_m.run_header(header, manifest, np.arange(-1, 9))
    assert run.values.dtype == np.int8
    np.testing.assert_array_equal(run.values, expected[np.clip(np.arange(-1, 9), 0, 7)])
    # 8 x 64 int8 codes and 64 float32 scales: pe_row reads both (a row copy alone would not
    # keep the 256 bytes of scales)
    assert run.flash >= 8 * 64 + 4 * 64


@needs_tools
def test_compute_functions_run_at_int64_extremes(tmp_path):
    """binary-signed's function over int64 extremes equals its ``encode`` bit for bit (it is
    exact at every int64); the timed loop runs max_len calls."""
    header, manifest, config = _header(tmp_path, "binary-signed", 16, mode="compute")
    p = np.array([INT64_MIN, INT64_MIN + 1, -(2**40), -126, -1, 0, 1, 15, 16, 2**33, INT64_MAX],
                 np.int64)
    run = cortex_m.run_header(header, manifest, p)
    with torch.no_grad():
        expected = build(config.scheme).encode(torch.from_numpy(p)).numpy()
    assert run.values.dtype == np.float32
    np.testing.assert_array_equal(run.values, expected)
    assert run.ticks[3] == 16


@needs_tools
def test_a_multi_index_function_takes_records_of_its_arity(tmp_path):
    header, manifest, config = _header(tmp_path, "binary-2d", 8, mode="compute")
    p = np.array([[0, 0], [1, 7], [7, 1], [-1, 3], [INT64_MAX, INT64_MIN]], np.int64)
    run = cortex_m.run_header(header, manifest, p)
    with torch.no_grad():
        expected = build(config.scheme).encode(torch.from_numpy(p)).numpy()
    np.testing.assert_array_equal(run.values, expected)


@needs_tools
def test_a_bias_function_runs_over_query_key_pairs(tmp_path):
    header, manifest, config = _header(tmp_path, "alibi", 8, mode="compute")
    pairs = np.array([[0, 0], [5, 2], [2, 5], [7, 0], [-3, 4]], np.int64)
    run = cortex_m.run_header(header, manifest, pairs)
    module = build(config.scheme)
    with torch.no_grad():
        expected = np.stack([module.encode(torch.tensor([t]), torch.tensor([u]))[:, 0, 0].numpy()
                             for t, u in pairs])
    assert run.values.shape == (5, config.scheme.heads)
    np.testing.assert_array_equal(run.values, expected)


@needs_tools
def test_int8_sliced_codes_are_the_exact_int16_sums(tmp_path):
    """``codes=True`` runs the int8 sliced header's ``codes_function``: int16 sums of int8
    weights over the position's bits, i.e. ``bits @ q``, with ``q`` the manifest's rounding."""
    header, manifest, config = _header(tmp_path, "binary", 16, 8, mode="sliced", quantize="int8",
                                       extra={"slices": "3,2"})
    module = build(config.scheme)
    scale = np.asarray(manifest["quant"]["scale"], np.float64)
    q = np.rint(module.projection.weight.detach().numpy().astype(np.float64).T / scale)
    p = np.array([-1, 0, 1, 5, 15, 16, 2**40 + 9], np.int64)
    bits = (p[:, None] >> np.arange(manifest["n_bits"])) & 1
    run = cortex_m.run_header(header, manifest, p, codes=True)
    assert run.values.dtype == np.int16
    np.testing.assert_array_equal(run.values, bits @ q.astype(np.int64))


@needs_tools
def test_a_program_that_overruns_its_time_is_a_parity_error(tmp_path):
    header, manifest, _ = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    with pytest.raises(ParityError) as err:
        cortex_m.run_header(header, manifest, np.arange(4), timeout_s=0.001)
    assert str(err.value) == "the m4f program did not finish in 0.001 s"


@needs_tools
def test_a_header_that_does_not_compile_names_the_step(tmp_path):
    header, manifest, _ = _header(tmp_path, "gray", 8, mode="table", dtype="uint8")
    with pytest.raises(CompileError) as err:
        cortex_m.run_header(header + b"\nint unused_and_wrong(void) { return x; }\n", manifest,
                            np.arange(4))
    assert str(err.value).startswith("compiling the header failed: ")
    assert "error" in str(err.value)
