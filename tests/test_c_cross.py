"""Cross-compile C headers for a Cortex-M4 and measure their flash cost.

Skipped without ``arm-none-eabi-gcc`` (Debian: ``apt-get install gcc-arm-none-eabi``, ~51 MB
download, ~465 MB installed; CI does not install it). Each header is wrapped in a tiny function
that reads it (so ``-Os`` keeps it), compiled ``-c`` freestanding with the same warnings as the
host check, and measured with ``arm-none-eabi-size``: flash = ``text + data`` of the object
(``const`` arrays land in ``.rodata``, which ``size`` counts as text). Run with ``-s`` to see
the figures; the documented Cortex-M figures come from ``scripts/bench_cortexm.py``, which
links and runs each header on an emulated core (``edgepe.verify.cortex_m``).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from edgepe.export import ExportConfig, export
from edgepe.formats.c import COMPUTE_SCHEMES, FLOAT_COMPUTE_SCHEMES
from edgepe.schemes import resolve
from edgepe.verify.c_runner import COMPILE_FLAGS

ARM_GCC = shutil.which("arm-none-eabi-gcc")
ARM_SIZE = shutil.which("arm-none-eabi-size")
ARM_NM = shutil.which("arm-none-eabi-nm")
pytestmark = pytest.mark.skipif(
    ARM_GCC is None or ARM_SIZE is None or ARM_NM is None,
    reason="arm-none-eabi-gcc is not installed (Debian: apt-get install gcc-arm-none-eabi); "
    "the Cortex-M build and flash figures need it",
)

CORTEX_M4 = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16",
             "-Os", "-ffreestanding")


def cortex_m_object(tmp_path, manifest, header, name) -> int:
    """Compile ``header`` inside a function that reads it; returns flash bytes (text + data)."""
    macro = manifest["macro_prefix"]
    if manifest["mode"] == "compute":
        arity = manifest["positions"]["arity"]
        arg = f"const int64_t pos[{macro}_ARITY]" if arity else "int64_t pos"
        body = f"{manifest['function']}(pos, out);"
        width = f"{macro}_D"
    elif manifest["dtype"] == "bit":
        arg = "uint32_t p"
        width = f"{macro}_COLS"
        body = (f"uint32_t k; for (k = 0; k < {width}; ++k) "
                f"out[k] = (float){manifest['accessor']}(p, k);")
    else:
        arg = "uint32_t p"
        width = f"{macro}_COLS"
        quant = manifest["quant"]
        column = "k" if quant and quant["axis"] is not None else "0"
        scale = f"{manifest['symbol']}_scale[{column}] * " if quant else ""
        body = (f"uint32_t k; for (k = 0; k < {width}; ++k) "
                f"out[k] = {scale}(float){manifest['symbol']}[p][k];")
    src = tmp_path / f"{name}.c"
    src.write_text(
        f'#include "{header}"\nvoid pe_row({arg}, float out[{width}]);\n'
        f"void pe_row({arg}, float out[{width}])\n{{\n    {body}\n}}\n"
    )
    obj = tmp_path / f"{name}.o"
    subprocess.run([ARM_GCC, *COMPILE_FLAGS, *CORTEX_M4, "-c", str(src), "-o", str(obj)],
                   check=True)
    # Self-contained: no libgcc/libc helper (64-bit shifts are inlined), nothing to link.
    undefined = subprocess.run([ARM_NM, "-u", str(obj)], capture_output=True, text=True,
                               check=True).stdout.split()
    assert undefined == [], undefined
    fields = subprocess.run([ARM_SIZE, str(obj)], capture_output=True, text=True,
                            check=True).stdout.splitlines()[1].split()
    return int(fields[0]) + int(fields[1])


def flash(tmp_path, scheme, max_len, mode, **kw) -> tuple[int, dict]:
    cfg = resolve(scheme, max_len, d_model=kw.pop("d_model", None))
    name = f"{scheme}-{mode}-{kw.get('dtype', 'float32')}-{kw.get('quantize', 'none')}"
    result = export(ExportConfig(cfg, mode=mode, format="c", out=tmp_path / f"{name}.h", **kw))
    return cortex_m_object(tmp_path, result.manifest, result.path, name), result.manifest


def test_flash_binary_table_vs_compute(tmp_path, record_property):
    """512 x 64 binary: the float table costs >= 128 KiB, the compute function ~2.5 KiB."""
    table, _ = flash(tmp_path, "binary", 512, "table", d_model=64)
    int8, _ = flash(tmp_path, "binary", 512, "table", d_model=64, quantize="int8")
    compute, manifest = flash(tmp_path, "binary", 512, "compute", d_model=64)
    compute8, _ = flash(tmp_path, "binary", 512, "compute", d_model=64, quantize="int8")
    assert manifest["symbol_shape"] == [10, 64]
    assert table >= 512 * 64 * 4 and int8 >= 512 * 64
    assert 10 * 64 * 4 <= compute < 10 * 64 * 4 + 1024  # the weights plus a small loop
    assert 10 * 64 + 64 * 4 <= compute8 < compute  # int8 weights and 64 float32 scales
    figures = {"binary 512x64 float32 table": table, "binary 512x64 int8 table": int8,
               "binary compute (10x64 float32 weights)": compute,
               "binary compute (10x64 int8 weights + 64 scales)": compute8}
    for what, size in figures.items():
        record_property(what, size)
        print(f"cortex-m4 flash: {what}: {size} bytes")


def test_flash_gray_bit_table_vs_compute(tmp_path, record_property):
    packed, _ = flash(tmp_path, "gray", 512, "table", dtype="bit")
    uint8, _ = flash(tmp_path, "gray", 512, "table", dtype="uint8")
    compute, _ = flash(tmp_path, "gray", 512, "compute")
    assert 640 <= packed < uint8 and uint8 >= 5120 and compute < packed
    figures = {"gray 512x10 bit-packed table": packed, "gray 512x10 uint8 table": uint8,
               "gray compute": compute}
    for what, size in figures.items():
        record_property(what, size)
        print(f"cortex-m4 flash: {what}: {size} bytes")


# The bit family's functions need no library at all; sinusoidal, rope (libm's sinf/cosf) and
# alibi (a bias f(t, u)) are built, linked and run on the emulated M4F in test_cortex_m.py.
@pytest.mark.parametrize("scheme", [s for s in COMPUTE_SCHEMES if s not in FLOAT_COMPUTE_SCHEMES])
def test_every_compute_function_builds_for_cortex_m4(tmp_path, scheme):
    size, _ = flash(tmp_path, scheme, 300, "compute")
    assert size > 0
