"""C headers on an emulated Cortex-M4F (and Cortex-M3): built, run, read back, equal to PyTorch.

Every C-exportable variant (each scheme's table, float32 or lossless uint8/bit; its int8 table
where int8 applies; each compute function, and binary's int8 one) is built by
``edgepe.verify.cortex_m`` for QEMU's ``mps2-an386`` (Cortex-M4F, hard float) and run over every
position ``0 .. L-1`` plus the out-of-range probes; a subset also runs on ``lm3s6965evb``
(Cortex-M3, soft float; every variant under ``-m slow``). Comparisons are those of the host
check (``test_c_header``): exact for tables, bit and int8 values; the scheme's registered
tolerance for float compute functions (``tolerance_why`` in each scheme says why). Skipped
without the toolchain and QEMU (Debian: ``apt-get install gcc-arm-none-eabi
libnewlib-arm-none-eabi qemu-system-arm``; ``.ci/run`` installs them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_c_header import bias_reference, check_int8_projection, probe_positions

from edgepe.contract.errors import PositionError
from edgepe.export import ExportConfig, export
from edgepe.formats.bin import BIT_SCHEMES
from edgepe.formats.c import COMPUTE_SCHEMES
from edgepe.graphs.quant import table_quant
from edgepe.graphs.table_values import full_table
from edgepe.schemes import build, get_spec, resolve, scheme_ids
from edgepe.verify.c_runner import CompileError
from edgepe.verify.cortex_m import INSTALL, run_header, tools

pytestmark = pytest.mark.skipif(
    tools() is None, reason=f"Cortex-M toolchain or QEMU missing: {INSTALL}"
)

# Small tables keep the 40-odd builds cheap; the demo's 512 x 64 runs at full size.
MAX_LEN = {"binary": 512, "binary-2d": 40, "hierarchical": 9, "gray": 512}


def variants() -> dict[str, tuple]:
    """``id -> (scheme, max_len, mode, dtype, quantize)``: every C-exportable variant."""
    out = {}
    for scheme in scheme_ids():
        spec = get_spec(scheme)
        length = MAX_LEN.get(scheme, 48)
        if "table" not in spec.modes:  # mrope: a compute graph only, no C table
            continue
        if scheme in BIT_SCHEMES:  # 0/1 tables: lossless uint8 and bit-packed
            out[f"{scheme}-table-uint8"] = (scheme, length, "table", "uint8", "none")
            out[f"{scheme}-table-bit"] = (scheme, length, "table", "bit", "none")
        else:
            out[f"{scheme}-table-float32"] = (scheme, length, "table", "float32", "none")
        if not spec.exact:  # int8 is refused where every value is exact
            out[f"{scheme}-table-int8"] = (scheme, length, "table", "float32", "int8")
        if scheme in COMPUTE_SCHEMES:
            out[f"{scheme}-compute"] = (scheme, length, "compute", "float32", "none")
    out["binary-compute-int8"] = ("binary", 512, "compute", "float32", "int8")
    return out


VARIANTS = variants()
# Cortex-M3 (no FPU): the table paths of each stored dtype and the int8 paths.
M3 = ["binary-table-float32", "binary-table-int8", "sinusoidal-table-int8", "gray-table-bit",
      "binary-bits-table-uint8", "binary-compute-int8", "binary-compute", "sinusoidal-compute",
      "alibi-compute"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("cortex-m")
    cache = {}

    def get(key):
        if key not in cache:
            scheme, max_len, mode, dtype, quantize = VARIANTS[key]
            cfg = resolve(scheme, max_len)
            config = ExportConfig(cfg, mode=mode, format="c", dtype=dtype, quantize=quantize,
                                  out=root / f"{key}.h")
            result = export(config)
            cache[key] = (result.path, result.manifest, config, build(cfg))
        return cache[key]

    return get


def check_on_board(exported, key, board):
    """Run ``key`` on ``board`` and compare with the reference (module docstring); the run."""
    path, manifest, config, module = exported(key)
    cfg = config.scheme
    if config.mode == "table":
        table = full_table(cfg, module)
        rows = np.arange(-3, table.shape[0] + 3)  # the program clamps, as a table artifact does
        run = run_header(path.read_bytes(), manifest, rows, board)
        expected = table[np.clip(rows, 0, table.shape[0] - 1)]
        if config.quantize == "int8":
            expected = table_quant(config, module).quantize(expected)
        assert run.values.dtype == expected.dtype or config.quantize == "none"
        np.testing.assert_array_equal(run.values, expected.astype(run.values.dtype))
        return run
    limit = manifest["positions"]["limit"]
    if cfg.spec.kind == "bias":  # f(t, u) over (query, key) pairs: alibi, exact
        pairs, ref = bias_reference(module, cfg.max_len, limit)
        run = run_header(path.read_bytes(), manifest, pairs, board)
        np.testing.assert_array_equal(run.values, ref)
        return run
    pos = probe_positions(cfg.max_len)
    if limit is not None:  # the linear part is defined up to 2^24
        inside = (pos >= -limit) & (pos <= limit)
        pos = np.concatenate([pos[inside], [limit, -limit, limit - 1]])
    if cfg.arity is not None:
        pos = np.stack([np.roll(pos, 7 * i) for i in range(cfg.arity)], axis=1)
    run = run_header(path.read_bytes(), manifest, pos, board)
    with torch.no_grad():
        ref = module.encode(torch.as_tensor(pos)).numpy()
    assert run.values.dtype == np.float32 and run.values.shape == ref.shape
    if config.quantize == "int8":
        check_int8_projection(run.values, ref, pos, manifest, path.read_text(), module)
    else:
        rtol, atol = cfg.spec.tolerance
        np.testing.assert_allclose(run.values, ref, rtol=rtol, atol=atol)
    return run


@pytest.mark.parametrize("key", list(VARIANTS))
def test_cortex_m4f_matches_reference(exported, key):
    run = check_on_board(exported, key, "m4f")
    assert run.flash > 0 and run.instructions > 0


@pytest.mark.parametrize("key", M3)
def test_cortex_m3_matches_reference(exported, key):
    check_on_board(exported, key, "m3")


@pytest.mark.slow
@pytest.mark.parametrize("key", [k for k in VARIANTS if k not in M3])
def test_cortex_m3_every_variant(exported, key):
    """The rest of the variants on the Cortex-M3 (soft float): the exhaustive sweep."""
    check_on_board(exported, key, "m3")


def test_demo_costs(exported):
    """The binary demo at L=512, d=64: the int8 compute function needs <= 0.1x the float32
    table's flash (the issue's acceptance); each cost is measured, not assumed."""
    table = check_on_board(exported, "binary-table-float32", "m4f")
    compute8 = check_on_board(exported, "binary-compute-int8", "m4f")
    assert table.flash >= 512 * 64 * 4  # the table itself is in flash
    assert 10 * 64 + 64 * 4 <= compute8.flash <= 0.1 * table.flash  # int8 weights + scales
    # A table row is 64 loads and stores; the compute function sums 10 weight rows.
    assert 64 * 2 <= table.instructions < compute8.instructions
    # Arrays stay in flash: RAM is at most a stack frame, never a copy of the table or weights.
    assert table.ram < 64 and compute8.ram < 64


def test_a_warning_fails_the_cross_build(exported):
    """The header is compiled with the host's strict flags (-Werror) on the Arm compiler too."""
    path, manifest, _, _ = exported("gray-compute")
    broken = path.read_text().replace("const uint64_t g = u ^ (u >> 1);",
                                      "const uint64_t g = u ^ (u >> 1); int unused;")
    with pytest.raises(CompileError, match="unused"):
        run_header(broken.encode(), manifest, np.arange(4))


