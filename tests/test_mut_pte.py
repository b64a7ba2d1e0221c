"""``edgepe.formats.pte`` piece by piece, fast (issue 33): the option checks with their exact
lines, the limits at their edges, the program modules against NumPy references, ``Program``'s
splitting of long calls, and the readers of a program's bytes.

Expected values come from outside the code under test: NumPy gathers and shifts, the scheme's own
``encode``, sizes counted from shapes. Programs are small (L <= 64) so each lowers in well under a
second once ExecuTorch is imported; ``tests/test_pte.py`` holds the per-scheme parity sweep.
"""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest
import torch

pytest.importorskip(
    "executorch.runtime",
    reason="ExecuTorch is not installed: pip install -c constraints.txt -e '.[executorch]'",
)

from _export_helpers import in_memory  # noqa: E402

from edgepe.contract.config import ExportConfig  # noqa: E402
from edgepe.contract.errors import ArtifactError, BadParameterError  # noqa: E402
from edgepe.formats import pte  # noqa: E402
from edgepe.graphs.table_values import full_table  # noqa: E402
from edgepe.schemes import build, resolve  # noqa: E402

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _config(scheme="binary", max_len=64, **options) -> ExportConfig:
    s = resolve(scheme, max_len)
    return ExportConfig(s, mode=options.pop("mode", s.spec.default_mode), format="pte", **options)


@pytest.fixture(scope="module")
def demo():
    """``(config, module, data, manifest)`` of the demo's compute program at L = 8."""
    return in_memory("binary", 8, randomise=True, mode="compute", format="pte")


@pytest.fixture(scope="module")
def alibi_table():
    return in_memory("alibi", 8, randomise=True, mode="table", format="pte")


# --- option checks: each refusal names the option and what works instead ---------------------

@pytest.mark.parametrize("options, message", [
    ({"lowering": "arith"}, "--lowering arith is for ONNX graphs; a pte program shifts and masks "
     "with ExecuTorch's portable bitwise kernels"),
    ({"int8_runtime": "live"}, "--int8-runtime live chooses how an ONNX graph holds int8; a pte "
     "program keeps its int8 tensors int8 and dequantises per call"),
    ({"dtype": "bit", "mode": "table"},
     "--dtype bit packs table files: use --format npy, bin or c"),
    ({"extra": {"opt": 1, "b": "x"}}, "opt=1, b=x applies to ONNX graphs, not to --format pte"),
    ({"mode": "sliced"}, "--mode sliced is an ONNX graph or a C header (--format onnx or c); an "
     "ExecuTorch program is --mode compute or table"),
])
def test_options_a_program_cannot_take_are_refused_with_their_line(options, message):
    with pytest.raises(BadParameterError) as err:
        pte.check_options(_config(**options))
    assert str(err.value) == message


def test_uint8_needs_a_bit_output_scheme():
    pte.check_options(_config("gray", dtype="uint8"))  # {0, 1}: fine
    with pytest.raises(BadParameterError) as err:
        pte.check_options(_config("sinusoidal", dtype="uint8"))
    assert str(err.value) == ("--dtype uint8 needs outputs that are exactly 0 or 1; scheme "
                              "'sinusoidal' has other values")


def test_int8_compute_is_for_the_projection_schemes_only():
    for scheme in pte.PROJECTIONS:
        pte.check_options(_config(scheme, quantize="int8"))
    with pytest.raises(BadParameterError) as err:
        pte.check_options(_config("sinusoidal", mode="compute", quantize="int8"))
    assert str(err.value) == (
        "scheme 'sinusoidal' stores no weights to quantise in a compute program; for a small int8 "
        "program use --mode table --quantize int8 (int8 compute programs: binary, fourier-binary)")
    pte.check_options(_config("sinusoidal", mode="table", quantize="int8"))
    with pytest.raises(BadParameterError, match="is exact"):  # quant's own check runs first
        pte.check_options(_config("binary-signed", mode="table", quantize="int8"))


