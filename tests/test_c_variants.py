"""C headers of one scheme side by side, and the C defaults a user meets (issue 21's C points).

Headers that differ in max_len, width, stored type or mode have distinct include guards and
symbols, so one translation unit can include all of them and read each; a header included twice
is still fine (its guard). Checked with the host's C compiler. Then ``--format c``'s default
mode, the ``--lowering`` refusal and the manifest shape of a compute header.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.export import ExportConfig, export
from edgepe.graphs.quant import table_quant
from edgepe.graphs.table_values import full_table
from edgepe.schemes import build, resolve
from edgepe.verify.c_runner import COMPILE_FLAGS, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler (gcc or $CC) here")


def test_headers_of_one_scheme_include_together(tmp_path):
    """float32 and int8 tables of one sinusoidal, two max_len and two widths: each header's
    guard and symbols are its own, and each array holds its own values."""
    variants = {
        "f32": (resolve("sinusoidal", 16, d_model=8), {}),
        "i8": (resolve("sinusoidal", 16, d_model=8), {"quantize": "int8"}),
        "long": (resolve("sinusoidal", 32, d_model=8), {}),
        "wide": (resolve("sinusoidal", 16, d_model=12), {}),
    }
    results = {
        key: export(ExportConfig(cfg, mode="table", format="c", out=tmp_path / f"{key}.h", **kw))
        for key, (cfg, kw) in variants.items()
    }
    symbols = [r.manifest["symbol"] for r in results.values()]
    assert len(set(symbols)) == len(symbols), symbols
    includes = "".join(f'#include "{r.path}"\n' for r in results.values())
    # Print row 5 of each table, in order, as exact hex floats or integers.
    prints = ""
    for r in results.values():
        cols, fmt, cast = r.manifest["shape"][1], "%a", "(double)"
        if r.manifest["dtype"] == "int8":
            fmt, cast = "%d", "(int)"
        prints += (f"    for (k = 0; k < {cols}; ++k) printf(\"{fmt} \", "
                   f"{cast}{r.manifest['symbol']}[5][k]);\n    printf(\"\\n\");\n")
    src = tmp_path / "all.c"
    src.write_text("#include <stdio.h>\n" + includes + includes  # twice: the guards hold
                   + "int main(void)\n{\n    int k;\n" + prints + "    return 0;\n}\n")
    exe = tmp_path / "all"
    subprocess.run([compiler(), *COMPILE_FLAGS, str(src), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for line, (key, (cfg, kw)) in zip(lines, variants.items(), strict=True):
        module = build(cfg)
        expected = full_table(cfg, module)[5]
        if kw:
            config = ExportConfig(cfg, mode="table", format="c", **kw)
            expected = table_quant(config, module).quantize(expected)
            got = np.array(line.split(), dtype=np.int8)
        else:
            got = np.array([float.fromhex(t) for t in line.split()], dtype=np.float32)
        np.testing.assert_array_equal(got, expected, err_msg=key)


def test_compute_and_table_of_one_variant_include_together(tmp_path):
    """binary's compute function (float and int8 weights) and its table in one unit."""
    cfg = resolve("binary", 64, d_model=4)
    paths = [
        export(ExportConfig(cfg, mode=mode, format="c", quantize=q, out=tmp_path / f"{i}.h"))
        for i, (mode, q) in enumerate([("compute", "none"), ("compute", "int8"),
                                       ("table", "none")])
    ]
    src = tmp_path / "both.c"
    src.write_text("".join(f'#include "{p.path}"\n' for p in paths)
                   + f"int main(void)\n{{\n    float a[4], b[4];\n"
                   f"    {paths[0].manifest['function']}(5, a);\n"
                   f"    {paths[1].manifest['function']}(5, b);\n"
                   f"    return a[0] == {paths[2].manifest['symbol']}[5][0] ? 0 : 1;\n}}\n")
    subprocess.run([compiler(), *COMPILE_FLAGS, str(src), "-o", str(tmp_path / "both")],
                   check=True)
    assert subprocess.run([str(tmp_path / "both")]).returncode == 0
    assert paths[0].manifest["function"] != paths[1].manifest["function"]
    guards = {p.path.read_text().split("#ifndef ")[1].split()[0] for p in paths}
    assert len(guards) == 3, guards


@pytest.mark.parametrize(
    "scheme, mode",
    [("gray", "compute"), ("sinusoidal", "compute"), ("alibi", "compute"),
     ("learned", "table"), ("gaussian", "table"), ("integer-norm", "table")],
)
def test_format_c_defaults_to_compute_where_a_function_exists(tmp_path, scheme, mode):
    """``--format c`` with no ``--mode``: the C function where there is one, else the table
    (as npy/bin default to their table), never a refusal; the export verifies (exit 0)."""
    out = tmp_path / "pe.h"
    result = CliRunner().invoke(app, ["export", "--scheme", scheme, "--max-len", "32",
                                      "--format", "c", "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifest = json.loads(Path(f"{out}.json").read_text())
    assert manifest["mode"] == mode
    assert "parity PASSED" in result.stdout


@pytest.mark.parametrize("mode", [[], ["--mode", "table"]])
def test_lowering_is_refused_for_c(tmp_path, mode):
    """``--lowering`` picks an ONNX graph's integer ops: for a C header (function or table) it
    is refused (exit 2, one line, nothing written) rather than silently ignored."""
    out = tmp_path / "g.h"
    result = CliRunner().invoke(app, ["export", "--scheme", "gray", "--max-len", "32",
                                      "--format", "c", "--lowering", "arith", *mode,
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "--lowering arith" in result.output and "drop --lowering" in result.output
    assert not out.exists()


@pytest.mark.parametrize("scheme, shape", [("binary", ["N", 64]), ("sinusoidal", ["N", 64]),
                                           ("alibi", [8, "N", "M"])])
def test_compute_header_manifest_shape_is_the_graphs(tmp_path, scheme, shape):
    """A C compute header's manifest ``shape`` is the ONNX compute graph's output shape: a
    function evaluates any number of positions, not ``max_len`` rows."""
    cfg = resolve(scheme, 512)
    c = export(ExportConfig(cfg, mode="compute", format="c", out=tmp_path / "f.h"))
    graph = export(ExportConfig(cfg, mode="compute", format="onnx", out=tmp_path / "f.onnx"))
    assert c.manifest["shape"] == graph.manifest["shape"] == shape
