"""Fast focused tests of ``edgepe.graphs.trig`` (issue 33's mutation testing): every graph of
sinusoidal, sinusoidal-learned and rope (encode, cache, apply, apply-4d; onnx, ort and rotary23
lowerings; both layouts, partial rotary_dim, yarn's attention factor), tiny sizes, against
numpy: the float32 angle ``float32(pos) * w`` (bitwise, as the module doc says the graph's is),
then float64 cos/sin of it, and the rotation written out by hand in float64.

Tolerances: ``spec.tolerance`` (1e-6, onnxruntime's Sin/Cos within 2 ulp of a value <= 1) on a
cos/sin; a rotated value ``x_a c - x_b s`` with ``|x| <= 1/2`` adds at most two such errors
times 1/2 and three float32 roundings of values below 1 (``3 2^-24``): 1e-6 + 2^-22.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgepe.contract.config import ExportConfig, base_manifest
from edgepe.contract.errors import BadParameterError
from edgepe.formats.onnx import output_shape
from edgepe.graphs import trig
from edgepe.graphs._common import read_manifest_prop
from edgepe.schemes import build, resolve

COSSIN = 1e-6  # spec.tolerance of the trig schemes
ROTATED = 1e-6 + 2.0**-22
P = np.array([0, 1, 2, 7, 15, 16, 17, 100, -1, -9, 4096, -70000, 2**24], dtype=np.int64)


def make(scheme, max_len, d_model, params=None, builder=None, **options):
    config = ExportConfig(scheme=resolve(scheme, max_len, d_model, None, params), **options)
    module = build(config.scheme)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    fn = builder or {"sinusoidal": trig.sinusoidal, "sinusoidal-learned": trig.sinusoidal_learned,
                     "rope": trig.rope}[scheme]
    return config, module, fn(config, module, manifest), manifest


def run(model, outputs=None, **feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(outputs, feeds)


def theta32(p, module, width=None):
    """The float32 angle: float32(pos (+ offset)) * float32 w, one rounding (numpy's IEEE)."""
    offset = int(getattr(module, "offset", 0))
    w = module.inv_freq.numpy().astype(np.float32)[:width]
    return (p + offset).astype(np.float32)[:, None] * w[None, :]


def cos_sin(p, module, width=None):
    t = theta32(p, module, width).astype(np.float64)
    c, s = np.cos(t), np.sin(t)
    if getattr(module, "scaled", False):
        a = module.scale.numpy().astype(np.float64)[:width]
        c, s = c * a, s * a
    return c, s


def rotate64(x, c, s, layout, r):
    """``x [..., d]`` rotated in float64 by ``c``/``s`` ``[..., d/2]`` (broadcast)."""
    x = x.astype(np.float64)
    if layout == "interleaved":
        even, odd = x[..., 0::2], x[..., 1::2]
        k = even.shape[-1]
        c, s = c[..., :k], s[..., :k]
        out = np.stack([even * c - odd * s, even * s + odd * c], axis=-1)
        return out.reshape(x.shape)
    h = r // 2
    first, second = x[..., :h], x[..., h:r]
    c, s = c[..., :h], s[..., :h]
    return np.concatenate([first * c - second * s, first * s + second * c, x[..., r:]], axis=-1)


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_theta_is_the_float32_product_bitwise():
    for scheme, params in (("sinusoidal", {"offset": "2"}), ("rope", None)):
        _, module, model, _ = make(scheme, 16, 6, params)
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            "theta", onnx.TensorProto.FLOAT, None))
        got = run(model, ["theta"], positions=P)[0]
        np.testing.assert_array_equal(got.view(np.uint32), theta32(P, module).view(np.uint32))
        inits = {i.name for i in model.graph.initializer}
        assert "inv_freq" in inits and ("offset" in inits) == (scheme == "sinusoidal")


@pytest.mark.parametrize("params", [None, {"layout": "half"}, {"offset": "-3"}])
def test_sinusoidal_graph(params):
    config, module, model, _ = make("sinusoidal", 16, 6, params)
    out = run(model, positions=P)[0]
    c, s = cos_sin(P, module)
    want = (np.hstack([s, c]) if module.layout == "half"
            else np.stack([s, c], axis=-1).reshape(len(P), 6))
    assert out.shape == (len(P), 6) and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=0, atol=COSSIN)
    assert [o.name for o in model.graph.output] == ["pe"] and dims(model.graph.output[0]) == [
        "N", 6]
    assert [i.name for i in model.graph.input] == ["positions"]
    assert model.graph.name == "edgepe_sinusoidal"
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Sin") == ops.count("Cos") == 1 and "Mul" in ops


