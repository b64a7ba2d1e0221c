"""TFLite models (``--format tflite``, issue 43): written deterministically with the TFLite schema,
run on LiteRT's interpreter and TFLM's (reference kernels), int8 with per-channel
FULLY_CONNECTED within its proven bound, ``--target litert|tflm`` choosing a lowering op by op,
``inspect`` (ops, TFLM arena), ``edgepe.load``, and hostile files refused in one line.

The parity sweep over every scheme's tflite cells is in tests/test_parity_grid.py. Runs where the
``[tflite]`` extra is installed (the README's test command installs it); skips elsewhere.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import torch

pytest.importorskip("ai_edge_litert", reason="the [tflite] extra is not installed: pip install "
                    "-c constraints.txt -e '.[tflite]'")
pytest.importorskip("tflite_micro", reason="the [tflite] extra is not installed")

from typer.testing import CliRunner  # noqa: E402

import edgepe  # noqa: E402
from edgepe.api import make_config  # noqa: E402
from edgepe.cli import app  # noqa: E402
from edgepe.contract.errors import ArtifactError, BadParameterError  # noqa: E402
from edgepe.export import export, prepare  # noqa: E402
from edgepe.formats.tflite import (  # noqa: E402
    ROWS,
    Program,
    _allocates,
    arena_bytes,
    read_model,
    verify_flatbuffer,
)
from edgepe.graphs.tflite_graph import Graph, Op  # noqa: E402
from edgepe.schemes import build  # noqa: E402

L = 512


def _bytes(**kw) -> tuple[bytes, dict]:
    prepared = prepare(make_config(kw.pop("scheme", "binary"), kw.pop("max_len", L),
                                   format="tflite", **kw))
    buffer = io.BytesIO()
    prepared.write(buffer)
    return buffer.getvalue(), dict(prepared.manifest)


@pytest.fixture(scope="module")
def demo_int8(tmp_path_factory):
    """The demo (binary, L 512) in int8, as TFLM runs it (--lowering float)."""
    out = tmp_path_factory.mktemp("tfl") / "demo-int8.tflite"
    export(make_config("binary", L, format="tflite", quantize="int8", lowering="float", out=out))
    return out


def test_the_same_export_gives_the_same_bytes(tmp_path) -> None:
    """A reproducible build: two exports of one command are byte-identical, and a different
    seed gives different bytes (the weights are in the file)."""
    outs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / f"{name}.tflite"
        export(make_config("binary", L, format="tflite", quantize="int8", seed=seed, out=out))
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    assert outs[0][4:8] == b"TFL3"


@pytest.mark.parametrize("runtime", ["litert", "tflm"])
def test_int8_demo_runs_within_its_bound_for_every_bit_pattern(demo_int8, runtime) -> None:
    """Every one of the 2^n bit patterns (positions 0 .. 2^n - 1, and the same again shifted by
    -2^n: they wrap), within the proven bound of the float reference, on both interpreters.
    The bound holds at every pattern only if the int8 output's scale saturates none."""
    manifest = json.loads(demo_int8.with_name(demo_int8.name + ".json").read_text())
    program = Program(demo_int8.read_bytes(), manifest, runtime)
    n = 10  # n_bits(512)
    positions = np.concatenate([np.arange(2**n), np.arange(2**n) - 2**n]).astype(np.int64)
    module = build(make_config("binary", L).scheme)
    with torch.no_grad():
        ref = module.encode(torch.from_numpy(positions)).numpy()
    err = np.abs(program.run({"positions": positions}) - ref).max()
    quant = manifest["quant"]
    assert 0 < err <= quant["bound"]
    assert quant["max_abs_err"] <= quant["bound"]
    assert quant["output"]["zero_point"] == 0 and quant["output"]["scale"] > 0


