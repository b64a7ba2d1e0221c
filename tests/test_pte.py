"""ExecuTorch programs (``--format pte``, issue 22): exported, run on ``executorch.runtime``,
compared with the PyTorch reference; loaded by ``edgepe.load``; verified; inspected.

Runs where the ``[executorch]`` extra is installed (``.ci/run`` installs it); skips elsewhere
with the install line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip(
    "executorch.runtime",
    reason="ExecuTorch is not installed: pip install -c constraints.txt -e '.[executorch]'",
)

from _export_helpers import in_memory  # noqa: E402

import edgepe  # noqa: E402
from edgepe.formats.pte import Program  # noqa: E402
from edgepe.graphs.table_values import table_reference  # noqa: E402
from edgepe.schemes import build, get_spec, resolve, scheme_ids  # noqa: E402
from edgepe.verify.sweep import probe_values  # noqa: E402

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
L = 64
FLOAT_SCHEMES = [s for s in scheme_ids() if not get_spec(s).exact]


def _program(scheme: str, mode: str, max_len: int = L, quantize: str = "none",
             dtype: str = "float32", **kw):
    """``(config, module, data, manifest)`` of a .pte held in memory. Learned weights are
    replaced by seeded normal values, so a program that ignored them could not pass."""
    return in_memory(scheme, max_len, randomise=True, mode=mode, format="pte",
                     quantize=quantize, dtype=dtype, **kw)


def _positions(config, table: bool) -> np.ndarray:
    """Every in-range position, then the probes (negatives, past the end, 2^n, int64 extremes;
    within the scheme's float-exact limit where it has one)."""
    limit = None if table else config.scheme.spec.position_limit
    return np.concatenate([np.arange(config.scheme.max_len, dtype=np.int64),
                           probe_values(config.scheme, limit, 32)])


def _check(config, module, data, manifest, tolerance=None) -> None:
    s = config.scheme
    program = Program(data, manifest)
    table = config.mode == "table"
    rtol, atol = tolerance or (manifest["tolerance"]["rtol"], manifest["tolerance"]["atol"])
    positions = _positions(config, table)
    if s.spec.kind == "bias":
        keys = positions[::3]
        feeds = {"positions": positions, "key_positions": keys}
        args = (torch.from_numpy(positions), torch.from_numpy(keys))
    elif s.arity is not None:
        rng = np.random.default_rng(0)
        positions = np.stack([rng.permutation(positions) for _ in range(s.arity)], axis=1)
        feeds, args = {"positions": positions}, (torch.from_numpy(positions),)
    else:
        feeds, args = {"positions": positions}, (torch.from_numpy(positions),)
    with torch.no_grad():
        expected = (table_reference(s, module, *args) if table else module.encode(*args))
    expected = expected.to(torch.float32).numpy()
    actual = program.run(feeds)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol)


# Table programs share one module (_Table) with three layouts: one scheme of each runs by default
# (pe rows, multi-index rows, bias distances, and learned: table-only), the rest in the slow run.
TABLE_DEFAULT = ("binary", "learned", "binary-2d", "alibi")


def _grid():
    for scheme in scheme_ids():
        # --mode sliced is an ONNX graph or a C header (tests/test_sliced.py: pte refuses it)
        for mode in (m for m in get_spec(scheme).modes if m != "sliced"):
            slow = mode == "table" and scheme not in TABLE_DEFAULT
            yield pytest.param(scheme, mode, id=f"{scheme}-{mode}",
                               marks=pytest.mark.slow if slow else ())


@pytest.mark.parametrize("scheme, mode", _grid())
def test_every_scheme_runs_on_executorch_with_parity(scheme, mode):
    """Every scheme in each of its modes, float32: the program on ExecuTorch's runtime equals the
    reference at every position 0..L-1 and at negative, past-the-end and int64-extreme probes,
    within the scheme's tolerance (exact for the bit family)."""
    config, module, data, manifest = _program(scheme, mode)
    if get_spec(scheme).exact:
        assert manifest["tolerance"] == {"rtol": 0.0, "atol": 0.0}
    _check(config, module, data, manifest)


@pytest.mark.parametrize("scheme", ["binary", "fourier-binary"])
def test_int8_projection_programs_within_the_proven_bound(scheme):
    """int8 weights x int32 bits, int32 accumulation, one rescale: within the manifest's
    proven bound of the float reference at every position, probes (wrapped) included."""
    config, module, data, manifest = _program(scheme, "compute", quantize="int8")
    quant = manifest["quant"]
    assert 0 < quant["max_abs_err"] <= quant["bound"]
    _check(config, module, data, manifest, tolerance=(0.0, quant["bound"]))


@pytest.mark.parametrize("scheme", [
    pytest.param(s, marks=() if s in ("binary", "sinusoidal", "alibi") else pytest.mark.slow)
    for s in FLOAT_SCHEMES if "table" in get_spec(s).modes])  # mrope: compute only
def test_int8_table_programs_within_the_proven_bound(scheme):
    """int8 tables (rows gathered, then q * scale) within the proven half-step bound."""
    config, module, data, manifest = _program(scheme, "table", quantize="int8")
    _check(config, module, data, manifest, tolerance=(0.0, manifest["quant"]["bound"]))


