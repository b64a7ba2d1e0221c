"""Compute graphs of the float schemes (sinusoidal, sinusoidal-learned, rope encode, alibi,
gaussian) against their PyTorch references on onnxruntime CPU and the ONNX reference evaluator.

Positions cover ``0 .. max_len - 1`` and an extrapolation range (past the end, negatives, and
out to the schemes' float limit ``|pos| = 2^24``): these schemes extrapolate. Float outputs
compare within the scheme's ``spec.tolerance``; alibi and gaussian are bitwise. rope's apply
graphs are in ``test_rope.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from edgepe.contract.config import ExportConfig, base_manifest, manifest_path
from edgepe.contract.errors import BadParameterError
from edgepe.export import export
from edgepe.formats.onnx import output_shape
from edgepe.graphs import builder
from edgepe.graphs._common import embedded_manifest, onnx_section, read_manifest_prop
from edgepe.schemes import build, resolve
from edgepe.schemes.sinusoidal import angles

LIMIT = 2**24
TRIG = ("sinusoidal", "sinusoidal-learned", "rope")
BIAS = ("alibi", "gaussian")
# max_len 1, powers of two, 2^k - 1; d_model not a multiple of 8 among them.
SIZES = [(1, 2), (16, 6), (255, 10), (512, 34), (1024, 64), (127, 512)]


def make(scheme: str, max_len: int, d_model=None, heads=None, params=None, **options):
    """``(config, module, model)`` for the scheme's compute graph, built as the exporter does."""
    config = ExportConfig(scheme=resolve(scheme, max_len, d_model, heads, params),
                          mode="compute", **options)
    module = build(config.scheme, seed=config.seed, checkpoint=config.checkpoint)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    return config, module, builder(scheme, "compute")(config, module, manifest)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def positions(max_len: int, seed: int = 0) -> np.ndarray:
    """Every in-range position, then past the end, negatives, and far ones up to 2^24."""
    rng = np.random.default_rng(seed)
    far = rng.integers(-LIMIT, LIMIT + 1, 2000)
    edges = [LIMIT, -LIMIT, LIMIT - 1, 2**23 + 1, 2**20 + 7, -(2**20) - 7]
    return np.concatenate([np.arange(max_len), np.arange(max_len, max_len + 300),
                           np.arange(-300, 0), far, edges]).astype(np.int64)