def test_positions_of_the_wrong_shape(exported):
    path, manifest, _, _ = exported("binary-2d-compute")
    with pytest.raises(PositionError):
        run_header(path.read_bytes(), manifest, np.arange(4))


def test_flash_counts_the_library_code_a_header_pulls_in(exported):
    """sinusoidal's function calls libm's sinf/cosf: the linker map attributes those archive
    members (and what they pull in) to the header, so its flash is the frequencies and the loop
    (~300 bytes) plus newlib's sinf/cosf (~4 KB; 4460 bytes in all measured at d=64)."""
    run = check_on_board(exported, "sinusoidal-compute", "m4f")
    assert 2048 < run.flash < 8192, run.flash
    alibi = check_on_board(exported, "alibi-compute", "m4f")  # one multiply: no library
    assert alibi.flash < 256, alibi.flash


def test_instructions_follow_from_the_board_clock(exported):
    """The calibration constant (2 x 200000 instructions) against an independent derivation:
    QEMU's ``-icount shift=0`` runs one instruction per ns and the mps2-an386's SysTick counts
    its 25 MHz core clock, so one tick is 40 instructions. The calibration loop must read
    400000 / 40 ticks, and the reported instructions must equal (row - empty) x 40 / calls."""
    run = check_on_board(exported, "binary-table-float32", "m4f")
    calib, row, none, count = run.ticks
    assert calib == pytest.approx(400000 / 40, rel=0.01)
    assert run.instructions == pytest.approx((row - none) * 40 / count, rel=0.01)