def test_int8_compute_without_weights_is_refused():
    with pytest.raises(edgepe.contract.errors.BadParameterError,
                       match="--mode table --quantize int8"):
        _program("sinusoidal", "compute", quantize="int8")


def test_demo_program_holds_the_weights_plus_at_most_2_5_kb():
    """Issue 22: the demo at L=512, d=64 is its 10 x 64 float32 weights plus <= 2.5 KB (the
    unused pe_binary table is not in it)."""
    _, module, data, manifest = _program("binary", "compute", max_len=512)
    weights = module.projection.weight.numel() * 4
    assert weights == 2560
    assert len(data) <= weights + 2560, len(data)
    assert manifest["pte"]["max_n"] == 512


def test_program_bytes_are_deterministic():
    assert _program("binary", "compute")[2] == _program("binary", "compute")[2]
    assert _program("alibi", "table")[2] == _program("alibi", "table")[2]


def test_programs_divide_elementwise_so_division_is_exact():
    """ExecuTorch divides by a broadcast divisor through its reciprocal (one ulp off); the
    schemes divide by a divisor expanded to the dividend's shape, which it rounds correctly:
    integer-norm's program equals the reference bit for bit at every position it is defined for,
    though it divides, and the manifest keeps the registry's tolerance."""
    config, module, data, manifest = _program("integer-norm", "compute", max_len=1000)
    assert "aten::div.out" in manifest["pte"]["operators"]
    assert manifest["tolerance"] == {"rtol": 0.0, "atol": 0.0}
    positions = np.arange(-(2**20), 2**20, 37, dtype=np.int64)
    actual = Program(data, manifest).run({"positions": positions})
    expected = module.encode(torch.from_numpy(positions)).numpy()
    np.testing.assert_array_equal(actual, expected)


def _export(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgepe", "export", *args],
                          capture_output=True, text=True, cwd=tmp_path, check=False)


