"""Golden graphs, byte for byte, and the completeness of the exporter (STYLE 9 c, d).

A golden differing means the bytes edgepe exports changed: if that was deliberate, run
``.venv/bin/python scripts/regen_goldens.py`` and review ``edgepe inspect`` of the new file.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from _export_helpers import BIT_FAMILY, INTEGER_FAMILY, assert_parity, feeds_for, reference

from edgepe.graphs import COMPUTE, builder
from edgepe.graphs._common import read_manifest_prop
from edgepe.schemes import build, get_spec, scheme_ids

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "regen_goldens.py"
_spec = importlib.util.spec_from_file_location("regen_goldens", SCRIPT)
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

# (scheme, mode) pairs whose parity test_export_onnx.py checks over a grid of sizes.
PARITY_CASES = {(s, "compute") for s in BIT_FAMILY + INTEGER_FAMILY} | {
    (s, "table") for s in scheme_ids()
} | {(s, "sliced") for s in ("rope", "sinusoidal", "binary")}  # tests/test_sliced.py


@pytest.mark.parametrize("name", sorted(regen.GOLDENS))
def test_golden_bytes(name):
    path = regen.path(name)
    assert path.is_file(), f"missing golden {path}: run scripts/regen_goldens.py"
    assert regen.golden_bytes(name) == path.read_bytes(), (
        f"{name}: exported bytes differ from the golden; if deliberate, run "
        "scripts/regen_goldens.py"
    )


# Goldens whose graph takes every int64 position and equals ``reference`` there (the tolerance of
# _export_helpers.assert_parity). The others have their parity tested where their domain and
# tolerance are: the int32/float lowerings (exact up to their limits) in tests/test_lowerings.py,
# sliced graphs (positions inside the plan, the plan's bound) in tests/test_sliced.py, rope's
# cache and apply graphs in tests/test_rope.py, int8 (its proven bound) in tests/test_quant.py
# and tests/test_int8_runtime.py.
RUNS_EVERYWHERE = sorted(
    name for name, (*_, options) in regen.GOLDENS.items()
    if options.get("format", "onnx") == "onnx" and options.get("mode") != "sliced"
    and "quantize" not in options and "extra" not in options
    and options.get("lowering", "bitwise") in ("bitwise", "arith"))


@pytest.mark.parametrize("name", RUNS_EVERYWHERE)
def test_golden_runs_and_matches_its_reference(name):
    """A golden is a working artifact: its stored graph equals the reference it names."""
    from _export_helpers import run_ort

    from edgepe import api

    model_bytes = (regen.GOLDEN_DIR / f"{name}.onnx").read_bytes()
    manifest = read_manifest_prop(onnx.load_from_string(model_bytes))
    scheme, max_len, d_model, heads, params, options = regen.GOLDENS[name]
    config = api.make_config(scheme, max_len, d_model=d_model, heads=heads, params=params,
                             **options)
    described = {"scheme": scheme, "max_len": max_len, "mode": config.mode,
                 "dtype": config.dtype, "d_model": config.scheme.d_model,
                 "params": json.loads(json.dumps(config.scheme.as_dict()["params"]))}
    assert {k: manifest[k] for k in described} == described
    module = build(config.scheme, seed=config.seed)
    feeds = feeds_for(config)
    got = run_ort(model_bytes, feeds)
    assert_parity(config, got, reference(config, module, feeds))
    if config.dtype != "float16":  # float16 ends at 65504: larger |pe| is inf, as the reference
        assert np.isfinite(got.astype(np.float32)).all()


C_GOLDENS = sorted(n for n, (*_, o) in regen.GOLDENS.items() if o.get("format") == "c")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc: apt-get install gcc")
@pytest.mark.parametrize("name", C_GOLDENS)
def test_a_c_golden_compiles_warning_free(tmp_path, name):
    """A C golden is a working header: C99, every warning an error (its values are checked
    against the reference in tests/test_c_header.py and tests/test_sliced.py)."""
    from edgepe.verify.c_runner import COMPILE_FLAGS

    source = tmp_path / "main.c"
    source.write_text(f'#include "{regen.path(name)}"\nint main(void) {{ return 0; }}\n')
    done = subprocess.run(["gcc", *COMPILE_FLAGS, "-c", str(source), "-o",
                           str(tmp_path / "main.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_scheme_has_a_builder_and_a_test_for_each_mode():
    goldens = {
        (scheme, options.get("mode", get_spec(scheme).default_mode))
        for scheme, _, _, _, _, options in regen.GOLDENS.values()
    }
    for scheme in scheme_ids():
        spec = get_spec(scheme)
        assert ("compute" in spec.modes) == (scheme in COMPUTE), scheme
        for mode in spec.modes:
            assert callable(builder(scheme, mode)), (scheme, mode)
            assert (scheme, mode) in goldens | PARITY_CASES, f"untested: {scheme} {mode}"


def test_goldens_are_small_and_cover_both_lowerings_and_dtypes():
    sizes = {p.name: p.stat().st_size for p in regen.GOLDEN_DIR.iterdir() if p.is_file()}
    assert set(sizes) == {regen.path(name).name for name in regen.GOLDENS}
    assert max(sizes.values()) < 8192
    options = [o for *_, o in regen.GOLDENS.values()]
    assert any(o.get("lowering") == "arith" for o in options)
    assert any(o.get("dtype") == "uint8" for o in options)


# -- artifacts exported before a change ---------------------------------------------------------
# Whole artifacts (file + manifest) as `edgepe export` wrote them before issue 31 moved the modules
# into layers (one of each kind: the demo's binary graph, an int8 ONNX table, a uint8 npy table, a
# bit-packed bin table, a C header). Never regenerated: a change that keeps the exporter's bytes
# keeps `edgepe verify` rebuilding each of them byte-identical.
ARTIFACTS = Path(__file__).resolve().parent / "goldens" / "artifacts"


@pytest.mark.parametrize("name", sorted(p.name for p in ARTIFACTS.iterdir()
                                        if p.suffix != ".json"))
def test_an_artifact_exported_before_still_rebuilds_byte_identical(tmp_path, name):
    from typer.testing import CliRunner

    from edgepe.cli import app

    for path in (ARTIFACTS / name, ARTIFACTS / f"{name}.json"):  # verify locks the folder
        (tmp_path / path.name).write_bytes(path.read_bytes())
    result = CliRunner().invoke(app, ["verify", str(tmp_path / name)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"parity PASSED for {tmp_path / name}: rebuilt byte-identical; "), last