@pytest.mark.parametrize("runtime", ["litert", "tflm"])
def test_int8_output_is_the_float_output_quantised(demo_int8, runtime) -> None:
    """Output 1 ``pe_int8`` (for a model that stays int8) is output 0 ``pe`` before
    DEQUANTIZE: ``pe == float32(pe_int8 * quant.output.scale)`` exactly, on both interpreters."""
    manifest = json.loads(demo_int8.with_name(demo_int8.name + ".json").read_text())
    program = Program(demo_int8.read_bytes(), manifest, runtime)
    program.run({"positions": np.arange(ROWS)})
    if runtime == "litert":
        details = program._it.get_output_details()
        assert [d["name"] for d in details] == ["pe", "pe_int8"]
        q = program._it.get_tensor(details[1]["index"])
        pe = program._it.get_tensor(details[0]["index"])
        assert details[1]["quantization"][0] == np.float32(manifest["quant"]["output"]["scale"])
    else:
        pe, q = np.array(program._it.get_output(0)), np.array(program._it.get_output(1))
    assert q.dtype == np.int8 and (q != 0).any()
    scale = np.float32(manifest["quant"]["output"]["scale"])
    np.testing.assert_array_equal(pe, q.astype(np.float32) * scale)


def test_int8_fully_connected_is_per_channel_int8(demo_int8) -> None:
    """The FULLY_CONNECTED that TFLM/CMSIS-NN run: int8 input (scale 1), int8 weights with one
    scale per output channel along quantized_dimension 0, zero points 0, no bias, int8 output;
    the scales are the manifest's."""
    import tflite

    data = demo_int8.read_bytes()
    manifest = json.loads(demo_int8.with_name(demo_int8.name + ".json").read_text())
    model = tflite.Model.GetRootAsModel(data, 0)
    sg = model.Subgraphs(0)
    fc = next(sg.Operators(i) for i in range(sg.OperatorsLength())
              if model.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode()
              == tflite.BuiltinOperator.FULLY_CONNECTED)
    x, w, bias = fc.InputsAsNumpy()
    assert bias == -1  # no bias operand
    x, w = sg.Tensors(int(x)), sg.Tensors(int(w))
    y = sg.Tensors(int(fc.OutputsAsNumpy()[0]))
    assert [t.Type() for t in (x, w, y)] == [tflite.TensorType.INT8] * 3
    wq = w.Quantization()
    assert wq.QuantizedDimension() == 0 and list(w.ShapeAsNumpy()) == [64, 10]
    np.testing.assert_array_equal(wq.ScaleAsNumpy(), np.float32(manifest["quant"]["scale"]))
    assert not wq.ZeroPointAsNumpy().any()
    assert x.Quantization().ScaleAsNumpy().tolist() == [1.0]
    assert y.Quantization().ScaleAsNumpy()[0] == np.float32(manifest["quant"]["output"]["scale"])


def test_tflm_refuses_right_shift_in_one_line() -> None:
    """The bitwise lowering is LiteRT's: TFLM's resolver has no RIGHT_SHIFT, and says so."""
    data, manifest = _bytes()
    assert "RIGHT_SHIFT" in manifest["tflite"]["operators"]
    Program(data, manifest, "litert")  # LiteRT runs it
    with pytest.raises(ArtifactError, match="Didn't find op for builtin opcode 'RIGHT_SHIFT'"):
        Program(data, manifest, "tflm")


def test_arena_is_the_smallest_that_allocates(demo_int8) -> None:
    data = demo_int8.read_bytes()
    arena = arena_bytes(data)
    assert _allocates(data, arena)[0]
    assert not _allocates(data, arena - 16)[0]
    assert 1024 < arena < 64 * 1024


def test_target_picks_a_lowering_the_runtime_has(tmp_path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.tflite"
    ok = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--format",
                             "tflite", "--target", "tflm", "--out", str(out)])
    assert ok.exit_code == 0, ok.output
    assert "target tflm: all" in ok.output and "(--lowering float)" in ok.output
    assert "tflm ok" in ok.output  # the export's check ran it on TFLM
    lit = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--format",
                              "tflite", "--target", "litert", "--out", str(tmp_path / "l.tflite")])
    assert lit.exit_code == 0 and "(--lowering bitwise)" in lit.output
    bad = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--format",
                              "tflite", "--target", "tflm", "--lowering", "bitwise", "--out",
                              str(tmp_path / "b.tflite")])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [
        "error: target tflm (TensorFlow Lite Micro (reference kernels; CMSIS-NN replaces the "
        "int8 ones)) cannot run scheme 'gray' --mode compute: --lowering bitwise: RIGHT_SHIFT: "
        "not in tflm's operator table"]
    assert not (tmp_path / "b.tflite").exists()
    onnx = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--target",
                               "tflm", "--out", str(tmp_path / "g.onnx")])
    assert onnx.exit_code == 2 and "use --format tflite" in onnx.output