def test_sinusoidal_float16():
    _, module, model, _ = make("sinusoidal", 16, 6, dtype="float16")
    out = run(model, positions=P)[0]
    c, s = cos_sin(P, module)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, np.stack([s, c], -1).reshape(len(P), 6), atol=2.0**-11)


def test_sinusoidal_learned_graph():
    """The fixed part extrapolates; the residual row is added at 0 .. L-1 only."""
    config, module, model, _ = make("sinusoidal-learned", 16, 6)
    residual = np.random.default_rng(0).normal(0, 0.5, (16, 6)).astype(np.float32)
    with torch.no_grad():
        module.residual.copy_(torch.from_numpy(residual))
    model = trig.sinusoidal_learned(config, module,
                                    base_manifest(config, output_shape(config), "float32"))
    p = np.array([-(2**40), -1, 0, 1, 15, 16, 17, 2**33], dtype=np.int64)
    out = run(model, positions=p)[0]
    c, s = cos_sin(p, module)
    fixed = np.stack([s, c], -1).reshape(len(p), 6)
    inside = (p >= 0) & (p < 16)
    want = fixed + np.where(inside[:, None], residual[np.clip(p, 0, 15)], 0)
    np.testing.assert_allclose(out[~inside], fixed[~inside], rtol=0, atol=COSSIN)
    np.testing.assert_allclose(out[inside], want[inside], rtol=0, atol=COSSIN + 2.0**-22)
    assert model.graph.name == "edgepe_sinusoidal_learned"
    assert "Clip" not in {n.op_type for n in model.graph.node}  # int64 Clip is wrong past 2^31


@pytest.mark.parametrize("params", [None, {"rope_type": "yarn", "factor": 8.0,
                                           "original_max_position_embeddings": 4}])
def test_rope_encode_graph(params):
    config, module, model, _ = make("rope", 16, 8, params)
    out = run(model, positions=P)[0]
    c, s = cos_sin(P, module)
    a = float(module.scale.max()) if params else 1.0
    assert (a > 1) == bool(params)
    np.testing.assert_allclose(out, np.hstack([c, s]), rtol=0, atol=a * COSSIN + 2.0**-23)
    assert model.graph.name == "edgepe_rope" and dims(model.graph.output[0]) == ["N", 8]
    inits = {i.name for i in model.graph.initializer}
    assert ("attention_factor" in inits) == bool(params)


def test_rope_cache_graph():
    config, module, model, _ = make("rope", 16, 8, {"rotary_dim": 4},
                                    extra={"rope_graph": "cache"})
    pe, cos_cache, sin_cache = run(model, ["pe", "cos_cache", "sin_cache"], positions=P)
    c, s = cos_sin(P, module)
    np.testing.assert_allclose(pe, np.hstack([c, s]), rtol=0, atol=COSSIN)
    np.testing.assert_array_equal(cos_cache, pe[:, :2])  # the first R/2 slots, the same values
    np.testing.assert_array_equal(sin_cache, pe[:, 4:6])
    assert [o.name for o in model.graph.output] == ["pe", "cos_cache", "sin_cache"]
    assert [dims(o) for o in model.graph.output] == [["N", 8], ["N", 2], ["N", 2]]
    assert model.graph.name == "edgepe_rope_cache"
    _, _, f16, _ = make("rope", 16, 8, extra={"rope_graph": "cache"}, dtype="float16")
    assert {o.type.tensor_type.elem_type for o in f16.graph.output} == {
        onnx.TensorProto.FLOAT16}
    assert {r.dtype for r in run(f16, positions=P)} == {np.dtype(np.float16)}


APPLY = [(lowering, params) for lowering in trig.ROPE_LOWERINGS for params in (
    None, {"layout": "half"}, {"layout": "half", "rotary_dim": 4}, {"rotary_dim": 4},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4})]