def reference(module, *inputs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.encode(*(torch.from_numpy(x) for x in inputs)).numpy()


def assert_within(actual: np.ndarray, expected: np.ndarray, config) -> None:
    rtol, atol = config.scheme.spec.tolerance
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    # assert_allclose's own test (isclose, NaNs equal) first: its report costs 6x the check
    # (half of the 2^25-position sweep's time); it runs to say where, when the check fails
    if not np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True).all():
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def assert_bitwise(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same float32 bits, signed zeros included."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype == np.float32
    assert np.array_equal(actual.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("max_len,d_model", SIZES, ids=[f"L{n}-d{d}" for n, d in SIZES])
@pytest.mark.parametrize("scheme", TRIG)
def test_trig_graph_matches_reference_in_range_and_extrapolated(scheme, max_len, d_model):
    config, module, model = make(scheme, max_len, d_model)
    p = positions(max_len)
    out = session(model).run(["pe"], {"positions": p})[0]
    assert_within(out, reference(module, p), config)


@pytest.mark.parametrize("scheme", TRIG)
def test_trig_graph_angle_is_bitwise_the_reference_angle(scheme):
    """The graph's ``theta`` is the reference's float32 ``pos * inv_freq``: only Sin/Cos differ."""
    _, module, model = make(scheme, 64, 34)
    model.graph.output.append(onnx.helper.make_tensor_value_info("theta", onnx.TensorProto.FLOAT,
                                                                 None))
    p = positions(64)
    theta = session(model).run(["theta"], {"positions": p})[0]
    assert_bitwise(theta, angles(torch.from_numpy(p), module.inv_freq).numpy())


@pytest.mark.parametrize("scheme", TRIG)
def test_trig_graph_on_the_reference_evaluator(scheme):
    config, module, model = make(scheme, 15, 10)
    p = np.array([0, 1, 7, 14, 15, 16, 1000, -1, -15, LIMIT, -LIMIT, 12345678], dtype=np.int64)
    out = ReferenceEvaluator(model).run(None, {"positions": p})[0]
    assert_within(out, reference(module, p), config)


def test_sinusoidal_learned_residual_switches_off_outside_the_table():
    """In range: sinusoidal + residual row; outside: exactly the plain sinusoidal graph."""
    _, learned, model = make("sinusoidal-learned", 32, 10, seed=3)
    _, _, plain = make("sinusoidal", 32, 10)
    p = positions(32)
    mixed = session(model).run(None, {"positions": p})[0]
    fixed = session(plain).run(None, {"positions": p})[0]
    outside = (p < 0) | (p >= 32)
    assert_bitwise(mixed[outside], fixed[outside])
    residual = learned.residual.detach().numpy()
    np.testing.assert_allclose(mixed[~outside] - fixed[~outside], residual[p[~outside]],
                               atol=2e-7)
    assert np.abs(residual).min() > 0  # the check above would not see a zero residual


def test_sinusoidal_learned_graph_takes_every_int64_with_the_residual_off():
    """Past the float limit the reference refuses; the graph still runs (no Gather out of
    range) and adds nothing to the plain sinusoidal graph's output."""
    _, _, model = make("sinusoidal-learned", 16, 6)
    _, _, plain = make("sinusoidal", 16, 6)
    rng = np.random.default_rng(2)
    p = np.concatenate([rng.integers(-2**62, 2**62, 5000), rng.integers(-2**33, 2**33, 5000),
                        [2**31, 2**32 + 3, 2**63 - 1, -(2**63)]]).astype(np.int64)
    assert_bitwise(session(model).run(None, {"positions": p})[0],
                   session(plain).run(None, {"positions": p})[0])


def test_sinusoidal_learned_uses_the_checkpointed_residual(tmp_path):
    """A residual loaded from a checkpoint is the one the graph gathers."""
    config = resolve("sinusoidal-learned", 8, 6)
    module = build(config)
    with torch.no_grad():
        module.residual.copy_(torch.arange(48, dtype=torch.float32).reshape(8, 6))
    ckpt = tmp_path / "residual.pt"
    torch.save(module.state_dict(), ckpt)
    _, loaded, model = make("sinusoidal-learned", 8, 6, checkpoint=str(ckpt))
    p = np.arange(-2, 10, dtype=np.int64)
    out = session(model).run(None, {"positions": p})[0]
    assert_within(out, reference(loaded, p), ExportConfig(scheme=config))
    assert out[p == 5][0, 3] > 32  # residual[5, 3] = 33, plus a cosine


BIAS_CASES = [("alibi", 1, None), ("alibi", 8, None), ("alibi", 12, None), ("gaussian", 1, None),
              ("gaussian", 4, {"sigma": 3.3}), ("gaussian", 2, {"sigma": 0.5})]


@pytest.mark.parametrize("max_len", [1, 16, 255])
@pytest.mark.parametrize("scheme,heads,params", BIAS_CASES,
                         ids=[f"{s}-h{h}-{p}" for s, h, p in BIAS_CASES])
def test_bias_graph_is_bitwise_the_reference(scheme, heads, params, max_len):
    _, module, model = make(scheme, max_len, heads=heads, params=params)
    s = session(model)
    grid = np.arange(-40, max_len + 40, dtype=np.int64)
    far = np.random.default_rng(1).integers(-LIMIT, LIMIT + 1, 300).astype(np.int64)
    for queries, keys in ((grid, grid), (far, grid), (far, far[:77]),
                          (np.array([LIMIT, -LIMIT]), np.array([-LIMIT, LIMIT, 0]))):
        out = s.run(["bias"], {"positions": queries, "key_positions": keys})[0]
        assert out.shape == (heads, len(queries), len(keys))
        assert_bitwise(out, reference(module, queries, keys))


@pytest.mark.parametrize("scheme", BIAS)
def test_bias_graph_on_the_reference_evaluator(scheme):
    _, module, model = make(scheme, 16, heads=3)
    q = np.array([0, 5, 15, 16, -3, LIMIT], dtype=np.int64)
    k = np.array([0, 15, 40, -LIMIT], dtype=np.int64)
    out = ReferenceEvaluator(model).run(None, {"positions": q, "key_positions": k})[0]
    assert_bitwise(out, reference(module, q, k))


def _initializer_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(t.dims) for t in model.graph.initializer}


@pytest.mark.parametrize("scheme", TRIG)
def test_trig_graphs_use_sin_cos_and_hold_no_position_table(scheme):
    config, _, model = make(scheme, 512, 10)
    ops = {n.op_type for n in model.graph.node}
    assert {"Sin", "Cos"} <= ops
    tables = {name for name, dims in _initializer_shapes(model).items() if 512 in dims}
    # sinusoidal-learned's residual is a learned per-position table by definition.
    assert tables == ({"residual"} if scheme == "sinusoidal-learned" else set())


@pytest.mark.parametrize("scheme", BIAS)
def test_bias_graphs_are_integer_until_one_cast_and_trig_free(scheme):
    _, _, model = make(scheme, 512, heads=8)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Cast") == 1
    assert set(ops[: ops.index("Cast")]) <= {"Unsqueeze", "Sub", "Abs"}
    assert not set(ops) & {"Sin", "Cos", "Tan", "Exp", "Log", "Pow", "Gather"}
    assert all(np.prod(dims, dtype=np.int64) <= 8 for dims in _initializer_shapes(model).values())


def test_float16_output_is_the_rounded_reference():
    config, module, model = make("sinusoidal", 64, 34, dtype="float16")
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    p = positions(64)
    out = session(model).run(None, {"positions": p})[0]
    expected = reference(module, p).astype(np.float16)
    # rounding two float32 values within 1e-6 of each other to float16 splits them by <= 1 step
    assert np.all(np.abs(out.astype(np.float32) - expected) <= np.spacing(np.abs(expected)))


def test_opset_below_what_the_graph_needs_is_refused_naming_the_op():
    with pytest.raises(BadParameterError, match="Unsqueeze needs opset 13"):
        make("sinusoidal", 16, 6, opset=12)
    with pytest.raises(BadParameterError, match="Unsqueeze needs opset 13"):
        make("alibi", 16, opset=11)


@pytest.mark.parametrize("scheme,sizes", [("sinusoidal", (255, 10)),
                                          ("sinusoidal-learned", (16, 6)), ("rope", (512, 34)),
                                          ("alibi", (15, None)), ("gaussian", (16, None))])
def test_export_writes_a_deterministic_graph_with_its_manifest(tmp_path, scheme, sizes):
    max_len, d_model = sizes
    config = ExportConfig(scheme=resolve(scheme, max_len, d_model), mode="compute")
    first = export(config.with_out(tmp_path / "a.onnx"))
    second = export(config.with_out(tmp_path / "b.onnx"))
    data = first.path.read_bytes()
    assert data == second.path.read_bytes()
    assert manifest_path(first.path).read_bytes() == manifest_path(second.path).read_bytes()
    model = onnx.load_from_string(data)
    stored = read_manifest_prop(model)
    assert embedded_manifest(first.manifest) == stored
    assert first.manifest["onnx"] == onnx_section(model)
    assert stored["tolerance"] == dict(zip(("rtol", "atol"), config.scheme.spec.tolerance,
                                           strict=True))
    assert stored["positions"]["out_of_range"] in ("extrapolate", "mixed")
    module = build(config.scheme)
    s = session(model)
    p = positions(max_len)
    if scheme in BIAS:
        out = s.run(None, {"positions": p, "key_positions": p[:50]})[0]
        assert_bitwise(out, reference(module, p, p[:50]))
    else:
        assert_within(s.run(None, {"positions": p})[0], reference(module, p), config)


@pytest.mark.slow
def test_sinusoidal_graph_over_every_position_to_the_float_limit():
    """Exhaustive: every position in [-2^24, 2^24], in chunks. d = 4 holds the frequency 1 (the
    largest angles, the hardest argument reduction) and 0.01; rope and sinusoidal-learned share
    this Sin/Cos subgraph (the bitwise angle test above) and are sampled out to 2^24."""
    config, module, model = make("sinusoidal", 1000, 4)
    s = session(model)
    for start in range(-LIMIT, LIMIT + 1, 1 << 21):
        p = np.arange(start, min(start + (1 << 21), LIMIT + 1), dtype=np.int64)
        assert_within(s.run(None, {"positions": p})[0], reference(module, p), config)