def test_inspect_lists_ops_and_arena(demo_int8) -> None:
    result = CliRunner().invoke(app, ["inspect", str(demo_int8), "--target", "tflm"])
    assert result.exit_code == 0, result.output
    arena = arena_bytes(demo_int8.read_bytes())
    assert "QUANTIZE FULLY_CONNECTED DEQUANTIZE" in result.output
    assert f"TFLM arena {arena} bytes" in result.output
    assert "target tflm: all 15 nodes supported" in result.output


def test_load_runs_on_litert(demo_int8) -> None:
    pe = edgepe.load(demo_int8)
    positions = np.array([0, 5, 511, ROWS + 3, 700], dtype=np.int64)
    module = build(make_config("binary", L).scheme)
    with torch.no_grad():
        ref = module.encode(torch.from_numpy(positions)).numpy()
    bound = json.loads(demo_int8.with_name(demo_int8.name + ".json").read_text())["quant"]["bound"]
    assert np.abs(pe.encode(positions) - ref).max() <= bound
    with pytest.raises(BadParameterError, match="is a TFLite model: it runs on LiteRT's "
                       "interpreter, providers apply to ONNX artifacts"):
        edgepe.load(demo_int8, providers="cpu")


@pytest.mark.parametrize("kw, message", [
    ({"dtype": "float16"}, "a .tflite outputs float32"),
    ({"scheme": "binary-2d"}, "takes positions [N, 2]"),
    ({"scheme": "rope"}, "its .tflite is --mode table"),
    ({"scheme": "sinusoidal"}, "use --mode table"),
    ({"scheme": "gray", "quantize": "int8"}, "would only add error"),
    ({"lowering": "arith32"}, "computes bits with bitwise or float"),
    ({"scheme": "mrope"}, "takes positions [N, 3] and has no table mode"),
    ({"scheme": "rope", "mode": "sliced", "lowering": "trunc"}, "slices positions with float"),
    ({"scheme": "rope", "mode": "sliced", "extra": {"slices": "4,4"}}, "cover positions below"),
])
def test_refused_options_name_what_works(kw, message) -> None:
    with pytest.raises(BadParameterError, match=message.replace("[", r"\[")):
        _bytes(**kw)


# Hostile files: each replaces an exported model's bytes (its manifest's sha256 updated, as a
# forger would), then inspect, run and load must refuse it in one line, exit 2.
def _custom_op() -> bytes:
    g = Graph()
    x = g.input("positions", (ROWS,), np.int32)
    g.outputs.append(g.op("CUSTOM", [x], (ROWS,), np.int32))
    return g.serialize("custom")


def _huge() -> bytes:
    g = Graph()
    x = g.input("positions", (2**20, 2**10), np.float32)  # 4 GiB
    g.outputs.append(g.op("FLOOR", [x], (2**20, 2**10), np.float32))
    return g.serialize("huge")