def _cli(*args, cwd=None):
    """``edgepe ARGS`` in this process (typer's runner: exit code, stdout and stderr apart).
    A real process costs a torch and ExecuTorch import (~6 s of CPU, 7-16 s on a loaded 2-core
    machine) per command; each command's contract as a process (exit status, one stderr line)
    keeps one real subprocess here: the demo export, ``--lowering arith``, verify of a file that
    is not a program, inspect of one with no execution plan."""
    from typer.testing import CliRunner

    from edgepe.cli import app

    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(map(str, args)))
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def demo_pte(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pte")
    run = _export(folder, "--scheme", "binary", "--max-len", "512", "--format", "pte")
    assert run.returncode == 0, run.stderr
    # Byte-identical to its rebuild; within the demo's 1e-6 (N = 1 calls sum in another order)
    assert "parity PASSED" in run.stdout and "rebuilt byte-identical" in run.stdout
    assert "executorch ok" in run.stdout
    return folder / "models" / "binary-compute-L512-d64.pte"


def test_cli_export_writes_a_pte_and_its_manifest(demo_pte):
    manifest = json.loads(demo_pte.with_name(demo_pte.name + ".json").read_text())
    assert manifest["format"] == "pte" and manifest["lowering"] is None
    assert manifest["pte"]["operators"] == sorted(manifest["pte"]["operators"])
    assert "aten::mm.out" in manifest["pte"]["operators"]


def test_load_encodes_through_executorch_in_pieces(demo_pte):
    """``edgepe.load`` runs the program; calls longer than ``max_n`` are split, and every
    int64 position (negatives and extremes: bits of pos mod 2^10) equals the reference."""
    pe = edgepe.load(demo_pte)
    module = build(resolve("binary", 512))
    positions = np.concatenate([np.arange(-3000, 3000, dtype=np.int64),
                                np.array([INT64_MIN, INT64_MIN + 1, INT64_MAX], np.int64)])
    expected = module.encode(torch.from_numpy(positions)).detach().numpy()
    np.testing.assert_allclose(pe.encode(positions), expected, rtol=1e-6, atol=1e-6)
    assert pe.encode(np.zeros(0, np.int64)).shape == (0, 64)
    x = np.ones((2, 5, 64), np.float32)
    np.testing.assert_allclose(pe.apply(x, offset=100), x + expected[3100:3105], rtol=1e-6)


def test_load_refuses_providers_for_a_program(demo_pte):
    """onnxruntime's providers do not apply to an ExecuTorch program: refused, naming why."""
    with pytest.raises(edgepe.contract.errors.BadParameterError,
                       match="is an ExecuTorch program: it runs on "
                       "ExecuTorch's runtime, providers apply to ONNX artifacts"):
        edgepe.load(demo_pte, providers="cpu")


def test_load_bias_program_in_blocks(tmp_path):
    """A bias program takes [N] x [M] up to max_n each; load() tiles longer calls."""
    run = _cli("export", "--scheme", "alibi", "--max-len", "16", "--format", "pte",
               "--out", "a.pte", cwd=tmp_path)
    assert run.exit_code == 0, run.output
    pe = edgepe.load(tmp_path / "a.pte")
    q = np.arange(-20, 20, dtype=np.int64)
    k = np.arange(0, 37, dtype=np.int64)
    expected = build(resolve("alibi", 16)).encode(torch.from_numpy(q), torch.from_numpy(k))
    np.testing.assert_array_equal(pe.encode(q, k), expected.numpy())


def test_verify_runs_on_executorch_and_catches_a_changed_weight(demo_pte, tmp_path):
    ok = _cli("verify", demo_pte)
    assert ok.exit_code == 0, ok.output
    assert "executorch ok" in ok.stdout and "rebuilt byte-identical" in ok.stdout
    # One weight changed by 0.5 inside the program, and the manifest re-signed.
    data = bytearray(demo_pte.read_bytes())
    weight = build(resolve("binary", 512)).projection.weight.detach().numpy()
    first = np.ascontiguousarray(weight.T).astype("<f4").tobytes()[:4]
    at = bytes(data).find(first)
    assert at > 0
    data[at:at + 4] = (np.frombuffer(first, "<f4") + np.float32(0.5)).astype("<f4").tobytes()
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(data))
    manifest = json.loads(demo_pte.with_name(demo_pte.name + ".json").read_text())
    import hashlib

    manifest["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    bad.with_name("bad.pte.json").write_text(json.dumps(manifest))
    run = _cli("verify", bad)
    assert run.exit_code == 1, (run.stdout, run.stderr)
    assert "executorch FAILED" in run.stdout + run.stderr


def test_verify_refuses_a_file_that_is_not_a_program(demo_pte, tmp_path):
    fake = tmp_path / "fake.pte"
    fake.write_bytes(b"\0" * 64)
    manifest = json.loads(demo_pte.with_name(demo_pte.name + ".json").read_text())
    import hashlib

    manifest["sha256"] = hashlib.sha256(fake.read_bytes()).hexdigest()
    fake.with_name("fake.pte.json").write_text(json.dumps(manifest))
    run = subprocess.run([sys.executable, "-m", "edgepe", "verify", str(fake)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "not an ExecuTorch program" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_inspect_of_a_program_with_no_execution_plan_is_one_line(demo_pte, tmp_path):
    """The ET identifier and a zeroed body parse as a flatbuffer with no execution plan: inspect
    says so in one line, exit 2 (it was an internal error)."""
    fake = tmp_path / "empty.pte"
    fake.write_bytes(b"\x10\0\0\0ET12" + b"\0" * 56)
    fake.with_name("empty.pte.json").write_bytes(
        demo_pte.with_name(demo_pte.name + ".json").read_bytes())
    run = subprocess.run([sys.executable, "-m", "edgepe", "inspect", str(fake)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr == "error: not an ExecuTorch program edgepe can read (no execution plan)\n"


def test_inspect_lists_operators_and_the_kernels_they_need(demo_pte):
    run = _cli("inspect", demo_pte)
    assert run.exit_code == 0, run.output
    for op in ("aten::bitwise_right_shift.Tensor_out", "aten::bitwise_and.Scalar_out",
               "aten::mm.out"):
        assert op in run.stdout
    assert "kernels: portable kernels only" in run.stdout
    assert "constants: 2656 bytes" in run.stdout  # 2560 B of weights + 80 B shifts + 16 B


@pytest.mark.parametrize("args, message", [
    (["--lowering", "arith"], "--lowering arith is for ONNX graphs"),
    (["--dtype", "bit"], "--dtype bit packs table files"),
    (["--quantize", "int8", "--int8-runtime", "live"], "a pte program keeps its int8 tensors"),
    (["--scheme", "sinusoidal", "--quantize", "int8"], "--mode table --quantize int8"),
])
def test_bad_pte_options_exit_2_and_write_nothing(tmp_path, args, message):
    base = {"--scheme": "binary"}
    if "--scheme" in args:
        base = {}
    flat = [x for kv in base.items() for x in kv]
    if args[0] == "--lowering":  # one real process: the exit status and stderr a shell sees
        run = _export(tmp_path, *flat, "--max-len", "64", "--format", "pte", *args)
        assert run.returncode == 2, (run.stdout, run.stderr)
    else:
        run = _cli("export", *flat, "--max-len", "64", "--format", "pte", *args, cwd=tmp_path)
        assert run.exit_code == 2, (run.stdout, run.stderr)
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "models").exists()


def test_without_executorch_pte_names_the_install_line(tmp_path):
    """Where ExecuTorch is not installed, ``--format pte`` is one line with the install
    command (the package is made unimportable in a child process: ``sys.modules`` None)."""
    code = ("import sys; sys.modules['executorch'] = None; from edgepe.cli import main; "
            "sys.argv = ['edgepe', 'export', '--scheme', 'binary', '--max-len', '64', "
            "'--format', 'pte']; main()")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=False)
    assert run.returncode == 2, run.stderr
    assert "pip install -c constraints.txt -e '.[executorch]'" in run.stderr
    assert not (tmp_path / "models").exists()