@pytest.mark.parametrize("lowering,params", APPLY)
def test_rope_apply_graph(lowering, params):
    opset = 23 if lowering == "rotary23" else 18
    config, module, model, manifest = make(
        "rope", 16, 8, params, opset=opset,
        extra={"rope_graph": "apply", "rope_lowering": lowering})
    x = np.random.default_rng(1).uniform(-0.5, 0.5, (2, len(P), 8)).astype(np.float32)
    y = run(model, x=x, positions=P)[0]
    c, s = cos_sin(P, module)
    a = float(module.scale.max()) if getattr(module, "scaled", False) else 1.0
    want = rotate64(x, c, s, module.layout, module.rotary_dim)
    assert y.shape == x.shape
    np.testing.assert_allclose(y, want, rtol=0, atol=a * ROTATED + 2.0**-22)
    assert [i.name for i in model.graph.input] == ["x", "positions"]
    assert [dims(i) for i in model.graph.input] == [["B", "N", 8], ["N"]]
    assert [o.name for o in model.graph.output] == ["y"] and dims(model.graph.output[0]) == [
        "B", "N", 8]
    assert read_manifest_prop(model)["shape"] == ["B", "N", 8]
    assert model.graph.name == f"edgepe_rope_apply_{lowering}"
    imports = {o.domain: o.version for o in model.opset_import}
    assert imports == ({"": opset, "com.microsoft": 1} if lowering == "ort" else {"": opset})
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == (0 if lowering == "onnx" else 1)
    for node in rotary:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["interleaved"] == int(module.layout == "interleaved")
        assert node.domain == ("com.microsoft" if lowering == "ort" else "")
        assert attrs.get("rotary_embedding_dim", 8) == module.rotary_dim


@pytest.mark.parametrize("lowering,params", APPLY)
def test_rope_apply_4d_graph(lowering, params):
    opset = 23 if lowering == "rotary23" else 18
    config, module, model, _ = make("rope", 16, 8, params, opset=opset,
                                    extra={"rope_graph": "apply-4d", "rope_lowering": lowering})
    p = np.array([[0, 5, -3, 17], [2**20, 1, 1, 9]], dtype=np.int64)  # [B, S]
    x = np.random.default_rng(2).uniform(-0.5, 0.5, (2, 3, 4, 8)).astype(np.float32)
    y = run(model, x=x, positions=p)[0]
    c, s = cos_sin(p.reshape(-1), module)
    c, s = c.reshape(2, 1, 4, -1), s.reshape(2, 1, 4, -1)  # the same rotation for every head
    a = float(module.scale.max()) if getattr(module, "scaled", False) else 1.0
    np.testing.assert_allclose(y, rotate64(x, c, s, module.layout, module.rotary_dim), rtol=0,
                               atol=a * ROTATED + 2.0**-22)
    assert [dims(i) for i in model.graph.input] == [["B", "H", "S", 8], ["B", "S"]]
    assert dims(model.graph.output[0]) == ["B", "H", "S", 8]
    assert model.graph.name == f"edgepe_rope_apply_4d_{lowering}"
    for node in (n for n in model.graph.node if n.op_type == "RotaryEmbedding"):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["interleaved"] == int(module.layout == "interleaved")
        assert attrs.get("rotary_embedding_dim", 8) == module.rotary_dim


def test_rope_apply_float16_output():
    _, module, model, _ = make("rope", 16, 8, dtype="float16",
                               extra={"rope_graph": "apply", "rope_lowering": "ort"})
    x = np.full((1, len(P), 8), 0.5, np.float32)
    y = run(model, x=x, positions=P)[0]
    assert y.dtype == np.float16
    c, s = cos_sin(P, module)
    np.testing.assert_allclose(y, rotate64(x, c, s, "interleaved", 8), atol=2.0**-11)


def test_rope_choice_defaults_and_refusals():
    def config(mode="compute", **extra):
        return ExportConfig(scheme=resolve("rope", 16, 8, None, None), mode=mode, extra=extra)

    assert trig.rope_choice(config()) == ("encode", "onnx")
    assert trig.rope_choice(config(rope_graph="apply-4d", rope_lowering="ort")) == (
        "apply-4d", "ort")
    assert trig.rope_choice(config("sliced", rope_lowering="rotary23")) == ("encode", "rotary23")
    with pytest.raises(BadParameterError, match=r"^--rope-graph 'rotate' is not one of: encode, "
                       r"cache, apply, apply-4d$"):
        trig.rope_choice(config(rope_graph="rotate"))
    with pytest.raises(BadParameterError, match=r"^--rope-lowering 'trt' is not one of: onnx, "
                       r"ort, rotary23$"):
        trig.rope_choice(config(rope_lowering="trt"))
    for bad in (config(rope_lowering="ort"), config(rope_graph="cache", rope_lowering="ort"),
                config("sliced", rope_graph="cache", rope_lowering="ort")):
        with pytest.raises(BadParameterError, match=r"^--rope-lowering ort lowers the rotation: "
                           r"add --rope-graph apply \(or --mode sliced, whose angle additions it "
                           r"fuses\)$"):
            trig.rope_choice(bad)