def test_table_programs_are_held_to_the_table_cap_of_their_stored_dtype():
    """sinusoidal L=64, d=64: 4096 values, 16384 bytes as float32 and 4096 as int8. A cap of
    4096 takes the int8 table and refuses the float32 one; 4095 refuses both."""
    s = resolve("sinusoidal", 64)
    assert s.d_model == 64
    pte.check_options(_config("sinusoidal", mode="table", quantize="int8", max_table_bytes=4096))
    with pytest.raises(BadParameterError, match="is 4096 bytes, over the cap of 4095"):
        pte.check_options(_config("sinusoidal", mode="table", quantize="int8",
                                  max_table_bytes=4095))
    with pytest.raises(BadParameterError, match="is 16384 bytes, over the cap of 16383"):
        pte.check_options(_config("sinusoidal", mode="table", max_table_bytes=16383))
    pte.check_options(_config("sinusoidal", mode="table", max_table_bytes=16384))
    # a compute program stores no table: no cap
    pte.check_options(_config("sinusoidal", mode="compute", max_table_bytes=1))


@pytest.mark.parametrize("scheme, max_len, expected", [
    ("binary", 1, 2), ("binary", 2, 2), ("binary", 3, 3), ("binary", 4095, 4095),
    ("binary", 4096, 4096), ("binary", 4097, 4096), ("alibi", 511, 511), ("alibi", 512, 512),
    ("alibi", 513, 512), ("alibi", 1, 2),
])
def test_max_n_is_the_length_within_the_program_limits(scheme, max_len, expected):
    assert pte.max_n(_config(scheme, max_len)) == expected


def test_output_shape_names_the_dynamic_axes():
    assert pte.output_shape(_config("binary", 8)) == ["N", resolve("binary", 8).d_model]
    alibi = resolve("alibi", 8)
    assert pte.output_shape(_config("alibi", 8)) == [alibi.heads, "N", "M"]


# --- the modules a program runs, against NumPy -------------------------------------------------

def _probe(length: int) -> np.ndarray:
    return np.array([INT64_MIN, -(2**40), -3, -1, 0, 1, length - 2, length - 1, length,
                     length + 5, 2**33, INT64_MAX], dtype=np.int64)


def test_table_rows_are_gathered_at_clamped_positions_in_the_output_dtype():
    rng = np.random.default_rng(0)
    s = resolve("sinusoidal", 8)
    table = rng.normal(size=(8, s.d_model)).astype(np.float32)
    positions = _probe(8)
    expected = table[np.clip(positions, 0, 7)]
    module = pte._Table(s, table, None, torch.float16)
    assert module.scale is None and module.kind == "pe"
    out = module(torch.from_numpy(positions))
    assert out.dtype == torch.float16
    np.testing.assert_array_equal(out.numpy(), expected.astype(np.float16))


def test_int8_table_rows_are_dequantised_per_column():
    rng = np.random.default_rng(1)
    s = resolve("sinusoidal", 8)
    q = rng.integers(-127, 128, size=(8, s.d_model)).astype(np.int8)
    scale = rng.uniform(0.001, 0.1, size=s.d_model).astype(np.float32)
    positions = _probe(8)
    out = pte._Table(s, q, scale, torch.float32)(torch.from_numpy(positions))
    expected = q[np.clip(positions, 0, 7)].astype(np.float32) * scale
    np.testing.assert_array_equal(out.numpy(), expected)


def test_bias_rows_are_read_by_the_clamped_distance_of_saturated_positions():
    """Row ``clamp(t - u, -(L-1), L-1) + L - 1``, computed with Python integers (no overflow),
    laid out ``[H, N, M]``; int64's extremes saturate rather than wrap."""
    rng = np.random.default_rng(2)
    s = resolve("alibi", 8)
    table = rng.normal(size=(15, s.heads)).astype(np.float32)
    t, u = _probe(8), _probe(8)[::-1][:7].copy()
    rows = np.array([[min(max(int(a) - int(b), -7), 7) + 7 for b in u] for a in t])
    out = pte._Table(s, table, None, torch.float32)(torch.from_numpy(t), torch.from_numpy(u))
    assert out.shape == (s.heads, len(t), len(u))
    np.testing.assert_array_equal(out.numpy(), table[rows].transpose(2, 0, 1))
    # t = INT64_MIN, u = INT64_MAX: the far negative end; t = INT64_MAX, u = 2^33: the far end
    assert (u[0], u[1]) == (INT64_MAX, 2**33) and rows[0, 0] == 0 and rows[-1, 1] == 14


