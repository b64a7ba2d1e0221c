"""The builders' shared pieces (edgepe/graphs/_common.py): opset limits at their edges, the
``Graph`` recorder's names, ``make_model``'s header and manifest, and the ``onnx`` section read
back (issue 33: the mutation run of that module runs these first; milliseconds each).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgepe.contract.errors import BadParameterError
from edgepe.contract.version import __version__
from edgepe.graphs import _common as c


def test_opset_limit_at_max_and_one_above():
    assert c.MAX_OPSET == 25
    c.check_opset([], 25)  # at the limit: accepted
    with pytest.raises(BadParameterError) as info:
        c.check_opset([], 26)
    assert str(info.value) == ("--opset 26 is too high: the installed onnxruntime loads opsets "
                               "up to 25 (IR version 13)")


def test_the_op_needing_the_highest_opset_is_named():
    nodes = [helper.make_node("Add", ["a", "b"], ["c"]),           # opset 1 (14 for bf16)
             helper.make_node("BitwiseAnd", ["a", "b"], ["d"]),    # opset 18
             helper.make_node("Unsqueeze", ["a", "x"], ["e"])]     # 13 (axes as an input)
    c.check_opset(nodes, 18)
    with pytest.raises(BadParameterError) as info:
        c.check_opset(nodes, 17)
    assert str(info.value) == "--opset 17 is too low: BitwiseAnd needs opset 18 or later"
    with pytest.raises(BadParameterError) as info:
        c.check_opset(nodes[::2], 12)
    assert str(info.value) == "--opset 12 is too low: Unsqueeze needs opset 13 or later"


def test_ties_name_the_first_op_in_alphabetical_order():
    nodes = [helper.make_node("BitwiseXor", ["a", "b"], ["c"]),
             helper.make_node("BitwiseAnd", ["a", "b"], ["d"])]
    with pytest.raises(BadParameterError, match="BitwiseAnd needs opset 18"):
        c.check_opset(nodes, 17)


def test_op_min_opset_of_each_kind():
    assert c.op_min_opset("BitShift") == 11
    assert c.op_min_opset("Clip") == 13  # integer Clip (FORM_OPSET)
    assert c.op_min_opset("RotaryEmbedding", "com.microsoft") == 1
    assert c.op_min_opset("Add", "ai.onnx") == c.op_min_opset("Add") == 1
    with pytest.raises(BadParameterError) as info:
        c.op_min_opset("NoSuchOp")
    assert str(info.value) == "op 'NoSuchOp' is not an ONNX operator"
    # a node of another domain needs nothing of the default opset
    c.check_opset([helper.make_node("RotaryEmbedding", ["a"], ["b"], domain="com.microsoft")], 1)


def test_const_value_dtype_and_name():
    tensor = c.const("k", [1, 2], np.int32)
    assert tensor.name == "k" and tensor.data_type == TensorProto.INT32
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensor), [1, 2])


def test_graph_names_nodes_and_constants_in_order():
    g = c.Graph("g")
    k = g.const(np.float32(2), np.float32)
    named = g.const([1], np.int64, "axes")
    y = g.op("Mul", c.POSITIONS, k, out=None)
    z = g.cast(y, "int32")
    assert (k, named, y, z) == ("c_1", "axes", "mul_2", "cast_3")
    assert [n.name for n in g.nodes] == ["n0_Mul", "n1_Cast"]
    assert helper.get_attribute_value(g.nodes[1].attribute[0]) == TensorProto.INT32
    assert g.op("Add", z, z, out="sum") == "sum"
    for dtype, elem in (("float32", TensorProto.FLOAT), ("float16", TensorProto.FLOAT16),
                        ("uint8", TensorProto.UINT8), ("uint64", TensorProto.UINT64),
                        ("int64", TensorProto.INT64), ("bool", TensorProto.BOOL)):
        g.cast("sum", dtype)
        assert g.nodes[-1].attribute[0].i == elem


def test_finish_casts_to_float16_and_renames_otherwise():
    g = c.Graph("g")
    x = g.op("Neg", c.POSITIONS)
    g.op("Abs", x)
    g.finish(x, "float32")
    assert g.nodes[0].output[0] == "pe" and list(g.nodes[1].input) == ["pe"]  # readers follow
    g = c.Graph("g")
    x = g.op("Neg", c.POSITIONS)
    g.finish(x, "float16", name="out")
    assert [n.op_type for n in g.nodes] == ["Neg", "Cast"] and g.nodes[1].output[0] == "out"
    assert g.nodes[1].attribute[0].i == TensorProto.FLOAT16


def test_rename_of_a_second_output():
    g = c.Graph("g")
    g.nodes.append(helper.make_node("Split", ["x"], ["a", "b"]))
    g.nodes.append(helper.make_node("Add", ["b", "a"], ["y"]))
    g.rename("b", "second")
    assert list(g.nodes[0].output) == ["a", "second"] and list(g.nodes[1].input) == ["second",
                                                                                    "a"]


@pytest.mark.parametrize(("low", "high"), [(0, 5), (-3, 3)])
def test_clamp_int64_on_the_extremes(low, high):
    g = c.Graph("g")
    y = c.clamp_int64(g, c.POSITIONS, low, high, "pos")
    names = [t.name for t in g.initializers]
    assert names == ["pos_low", "pos_high"]
    assert all(t.data_type == TensorProto.INT64 for t in g.initializers)
    g.rename(y, "out")
    model = helper.make_model(helper.make_graph(
        g.nodes, "g", [c.positions_input(None)],
        [helper.make_tensor_value_info("out", TensorProto.INT64, ["N"])], g.initializers),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.array([-(2**63), -4, low, 0, high, 2**31, 2**63 - 1], np.int64)
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"positions": x})[0]
    np.testing.assert_array_equal(got, np.clip(x, low, high))


def test_positions_inputs_and_outputs():
    p = c.positions_input(None)
    assert p.name == "positions" and p.type.tensor_type.elem_type == TensorProto.INT64
    assert [d.dim_param for d in p.type.tensor_type.shape.dim] == ["N"]
    p = c.positions_input(2)
    assert [d.dim_param or d.dim_value for d in p.type.tensor_type.shape.dim] == ["N", 2]
    k = c.positions_input(None, c.KEY_POSITIONS)
    assert k.name == "key_positions" and k.type.tensor_type.shape.dim[0].dim_param == "M"
    o = c.output("pe", "float16", ["N", 4])
    assert o.type.tensor_type.elem_type == TensorProto.FLOAT16


def _tiny(opset=18, extra=None, manifest=None):
    g = c.Graph("tiny")
    g.finish(g.op("Cast", c.POSITIONS, to=TensorProto.FLOAT), "float32")
    return c.make_model(g.nodes, [c.positions_input(None)], [c.output("pe", "float32", ["N"])],
                        g.initializers, opset, manifest or {"scheme": "x"}, g.name, extra)


def test_make_model_header_and_manifest():
    manifest = {"scheme": "x", "sha256": "s", "inputs": {"a": 1}, "onnx": {}, "b": [1, 2]}
    model = _tiny(opset=17, manifest=manifest)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert model.ir_version == 8  # the lowest IR version of opset 17
    assert (model.producer_name, model.producer_version) == ("edgepe", __version__)
    assert model.graph.name == "tiny"
    (prop,) = model.metadata_props
    assert prop.key == "edgepe.manifest"
    assert prop.value == '{"b":[1,2],"scheme":"x"}'  # sorted, compact, no sidecar-only fields
    assert c.read_manifest_prop(model) == {"b": [1, 2], "scheme": "x"}
    assert c.read_manifest_prop(onnx.ModelProto()) is None


def test_make_model_extra_opsets_sorted_after_the_default():
    model = _tiny(opset=21, extra={"com.microsoft": 1, "ai.onnx.ml": 3})
    assert [(o.domain, o.version) for o in model.opset_import] == [
        ("", 21), ("ai.onnx.ml", 3), ("com.microsoft", 1)]
    assert model.ir_version == 10
    section = c.onnx_section(model)
    assert section == {"opset": 21, "extra_opsets": {"ai.onnx.ml": 3, "com.microsoft": 1},
                       "ir_version": 10,
                       "inputs": [{"name": "positions", "dtype": "int64", "shape": ["N"]}],
                       "outputs": [{"name": "pe", "dtype": "float32", "shape": ["N"]}]}


def test_make_model_refuses_an_opset_too_low_for_its_ops():
    g = c.Graph("g")
    g.finish(g.op("BitwiseNot", c.POSITIONS), "float32")
    with pytest.raises(BadParameterError, match="BitwiseNot needs opset 18"):
        c.make_model(g.nodes, [c.positions_input(None)], [], [], 17, {}, "g")


def test_onnx_section_reads_the_ai_onnx_spelling_of_the_default_domain():
    model = _tiny()
    model.opset_import[0].domain = "ai.onnx"
    assert c.onnx_section(model)["opset"] == 18 and c.onnx_section(model)["extra_opsets"] == {}


def test_embedded_manifest_drops_only_the_sidecar_fields():
    assert c.embedded_manifest({"a": 1, "inputs": 2, "onnx": 3, "sha256": 4, "quant": None}) == {
        "a": 1, "quant": None}
    assert json.loads(json.dumps(c.SIDECAR_ONLY)) == ["inputs", "onnx"]