def test_rope_cache_graph_takes_the_given_sin_cos():
    """``sin_cos`` reaches every rope graph, the cache one too: ``--mode sliced``'s cache graph
    has no Sin/Cos and is within the sliced bound of the float64 definition."""
    from edgepe.graphs import sliced

    config, module, model, manifest = make("rope", 16, 8, builder=sliced.rope, mode="sliced",
                                           extra={"rope_graph": "cache"})
    assert not {"Sin", "Cos"} & {n.op_type for n in model.graph.node}
    p = np.arange(-15, 16, dtype=np.int64)
    pe, cos_cache = run(model, ["pe", "cos_cache"], positions=p)
    t = p.astype(np.float64)[:, None] * module.inv_freq.numpy().astype(np.float64)[None, :]
    bound = sliced.bound(sliced.plan_of(config))
    assert np.abs(pe - np.hstack([np.cos(t), np.sin(t)])).max() <= bound
    np.testing.assert_array_equal(cos_cache, pe[:, :4])


@pytest.mark.parametrize("section", [(2, 3, 3), (1, 2, 1, 2)], ids=["qwen2-vl", "four"])
def test_mrope_graph_takes_each_slot_from_its_stream(section):
    """``positions [N, 3] -> [cos | sin]``: slot ``i`` at the float32 angle
    ``float32(pos[stream(i)]) * w_i`` (bitwise the product), stream ``j mod 3`` for section
    ``j`` written out here, cos/sin within 1e-6 of float64 cos/sin of that angle; streams
    that differ (and negative, far positions) so that a wrong stream shows."""
    params = {"mrope_section": ",".join(map(str, section)), "base": 100.0}
    config, module, model, manifest = make("mrope", 64, 2 * sum(section), params,
                                           builder=trig.mrope)
    stream = np.concatenate([[j % 3] * size for j, size in enumerate(section)])
    gen = np.random.default_rng(3)
    p = np.concatenate([gen.integers(-70000, 2**24, (40, 3)), [[2**24, -(2**24), 0]]])
    p = p.astype(np.int64)
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        "theta", onnx.TensorProto.FLOAT, None))
    pe, got = run(model, positions=p)
    half = sum(section)
    w = module.inv_freq.numpy()
    theta = p.astype(np.float32)[:, stream] * w[None, :]  # one float32 rounding
    np.testing.assert_array_equal(got.view(np.uint32), theta.view(np.uint32))
    assert pe.shape == (len(p), 2 * half) and pe.dtype == np.float32
    np.testing.assert_allclose(pe[:, :half], np.cos(theta.astype(np.float64)), rtol=0, atol=COSSIN)
    np.testing.assert_allclose(pe[:, half:], np.sin(theta.astype(np.float64)), rtol=0, atol=COSSIN)
    assert {v.name: dims(v) for v in model.graph.input} == {"positions": ["N", 3]}
    assert [(v.name, dims(v)) for v in model.graph.output[:1]] == [("pe", ["N", 2 * half])]
    assert model.graph.name == "edgepe_mrope"


def test_mrope_float16():
    """``--dtype float16``: the float32 cos/sin cast once at the end (within half an ulp of
    float16 at values <= 1, 2^-11, plus the float32 error)."""
    params = {"mrope_section": "1,1,2", "base": 100.0}
    _, module, model, _ = make("mrope", 16, 8, params, builder=trig.mrope, dtype="float16")
    p = np.array([[0, 1, 2], [7, -9, 4096], [2**24, 5, -70000]], dtype=np.int64)
    (pe,) = run(model, positions=p)
    theta = p.astype(np.float32)[:, [0, 1, 2, 2]] * module.inv_freq.numpy()[None, :]
    want = np.hstack([np.cos(theta.astype(np.float64)), np.sin(theta.astype(np.float64))])
    assert pe.dtype == np.float16 and model.graph.output[0].type.tensor_type.elem_type == \
        onnx.TensorProto.FLOAT16
    np.testing.assert_allclose(pe, want, rtol=0, atol=2.0**-11 + COSSIN)