@pytest.mark.parametrize("scheme, params, seed", [
    ("binary-2d", None, 3),
    # widths 3,2,1: columns read bits of the coordinate their width block belongs to (the
    # manifest's params say which)
    ("hierarchical", {"widths": "3,2,1"}, 5),
])
def test_multi_index_rows_equal_the_scheme_at_clamped_coordinates(scheme, params, seed):
    s = resolve(scheme, 8, params=params)
    module = build(s)
    program = pte._Table(s, full_table(s, module), None, torch.float32)
    rng = np.random.default_rng(seed)
    positions = np.stack([rng.permutation(_probe(8)) for _ in range(s.arity)], axis=1)
    with torch.no_grad():
        expected = module.encode(torch.from_numpy(np.clip(positions, 0, 7))).to(torch.float32)
    np.testing.assert_array_equal(program(torch.from_numpy(positions)).numpy(), expected.numpy())


def test_int8_projection_is_bits_times_int8_weights_then_one_rescale():
    rng = np.random.default_rng(4)
    n, d = 6, 5
    q = rng.integers(-127, 128, size=(n, d)).astype(np.int8)
    scale = rng.uniform(0.001, 0.1, size=d).astype(np.float32)
    module = pte._Int8Projection(np.arange(n, dtype=np.int64), q, scale)
    positions = np.array([-1, 0, 1, 5, 37, 63, 64, -64, 2**40 + 3], dtype=np.int64)
    bits = (positions[:, None] >> np.arange(n)) & 1
    expected = (bits @ q.astype(np.int64)).astype(np.float32) * scale
    out = module(torch.from_numpy(positions))
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), expected)


def test_projection_quant_keeps_float32_scales_and_drops_the_graph_only_fields():
    config = _config("binary", 64, quantize="int8")
    s = config.scheme
    manifest = {}
    shifts, q, scale = pte._projection_quant(config, build(s), manifest)
    np.testing.assert_array_equal(shifts, np.arange(s.n_bits))
    assert q.dtype == np.int8 and q.shape == (s.n_bits, s.d_model) and q.flags.c_contiguous
    assert scale.dtype == np.float32 and scale.shape == (s.d_model,)
    quant = manifest["quant"]
    assert not {"tensor", "scale_tensor", "scale_storage"} & set(quant)
    assert quant["bytes"]["int8"] == s.n_bits * s.d_model + 4 * s.d_model


# --- prepared programs --------------------------------------------------------------------------

def test_manifest_records_the_program(demo):
    config, _, data, manifest = demo
    assert manifest["lowering"] is None
    section = manifest["pte"]
    from importlib.metadata import version

    assert section["executorch"] == version("executorch")
    assert section["max_n"] == 8 and section["method"] == "forward"
    assert section["inputs"] == ["positions"]
    described = pte.describe_program(data)["methods"][0]["operators"]
    assert section["operators"] == sorted({op for op, _, _ in described})
    assert manifest["shape"] == ["N", config.scheme.d_model]
    _, _, _, bias = in_memory("alibi", 8, mode="compute", format="pte")
    assert bias["pte"]["inputs"] == ["positions", "key_positions"]


def test_the_demo_program_drops_its_unused_table(demo):
    """The demo module holds ``pe_binary`` [L, d] beside its n x d weights; the program keeps the
    weights only (its constants are smaller than weights + table)."""
    config, module, data, _ = demo
    weights = module.projection.weight.numel() * 4
    table = module.pe_binary.numel() * module.pe_binary.element_size()
    constants = pte.describe_program(data)["constant_bytes"]
    assert weights <= constants < weights + table


def test_int8_weights_stay_int8_in_the_program():
    """Casts are not constant-folded: fourier-binary's int8 weights are n x d bytes in the
    program, not 4 n x d (int32)."""
    config, module, data, manifest = in_memory("fourier-binary", 64, mode="compute",
                                               format="pte", quantize="int8")
    q = config.scheme.n_bits * config.scheme.d_model
    assert q < pte.describe_program(data)["constant_bytes"] < 4 * q
    assert manifest["quant"]["bytes"]["int8"] == q + 4 * config.scheme.d_model


