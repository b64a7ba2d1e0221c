"""Run a C header (``--format c``) through a real C compiler and read back what it computes.

``run_c_header(header, manifest, positions)`` writes a small C99 program that includes the
header, reads the positions from a file (raw int64, little-endian), and prints, one line per
position, what the header gives there: the compute function's ``out[D]`` (``--mode compute``) or
the table row (``--mode table``; the program clamps the index to ``[0, rows - 1]`` as firmware
would, and reads bit-packed tables through their accessor). Floats are printed with ``%a``
(hexadecimal: exact), integers with ``%d``; the values come back as a NumPy array, bit for bit.

The program is compiled with ``COMPILE_FLAGS`` (``-std=c99 -Wall -Wextra -Werror -pedantic``) plus
one variant from ``flag_variants()`` (``-O0``, ``-O2``, ``-funsigned-char``, and ``-m32`` where
this machine can build and run 32-bit programs), so a warning in a header fails the check.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.errors import EdgepeError, ParityError, PositionError

# Modes whose header holds a function of the position (``--mode sliced``: small tables and a
# function that combines them); the others hold the table itself.
FUNCTION_MODES = ("compute", "sliced")
COMPILE_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")
# What the program prints, per stored dtype: (printf conversion, parse, numpy result dtype).
_PRINT = {
    "float32": ("%a", "(double)", np.float32),
    "int8": ("%d", "(int)", np.int8),
    "uint8": ("%d", "(int)", np.uint8),
    "bit": ("%d", "(int)", np.uint8),
}


class CompilerNotFound(EdgepeError):
    """No C compiler on this machine (``$CC`` or ``gcc``): C artifacts cannot be checked here."""


class CompileError(ParityError):
    """The header (or the program around it) did not compile with the given flags."""


def compiler() -> str | None:
    """The C compiler to use: ``$CC`` or ``gcc``, if it is on ``PATH``."""
    return shutil.which(os.environ.get("CC", "gcc"))


@functools.cache
def flag_variants() -> dict[str, tuple[str, ...]]:
    """Named flag sets (added to ``COMPILE_FLAGS``) that work on this machine.

    ``m32`` is included only when a 32-bit program builds and runs here (``gcc-multilib``).
    """
    variants = {
        "O0": ("-O0",),
        "O2": ("-O2",),
        "O2-unsigned-char": ("-O2", "-funsigned-char"),
        "Os-signed-char": ("-Os", "-fsigned-char"),
    }
    cc = compiler()
    if cc is not None:
        with tempfile.TemporaryDirectory(prefix="edgepe-m32-") as tmp:
            src = Path(tmp, "probe.c")
            src.write_text("int main(void) { return sizeof(void *) == 4 ? 0 : 1; }\n")
            exe = Path(tmp, "probe")
            built = subprocess.run(
                [cc, "-m32", str(src), "-o", str(exe)], capture_output=True
            ).returncode == 0
            if built and subprocess.run([str(exe)], capture_output=True).returncode == 0:
                variants["m32"] = ("-m32", "-O2")
    return variants


def record_arity(manifest: Mapping[str, Any]) -> int | None:
    """``k`` when the header's function takes ``const int64_t pos[k]`` (2 for a bias function
    ``f(t, u, out)``: a record is a (query, key) pair); tables take one index."""
    if manifest["mode"] not in FUNCTION_MODES:
        return None
    if manifest.get("kind") == "bias":
        return 2
    return (manifest.get("positions") or {}).get("arity")


def out_width(manifest: Mapping[str, Any]) -> int:
    """Values the header gives a record: a table's columns, a compute function's ``out[]``
    (``d_model``; ``heads`` for a bias function)."""
    if manifest["mode"] not in FUNCTION_MODES:
        return manifest["shape"][1]
    return manifest["heads"] if manifest.get("kind") == "bias" else manifest["d_model"]


def call(manifest: Mapping[str, Any], pos: str = "pos") -> str:
    """The C call of a compute header's function on record ``pos`` (an ``int64_t`` array)."""
    arity = record_arity(manifest)
    if manifest.get("kind") == "bias":
        args = f"{pos}[0], {pos}[1]"
    else:
        args = pos if arity else f"{pos}[0]"
    return f"{manifest['function']}({args}, out);"


def c_program(include: str, manifest: Mapping[str, Any]) -> str:
    """The C99 source of the program that prints the header's values (module docstring);
    ``include`` is the name it ``#include``s (a plain file name: no quotes or backslashes)."""
    mode = manifest["mode"]
    macro = manifest["macro_prefix"]
    if mode in FUNCTION_MODES:
        fmt, cast, _ = _PRINT["float32"]
        k = record_arity(manifest) or 1
        width = out_width(manifest)
        body = (
            f"        float out[{width}];\n        {call(manifest)}\n"
            f"        for (j = 0; j < {width}; ++j) printf(j ? \" {fmt}\" : \"{fmt}\", "
            f"{cast}out[j]);\n"
        )
    else:
        dtype = manifest["dtype"]
        fmt, cast, _ = _PRINT[dtype]
        k = 1
        symbol = manifest["symbol"]
        value = (
            f"{manifest['accessor']}((uint32_t)p, (uint32_t)j)"
            if dtype == "bit"
            else f"{symbol}[p][j]"
        )
        body = (
            f"        const int64_t p = pos[0] < 0 ? 0 : pos[0] > {macro}_ROWS - 1 ? "
            f"{macro}_ROWS - 1 : pos[0];\n"
            f"        for (j = 0; j < {macro}_COLS; ++j) printf(j ? \" {fmt}\" : \"{fmt}\", "
            f"{cast}{value});\n"
        )
    return (
        "#include <stdint.h>\n#include <stdio.h>\n"
        f'#include "{include}"\n\n'
        "/* Reads int64 positions (little-endian, "
        f"{k} a record) from argv[1]; prints one line each. */\n"
        "int main(int argc, char **argv)\n{\n"
        f"    int64_t pos[{k}];\n    unsigned j;\n    FILE *f;\n"
        "    if (argc != 2 || (f = fopen(argv[1], \"rb\")) == NULL) return 2;\n"
        f"    while (fread(pos, sizeof pos[0], {k}, f) == {k}) {{\n"
        f"{body}"
        "        putchar('\\n');\n    }\n    fclose(f);\n    return 0;\n}\n"
    )