def _forged() -> bytes:
    rng = np.random.default_rng(0)
    body = bytearray(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    body[0:4] = (64).to_bytes(4, "little")  # a root offset inside the file
    body[4:8] = b"TFL3"
    return bytes(body)


def _bad_offset(good: bytes) -> bytes:
    """The first 4-byte word that, set to 0x7ffffff0, leaves a model Python's reader parses but
    FlatBuffers' verifier rejects: what TFLM must never be handed."""
    for offset in range(8, len(good) - 4, 4):
        bad = good[:offset] + (0x7FFFFFF0).to_bytes(4, "little") + good[offset + 4:]
        try:
            read_model(bad)
        except ArtifactError:
            continue
        try:
            verify_flatbuffer(bad)
        except ArtifactError:
            return bad
    raise AssertionError("no such offset")


HOSTILE = {
    "bad-offset": (_bad_offset, "not a valid"),
    "truncated": (lambda good: good[:len(good) // 2], "flatbuffer is damaged"),
    "custom-op": (lambda good: _custom_op(), "custom op"),
    "huge-tensor": (lambda good: _huge(), "past 67108864"),
    "forged": (lambda good: _forged(), "the .tflite"),
    "not-tflite": (lambda good: b"\x00" * 64, "no TFL3 flatbuffer identifier"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tflite_is_refused_in_one_line(case, tmp_path) -> None:
    out = tmp_path / "m.tflite"
    export(make_config("binary", 64, format="tflite", lowering="float", out=out))
    make, message = HOSTILE[case]
    data = make(out.read_bytes())
    out.write_bytes(data)
    side = out.with_name(out.name + ".json")
    manifest = json.loads(side.read_text())
    manifest["sha256"] = hashlib.sha256(data).hexdigest()
    side.write_text(json.dumps(manifest))
    runner = CliRunner()
    for args in (["inspect", str(out)], ["run", str(out), "--positions", "0:4"],
                 ["verify", str(out)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    with pytest.raises(ArtifactError):
        verify_flatbuffer(data)  # read_model's checks, then FlatBuffers' verifier
    # verify checks the file before it rebuilds anything
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output


# rope and sinusoidal --mode sliced (issue 43): the ONNX sliced graph's operations in its order
# (--lowering trunc slices |pos| as the .tflite does), so the outputs are equal bit for bit; three
# slices (a middle rotation), yarn's attention factor in the top tables, the half layout with
# fairseq's offset, negative positions (the top tables' negated rows) and positions past the plan
# (clamped indices: the table's edge, no read outside it).
SLICED_CASES = [
    ("rope", 4096, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
     "4,4,4"),
    ("sinusoidal", 1000, {"layout": "half", "offset": 2}, None),
]


@pytest.mark.parametrize("scheme, max_len, params, slices", SLICED_CASES)
def test_trig_sliced_equals_the_onnx_sliced_graph_on_both_interpreters(scheme, max_len, params,
                                                                       slices) -> None:
    import onnxruntime as ort

    extra = {"slices": slices} if slices else {}
    data, manifest = _bytes(scheme=scheme, max_len=max_len, params=params, mode="sliced",
                            extra=dict(extra))
    assert manifest["lowering"] == "float" and "SIN" not in manifest["tflite"]["operators"]
    assert manifest["positions"]["limit"] == (1 << sum(manifest["sliced"]["slices"])) - 1 - \
        params.get("offset", 0)
    onnx = prepare(make_config(scheme, max_len, params=params, mode="sliced", lowering="trunc",
                               extra=dict(extra)))
    buffer = io.BytesIO()
    onnx.write(buffer)
    assert onnx.manifest["tolerance"] == manifest["tolerance"]
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    limit = manifest["positions"]["limit"]
    positions = np.unique(np.concatenate([np.arange(-40, 40), [limit - 1, limit, -limit],
                                          np.random.default_rng(0).integers(0, limit, 60)]))
    positions = positions[np.abs(positions) <= limit].astype(np.int64)
    expected = session.run(None, {"positions": positions})[0]
    module = build(make_config(scheme, max_len, params=params).scheme)
    for runtime in ("litert", "tflm"):
        got = Program(data, manifest, runtime).run({"positions": positions})
        np.testing.assert_array_equal(got, expected)  # same ops, same order: bit for bit
    far = np.array([limit + 1, 2 * limit + 5], np.int64)  # past the plan: clamped, finite
    assert np.isfinite(Program(data, manifest).run({"positions": far})).all()
    from edgepe.schemes.definition import Definition

    with torch.no_grad():  # and within the sliced bound of the float64 definition
        ref = Definition(module).encode64(torch.from_numpy(positions)).numpy()
    assert np.abs(expected - ref).max() <= manifest["sliced"]["bound"]


def test_trig_sliced_target_tflm_is_the_float_lowering(tmp_path) -> None:
    result = CliRunner().invoke(app, ["export", "--scheme", "rope", "--max-len", "256", "--mode",
                                      "sliced", "--format", "tflite", "--target", "tflm",
                                      "--out", str(tmp_path / "r.tflite")])
    assert result.exit_code == 0, result.output
    assert "(--lowering float)" in result.output and "tflm ok" in result.output
    ops = {op["op"] for op in read_model((tmp_path / "r.tflite").read_bytes())["operators"]}
    assert {"SIN", "COS", "RIGHT_SHIFT"}.isdisjoint(ops) and "FLOOR" in ops
    integer = CliRunner().invoke(app, ["export", "--scheme", "integer", "--max-len", "64",
                                       "--format", "tflite", "--target", "tflm", "--out",
                                       str(tmp_path / "i.tflite")])
    assert integer.exit_code == 0, integer.output
    # the artifact's lowering is printed, and a graph without one (integer's DIV) prints none
    assert "target tflm: all 4 nodes supported" in integer.output
    assert "--lowering" not in integer.output


@pytest.mark.parametrize("scheme, params", [
    ("integer", {"C": 3.7}), ("integer-norm", {}), ("integer-multiscale", {}),
    ("integer-learnable", {})])
def test_integer_family_compute_is_the_schemes_own_arithmetic_on_both_interpreters(
        scheme, params) -> None:
    """pos / D as one float32 DIV (also for a D whose reciprocal is inexact: a multiply by 1/D
    would round differently), times the columns' factors, plus learnable's bias: the scheme's
    own float32 operations, so equal bit for bit (learnable with a seed's random w and b)."""
    config = make_config(scheme, L, mode="compute", params=params, seed=3, format="tflite")
    module = build(config.scheme, seed=3)
    if scheme == "integer-learnable":
        with torch.no_grad():
            module.weight.normal_(generator=torch.Generator().manual_seed(1))
            module.bias.normal_(generator=torch.Generator().manual_seed(2))
    prepared = prepare(config, module)
    buffer = io.BytesIO()
    prepared.write(buffer)
    data, manifest = buffer.getvalue(), dict(prepared.manifest)
    assert manifest["lowering"] is None and "DIV" in manifest["tflite"]["operators"]
    positions = np.arange(-(2**24), 2**24 + 1, 2**24 // 50 + 7, dtype=np.int64)
    positions = np.concatenate([positions, np.arange(-20, 20), [2**24, -(2**24)]])
    with torch.no_grad():
        ref = module.encode(torch.from_numpy(positions)).numpy()
    assert ref.shape[1] == 64 and len(np.unique(ref[100])) == (1 if scheme in (
        "integer", "integer-norm") else 64)
    for runtime in ("litert", "tflm"):
        np.testing.assert_array_equal(Program(data, manifest, runtime).run(
            {"positions": positions}), ref)


@pytest.mark.parametrize("scheme", ["binary-multilevel", "hybrid-int-binary", "binary-smooth"])
def test_multilevel_and_hybrid_compute_bit_for_bit_on_both_interpreters(scheme) -> None:
    """binary-multilevel: column j is bit shifts[j] (group g reads pos >> g), not bit j;
    hybrid-int-binary: pos / (L - 1) columns then bits (CONCATENATION); binary-smooth: exactly
    sigmoid(+-c) (a non-default c). Both lowerings, bit for bit, negative positions in two's
    complement."""
    params = {"binary-multilevel": {"groups": 3}, "binary-smooth": {"c": 2.3}}.get(scheme, {})
    module = build(make_config(scheme, 300, params=params).scheme)
    if scheme == "binary-multilevel":  # shifts repeat: not arange
        assert len(set(module.shifts.tolist())) < len(module.shifts)
    positions = np.concatenate([np.arange(-300, 300), [2**24, -(2**24)]]).astype(np.int64)
    with torch.no_grad():
        ref = module.encode(torch.from_numpy(positions)).numpy()
    for lowering, runtimes in (("bitwise", ("litert",)), ("float", ("litert", "tflm"))):
        data, manifest = _bytes(scheme=scheme, max_len=300, params=params, lowering=lowering)
        for runtime in runtimes:
            np.testing.assert_array_equal(Program(data, manifest, runtime).run(
                {"positions": positions}), ref)



# fourier-binary, binary-gated compute and rope/sinusoidal sliced int8 (issue 43, the last cells).
def _reference(scheme, max_len, positions, params=None):
    module = build(make_config(scheme, max_len, params=params or {}).scheme)
    with torch.no_grad():
        return module.encode(torch.from_numpy(positions)).numpy()


def test_fourier_binary_compute_is_the_basis_projection_on_both_interpreters() -> None:
    """bits @ [cos | -sin] in one float32 FULLY_CONNECTED: within the scheme's tolerance of the
    float32 reference for every bit pattern (both signs: they wrap), both lowerings; TFLM's
    reference kernel sums in the reference's order here (measured: equal bit for bit)."""
    n = 6  # max_len 64
    positions = np.concatenate([np.arange(2**n), np.arange(2**n) - 2**n, [2**24]]).astype(
        np.int64)
    ref = _reference("fourier-binary", 64, positions)
    rtol, atol = (1e-6, 1e-6)
    for lowering, runtimes in (("bitwise", ("litert",)), ("float", ("litert", "tflm"))):
        data, manifest = _bytes(scheme="fourier-binary", max_len=64, lowering=lowering)
        assert "FULLY_CONNECTED" in manifest["tflite"]["operators"]
        for runtime in runtimes:
            got = Program(data, manifest, runtime).run({"positions": positions})
            assert got.shape == ref.shape == (len(positions), 14)
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def test_fourier_binary_int8_is_per_channel_within_its_bound_on_both_interpreters() -> None:
    """The demo's int8 FULLY_CONNECTED with the DFT basis: every bit pattern within the
    proven bound; its all-zero column (Im F_0) exactly 0."""
    n = 6
    positions = np.concatenate([np.arange(2**n), np.arange(2**n) - 2**n]).astype(np.int64)
    ref = _reference("fourier-binary", 64, positions)
    data, manifest = _bytes(scheme="fourier-binary", max_len=64, quantize="int8",
                            lowering="float")
    quant = manifest["quant"]
    assert quant["max_abs_err"] <= quant["bound"] and quant["output"]["tensor"] == "pe_int8"
    for runtime in ("litert", "tflm"):
        got = Program(data, manifest, runtime).run({"positions": positions})
        err = np.abs(got - ref)
        assert 0 < err.max() <= quant["bound"]
        assert not got[:, 7].any()  # Im F_0 = 0: scale 1, q 0


def test_binary_gated_compute_bit_for_bit_on_both_interpreters() -> None:
    """b g + (pos / (L - 1)) (1 - g) with random gates: the ONNX graph's MUL, DIV, MUL, ADD in
    its order, so equal to the reference bit for bit, negative positions and 2^24 included."""
    config = make_config("binary-gated", 300, seed=0, format="tflite")
    module = build(config.scheme, seed=0)
    with torch.no_grad():
        module.gate_logits.normal_(generator=torch.Generator().manual_seed(5))
    positions = np.concatenate([np.arange(-300, 300), [2**24, -(2**24)]]).astype(np.int64)
    with torch.no_grad():
        ref = module.encode(torch.from_numpy(positions)).numpy()
    assert len(np.unique(module.gates()[0].detach().numpy())) > 1
    for lowering, runtimes in (("bitwise", ("litert",)), ("float", ("litert", "tflm"))):
        from dataclasses import replace

        prepared = prepare(replace(config, lowering=lowering), module)
        buffer = io.BytesIO()
        prepared.write(buffer)
        for runtime in runtimes:
            np.testing.assert_array_equal(Program(buffer.getvalue(), dict(prepared.manifest),
                                                  runtime).run({"positions": positions}), ref)


def test_binary_gated_int8_clamps_positions_and_holds_its_bound() -> None:
    """int8 of a graph without weights: the output's per-column scales (the ONNX int8 graph's)
    as a reciprocal MUL, QUANTIZE with scale 1, DEQUANTIZE, MUL; positions clamped to
    [0, L - 1] as the ONNX int8 graph does (pos / (L - 1) has no int8 range past it)."""
    import onnxruntime as ort

    L_ = 64
    data, manifest = _bytes(scheme="binary-gated", max_len=L_, quantize="int8",
                            lowering="float")
    onnx = prepare(make_config("binary-gated", L_, quantize="int8"))
    assert manifest["quant"]["bound"] == onnx.manifest["quant"]["bound"]
    assert manifest["quant"]["scale"] == onnx.manifest["quant"]["scale"]
    assert manifest["positions"]["out_of_range"] == "clamp"
    assert manifest["tflite"]["feed"] == "saturate"
    buffer = io.BytesIO()
    onnx.write(buffer)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    positions = np.concatenate([np.arange(-5, L_ + 5), [2**40, -(2**40)]]).astype(np.int64)
    expected = session.run(None, {"positions": positions})[0]
    ref = _reference("binary-gated", L_, np.clip(positions, 0, L_ - 1))
    scale = np.float32(manifest["quant"]["output"]["scale"])
    for runtime in ("litert", "tflm"):
        got = Program(data, manifest, runtime).run({"positions": positions})
        assert np.abs(got - ref).max() <= manifest["quant"]["bound"]
        # the same int8 steps as the ONNX graph's QuantizeLinear, up to ties (half to even there,
        # half away from zero in TFLite): at most one step apart
        assert np.abs(np.round(got / scale) - np.round(expected / scale)).max() <= 1
        np.testing.assert_array_equal(got[-2], got[5 + L_ - 1])  # 2^40: row L - 1
        np.testing.assert_array_equal(got[-1], got[5])  # -2^40: row 0


@pytest.mark.parametrize("scheme", ["rope", "sinusoidal"])
def test_trig_sliced_int8_is_the_float_sliced_output_quantised(scheme) -> None:
    """int8 of the sliced graph: one scale (1/127: sin/cos within +-1), QUANTIZE to the int8
    output a quantised model takes, DEQUANTIZE; its bound is the ONNX int8 sliced manifest's
    (half a step, the sliced bound against the float64 definition, Q/DQ roundings), held
    against the float64 definition on both interpreters, negative positions included."""
    from edgepe.schemes.definition import Definition

    f_data, f_manifest = _bytes(scheme=scheme, max_len=256, mode="sliced")
    data, manifest = _bytes(scheme=scheme, max_len=256, mode="sliced", quantize="int8")
    onnx = prepare(make_config(scheme, 256, mode="sliced", lowering="trunc", quantize="int8"))
    quant = manifest["quant"]
    assert quant["bound"] == onnx.manifest["quant"]["bound"]
    assert {"QUANTIZE", "DEQUANTIZE"} <= set(manifest["tflite"]["operators"])
    scale = np.float32(quant["output"]["scale"])
    assert scale == np.float32(1 / 127)
    limit = manifest["positions"]["limit"]
    positions = np.concatenate([np.arange(-64, limit + 1), [-limit]]).astype(np.int64)
    module = build(make_config(scheme, 256).scheme)
    with torch.no_grad():
        ref = Definition(module).encode64(torch.from_numpy(positions)).numpy()
    floats = Program(f_data, f_manifest).run({"positions": positions})
    for runtime in ("litert", "tflm"):
        program = Program(data, manifest, runtime)
        got = program.run({"positions": positions})
        assert 0 < np.abs(got - ref).max() <= quant["bound"]
        # the float sliced output, rounded to the step (ties aside: measured none here)
        np.testing.assert_array_equal(got, (np.round(floats / scale) * scale).astype(np.float32))


def _offset_buffer() -> bytes:
    """A table whose data the model says lies at byte 2^40 (Buffer.offset/size): LiteRT's
    verifier refuses it, TFLM allocates it unchecked."""
    import tflite

    g = Graph()
    x = g.input("positions", (ROWS,), np.int32)
    t = g.const("table", np.zeros((64, 4), np.float32))
    g.buffers[g.tensors[t].buffer] = b""
    g.outputs.append(g.op("GATHER", [t, x], (ROWS, 4), np.float32,
                          options=("GatherOptions", {"Axis": 0})))
    end, calls = tflite.BufferEnd, []

    def forged_end(b):
        calls.append(1)
        if len(calls) == 2:  # the table's buffer (0 is the sentinel)
            tflite.BufferAddOffset(b, 2**40)
            tflite.BufferAddSize(b, 1024)
        return end(b)
    tflite.BufferEnd = forged_end
    try:
        return g.serialize("offset")
    finally:
        tflite.BufferEnd = end


def _many_operators(n: int) -> bytes:
    """``n`` ABS operators, each its own table (a forger could name one table n times)."""
    g = Graph()
    x = g.input("positions", (ROWS,), np.int32)
    g.outputs.append(x)
    g.ops.extend(Op("ABS", (x,), (x,)) for _ in range(n))
    return g.serialize("many")


def _rank(n: int) -> bytes:
    g = Graph()
    x = g.input("positions", (1,) * n, np.int32)
    g.outputs.append(x)
    return g.serialize("rank")


@pytest.mark.parametrize("make, message", [
    (_offset_buffer, "lies outside the flatbuffer"),
    (lambda: _many_operators(4097), r"4097 operators \(at most 4096\)"),
    (lambda: _rank(9), r"rank 9 \(at most 8\)"),
])
def test_read_model_bounds_what_a_file_names(make, message) -> None:
    with pytest.raises(ArtifactError, match=message):
        read_model(make())


def test_read_model_takes_the_bounds_themselves() -> None:
    """The limits are inclusive: 4096 operators and rank 8 are read."""
    assert len(read_model(_many_operators(4096))["operators"]) == 4096
    assert read_model(_rank(8))["inputs"][0]["shape"] == [1] * 8


def test_a_file_past_the_reader_bound_is_refused_before_it_is_read_whole(demo_int8,
                                                                         monkeypatch) -> None:
    """edgepe.load, inspect (describe) and verify's runtimes read a .tflite through read_file:
    at most MAX_FILE_BYTES + 1 bytes (load read the whole file once its sha256 matched)."""
    from edgepe.audit import describe
    from edgepe.formats import tflite

    size = demo_int8.stat().st_size
    monkeypatch.setattr(tflite, "MAX_FILE_BYTES", size)
    assert tflite.read_file(demo_int8) == demo_int8.read_bytes()  # the bound itself is read
    monkeypatch.setattr(tflite, "MAX_FILE_BYTES", size - 1)
    message = f"the .tflite is over {size - 1} bytes"
    for call in (tflite.read_file, edgepe.load, describe):
        with pytest.raises(ArtifactError, match=message):
            call(demo_int8)


@pytest.mark.parametrize("kw", [
    {"scheme": "fourier-binary", "max_len": 64},
    {"scheme": "fourier-binary", "max_len": 64, "quantize": "int8"},
    {"scheme": "binary-gated", "max_len": 64, "quantize": "int8"},
    {"scheme": "sinusoidal", "max_len": 64, "mode": "sliced", "quantize": "int8"}])
def test_new_cells_targets_pick_what_each_runtime_runs(kw) -> None:
    """--target litert takes RIGHT_SHIFT (bitwise) where the cell has bits, --target tflm the
    float lowering; each chosen model passes its profile node by node, and TFLM allocates the
    one chosen for it (the sliced cell slices with float on both)."""
    from edgepe.targets.profiles import TFLITE_PROFILES
    from edgepe.targets.tflite import for_export

    kw = dict(kw)
    config = make_config(kw.pop("scheme"), kw.pop("max_len"), format="tflite", **kw)
    chosen = {}
    for name in ("litert", "tflm"):
        picked, report = for_export(config, TFLITE_PROFILES[name], lowering_given=False)
        assert report and not report.blocking
        chosen[name] = picked.lowering
    sliced = config.mode == "sliced"
    assert chosen == {"litert": "float" if sliced else "bitwise", "tflm": "float"}
    data, manifest = _bytes(scheme=config.scheme.scheme, max_len=64, **kw,
                            lowering=chosen["tflm"])
    assert arena_bytes(data) > 0