def test_program_output_dtypes_follow_dtype():
    for dtype, expected in (("float16", np.float16), ("uint8", np.uint8)):
        _, module, data, manifest = in_memory("gray", 8, mode="compute", format="pte",
                                              dtype=dtype)
        out = pte.Program(data, manifest).run({"positions": np.arange(-3, 12, dtype=np.int64)})
        assert out.dtype == expected
        with torch.no_grad():
            reference = module.encode(torch.arange(-3, 12)).numpy()
        np.testing.assert_array_equal(out, reference.astype(expected))


def test_int8_table_program_records_its_quantisation():
    config, module, data, manifest = in_memory("sinusoidal", 8, mode="table", format="pte",
                                               quantize="int8")
    assert manifest["quant"]["tensor"] == "table_int8"
    out = pte.Program(data, manifest).run({"positions": np.arange(-2, 10, dtype=np.int64)})
    assert out.dtype == np.float32 and out.shape == (12, 64)
    with torch.no_grad():
        reference = module.encode(torch.from_numpy(np.clip(np.arange(-2, 10), 0, 7))).numpy()
    error = np.abs(out.astype(np.float64) - reference).max()
    assert 0 < error <= manifest["quant"]["bound"] < 0.004  # half a step of 1/127


def test_a_program_takes_one_to_max_n_positions_in_a_call(demo):
    """The dynamic axis is 1 .. max_n: both ends run, one past the end is refused by the runtime
    (``Program.run`` splits longer calls)."""
    _, module, data, manifest = demo
    program = pte.Program(data, manifest)
    with torch.no_grad():
        reference = module.encode(torch.arange(9)).numpy()
    np.testing.assert_array_equal(program._call(np.array([3], dtype=np.int64)), reference[3:4])
    np.testing.assert_array_equal(program._call(np.arange(8, dtype=np.int64)), reference[:8])
    with pytest.raises(Exception):  # noqa: B017 - the runtime's untyped error
        program._call(np.arange(9, dtype=np.int64))


# --- Program: loading, limits, splitting ------------------------------------------------------

@pytest.mark.parametrize("limit", [1, 8, pte.MAX_N])
def test_max_n_from_1_to_the_limit_is_taken(demo, limit):
    _, _, data, manifest = demo
    program = pte.Program(data, {**manifest, "pte": {**manifest["pte"], "max_n": limit}})
    assert program.max_n == limit


@pytest.mark.parametrize("limit", [0, -1, pte.MAX_N + 1, True, 8.0, "8", None])
def test_max_n_outside_1_to_the_limit_is_refused(demo, limit):
    _, _, data, manifest = demo
    with pytest.raises(BadParameterError) as err:
        pte.Program(data, {**manifest, "pte": {**manifest["pte"], "max_n": limit}})
    assert str(err.value) == f"the manifest's pte.max_n must be 1 to {pte.MAX_N}, got {limit!r}"


def test_a_manifest_without_a_pte_section_is_refused(demo):
    _, _, data, manifest = demo
    for section in (None, [8], "x"):
        with pytest.raises(BadParameterError, match="got None"):
            pte.Program(data, {**manifest, "pte": section})


