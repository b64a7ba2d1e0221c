"""graft's splicing at known values (edgepe.graft.splice; issue 33: mutmut survivors): tiny ONNX
models built here, a PE put in with ``graft_model`` / ``splice_found``, the result run on
onnxruntime against values computed in numpy, and every refusal's message. The graft tests
(tests/test_graft*.py) graft exported models end to end; these pin each branch of the splice.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.graft import splice
from edgepe.graft.splice import Positions, graft_model

prove = importlib.import_module("edgepe.graft.prove")

L, D = 8, 4
T = np.arange(L * D, dtype=np.float64).reshape(L, D) / 4  # row p: 4p/4 .. (4p + 3)/4
MANIFEST = {"kind": "pe", "scheme": "sinusoidal", "d_model": D, "max_len": L, "sha256": "ab",
            "inputs": {"x": 1}, "onnx": {"opset": 18}}


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs, outputs, inits=(), opset=18, ir=8):
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _user(pos_elem=TensorProto.INT64, pos_dims=("B", "S"), pos_name="pos", h_elem=None):
    """``y = Neg(Relu(x))`` with a positions input; the PE goes at ``h = Relu(x)``."""
    inputs = [_vi("x", TensorProto.FLOAT, ["B", "S", D])]
    if pos_name:
        inputs.append(_vi(pos_name, pos_elem, list(pos_dims)))
    return _model([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                   helper.make_node("Neg", ["h"], ["y"], name="neg")],
                  inputs, [_vi("y", TensorProto.FLOAT, ["B", "S", D])])


def _pe(rows=T):
    return prove.table_pe(rows, 18)


def _run(model, **feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


X = np.linspace(-2, 2, 2 * 3 * D, dtype=np.float32).reshape(2, 3, D)
IDS = np.array([[7, 0, 3], [1, 1, 6]])


# ---- Positions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "name", "axis", "back"), [
    ("pos", "input", "pos", None, "pos"), ("arange:x", "arange", "x", None, "arange:x"),
    ("arange:x:2", "arange", "x", 2, "arange:x:2"), ("arange:x:-1", "arange", "x", -1,
                                                     "arange:x:-1"),
    ("arange:x:", "arange", "x", None, "arange:x"), ("arange:x:0", "arange", "x", 0,
                                                     "arange:x:0")])
def test_positions_parse_and_str(text, kind, name, axis, back):
    got = Positions.parse(text)
    assert (got.kind, got.name, got.axis) == (kind, name, axis)
    assert str(got) == back
    assert Positions.parse(got) is got


@pytest.mark.parametrize(("text", "message"), [
    ("arange:", "--positions arange:INPUT needs an input name"),
    ("arange::1", "--positions arange:INPUT needs an input name"),
    ("arange:x:a", "--positions 'arange:x:a': the axis must be an integer"),
    ("arange:x:1:2", "--positions 'arange:x:1:2': the axis must be an integer"),
    # (int() would take neither: one line, not a traceback)
    ("arange:x:--1", "--positions 'arange:x:--1': the axis must be an integer"),
    ("arange:x:\u00b2", "--positions 'arange:x:\u00b2': the axis must be an integer"),
    ("arange:x:-", "--positions 'arange:x:-': the axis must be an integer"),
    ("", "--positions needs an input name, or arange:INPUT")])
def test_positions_parse_refuses(text, message):
    with pytest.raises(BadParameterError) as exc:
        Positions.parse(text)
    assert str(exc.value) == message


# ---- names --------------------------------------------------------------------------------------


def _with_subgraphs():
    """An If whose branches read the outer ``a``, and a custom node with a list of graphs."""
    then = helper.make_graph([helper.make_node("Identity", ["a"], ["t_out"], name="t_node")],
                             "then", [], [_vi("t_out", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["b"], ["e_out"], name="e_node")],
                              "else", [], [_vi("e_out", TensorProto.FLOAT, [2])])
    listed = helper.make_graph([helper.make_node("Abs", ["c"], ["l_out"], name="l_node")],
                               "listed", [], [_vi("l_out", TensorProto.FLOAT, [2])],
                               value_info=[_vi("l_vi", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["cond"], ["r"], name="if", then_branch=then, else_branch=other)
    custom = helper.make_node("Custom", ["r"], ["s"], name="custom", domain="my")
    custom.attribute.append(helper.make_attribute("graphs", [listed]))
    graph = helper.make_graph([node, custom], "g", [_vi("cond", TensorProto.BOOL, [])],
                              [_vi("s", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.ones(2, np.float32), "a")],
                              value_info=[_vi("vi", TensorProto.FLOAT, [2])])
    return graph


def test_names_and_used_reach_into_subgraphs():
    graph = _with_subgraphs()
    assert splice._names(graph) == {"cond", "s", "a", "vi", "r", "if", "custom", "t_out",
                                    "t_node", "e_out", "e_node", "b", "l_out", "l_node", "c",
                                    "l_vi"}
    assert splice._used(graph) == {"cond", "r", "a", "b", "c"}
    assert splice._tensor_names(graph) == ["cond", "r", "s"]


def test_free_prefix_skips_names_and_records_taken():
    model = _user()
    assert splice._free_prefix(model) == ("edgepe_pe0/", 0)
    model.graph.node[0].output[0] = "edgepe_pe0/h"
    assert splice._free_prefix(model) == ("edgepe_pe1/", 1)
    entry = model.metadata_props.add()
    entry.key = "edgepe.graft.1"
    assert splice._free_prefix(model) == ("edgepe_pe2/", 2)
    # a name that merely contains the prefix does not take it
    other = _user()
    other.graph.node[0].output[0] = "my_edgepe_pe0/h"
    assert splice._free_prefix(other) == ("edgepe_pe0/", 0)


def test_opset_reads_the_default_domain():
    model = _user()
    model.opset_import.insert(0, helper.make_opsetid("com.microsoft", 1))
    assert splice._opset(model) == 18
    model.opset_import[1].domain = "ai.onnx"
    assert splice._opset(model) == 18


def test_value_type_from_inputs_or_shape_inference():
    model = _model([helper.make_node("Relu", ["w"], ["h"]),
                    helper.make_node("Cast", ["h"], ["c"], to=TensorProto.INT32),
                    helper.make_node("Identity", ["u"], ["v"]),
                    helper.make_node("Identity", ["x"], ["x2"])],
                   [_vi("x", TensorProto.FLOAT, ["B", 3, None]),
                    _vi("w", TensorProto.FLOAT, ["B", 3, "W"]),
                    helper.make_tensor_value_info("u", TensorProto.FLOAT16, None)],
                   [_vi("c", TensorProto.INT32, None), _vi("v", TensorProto.FLOAT16, None),
                    _vi("x2", TensorProto.FLOAT, None)])
    assert splice._value_type(model, "x") == (TensorProto.FLOAT, ["B", 3, None])
    assert splice._value_type(model, "h") == (TensorProto.FLOAT, ["B", 3, "W"])
    assert splice._value_type(model, "c") == (TensorProto.INT32, ["B", 3, "W"])
    assert splice._value_type(model, "u") == (TensorProto.FLOAT16, None)
    assert splice._value_type(model, "nope") == (None, None)
