"""Run a C header (``--format c``) on an emulated Cortex-M and measure what it costs there.

``run_header(header, manifest, positions, board)`` builds a bare-metal program around the
header's bytes with ``arm-none-eabi-gcc``, runs it under ``qemu-system-arm`` with semihosting and
returns what the emulated core computed, bit for bit, with the artifact's cost on that core:

- ``values``: as ``c_runner.run_program`` returns them (compute headers: float32 ``[N, D]`` from
  the function; tables: the stored row, clamped to ``[0, rows - 1]`` as firmware would, in the
  stored dtype, bit-packed entries read through the accessor). The program writes each value's
  bytes as hex over semihosting, so the read-back is exact.
- ``flash``: bytes of ``.text``/``.rodata``/``.data`` that the linker map attributes to the
  encoding: the input sections of the object holding ``pe_row`` (the header's arrays and the one
  function that turns a position into its float32 row: the compute function, a table row copy, an
  int8 row times its scales, or a bit-packed row unpacked), plus every library member (libgcc's
  soft float, libm's ``sinf``) that object pulls in, transitively.
- ``ram``: ``.data + .bss`` of the same, plus ``pe_row``'s stack frame (``-fstack-usage``). The
  caller's ``out[D]`` buffer and library functions' frames are not counted.
- ``instructions``: instructions executed per call of ``pe_row``, averaged over positions
  ``0 .. L-1`` (table rows for tables). QEMU runs with ``-icount shift=0`` (one instruction = one
  ns of virtual time) and the program reads SysTick (core clock) around the loop; ticks are
  converted to instructions by a calibration loop of known length in the same run, and the same
  loop around an empty function is subtracted. This counts instructions, not cycles: QEMU models
  no pipeline, no flash wait states, no FPU or divider latency (a ``VDIV`` counts as one).

Boards (``BOARDS``): ``m4f`` is QEMU's ``mps2-an386`` (Cortex-M4 with FPv4-SP, hard float),
``m3`` is ``lm3s6965evb`` (Cortex-M3, no FPU: float arithmetic in libgcc's soft float; 256 KiB of
flash). The startup is this module's own (vector table, ``.data``/``.bss`` set-up, FPU enable on
the M4F) and semihosting is two ``bkpt 0xab`` calls (write a string, exit): no C library is
linked except libm and libgcc for what the header itself calls.

The header's bytes are compiled and run as given: a caller that did not build them must check
them first (``edgepe verify`` requires a byte-equal rebuild before it compiles anything).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.errors import BadParameterError, EdgepeError, ParityError, PositionError
from edgepe.verify.c_runner import (
    COMPILE_FLAGS,
    FUNCTION_MODES,
    CompileError,
    call,
    first_error_line,
    out_width,
    record_arity,
)

INSTALL = (
    "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm (Debian/Ubuntu)"
)
# Each run stops here at the latest: the programs finish in well under a second of host time.
TIMEOUT_S = 60


@dataclass(frozen=True)
class Board:
    """A QEMU machine and the compiler flags for its core."""

    machine: str
    cpu_flags: tuple[str, ...]
    flash_kib: int
    ram_kib: int
    fpu: bool


BOARDS = {
    "m4f": Board(
        "mps2-an386",
        ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"),
        4096, 4096, True,
    ),
    "m3": Board("lm3s6965evb", ("-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft"), 256, 64,
                False),
}
OPT = "-Os"


class ToolsNotFound(EdgepeError):
    """``arm-none-eabi-gcc`` or ``qemu-system-arm`` is missing: Cortex-M runs cannot happen here."""


@dataclass(frozen=True)
class CortexMRun:
    """What one run on an emulated core gave: values (see ``run_header``) and costs in bytes and
    instructions (module docstring)."""

    board: str
    values: np.ndarray
    flash: int
    ram: int
    instructions: float
    # The raw SysTick readings the instructions come from (calibration loop, timed loop, empty
    # loop) and the timed call count: a test derives the instructions from them independently.
    ticks: tuple[int, int, int, int] = (0, 0, 0, 0)


def tools() -> dict[str, str] | None:
    """Paths of the cross compiler and QEMU, or ``None`` when one is missing."""
    found = {name: shutil.which(name)
             for name in ("arm-none-eabi-gcc", "qemu-system-arm")}
    if None in found.values():
        return None
    return found  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# The program


_STARTUP = r"""
#include <stdint.h>
extern uint32_t __stack_top, __data_load, __data_start, __data_end, __bss_start, __bss_end;
int main(void);
void reset(void);
/* ARMv7-M semihosting: r0 = operation, r1 = argument, bkpt 0xab (ARM DUI 0471, 8.3). */
int edgepe_semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
__attribute__((noreturn)) void reset(void)
{
#if EDGEPE_FPU
    /* CPACR: full access to CP10/CP11 before any FP instruction (ARMv7-M B3.2.20). */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    uint32_t *src = &__data_load, *dst = &__data_start;
    while (dst < &__data_end) *dst++ = *src++;
    for (dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
    edgepe_semihost(0x18, (const void *)(uintptr_t)(main() == 0 ? 0x20026u : 0x20024u));
    for (;;) {}
}
__attribute__((section(".vectors"), used)) static void *const vectors[2] = {
    &__stack_top, (void *)reset,
};
"""

_LINKER = """
MEMORY {{ FLASH (rx) : ORIGIN = 0x00000000, LENGTH = {flash}K
         RAM (rwx) : ORIGIN = 0x20000000, LENGTH = {ram}K }}
ENTRY(reset)
SECTIONS {{
  .text : {{ KEEP(*(.vectors)) *(.text*) *(.rodata*) }} > FLASH
  .ARM.exidx : {{ *(.ARM.exidx*) }} > FLASH
  .data : {{ __data_start = .; *(.data*) . = ALIGN(4); __data_end = .; }} > RAM AT > FLASH
  __data_load = LOADADDR(.data);
  .bss (NOLOAD) : {{ __bss_start = .; *(.bss*) *(COMMON) . = ALIGN(4); __bss_end = .; }} > RAM
  __stack_top = ORIGIN(RAM) + LENGTH(RAM);
}}
"""


def _record(manifest: Mapping[str, Any]) -> int:
    """int64 values a compute record holds (1, the arity, or 2 for a bias function's (t, u))."""
    return record_arity(manifest) or 1


def _pe_source(manifest: Mapping[str, Any], codes: bool = False) -> tuple[str, str]:
    """``(pe.c, pe.h)``: the object that holds the encoding, and its declarations.

    ``pe_row(p, out)`` is what firmware calls per position (timed, counted in flash);
    ``pe_raw(p, out)`` copies the stored values for the exact read-back (tables only: for compute
    headers the row is the read-back). ``codes``: the row is the manifest's ``codes_function``
    (the int8 sliced header's exact int16 sums), written as ``int16_t``. ``pe_none`` has
    ``pe_row``'s signature and does nothing (the timing loop's baseline).
    """
    macro = manifest["macro_prefix"]
    if manifest["mode"] in FUNCTION_MODES:
        # Every compute function takes its record as int64 p[k] here (k = 1 for one position).
        ptype = f"const int64_t p[{_record(manifest)}]"
        row = (f"    {manifest['codes_function']}(p[0], (int16_t *)(void *)out);\n" if codes
               else f"    {call(manifest, 'p')}\n")
        raw = "    pe_row(p, (float *)out);\n"
    else:
        ptype = "uint32_t p"
        width = f"{macro}_COLS"
        symbol = manifest["symbol"]
        # Clamp as a table artifact does (the manifest's out_of_range "clamp").
        clamp = (f"    const uint32_t r = p > {macro}_ROWS - 1 ? {macro}_ROWS - 1 : p;\n"
                 "    uint32_t k;\n")
        if manifest["dtype"] == "bit":
            get = f"{manifest['accessor']}(r, k)"
            rtype = "uint8_t"
        else:
            get = f"{symbol}[r][k]"
            rtype = {"float32": "float", "int8": "int8_t", "uint8": "uint8_t"}[manifest["dtype"]]
        quant = manifest.get("quant")
        scale = ""
        if quant is not None:
            scale = f"{symbol}_scale[{'k' if quant['axis'] is not None else '0'}] * "
        cast = "" if rtype == "float" else "(float)"
        row = clamp + f"    for (k = 0; k < {width}; ++k) out[k] = {scale}{cast}{get};\n"
        raw = clamp + f"    for (k = 0; k < {width}; ++k) (({rtype} *)out)[k] = {get};\n"
    source = (
        '#include "edgepe_header.h"\n#include "pe.h"\n'
        f"void pe_row({ptype}, float *out)\n{{\n{row}}}\n"
        f"void pe_raw({ptype}, void *out)\n{{\n{raw}}}\n"
        f"void pe_none({ptype}, float *out)\n{{\n    (void)p;\n    (void)out;\n}}\n"
    )
    declarations = (
        "#include <stdint.h>\n"
        f"void pe_row({ptype}, float *out);\n"
        f"void pe_raw({ptype}, void *out);\n"
        f"void pe_none({ptype}, float *out);\n"
    )
    return source, declarations


def _main_source(manifest: Mapping[str, Any], positions: np.ndarray, timed: int,
                 value_bytes: int, width: int) -> str:
    """The program: calibrate, time ``pe_row`` over ``0 .. timed-1``, then print every probe's
    raw row as hex (``value_bytes`` bytes a value, ``width`` values a row)."""
    compute = manifest["mode"] in FUNCTION_MODES
    k = _record(manifest)
    if compute:
        flat = positions.reshape(len(positions), k)
        literals = ",\n".join(
            "{" + ", ".join(f"INT64_C({int(v)})" if v != -(2**63) else "INT64_MIN" for v in row)
            + "}" for row in flat.tolist()
        )
        ptype, pcall, tcall, fptype = "int64_t", "probes[i]", "tp", "const int64_t *"
        # Timed records: (t, t / 2, ...): position t; for a bias function query t, key t / 2.
        timed_setup = (f"        int64_t tp[{k}];\n        uint32_t j;\n"
                       f"        for (j = 0; j < {k}u; ++j) tp[j] = (int64_t)(t >> j);\n")
    else:
        literals = ",\n".join(f"{{{v}}}" for v in positions.tolist())
        ptype, pcall, tcall, fptype = "uint32_t", "probes[i][0]", "t", "uint32_t"
        timed_setup = ""
    raw_bytes = width * value_bytes
    return f"""#include <stdint.h>
#include "pe.h"
int edgepe_semihost(int op, const void *arg);
#define N_PROBES {len(positions)}u
#define TIMED {timed}u
static const {ptype} probes[N_PROBES][{k}] = {{
{literals}
}};
static float out[{width} + 1];
static unsigned char raw[{raw_bytes} + 4];
static char line[2 * {raw_bytes} + 4];
static void say(const char *s) {{ edgepe_semihost(0x04, s); }}  /* SYS_WRITE0 */
static void hex(const unsigned char *b, uint32_t n, char end)
{{
    static const char digits[] = "0123456789abcdef";
    uint32_t i;
    for (i = 0; i < n; ++i) {{
        line[2 * i] = digits[b[i] >> 4];
        line[2 * i + 1] = digits[b[i] & 15u];
    }}
    line[2 * n] = end;
    line[2 * n + 1] = 0;
    say(line);
}}
/* SysTick (ARMv7-M B3.3): core clock, 24-bit down counter. */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
static uint32_t wraps;
static uint32_t now(void)  /* ticks since start, counting wraps of the 24-bit counter */
{{
    uint32_t v = SYST_CVR;
    if (SYST_CSR & (1u << 16)) ++wraps;  /* COUNTFLAG: wrapped since the last read */
    return wraps * 0x1000000u - v;
}}
static uint32_t time_loop(void (*f)({fptype}, float *))
{{
    uint32_t t, start = now(), ticks;
    for (t = 0; t < TIMED; ++t) {{
{timed_setup}        f({tcall}, out);
        __asm__ volatile("" ::: "memory");
        if ((t & 63u) == 63u) (void)now();
    }}
    ticks = now() - start;
    return ticks;
}}
int main(void)
{{
    uint32_t i, calib, row, none;
    uint32_t head[4];
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0;
    SYST_CSR = 5u;  /* enable, core clock, no interrupt */
    while (SYST_CVR == 0) {{}}  /* loaded from RVR */
    (void)SYST_CSR;  /* reading clears COUNTFLAG */
    wraps = 0;
    calib = now();
    {{  /* 2 instructions an iteration: subs, bne */
        register uint32_t n __asm__("r0") = 200000u;
        __asm__ volatile("1: subs %0, %0, #1\\n\\tbne 1b" : "+r"(n));
    }}
    calib = now() - calib;
    row = time_loop(pe_row);
    none = time_loop(pe_none);
    head[0] = calib; head[1] = row; head[2] = none; head[3] = TIMED;
    say("EDGEPE-BEGIN\\n");
    hex((const unsigned char *)head, sizeof head, '\\n');
    for (i = 0; i < N_PROBES; ++i) {{
        pe_raw({pcall}, raw);
        hex(raw, {raw_bytes}u, '\\n');
    }}
    say("EDGEPE-END\\n");
    return 0;
}}
"""


# ---------------------------------------------------------------------------------------------
# Build, run, measure


def _run(command: Sequence[str], what: str, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(list(command), capture_output=True, text=True, **kw)
    if done.returncode != 0:
        error = CompileError(f"{what} failed: {first_error_line(done.stderr, done.returncode)}")
        error.stderr = done.stderr
        raise error
    return done


def _map_costs(map_text: str, pe_object: str) -> tuple[int, int]:
    """``(flash, static ram)`` of ``pe_object`` and the library members it pulls in, from a GNU
    ld map (``-Map``): sizes of the input sections placed in the output, by file."""
    head, _, layout = map_text.partition("Linker script and memory map")
    members = head.partition("Archive member included to satisfy reference by file (symbol)")[2]
    members = members.split("Discarded input sections")[0].split("Memory Configuration")[0]
    # "archive(member)\n    referrer (symbol)": who pulled which member.
    pulled: dict[str, set[str]] = {}
    for member, referrer in re.findall(r"^(\S.*)\n\s+(\S.*?) \(", members, re.M):
        pulled.setdefault(referrer.strip(), set()).add(member.strip())
    ours, todo = {pe_object}, [pe_object]
    while todo:
        for member in pulled.get(todo.pop(), ()):
            if member not in ours:
                ours.add(member)
                todo.append(member)
    flash = ram = 0
    # " .section  0xADDR  0xSIZE file", the name alone on its line when it is long; common
    # symbols (gcc -fcommon) are " COMMON  0xADDR  0xSIZE file".
    for name, size, file in re.findall(
        r"^ (\.[\w.$]+|COMMON)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S.*)$", layout, re.M
    ):
        if file.strip() not in ours or name.startswith((".text.pe_raw", ".text.pe_none")):
            continue
        size = int(size, 16)
        if name.startswith((".text", ".rodata")):
            flash += size
        elif name.startswith(".data"):
            flash += size  # its initial values are in flash
            ram += size
        elif name.startswith((".bss", "COMMON")):
            ram += size
    return flash, ram


def _stack(su_text: str) -> int:
    """``pe_row``'s frame in bytes from gcc's ``-fstack-usage`` output."""
    match = re.search(r":pe_row\t(\d+)\t", su_text)
    return int(match.group(1)) if match else 0


def run_header(
    header: bytes,
    manifest: Mapping[str, Any],
    positions,
    board: str = "m4f",
    timeout_s: float = TIMEOUT_S,
    codes: bool = False,
) -> CortexMRun:
    """Build ``header`` (its bytes) into a bare-metal program for ``board``, run it under QEMU
    and return the values it computed at ``positions`` with the measured costs.

    ``positions``: compute headers int64 ``[N]`` (``[N, k]`` for multi-index schemes, ``[N, 2]``
    (query, key) pairs for a bias function), every int64 allowed; tables, row indices ``[N]``
    (the program clamps them to the table). Raises ``ToolsNotFound`` (with the install line),
    ``CompileError``, ``ParityError`` (the program did not finish or printed the wrong amount),
    ``PositionError``. ``codes``: run the int8 sliced header's ``codes_function`` instead (its
    int16 sums are the values).
    """
    found = tools()
    if found is None:
        raise ToolsNotFound(f"the Cortex-M toolchain or QEMU is missing: {INSTALL}")
    spec = BOARDS[board]
    compute = manifest["mode"] in FUNCTION_MODES
    arity = record_arity(manifest)
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu":
        raise PositionError(f"positions must be integers, got dtype {positions.dtype}")
    if positions.ndim != (2 if arity else 1) or (arity and positions.shape[1] != arity):
        shape = f"[N, {arity}]" if arity else "[N]"
        raise PositionError(f"this C header takes positions {shape}, got {list(positions.shape)}")
    width = out_width(manifest)
    if codes and "codes_function" not in manifest:
        raise BadParameterError("codes: this header has no codes_function (int8 --mode sliced "
                            "binary has)")
    if compute:
        positions = positions.astype(np.int64)
        dtype, timed = ("int16" if codes else "float32"), manifest["max_len"]
    else:
        # Rows as uint32 (firmware's index type): negatives become row 0, as the clamp gives.
        positions = np.clip(positions, 0, manifest["shape"][0] - 1).astype(np.int64)
        dtype, timed = manifest["dtype"], manifest["shape"][0]
    value_bytes = {"float32": 4, "int16": 2}.get(dtype, 1)
    pe_c, pe_h = _pe_source(manifest, codes)
    cc = found["arm-none-eabi-gcc"]
    flags = [*COMPILE_FLAGS, *spec.cpu_flags, OPT, "-ffunction-sections", "-fdata-sections",
             "-fno-tree-loop-distribute-patterns", "-ffreestanding"]
    with tempfile.TemporaryDirectory(prefix="edgepe-cortexm-") as tmp:
        work = Path(tmp)
        (work / "edgepe_header.h").write_bytes(header)
        (work / "pe.h").write_text(pe_h)
        (work / "pe.c").write_text(pe_c)
        (work / "main.c").write_text(_main_source(manifest, positions, timed, value_bytes, width))
        (work / "startup.c").write_text(_STARTUP)
        (work / "link.ld").write_text(_LINKER.format(flash=spec.flash_kib, ram=spec.ram_kib))
        _run([cc, *flags, "-fstack-usage", "-c", "pe.c", "-o", "pe.o"], "compiling the header",
             cwd=work)
        # The harness is GNU C (inline asm, a vector table of pointers); the header is checked
        # as strictly as on the host (COMPILE_FLAGS in pe.c).
        _run([cc, "-std=gnu99", *flags[len(COMPILE_FLAGS):], f"-DEDGEPE_FPU={int(spec.fpu)}",
              "-c", "main.c", "startup.c"],
             "compiling the harness", cwd=work)
        _run([cc, *spec.cpu_flags, "-nostartfiles", "-nostdlib", "-T", "link.ld",
              "-Wl,--gc-sections", "-Wl,-Map=prog.map", "startup.o", "main.o", "pe.o",
              "-lm", "-lc", "-lgcc", "-o", "prog.elf"], "linking", cwd=work)
        flash, ram = _map_costs((work / "prog.map").read_text(), "pe.o")
        ram += _stack((work / "pe.su").read_text())
        # Semihosting output goes to a file of its own (QEMU's messages stay on stderr).
        command = [found["qemu-system-arm"], "-M", spec.machine, "-nographic", "-monitor", "none",
                   "-serial", "none", "-chardev", "file,id=out,path=out.txt",
                   "-semihosting-config", "enable=on,target=native,chardev=out",
                   "-icount", "shift=0", "-kernel", "prog.elf"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, cwd=work,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired as error:
            raise ParityError(f"the {board} program did not finish in {timeout_s} s") from error
        out = work / "out.txt"
        text = out.read_text(errors="replace") if out.exists() else ""
    if done.returncode != 0 or "EDGEPE-END" not in text:
        raise ParityError(
            f"the {board} program failed (QEMU exit {done.returncode}): "
            f"{(done.stderr + text).strip()[:300]}"
        )
    lines = text.split("EDGEPE-BEGIN", 1)[1].split("EDGEPE-END", 1)[0].split()
    head = np.frombuffer(bytes.fromhex(lines[0]), dtype="<u4")
    rows = lines[1:]
    if len(rows) != len(positions) or any(len(r) != 2 * width * value_bytes for r in rows):
        raise ParityError(f"the {board} program printed {len(rows)} rows, expected "
                          f"{len(positions)} of {width} values")
    raw = bytes.fromhex("".join(rows))
    stored = {"float32": "<f4", "int16": "<i2", "int8": "i1", "uint8": "u1", "bit": "u1"}[dtype]
    values = np.frombuffer(raw, dtype=stored).astype(stored.lstrip("<"))
    calib, row, none, count = (int(v) for v in head)
    per_tick = 400000 / calib  # the calibration loop ran 2 x 200000 instructions
    instructions = (row - none) * per_tick / count
    return CortexMRun(board, values.reshape(len(positions), width), flash, ram, instructions,
                      (calib, row, none, count))