def test_bytes_that_do_not_load_are_an_artifact_error(demo):
    _, _, data, manifest = demo
    with pytest.raises(ArtifactError) as err:
        pte.Program(data[:len(data) // 2], manifest)
    assert str(err.value).startswith("the .pte does not load in ExecuTorch: ")
    assert "\n" not in str(err.value)


def test_long_calls_are_split_into_pieces_of_max_n(demo):
    _, module, data, manifest = demo
    positions = np.arange(-5, 20, dtype=np.int64)
    with torch.no_grad():
        reference = module.encode(torch.from_numpy(positions)).numpy()
    for limit in (1, 3, 8):
        program = pte.Program(data, {**manifest, "pte": {**manifest["pte"], "max_n": limit}})
        np.testing.assert_array_equal(program.run({"positions": positions}), reference)


def test_bias_calls_are_split_into_blocks_of_queries_by_keys(alibi_table):
    config, module, data, manifest = alibi_table
    program = pte.Program(data, {**manifest, "pte": {**manifest["pte"], "max_n": 3}})
    t = np.arange(-2, 9, dtype=np.int64)
    u = np.array([0, 7, 3, -4, 12], dtype=np.int64)
    table = full_table(config.scheme, module)
    rows = np.clip(t[:, None] - u[None, :], -7, 7) + 7
    out = program.run({"positions": t, "key_positions": u})
    np.testing.assert_array_equal(out, table[rows].transpose(2, 0, 1))


def test_empty_calls_return_empty_outputs_of_the_right_shape(demo, alibi_table):
    _, _, data, manifest = demo
    out = pte.Program(data, manifest).run({"positions": np.zeros(0, np.int64)})
    assert out.shape == (0, manifest["d_model"]) and out.dtype == np.float32
    _, _, data, manifest = in_memory("binary-2d", 8, mode="compute", format="pte")
    out = pte.Program(data, manifest).run({"positions": np.zeros((0, 2), np.int64)})
    assert out.shape == (0, manifest["d_model"])
    _, _, data, manifest = alibi_table
    program = pte.Program(data, manifest)
    heads = manifest["heads"]
    out = program.run({"positions": np.arange(3, dtype=np.int64)})  # no keys
    assert out.shape == (heads, 3, 0) and out.dtype == np.float32
    out = program.run({"positions": np.zeros(0, np.int64), "key_positions": np.arange(2)})
    assert out.shape == (heads, 0, 2)


def test_positions_of_any_integer_dtype_are_fed_as_int64(alibi_table, demo):
    _, module, data, manifest = demo
    with torch.no_grad():
        reference = module.encode(torch.arange(-2, 6)).numpy()
    program = pte.Program(data, manifest)
    for dtype in (np.int32, np.int16):
        positions = np.arange(-2, 6).astype(dtype)
        np.testing.assert_array_equal(program.run({"positions": positions}), reference)
    positions = np.arange(6, dtype=np.uint8)
    np.testing.assert_array_equal(program.run({"positions": positions}), reference[2:])
    config, module, data, manifest = alibi_table
    t, u = np.array([0, 3, 9], np.int32), np.array([1, -2], np.int32)
    table = full_table(config.scheme, module)
    rows = np.clip(t[:, None].astype(np.int64) - u[None, :], -7, 7) + 7
    out = pte.Program(data, manifest).run({"positions": t, "key_positions": u})
    np.testing.assert_array_equal(out, table[rows].transpose(2, 0, 1))


def test_a_program_the_runtime_finds_inconsistent_is_refused_before_it_runs():
    """The demo's program (binary, L = 8) with byte 293 set to 122. When this test was written,
    ExecuTorch's minimal verification loaded it and planned its method (a corrupt program that
    would then run; other single-byte changes crashed the process there, so that is not done
    here); ``Program`` asks for the internal-consistency check, which refuses it."""
    _, _, data, manifest = in_memory("binary", 8, mode="compute", format="pte")
    assert data[293] == 0
    bad = data[:293] + bytes([122]) + data[294:]
    with pytest.raises(ArtifactError) as err:
        pte.Program(bad, manifest)
    # the runtime's own line (0x23: Error::InvalidProgram)
    assert str(err.value) == ("the .pte does not load in ExecuTorch: Failed to load program, "
                              "error: 0x:23")


def test_the_int8_projection_program_has_the_c_headers_int32_bound():
    """Both sum int8 x bits exactly in int32 and rescale once: the same quantisation and proven
    bound as the C header's int8 function (the ONNX graph's float32 sum has a looser one)."""
    program = in_memory("binary", 64, mode="compute", format="pte", quantize="int8")[3]["quant"]
    header = in_memory("binary", 64, mode="compute", format="c", quantize="int8")[3]["quant"]
    graph = in_memory("binary", 64, mode="compute", format="onnx", quantize="int8")[3]["quant"]
    assert program["bound"] == header["bound"] < graph["bound"]
    assert program["scale"] == header["scale"]


def test_the_first_call_silences_fd_2_and_restores_it(demo, capfd):
    _, module, data, manifest = demo
    program = pte.Program(data, manifest)
    pte.Program._started = False
    try:
        out = program.run({"positions": np.arange(4, dtype=np.int64)})
        assert pte.Program._started is True
        os.write(2, b"after\n")
        assert capfd.readouterr().err == "after\n"
        with torch.no_grad():
            np.testing.assert_array_equal(out, module.encode(torch.arange(4)).numpy())
    finally:
        pte.Program._started = True
    program.close()
    assert program._method is None and program._program is None


# --- reading a program's bytes -----------------------------------------------------------------

def test_describe_program_lists_each_operator_with_its_kernel(demo):
    _, module, data, _ = demo
    described = pte.describe_program(data)
    (method,) = described["methods"]
    assert method["name"] == "forward" and method["instructions"] >= len(method["operators"])
    assert ("aten::mm.out", True, True) in method["operators"]
    assert all(portable and registered for _, portable, registered in method["operators"])
    assert described["constant_bytes"] >= module.projection.weight.numel() * 4


def test_describe_program_refuses_bytes_that_are_not_a_program(demo):
    with pytest.raises(ArtifactError) as err:
        pte.describe_program(demo[2][:40])
    # the parser's own first line: the flatbuffer header is cut short
    assert str(err.value) == ("not an ExecuTorch program edgepe can read (unpack_from requires "
                              "a buffer of at least 64 bytes for unpacking 4 bytes at offset 60 "
                              "(actual buffer size is 40))")
    # The ET identifier and a zeroed body parse as a flatbuffer holding no execution plan.
    with pytest.raises(ArtifactError) as err:
        pte.describe_program(b"\x10\x00\x00\x00ET12" + b"\x00" * 56)
    assert str(err.value) == "not an ExecuTorch program edgepe can read (no execution plan)"


def test_portable_operators_are_read_from_every_kernel_yaml():
    ops = pte._portable_operators()
    assert {"aten::mm.out", "aten::bitwise_and.Scalar_out",
            "dim_order_ops::_to_dim_order_copy.out", "et_copy::_h2d_copy.out"} <= ops
    assert all("::" in op and "." in op.split("::")[1] for op in ops)


@pytest.mark.parametrize("head, ok", [
    (b"\x00\x00\x00\x00ET12", True), (b"\x00\x00\x00\x00ET12rest", True),
    (b"\x00\x00\x00\x00ET1", False), (b"\x00\x00\x00\x00EX12", False),
    (b"\x00\x00\x00\x00Et12", False), (b"\x00\x00\x00\x00ET1a", False),
    (b"\x00\x00\x00\x00ETa1", False), (b"", False),
])
def test_check_file_wants_the_et_identifier_and_a_two_digit_version(tmp_path, head, ok):
    path = tmp_path / "x.pte"
    path.write_bytes(head)
    if ok:
        assert pte.check_file(path, {"kind": "pe"}) == (("positions",), set())
        assert pte.check_file(path, {"kind": "bias"}) == (("positions", "key_positions"), set())
    else:
        with pytest.raises(ArtifactError) as err:
            pte.check_file(path, {})
        assert str(err.value) == (f"{str(path)!r} is not an ExecuTorch program (no ET flatbuffer "
                                  "identifier: truncated or another file?)")


def test_require_executorch_quietens_two_loggers_and_names_the_install_line(monkeypatch):
    from importlib.metadata import version

    for name in ("torchao", "torch.utils._pytree"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    assert pte.require_executorch() == version("executorch")
    for name in ("torchao", "torch.utils._pytree"):
        assert logging.getLogger(name).level == logging.ERROR
    for missing in ("executorch.exir", "executorch.runtime"):
        with monkeypatch.context() as m:
            m.setitem(sys.modules, missing, None)
            with pytest.raises(BadParameterError) as err:
                pte.require_executorch()
        assert str(err.value) == ("--format pte needs ExecuTorch, which is not installed: "
                                  "pip install -c constraints.txt -e '.[executorch]'")