def compile_program(
    header: str | Path,
    manifest: Mapping[str, Any],
    workdir: str | Path,
    flags: Sequence[str] = ("-O2",),
) -> Path:
    """Compile the printing program for ``header`` in ``workdir``; returns the executable.

    ``flags`` are added to ``COMPILE_FLAGS``. Raises ``CompilerNotFound`` or ``CompileError``
    (whose message is the compiler's first error line).
    """
    cc = compiler()
    if cc is None:
        raise CompilerNotFound(
            f"no C compiler found ({os.environ.get('CC', 'gcc')!r}): install gcc or set CC"
        )
    workdir = Path(workdir)
    src = workdir / "edgepe_print.c"
    exe = workdir / "edgepe_print"
    # The header is reached through a link with a plain name, so no path needs C escaping.
    link = workdir / "edgepe_header.h"
    link.unlink(missing_ok=True)
    link.symlink_to(Path(header).resolve())
    src.write_text(c_program(link.name, manifest))
    command = [cc, *COMPILE_FLAGS, *flags, str(src), "-o", str(exe), "-lm"]  # sinf, cosf
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        error = CompileError(f"{Path(header).name} does not compile with {' '.join(flags)}: "
                             f"{first_error_line(done.stderr, done.returncode)}")
        error.stderr = done.stderr
        raise error
    return exe


def first_error_line(stderr: str, returncode: int) -> str:
    """The one line of a failed gcc/ld run that says what failed: the first of gcc's
    ``FILE:LINE:COL: error: ...`` (a folder named "error..." does not make a line one), else ld's
    own first line (``multiple definition of``, ``will not fit in region``), skipping collect2's
    summary and ld's ``in function`` context line unless nothing else was said, else the exit
    status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    told = [line for line in lines
            if not line.startswith("collect2:") and ": in function `" not in line] or lines
    return next((line for line in told if ": error: " in line),
                told[0] if told else f"exit status {returncode}")


def run_program(exe: str | Path, manifest: Mapping[str, Any], positions) -> np.ndarray:
    """Run a program from ``compile_program`` on ``positions``; the printed values as NumPy.

    Compute headers: ``positions`` int64 ``[N]`` (``[N, k]`` for multi-index schemes, ``[N, 2]``
    (query, key) pairs for a bias function) -> float32 ``[N, D]`` (``[N, H]`` for bias).
    Tables: ``positions`` are row indices ``[N]`` (clamped by the program) -> ``[N, cols]`` in
    the stored dtype (float32, uint8, int8; bit-packed entries as uint8 0/1).
    """
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu":
        raise PositionError(f"positions must be integers, got dtype {positions.dtype}")
    arity = record_arity(manifest)
    if positions.ndim != (1 if arity is None else 2) or (arity and positions.shape[1] != arity):
        shape = "[N]" if arity is None else f"[N, {arity}]"
        raise PositionError(
            f"this C header takes positions {shape} (table rows are one index each), "
            f"got shape {list(positions.shape)}"
        )
    positions = np.ascontiguousarray(positions, dtype="<i8")
    dtype = "float32" if manifest["mode"] in FUNCTION_MODES else manifest["dtype"]
    cols = out_width(manifest)
    with tempfile.TemporaryDirectory(prefix="edgepe-c-") as tmp:
        data = Path(tmp, "positions.bin")
        data.write_bytes(positions.tobytes())
        done = subprocess.run([str(exe), str(data)], capture_output=True, text=True)
    if done.returncode != 0:
        raise ParityError(f"{Path(exe).name} exited with {done.returncode}: {done.stderr.strip()}")
    tokens = done.stdout.split()
    n = positions.shape[0]
    if len(tokens) != n * cols:
        raise ParityError(f"the C program printed {len(tokens)} values, expected {n} x {cols}")
    if dtype == "float32":
        # %a prints the exact binary value; float.fromhex reads it back exactly.
        values = np.array([float.fromhex(t) for t in tokens], dtype=np.float64)
    else:
        values = np.array(tokens, dtype=np.int64)
    return values.astype(_PRINT[dtype][2]).reshape(n, cols)


def run_c_header(
    header: str | Path,
    manifest: Mapping[str, Any],
    positions,
    flags: Sequence[str] = ("-O2",),
) -> np.ndarray:
    """Compile a program around ``header`` with ``COMPILE_FLAGS + flags``, run it on
    ``positions`` and return what it printed (see ``run_program`` for shapes and dtypes).

    ``manifest`` is the header's manifest (``edgepe.contract.manifest.read``).
    """
    with tempfile.TemporaryDirectory(prefix="edgepe-c-") as tmp:
        exe = compile_program(header, manifest, tmp, flags)
        return run_program(exe, manifest, positions)
