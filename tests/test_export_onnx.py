"""ONNX export: every bit/integer compute graph and every table graph against the reference.

Parity is checked on onnxruntime CPU over every position ``0 .. max_len - 1`` plus an
out-of-range probe (wrap/extrapolate per the scheme; tables clamp), for ``max_len`` 1, powers of
two, ``2^k - 1`` and 1000, at the default width and at one that is not a multiple of 8. Exact
schemes compare exactly, the others with ``spec.tolerance``.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _export_helpers import (
    BIT_FAMILY,
    INT64_MAX,
    INT64_MIN,
    INTEGER_FAMILY,
    LENGTHS,
    assert_parity,
    feeds_for,
    graph,
    odd_width,
    reference,
    run_ort,
)

from edgepe.contract.errors import BadParameterError
from edgepe.graphs._common import embedded_manifest, onnx_section, read_manifest_prop
from edgepe.schemes import get_spec, scheme_ids

WIDTHS = ["default", "odd"]


def _case(scheme, max_len, width, **options):
    d, params = odd_width(scheme, max_len) if width == "odd" else (None, {})
    return graph(scheme, max_len, d, params=params, randomise=True, **options)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("max_len", LENGTHS)
@pytest.mark.parametrize("lowering", ["bitwise", "arith"])
@pytest.mark.parametrize("scheme", BIT_FAMILY)
def test_bit_family_compute_parity(scheme, lowering, max_len, width):
    config, module, model = _case(scheme, max_len, width, lowering=lowering)
    feeds = feeds_for(config)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("max_len", LENGTHS)
@pytest.mark.parametrize("scheme", INTEGER_FAMILY)
def test_integer_family_compute_parity(scheme, max_len, width):
    config, module, model = _case(scheme, max_len, width)
    feeds = feeds_for(config)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("max_len", [1, 7, 64, 1000])
@pytest.mark.parametrize("scheme", [s for s in scheme_ids() if "table" in get_spec(s).modes])
def test_table_parity(scheme, max_len, width):
    if width == "odd" and get_spec(scheme).kind == "bias":
        config, module, model = graph(scheme, max_len, heads=3, mode="table", randomise=True)
    else:
        config, module, model = _case(scheme, max_len, width, mode="table")
    feeds = feeds_for(config)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize("scheme", BIT_FAMILY)
def test_arith_lowering_equals_bitwise(scheme):
    """The two lowerings give identical outputs, including negative and huge positions."""
    bitwise = _case(scheme, 300, "odd", lowering="bitwise")
    arith = _case(scheme, 300, "odd", lowering="arith")
    feeds = feeds_for(bitwise[0])
    np.testing.assert_array_equal(run_ort(bitwise[2], feeds), run_ort(arith[2], feeds))
    ops = {n.op_type for n in onnx.load_from_string(arith[2]).graph.node}
    assert not ops & {"BitShift", "BitwiseAnd", "BitwiseXor", "BitwiseOr", "BitwiseNot"}


@pytest.mark.parametrize(
    ("scheme", "options"),
    [("binary-bits", {"dtype": "uint8"}), ("gray", {"dtype": "uint8", "lowering": "arith"}),
     ("binary-2d", {"dtype": "uint8"}), ("hierarchical", {"dtype": "uint8", "mode": "table"}),
     ("binary", {"dtype": "float16"}), ("integer-learnable", {"dtype": "float16"}),
     ("rope", {"dtype": "float16", "mode": "table"}),
     ("alibi", {"dtype": "float16", "mode": "table"})],
)
def test_output_dtypes(scheme, options):
    config, module, model = graph(scheme, 100, **options)
    out = onnx.load_from_string(model).graph.output[0]
    expected = {"uint8": onnx.TensorProto.UINT8, "float16": onnx.TensorProto.FLOAT16}
    assert out.type.tensor_type.elem_type == expected[config.dtype]
    feeds = feeds_for(config)
    got = run_ort(model, feeds)
    assert got.dtype == np.dtype(config.dtype)
    assert_parity(config, got, reference(config, module, feeds))


def test_uint8_graph_never_casts_to_float():
    _, _, model = graph("gray", 100, dtype="uint8")
    casts = [n for n in onnx.load_from_string(model).graph.node if n.op_type == "Cast"]
    to = {a.i for n in casts for a in n.attribute if a.name == "to"}
    assert to == {onnx.TensorProto.UINT64, onnx.TensorProto.UINT8}


@pytest.mark.parametrize(
    ("scheme", "options", "needle"),
    [("binary", {"dtype": "bit"}, "--format npy"),
     ("binary", {"dtype": "uint8"}, "uint8"),
     ("binary-signed", {"dtype": "uint8"}, "exactly 0 or 1"),
     ("sinusoidal", {"lowering": "arith"}, "bit family"),
     ("binary", {"lowering": "arith", "mode": "table"}, "compute graphs"),
     ("binary", {"opset": 17}, "BitwiseAnd needs opset 18"),
     ("integer", {"opset": 12}, "Unsqueeze needs opset 13"),
     ("binary", {"opset": 26}, "too high")],
)
def test_refused_options_name_the_problem(scheme, options, needle):
    with pytest.raises(BadParameterError, match=needle.replace("(", r"\(")):
        graph(scheme, 64, **options)


def test_lower_opsets_work_where_the_ops_allow():
    """Without bitwise ops (arith lowering, tables, integer graphs) opset 13 is enough."""
    for scheme, options in [("gray", {"lowering": "arith"}), ("integer-norm", {}),
                            ("alibi", {"mode": "table"})]:
        config, module, model = graph(scheme, 50, opset=13, **options)
        assert onnx.load_from_string(model).opset_import[0].version == 13
        feeds = feeds_for(config)
        assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


def test_table_cap_is_checked_before_allocating():
    with pytest.raises(BadParameterError, match="--mode compute"):
        graph("binary-bits", 2**30, mode="table", max_table_bytes=10**6)  # 124 GiB: never built
    with pytest.raises(BadParameterError, match="max-table-bytes"):
        graph("learned", 1000, mode="table", max_table_bytes=1000)


@pytest.mark.parametrize(
    ("scheme", "options"),
    [("binary", {}), ("gray", {"lowering": "arith"}), ("binary-2d", {}),
     ("integer-learnable", {}), ("hierarchical", {"mode": "table"}), ("alibi", {"mode": "table"}),
     ("binary-smooth", {"dtype": "float32"})],
)
def test_onnx_reference_evaluator_agrees(scheme, options):
    from onnx.reference import ReferenceEvaluator

    config, module, model = graph(scheme, 40, randomise=True, **options)
    feeds = feeds_for(config)
    got = ReferenceEvaluator(model).run(None, feeds)[0]
    assert_parity(config, got, reference(config, module, feeds))


def test_graph_size_is_close_to_its_information():
    """binary L=512 d=64: the 10 x 64 float32 weights plus a few hundred bytes."""
    _, _, model = graph("binary", 512)
    proto = onnx.load_from_string(model)
    sizes = {t.name: len(t.raw_data) for t in proto.graph.initializer}
    assert sizes.pop("projection_scaled") == 10 * 64 * 4
    assert sum(sizes.values()) <= 200
    assert len(proto.graph.node) <= 4  # Cast to int32, BitwiseAnd, Cast, Gemm
    assert len(model) <= 1.25 * 2560 + 600  # issue 8's bound; includes the manifest


def test_embedded_manifest_leaves_out_only_what_the_graph_says_itself(tmp_path):
    from edgepe import api

    config = api.make_config("gray", 16, out=tmp_path / "g.onnx")
    result, _ = api.export(config, verify=False)
    model = onnx.load(str(result.path))
    embedded = read_manifest_prop(model)
    sidecar = json.loads((tmp_path / "g.onnx.json").read_text())
    assert embedded["scheme"] == "gray" and embedded["mode"] == "compute"
    assert set(sidecar) - set(embedded) == {"onnx", "inputs", "sha256"}
    assert embedded == {k: sidecar[k] for k in embedded}
    # the sidecar's onnx section is the graph's own header
    assert sidecar["onnx"] == onnx_section(model)
    assert sidecar["onnx"]["opset"] == 18 and sidecar["onnx"]["extra_opsets"] == {}
    assert sidecar["onnx"]["ir_version"] == model.ir_version <= 13
    assert sidecar["onnx"]["inputs"] == [{"name": "positions", "dtype": "int64",
                                          "shape": ["N"]}]
    assert sidecar["onnx"]["outputs"] == [{"name": "pe", "dtype": "float32",
                                           "shape": ["N", config.scheme.d_model]}]
    assert sidecar["inputs"] == json.loads(json.dumps(config.inputs()))
    assert json.loads(json.dumps(embedded)) == embedded


def test_export_twice_is_byte_identical_and_sha256_matches(tmp_path):
    from edgepe import api
    from edgepe.contract.checkpoint import sha256_file

    paths = []
    for name in ("a.onnx", "b.onnx"):
        config = api.make_config("binary", 512, out=tmp_path / name)
        result, report = api.export(config, verify=False)
        assert report is None
        paths.append(result.path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    for path in paths:
        manifest = json.loads((tmp_path / f"{path.name}.json").read_text())
        assert manifest["sha256"] == sha256_file(path)
        embedded = read_manifest_prop(onnx.load(str(path)))
        assert embedded_manifest(manifest) == embedded


def test_api_export_runs_the_quick_parity_check(tmp_path):
    from edgepe import api

    config = api.make_config("gray", 100, out=tmp_path / "g.onnx")
    result, report = api.export(config)
    assert report and "PASSED" in str(report) and "\n" not in str(report)
    again, _ = api.export(config, verify=False)
    assert again.unchanged


def test_api_checkpoint_is_hashed(tmp_path):
    import torch

    from edgepe import api
    from edgepe.contract.checkpoint import sha256_file
    from edgepe.contract.errors import CheckpointError
    from edgepe.schemes import build, resolve

    module = build(resolve("binary", 64, 16), seed=7)
    ckpt = tmp_path / "demo.pt"
    torch.save(module.state_dict(), ckpt)
    config = api.make_config("binary", 64, d_model=16, checkpoint=ckpt, out=tmp_path / "b.onnx")
    assert config.checkpoint_sha256 == sha256_file(ckpt)
    result, report = api.export(config)
    assert report
    weights = {t.name: t for t in onnx.load(str(result.path)).graph.initializer}
    stored = onnx.numpy_helper.to_array(weights["projection_scaled"])  # row k times 2^-k
    np.testing.assert_array_equal(np.ldexp(stored, np.arange(stored.shape[0])[:, None]),
                                  module.projection.weight.detach().numpy().T)
    with pytest.raises(CheckpointError, match="does not exist"):
        api.make_config("binary", 64, checkpoint=tmp_path / "missing.pt")


def test_arith_lowering_refuses_widths_past_62_and_bitwise_takes_them():
    with pytest.raises(BadParameterError, match="up to 62"):
        graph("hierarchical", 8, params={"widths": "63,4"}, lowering="arith")
    config, module, model = graph("hierarchical", 8, params={"widths": "63,4"})
    feeds = feeds_for(config)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


def test_make_config_refuses_onnx_problems_before_building_anything():
    """make_config builds no module: a 768 MB learned table is refused there, not after."""
    from edgepe import api

    with pytest.raises(BadParameterError, match="max-table-bytes"):
        api.make_config("learned", 3 * 10**6, mode="table")
    with pytest.raises(BadParameterError, match="uint8"):
        api.make_config("binary", 512, dtype="uint8")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", BIT_FAMILY)
def test_bit_family_sweep_large(scheme):
    """Exhaustive sweep: every position below 2^18 and 250,000 random int64, both lowerings."""
    import torch

    length = 2**18 - 1
    rng = np.random.default_rng(7)
    random = rng.integers(INT64_MIN, INT64_MAX, 250_000, dtype=np.int64, endpoint=True)
    config, module, bitwise = graph(scheme, length, randomise=True)
    _, _, arith = graph(scheme, length, randomise=True, lowering="arith")
    limit = config.scheme.spec.position_limit
    for values in (np.arange(length + 1, dtype=np.int64), random):
        if limit is not None:
            values = values[np.abs(values) <= limit]
        if config.scheme.arity:
            values = np.stack([np.roll(values, k) for k in range(config.scheme.arity)], axis=1)
        feeds = {"positions": values}
        got = run_ort(bitwise, feeds)
        np.testing.assert_array_equal(got, run_ort(arith, feeds))
        with torch.no_grad():
            expected = module.encode(torch.from_numpy(values)).numpy()
        assert_parity(config, got, expected)


@pytest.mark.parametrize("scheme", ["binary", "fourier-binary"])
@pytest.mark.parametrize("max_len", [1, 300, 1024])
def test_projection_schemes_use_the_mask_form_bit_for_bit(scheme, max_len):
    """binary/fourier-binary: positions Cast to int32, BitwiseAnd with int32 masks, one Cast,
    one Gemm; outputs equal bit for bit to the 0/1-bits MatMul (the arith lowering) over
    0 .. L - 1, negatives and int64's extremes (2^31, 2^32 - 1, 2^32 among them: the int32
    cast keeps the low 32 bits)."""
    config, _, model = _case(scheme, max_len, "odd")
    assert [n.op_type for n in onnx.load_from_string(model).graph.node] == [
        "Cast", "BitwiseAnd", "Cast", "Gemm"]
    _, _, arith = _case(scheme, max_len, "odd", lowering="arith")
    feeds = feeds_for(config)
    got, want = run_ort(model, feeds), run_ort(arith, feeds)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_mask_weights_undo_exactly_for_every_bit_up_to_63():
    """``float32(int64 mask 2^k) * scaled_k == w_k`` bit for bit, ``k = 63`` (INT64_MIN) too."""
    from edgepe.graphs.bits import _mask_weights

    w = np.random.default_rng(0).standard_normal((64, 5)).astype(np.float32)
    scaled = _mask_weights(w)
    masks = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64)).view(np.int64)
    back = masks.astype(np.float32)[:, None] * scaled
    assert np.array_equal(back.view(np.uint32), w.view(np.uint32))
    assert np.all(np.sign(scaled[63]) == -np.sign(w[63]))
    assert _mask_weights(np.ones((65, 2), np.float32)) is None  # no int64 mask for bit 64


def test_int32_masks_undo_exactly_for_every_bit_up_to_31():
    """The int32 front end: ``float32(int32 mask 2^k) * scaled_k == w_k`` bit for bit, the sign
    bit ``k = 31`` (INT32_MIN, float -2^31) too; 33 bits need the int64 masks."""
    from edgepe.graphs.bits import _mask_weights, bit_masks, mask_width

    w = np.random.default_rng(1).standard_normal((32, 5)).astype(np.float32)
    scaled = _mask_weights(w, 32)
    masks = bit_masks(32, 32)
    assert masks.dtype == np.int32 and masks[31] == np.iinfo(np.int32).min
    back = masks.astype(np.float32)[:, None] * scaled
    assert np.array_equal(back.view(np.uint32), w.view(np.uint32))
    assert np.all(np.sign(scaled[31]) == -np.sign(w[31]))
    assert _mask_weights(np.ones((33, 2), np.float32), 32) is None
    assert mask_width(32) == 32 and mask_width(33) == 64


def test_mask_form_falls_back_to_shifts_where_scaling_is_not_exact():
    """A weight whose 2^-k scaling would be subnormal keeps the shift form, and parity."""
    import io

    import torch

    from edgepe.export import ExportConfig, prepare
    from edgepe.schemes import build, resolve

    s = resolve("binary", 512, 8)
    module = build(s, seed=0)
    with torch.no_grad():
        module.projection.weight[3, 9] = 1e-37  # 1e-37 * 2^-9 < float32's smallest normal
    config = ExportConfig(s, mode="compute")
    buffer = io.BytesIO()
    prepare(config, module).write(buffer)
    model = buffer.getvalue()
    ops = [n.op_type for n in onnx.load_from_string(model).graph.node]
    assert "BitShift" in ops and "MatMul" in ops and "Gemm" not in ops
    feeds = feeds_for(config)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize("scheme,options", [
    (s, {}) for s in scheme_ids() if "table" in get_spec(s).modes] + [
        ("sinusoidal", {"dtype": "float16"}), ("gray", {"dtype": "uint8"})])
def test_a_streamed_table_file_is_the_model_built_in_memory(scheme, options):
    """The exported file (model, then the table appended as a second message that protobuf
    merges) parses to the graph ``table.build`` makes in memory: the same nodes, inputs, outputs,
    manifest and initializers (the table moved to the end), the table bit for bit, and it passes
    the full checker."""
    from edgepe.graphs.table import TABLE, build

    config, module, data = graph(scheme, 37, mode="table", randomise=True, **options)
    streamed = onnx.load_from_string(data)
    onnx.checker.check_model(streamed, full_check=True)
    whole = build(config, module, read_manifest_prop(streamed))
    names = [t.name for t in whole.graph.initializer]
    assert [t.name for t in streamed.graph.initializer] == [n for n in names if n != TABLE] + [
        TABLE]
    order = sorted(whole.graph.initializer, key=lambda t: t.name == TABLE)
    del whole.graph.initializer[:]
    whole.graph.initializer.extend(order)
    assert streamed == whole
