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


# ---- graft_model: where the PE goes, what it replaces, what it records --------------------------


def _relu(x):
    return np.maximum(x, 0)


def test_graft_replaces_a_node_output_read_by_position_ids():
    model = _user()
    before = model.SerializeToString()
    relu = model.graph.node[0]
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert model.SerializeToString() == before  # the input model is left as it was
    out = _run(grafted.model, x=X, pos=IDS)
    assert out.tolist() == (-T[IDS]).astype(np.float32).tolist()
    assert (grafted.at, grafted.positions, grafted.prefix) == ("h", Positions("input", "pos"),
                                                                "edgepe_pe0/")
    assert (grafted.add, grafted.from_input, grafted.new_input, grafted.converted) == (
        False, False, False, False)
    assert (grafted.seq_dim, grafted.removed_nodes) == ("S", 1)
    # the Relu as it stood in the copy (its output renamed to the graft's dead name)
    dead = onnx.NodeProto()
    dead.CopyFrom(relu)
    dead.output[0] = "edgepe_pe0/graft0/replaced"
    assert grafted.removed_bytes == dead.ByteSize()
    graph = grafted.model.graph
    assert [n.op_type for n in graph.node] == ["Shape", "Reshape", "Gather", "Concat", "Reshape",
                                               "Neg"]
    assert graph.node[-2].name == "edgepe_pe0/graft0/out" and graph.node[-2].output == ["h"]
    assert [v.name for v in graph.input] == ["x", "pos"]
    new_nodes = list(graph.node)[:-1]
    inits = list(graph.initializer)
    assert grafted.pe_bytes == sum(n.ByteSize() for n in new_nodes) + sum(
        t.ByteSize() for t in inits)
    (entry,) = grafted.model.metadata_props
    assert entry.key == "edgepe.graft.0" and grafted.metadata_bytes == entry.ByteSize()
    assert json.loads(entry.value) == {
        "at": "h", "positions": "pos", "add": False, "sha256": "ab",
        "manifest": {"kind": "pe", "scheme": "sinusoidal", "d_model": D, "max_len": L}}
    assert entry.value == json.dumps(json.loads(entry.value), sort_keys=True)
    onnx.checker.check_model(grafted.model, full_check=True)


def test_graft_casts_narrow_integer_positions():
    for elem, dtype in ((TensorProto.INT32, np.int32), (TensorProto.UINT8, np.uint8),
                        (TensorProto.INT16, np.int16), (TensorProto.INT8, np.int8),
                        (TensorProto.UINT16, np.uint16), (TensorProto.UINT32, np.uint32)):
        grafted = graft_model(_user(elem), _pe(), MANIFEST, "h", "pos")
        cast = grafted.model.graph.node[0]
        assert (cast.op_type, cast.output[0]) == ("Cast", "edgepe_pe0/graft0/positions_int64")
        out = _run(grafted.model, x=X, pos=IDS.astype(dtype))
        assert out.tolist() == (-T[IDS]).astype(np.float32).tolist()


@pytest.mark.parametrize(("elem", "word"), [(TensorProto.FLOAT, "float"),
                                            (TensorProto.BOOL, "bool"),
                                            (TensorProto.UINT64, "uint64")])
def test_graft_refuses_positions_that_are_not_integers(elem, word):
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(elem), _pe(), MANIFEST, "h", "pos")
    assert str(exc.value) == f"--positions 'pos' is {word}; positions are integers"


def test_graft_adds_to_a_node_output():
    grafted = graft_model(_user(), _pe(), MANIFEST, "h", "pos", add=True)
    out = _run(grafted.model, x=X, pos=IDS)
    assert out.tolist() == (-(_relu(X) + T[IDS].astype(np.float32))).tolist()
    assert grafted.add and grafted.removed_nodes == 0 and grafted.removed_bytes == 0
    assert json.loads(grafted.model.metadata_props[0].value)["add"] is True


def test_graft_adds_to_a_model_input_which_keeps_its_name():
    grafted = graft_model(_user(), _pe(), MANIFEST, "x", "pos", add=True)
    out = _run(grafted.model, x=X, pos=IDS)
    assert out.tolist() == (-_relu(X + T[IDS].astype(np.float32))).tolist()
    assert grafted.from_input and grafted.add
    assert [v.name for v in grafted.model.graph.input] == ["x", "pos"]
    assert grafted.model.graph.node[-2].input == ["edgepe_pe0/graft0/sum"]


def test_graft_replaces_a_model_input():
    grafted = graft_model(_user(), _pe(), MANIFEST, "x", "pos")
    assert [v.name for v in grafted.model.graph.input] == ["pos"]
    out = _run(grafted.model, pos=IDS)
    assert out.tolist() == (-_relu(T[IDS].astype(np.float32))).tolist()
    assert grafted.from_input and not grafted.add and grafted.removed_nodes == 0


def test_graft_rank_1_positions_need_no_reshape():
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["S", D]), _vi("pos", TensorProto.INT64, ["S"])],
                   [_vi("y", TensorProto.FLOAT, ["S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert [n.op_type for n in grafted.model.graph.node] == ["Gather", "Neg"]
    assert grafted.seq_dim == "S"
    assert _run(grafted.model, x=X[0], pos=IDS[0]).tolist() == (-T[IDS[0]]).astype(
        np.float32).tolist()
    # rows [S, D] for a tensor [B, S, D]: unsqueezed in front ([1, S, D])
    wide = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                  [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                   _vi("pos", TensorProto.INT64, ["S"])],
                  [_vi("y", TensorProto.FLOAT, ["B", "S", D])])
    grafted = graft_model(wide, _pe(), MANIFEST, "h", "pos")
    unsqueeze = grafted.model.graph.node[1]
    assert unsqueeze.op_type == "Unsqueeze" and unsqueeze.output == ["h"]
    lead = {t.name: numpy_helper.to_array(t) for t in grafted.model.graph.initializer}
    assert lead["edgepe_pe0/graft0/lead"].tolist() == [0]
    assert _run(grafted.model, x=X, pos=IDS[0]).tolist() == [(-T[IDS[0]]).astype(
        np.float32).tolist()]


def test_graft_positions_of_unknown_rank_fail_the_checker_in_one_line():
    """onnx's full check wants every input's shape: an input of unknown rank is refused once
    grafted, by the checker, in one line."""
    model = _user()
    model.graph.input[1].type.tensor_type.ClearField("shape")
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert str(exc.value) == ("the grafted model does not pass onnx.checker: Field 'shape' of "
                              "'type' is required but missing.")


def test_graft_rank_2_positions_into_a_rank_4_tensor():
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["A", "B", "S", D]),
                    _vi("pos", TensorProto.INT64, ["B", "S"])],
                   [_vi("y", TensorProto.FLOAT, ["A", "B", "S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    lead = {t.name: numpy_helper.to_array(t) for t in grafted.model.graph.initializer}
    assert lead["edgepe_pe0/graft0/lead"].tolist() == [0]
    assert _run(grafted.model, x=X[None], pos=IDS).tolist() == [(-T[IDS]).astype(
        np.float32).tolist()]
    # rank 3 positions into a rank-3 tensor: refused by shape
    deep = _user(pos_dims=("B", "S", "K"))
    with pytest.raises(BadParameterError) as exc:
        graft_model(deep, _pe(), MANIFEST, "h", "pos")
    assert str(exc.value) == ("shape mismatch: tensor 'h' has shape ['B', 'S', 4], the PE outputs "
                              "rank 4 [..., 4]")


def test_graft_rank_too_small_is_refused():
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [D]), _vi("pos", TensorProto.INT64, ["S"])],
                   [_vi("y", TensorProto.FLOAT, [D])])
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert str(exc.value) == ("shape mismatch: tensor 'h' has shape [4], the PE outputs rank 2 "
                              "[..., 4]")


@pytest.mark.parametrize(("spec", "axis", "seq", "rows"), [
    ("arange:x", 1, "S", 3), ("arange:x:1", 1, "S", 3), ("arange:x:-2", 1, "S", 3),
    ("arange:x:0", 0, "B", 2), ("arange:x:-3", 0, "B", 2)])
def test_graft_arange_positions(spec, axis, seq, rows):
    grafted = graft_model(_user(pos_name=None), _pe(), MANIFEST, "h", spec)
    assert grafted.positions == Positions("arange", "x", axis)
    assert str(grafted.positions) == f"arange:x:{axis}" and grafted.seq_dim == seq
    assert not grafted.new_input
    shape = grafted.model.graph.node[0]
    assert shape.op_type == "Shape" and [(a.name, a.i) for a in shape.attribute] == [
        ("end", axis + 1), ("start", axis)]
    x = np.zeros((2, 3, D), np.float32) if rows == 3 else np.zeros((2, 2, D), np.float32)
    assert _run(grafted.model, x=x).tolist() == [(-T[:rows]).astype(np.float32).tolist()]


def test_graft_arange_defaults():
    # a rank-1 input: axis 0
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["S"]), _vi("z", TensorProto.FLOAT, ["S", D])],
                   [_vi("y", TensorProto.FLOAT, ["S"])])
    model.graph.node[0].input[0] = "z"
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = D
    grafted = graft_model(model, _pe(), MANIFEST, "h", "arange:x")
    assert grafted.positions == Positions("arange", "x", 0) and grafted.seq_dim == "S"
    out = _run(grafted.model, x=np.zeros(5, np.float32), z=np.zeros((5, D), np.float32))
    assert out.tolist() == (-T[:5]).astype(np.float32).tolist()


@pytest.mark.parametrize(("spec", "message"), [
    ("arange:x:3", "--positions arange:x:3: axis 3 is outside 'x''s 3 axes"),
    ("arange:x:-4", "--positions arange:x:-4: axis -4 is outside 'x''s 3 axes"),
    ("arange:h", "--positions arange:h: 'h' is not a model input; inputs: x, pos"),
    ("relu", "--positions 'relu' names a tensor inside the model; it must be a model input (or "
             "a new name)"),
    ("h", "--positions 'h' names a tensor inside the model; it must be a model input (or a new "
          "name)")])
def test_graft_refuses_positions(spec, message):
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(), _pe(), MANIFEST, "h", spec)
    assert str(exc.value) == message


def test_graft_picks_positions_by_name_else_arange_of_the_first_input():
    assert graft_model(_user(pos_name="position_ids"), _pe(), MANIFEST, "h").positions == \
        Positions("input", "position_ids")
    assert graft_model(_user(pos_name="positions"), _pe(), MANIFEST, "h").positions == \
        Positions("input", "positions")
    both = _user(pos_name="positions")
    both.graph.input.append(_vi("position_ids", TensorProto.INT64, ["B", "S"]))
    assert graft_model(both, _pe(), MANIFEST, "h").positions == Positions("input", "position_ids")
    assert graft_model(_user(), _pe(), MANIFEST, "h").positions == Positions("arange", "x", 1)


def test_graft_a_new_positions_input():
    grafted = graft_model(_user(pos_name=None), _pe(), MANIFEST, "h", "p")
    assert grafted.new_input and grafted.seq_dim == "S"
    new = grafted.model.graph.input[-1]
    assert new.name == "p" and splice._value_type(grafted.model, "p") == (TensorProto.INT64,
                                                                          ["S"])
    out = _run(grafted.model, x=X, p=IDS[0])
    assert out.tolist() == [(-T[IDS[0]]).astype(np.float32).tolist()]
    # the tensor's axis before last has no name and size 0: the new input's axis is 'S'
    model = _user(pos_name=None)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 0
    assert graft_model(model, _pe(), MANIFEST, "h", "p").seq_dim == "S"
    model = _user(pos_name=None)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "T"
    assert graft_model(model, _pe(), MANIFEST, "h", "p").seq_dim == "T"


# ---- graft_model's refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(("manifest", "message"), [
    ({**MANIFEST, "kind": "bias"}, "graft takes a 'pe' artifact with positions [N]; this one is "
                                   "'sinusoidal' of kind 'bias'"),
    ({**MANIFEST, "positions": {"arity": 2}}, "graft takes a 'pe' artifact with positions [N]; "
                                              "this one is 'sinusoidal' of kind 'pe'"),
    ({"scheme": "x"}, "graft takes a 'pe' artifact with positions [N]; this one is 'x' of kind "
                      "None")])
def test_graft_takes_pe_artifacts_with_one_position_input(manifest, message):
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(), _pe(), manifest, "h", "pos")
    assert str(exc.value) == message
    # positions recorded without an arity (or arity 0) are [N]
    for positions in ({}, {"arity": 0}, None):
        graft_model(_user(), _pe(), {**MANIFEST, "positions": positions}, "h", "pos")


def test_graft_refuses_a_tensor_that_is_not_there():
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(), _pe(), MANIFEST, "hh", "pos")
    assert str(exc.value) == ("tensor 'hh' is not in the model (--at names a node output or a "
                              "model input). Did you mean 'h'?")
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(), _pe(), MANIFEST, "zzzz", "pos")
    assert str(exc.value) == ("tensor 'zzzz' is not in the model (--at names a node output or a "
                              "model input).")
    # an input's name is a candidate too
    with pytest.raises(BadParameterError, match=r"Did you mean 'pos'\?$"):
        graft_model(_user(), _pe(), MANIFEST, "poss", "pos")


def test_graft_refuses_a_tensor_that_is_an_input_and_an_output():
    model = _user()
    model.graph.output.append(_vi("x", TensorProto.FLOAT, ["B", "S", D]))
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "x", "pos")
    assert str(exc.value) == "tensor 'x' is both a model input and output; nothing to graft"
    # a node output that is also a model output is grafted (the PE makes it now)
    model = _user()
    model.graph.output.append(_vi("h", TensorProto.FLOAT, ["B", "S", D]))
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 1


@pytest.mark.parametrize(("elem", "message"), [
    (TensorProto.FLOAT16, "tensor 'h' is float16; the PE outputs float32: export it with --dtype "
                          "float16"),
    (TensorProto.UINT8, "tensor 'h' is uint8; the PE outputs float32: export it with --dtype "
                        "uint8"),
    (TensorProto.INT32, "tensor 'h' is int32; the PE outputs float32"),
    (TensorProto.DOUBLE, "tensor 'h' is double; the PE outputs float32")])
def test_graft_refuses_another_dtype(elem, message):
    model = _user()
    model.graph.node[0].op_type = "Cast"
    model.graph.node[0].attribute.append(helper.make_attribute("to", elem))
    model.graph.node[1].op_type = "Identity"
    model.graph.output[0].type.tensor_type.elem_type = elem
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert str(exc.value) == message


def test_graft_names_a_float16_pe_for_a_float32_tensor():
    pe = _pe()
    pe.graph.node.append(helper.make_node("Cast", ["pe"], ["pe16"], to=TensorProto.FLOAT16))
    pe.graph.output[0].name = "pe16"
    pe.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    with pytest.raises(BadParameterError) as exc:
        graft_model(_user(), pe, MANIFEST, "h", "pos")
    assert str(exc.value) == ("tensor 'h' is float32; the PE outputs float16: export it with "
                              "--dtype float32")
    # an unknown PE output type (elem 7, int64) is named by its number
    pe.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(BadParameterError, match=r"^tensor 'h' is float32; the PE outputs 7: "):
        graft_model(_user(), pe, MANIFEST, "h", "pos")


@pytest.mark.parametrize(("dims", "shown"), [(["B", "S", 5], "['B', 'S', 5]"), ([], "[]")])
def test_graft_refuses_a_shape_that_does_not_fit(dims, shown):
    model = _user()
    model.graph.input[0].type.tensor_type.shape.Clear()
    for d in dims:
        dim = model.graph.input[0].type.tensor_type.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = d
    model.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "x", "pos")
    assert str(exc.value) == (f"shape mismatch: tensor 'x' has shape {shown}, the PE outputs "
                              "[N, 4] ('sinusoidal' d_model 4)")


def test_graft_takes_a_last_axis_by_name_or_of_size_d_model():
    for last in ("D", D):
        model = _user()
        dim = model.graph.input[0].type.tensor_type.shape.dim[2]
        if isinstance(last, str):
            dim.dim_param = last
        else:
            dim.dim_value = last
        assert graft_model(model, _pe(), MANIFEST, "x", "pos").from_input


# ---- opsets, IR version, value_info -------------------------------------------------------------


def test_graft_converts_the_pe_to_the_models_opset_and_keeps_extra_domains():
    model = _user()
    model.opset_import[0].version = 17
    pe = _pe()
    pe.opset_import.append(helper.make_opsetid("com.example", 3))
    pe.ir_version = 8
    grafted = graft_model(model, pe, MANIFEST, "h", "pos")
    assert not grafted.converted
    assert sorted((o.domain, o.version) for o in grafted.model.opset_import) == [
        ("", 17), ("com.example", 3)]
    # the model's own domain version is kept, not the PE's
    model = _user()
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    grafted = graft_model(model, pe, MANIFEST, "h", "pos")
    assert sorted((o.domain, o.version) for o in grafted.model.opset_import) == [
        ("", 18), ("com.example", 1)]


def test_graft_converts_the_model_up_when_the_pe_needs_it():
    model = _user()
    model.opset_import[0].version = 17
    before = model.SerializeToString()
    pe = _pe()  # BitwiseAnd exists from opset 18 on
    pe.graph.node.insert(0, helper.make_node("BitwiseAnd", ["positions", "positions"], ["p2"]))
    pe.graph.node[1].input[1] = "p2"
    grafted = graft_model(model, pe, MANIFEST, "h", "pos")
    assert grafted.converted and splice._opset(grafted.model) == 18
    assert model.SerializeToString() == before
    assert _run(grafted.model, x=X, pos=IDS).tolist() == (-T[IDS]).astype(np.float32).tolist()


def test_graft_raises_the_ir_version_to_what_the_model_needs():
    pe = _pe()
    pe.ir_version = 10
    assert graft_model(_user(), pe, MANIFEST, "h", "pos").model.ir_version == 10
    pe.ir_version = 3  # opset 18 needs IR 8
    model = _user()
    model.ir_version = 3
    assert graft_model(model, pe, MANIFEST, "h", "pos").model.ir_version == 8
    model.ir_version = 9
    assert graft_model(model, pe, MANIFEST, "h", "pos").model.ir_version == 9


def test_graft_drops_the_value_info_of_replaced_tensors_and_adds_the_pes():
    model = _user()
    model.graph.value_info.extend([_vi("h", TensorProto.FLOAT, ["B", "S", D]),
                                   _vi("y2", TensorProto.FLOAT, [1])])
    pe = _pe()
    pe.graph.value_info.append(_vi("inner", TensorProto.FLOAT, ["N", D]))
    grafted = graft_model(model, pe, MANIFEST, "h", "pos")
    assert [v.name for v in grafted.model.graph.value_info] == ["y2", "edgepe_pe0/inner"]
    # grafting into a graft: the names and the metadata key of the first are taken
    again = graft_model(grafted.model, _pe(), MANIFEST, "h", "pos")
    assert again.prefix == "edgepe_pe1/"
    assert [p.key for p in again.model.metadata_props] == ["edgepe.graft.0", "edgepe.graft.1"]
    assert again.metadata_bytes == again.model.metadata_props[1].ByteSize()


def test_graft_names_of_its_own_avoid_the_pes():
    pe = _pe()
    pe.graph.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), "graft0/x"))
    grafted = graft_model(_user(), pe, MANIFEST, "h", "pos")
    assert grafted.model.graph.node[0].name == "edgepe_pe0/graft1/positions_shape"
    assert _run(grafted.model, x=X, pos=IDS).tolist() == (-T[IDS]).astype(np.float32).tolist()


def test_slim_keeps_what_the_graph_stores():
    assert splice._slim(MANIFEST) == {"kind": "pe", "scheme": "sinusoidal", "d_model": D,
                                      "max_len": L}
    quant = {"bound": 0.5, "scale": [1.0, 2.0], "axis": 1, "runtime": "fold"}
    assert splice._slim({**MANIFEST, "quant": quant, "weights_from": "w.pt"}) == {
        "kind": "pe", "scheme": "sinusoidal", "d_model": D, "max_len": L,
        "quant": {"bound": 0.5, "axis": 1, "runtime": "fold"}, "weights_from": "w.pt"}
    assert splice._slim({**MANIFEST, "quant": None})["quant"] is None


# ---- the replaced producer's cone ---------------------------------------------------------------


def _chain(extra_nodes=(), extra_outputs=(), extra_inits=()):
    """``h = Relu(x * c)``, ``y = -h``: replacing h leaves Mul and Relu (and c) dead."""
    c = numpy_helper.from_array(np.full(D, 3.0, np.float32), "c")
    model = _model([helper.make_node("Mul", ["x", "c"], ["m"], name="mul"),
                    helper.make_node("Relu", ["m"], ["h"], name="relu"),
                    helper.make_node("Neg", ["h"], ["y"], name="neg"), *extra_nodes],
                   [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                    _vi("pos", TensorProto.INT64, ["B", "S"])],
                   [_vi("y", TensorProto.FLOAT, ["B", "S", D]), *extra_outputs],
                   [c, *extra_inits])
    return model


def _bytes(model, *names):
    nodes = {n.name: n for n in model.graph.node}
    inits = {t.name: t for t in model.graph.initializer}
    total = 0
    for name in names:
        item = onnx.NodeProto() if name in nodes else onnx.TensorProto()
        item.CopyFrom(nodes.get(name) or inits[name])
        if name == "relu":
            item.output[0] = "edgepe_pe0/graft0/replaced"
        total += item.ByteSize()
    return total


def test_the_dead_cone_and_its_initializers_are_removed():
    model = _chain()
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 2
    assert grafted.removed_bytes == _bytes(model, "mul", "relu", "c")
    assert "c" not in {t.name for t in grafted.model.graph.initializer}
    assert not {"mul", "relu"} & {n.name for n in grafted.model.graph.node}
    assert _run(grafted.model, x=X, pos=IDS).tolist() == (-T[IDS]).astype(np.float32).tolist()


@pytest.mark.parametrize("how", ["node", "output", "subgraph"])
def test_a_cone_node_read_elsewhere_is_kept(how):
    """m = x * c is read by another node, is a model output, or is read inside a subgraph: Mul
    (and c) stay, only the Relu goes."""
    if how == "node":
        model = _chain([helper.make_node("Abs", ["m"], ["z"], name="abs")],
                       [_vi("z", TensorProto.FLOAT, ["B", "S", D])])
    elif how == "output":
        model = _chain(extra_outputs=[_vi("m", TensorProto.FLOAT, ["B", "S", D])])
    else:
        branch = helper.make_graph([helper.make_node("Identity", ["m"], ["b_out"])], "b", [],
                                   [_vi("b_out", TensorProto.FLOAT, ["B", "S", D])])
        model = _chain([helper.make_node("If", ["flag"], ["z"], name="if", then_branch=branch,
                                         else_branch=branch)],
                       [_vi("z", TensorProto.FLOAT, ["B", "S", D])],
                       [numpy_helper.from_array(np.array(True), "flag")])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 1 and grafted.removed_bytes == _bytes(model, "relu")
    assert "c" in {t.name for t in grafted.model.graph.initializer}
    assert "mul" in {n.name for n in grafted.model.graph.node}


def test_an_initializer_read_elsewhere_or_an_output_is_kept():
    model = _chain([helper.make_node("Add", ["y", "c"], ["z"], name="add")],
                   [_vi("z", TensorProto.FLOAT, ["B", "S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 2 and grafted.removed_bytes == _bytes(model, "mul", "relu")
    assert "c" in {t.name for t in grafted.model.graph.initializer}
    model = _chain(extra_outputs=[_vi("c", TensorProto.FLOAT, [D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_bytes == _bytes(model, "mul", "relu")
    # an initializer no removed node read stays (dead or not: not the graft's to drop)
    model = _chain(extra_inits=[numpy_helper.from_array(np.zeros(1, np.float32), "unused")])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert "unused" in {t.name for t in grafted.model.graph.initializer}
    assert grafted.removed_bytes == _bytes(model, "mul", "relu", "c")


def test_remove_dead_without_a_producer_changes_nothing():
    model = _chain()
    nodes = list(model.graph.node)
    result = splice._remove_dead(model.graph, nodes, None)
    assert result == {"nodes": nodes, "names": set(), "count": 0, "bytes": 0}
    nodes[1].output[0] = "dead"  # as the splice renames a replaced producer's output
    result = splice._remove_dead(model.graph, nodes, [nodes[1]])
    assert (result["count"], result["names"]) == (2, {"m", "dead", "c"})
    assert [n.name for n in result["nodes"]] == ["neg"]


# ---- splice_found -------------------------------------------------------------------------------


COS, SIN = T / 32, -T / 32


def _two_tables():
    """``y = cos * sin`` with cos and sin rows gathered by position_ids."""
    return _model([helper.make_node("Gather", ["C", "position_ids"], ["cos"], name="gc"),
                   helper.make_node("Gather", ["S", "position_ids"], ["sin"], name="gs"),
                   helper.make_node("Mul", ["cos", "sin"], ["y"], name="mul")],
                  [_vi("position_ids", TensorProto.INT64, ["B", "S"])],
                  [_vi("y", TensorProto.FLOAT, ["B", "S", D])],
                  [numpy_helper.from_array(COS.astype(np.float32), "C"),
                   numpy_helper.from_array(SIN.astype(np.float32), "S")])


def _pe_two(scale=False):
    """positions [N] (and ``scale`` [1]) -> rows of 2 COS and 2 SIN (times scale)."""
    nodes = [helper.make_node("Gather", ["tc", "positions"], ["c_raw" if scale else "c_out"]),
             helper.make_node("Gather", ["ts", "positions"], ["s_out"])]
    inputs = [_vi("positions", TensorProto.INT64, ["N"])]
    if scale:
        nodes.append(helper.make_node("Mul", ["c_raw", "scale"], ["c_out"]))
        inputs.append(_vi("scale", TensorProto.FLOAT, [1]))
    return _model(nodes, inputs, [_vi("c_out", TensorProto.FLOAT, ["N", D]),
                                  _vi("s_out", TensorProto.FLOAT, ["N", D])],
                  [numpy_helper.from_array(2 * COS.astype(np.float32), "tc"),
                   numpy_helper.from_array(2 * SIN.astype(np.float32), "ts")])


def test_splice_found_puts_the_pe_outputs_in_place_of_the_tensors():
    model = _two_tables()
    before = model.SerializeToString()
    grafted = splice.splice_found(model, _pe_two(), {"c_out": "cos", "s_out": "sin"},
                                  "position_ids", {"scheme": "rope", "n": 1})
    assert model.SerializeToString() == before
    want = (4 * COS[IDS] * SIN[IDS]).astype(np.float32)
    assert _run(grafted.model, position_ids=IDS).tolist() == want.tolist()
    assert (grafted.at, grafted.positions, grafted.prefix) == (
        "cos, sin", Positions("input", "position_ids"), "edgepe_pe0/")
    assert (grafted.add, grafted.from_input, grafted.new_input, grafted.converted,
            grafted.seq_dim) == (False, False, False, False, None)
    assert grafted.removed_nodes == 2
    gc, gs = (onnx.NodeProto(), onnx.NodeProto())
    gc.CopyFrom(model.graph.node[0])
    gc.output[0] = "edgepe_pe0/replaced0"
    gs.CopyFrom(model.graph.node[1])
    gs.output[0] = "edgepe_pe0/replaced1"
    assert grafted.removed_bytes == gc.ByteSize() + gs.ByteSize() + sum(
        t.ByteSize() for t in model.graph.initializer)
    graph = grafted.model.graph
    assert [n.output[0] for n in graph.node] == ["cos", "sin", "y"]
    assert [t.name for t in graph.initializer] == ["edgepe_pe0/tc", "edgepe_pe0/ts"]
    assert grafted.pe_bytes == sum(n.ByteSize() for n in list(graph.node)[:2]) + sum(
        t.ByteSize() for t in graph.initializer)
    (entry,) = grafted.model.metadata_props
    assert (entry.key, entry.value) == ("edgepe.graft.0", '{"n": 1, "scheme": "rope"}')
    assert grafted.metadata_bytes == entry.ByteSize()


def test_splice_found_feeds_a_second_input_with_the_condition():
    model = _two_tables()
    model.graph.input.append(_vi("factor", TensorProto.FLOAT, [1]))
    grafted = splice.splice_found(model, _pe_two(scale=True), {"c_out": "cos", "s_out": "sin"},
                                  "position_ids", {}, condition="factor")
    got = _run(grafted.model, position_ids=IDS, factor=np.array([3.0], np.float32))
    assert got.tolist() == (12 * COS[IDS] * SIN[IDS]).astype(np.float32).tolist()


def test_splice_found_replaces_a_constant_the_model_reads_as_is():
    """A tensor that is an initializer (MPT's bias): dropped, its bytes counted; the PE, with no
    input, goes first."""
    bias = numpy_helper.from_array(np.ones((L, D), np.float32), "bias")
    model = _model([helper.make_node("Add", ["x", "bias"], ["y"], name="add")],
                   [_vi("x", TensorProto.FLOAT, [L, D])], [_vi("y", TensorProto.FLOAT, [L, D])],
                   [bias])
    pe = _model([helper.make_node("Neg", ["t"], ["b_out"])], [],
                [_vi("b_out", TensorProto.FLOAT, [L, D])],
                [numpy_helper.from_array(T.astype(np.float32), "t")])
    pe.graph.ClearField("input")
    grafted = splice.splice_found(model, pe, {"b_out": "bias"}, "unused", {})
    assert grafted.removed_nodes == 0 and grafted.removed_bytes == bias.ByteSize()
    assert [n.op_type for n in grafted.model.graph.node] == ["Neg", "Add"]
    assert [t.name for t in grafted.model.graph.initializer] == ["edgepe_pe0/t"]
    x = np.zeros((L, D), np.float32)
    assert _run(grafted.model, x=x).tolist() == (-T).astype(np.float32).tolist()


def test_splice_found_drops_the_value_info_of_what_it_replaced():
    model = _two_tables()
    model.graph.value_info.extend([_vi("cos", TensorProto.FLOAT, ["B", "S", D]),
                                   _vi("y", TensorProto.FLOAT, ["B", "S", D])])
    model.ir_version = 3
    grafted = splice.splice_found(model, _pe_two(), {"c_out": "cos", "s_out": "sin"},
                                  "position_ids", {})
    assert [v.name for v in grafted.model.graph.value_info] == ["y"]
    assert grafted.model.ir_version == 8  # what opset 18 needs


def test_record_and_check_stores_the_record_and_refuses_a_broken_model():
    model = _user()
    entry = splice._record_and_check(model, 3, {"b": 1, "a": [2]})
    assert (entry.key, entry.value) == ("edgepe.graft.3", '{"a": [2], "b": 1}')
    assert model.metadata_props[-1] is entry or model.metadata_props[-1] == entry
    broken = _user()
    broken.graph.node[1].input[0] = "nowhere"
    with pytest.raises(BadParameterError) as exc:
        splice._record_and_check(broken, 0, {})
    message = str(exc.value)
    assert message.startswith("the grafted model does not pass onnx.checker: ")
    assert "nowhere" in message and "\n" not in message


def test_reconcile_names_both_conversions_that_failed():
    """A PE needing opset 18 (BitwiseAnd) and a model at 17 the converter cannot take up (an op
    it does not know): one line naming both."""
    model = _user()
    model.opset_import[0].version = 17
    model.graph.node.append(helper.make_node("NoSuchOp", ["x"], ["z"]))
    pe = _pe()
    pe.graph.node.insert(0, helper.make_node("BitwiseAnd", ["positions", "positions"], ["p2"]))
    pe.graph.node[1].input[1] = "p2"
    with pytest.raises(BadParameterError) as exc:
        splice.reconcile(model, pe)
    message = str(exc.value)
    assert message.startswith("onnx's version converter takes neither the PE (opset 18) to the "
                              "model's opset 17 nor the model up to 18: ")
    assert "\n" not in message and len(message) > len("onnx's version converter takes neither "
                                                      "the PE (opset 18) to the model's opset 17 "
                                                      "nor the model up to 18: ")


# ---- names, ranks and producers the first mutmut run showed untested -----------------------------

OWN = "edgepe_pe0/graft0/"


def test_graft_names_every_node_and_constant_it_adds_under_its_own_prefix():
    """The names a grafted model carries (a user reads them in Netron): arange positions..."""
    grafted = graft_model(_user(pos_name=None), _pe(), MANIFEST, "h", "arange:x")
    graph = grafted.model.graph
    assert [n.name for n in graph.node][:3] == [OWN + "seq_len_1", OWN + "seq_len",
                                                 OWN + "arange"]
    assert [n.output[0] for n in graph.node][:3] == [OWN + "seq_len_1", OWN + "seq_len",
                                                      OWN + "arange"]
    assert graph.node[-2].name == OWN + "out" and graph.node[-2].output == ["h"]
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in graph.initializer}
    assert {k: v for k, v in inits.items() if k.startswith(OWN)} == {
        OWN + "axis0": [0], OWN + "zero": 0, OWN + "one": 1, OWN + "lead": [0]}
    assert grafted.new_input is False
    # ...flattened positions of rank 2 shaped back...
    grafted = graft_model(_user(), _pe(), MANIFEST, "h", "pos")
    graph = grafted.model.graph
    assert [n.name for n in graph.node] == [
        OWN + "positions_shape", OWN + "positions_flat", "", OWN + "pe_shape", OWN + "out",
        "neg"]
    assert [n.output[0] for n in graph.node][:4] == [
        OWN + "positions_shape", OWN + "positions_flat", "edgepe_pe0/pe", OWN + "pe_shape"]
    assert graph.node[4].input[0] == "edgepe_pe0/pe"
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in graph.initializer}
    assert inits[OWN + "flat"] == [-1] and inits[OWN + "d_model"] == [D]
    assert grafted.new_input is False
    # added to: the shaped rows keep their name, read by the sum
    grafted = graft_model(_user(), _pe(), MANIFEST, "h", "pos", add=True)
    reshape, add = grafted.model.graph.node[5:7]
    assert (reshape.name, list(reshape.output)) == (OWN + "pe_shaped", [OWN + "pe_shaped"])
    assert list(add.input) == [OWN + "replaced", OWN + "pe_shaped"] and add.output == ["h"]
    # ...an unsqueeze added to: the sum and the unsqueezed rows keep their names
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                    _vi("pos", TensorProto.INT64, ["S"])],
                   [_vi("y", TensorProto.FLOAT, ["B", "S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos", add=True)
    names = [n.name for n in grafted.model.graph.node]
    assert OWN + "pe_unsqueezed" in names and grafted.model.graph.node[names.index(
        OWN + "pe_unsqueezed")].output == [OWN + "pe_unsqueezed"]
    relu = grafted.model.graph.node[0]
    assert relu.output == [OWN + "replaced"]
    add = grafted.model.graph.node[names.index("h")]
    assert list(add.input) == [OWN + "replaced", OWN + "pe_unsqueezed"]


def test_graft_arange_of_a_rank_2_input_is_its_axis_1():
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["S", D]), _vi("ids", TensorProto.INT64,
                                                               ["B", "T"])],
                   [_vi("y", TensorProto.FLOAT, ["S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "arange:ids")
    assert grafted.positions == Positions("arange", "ids", 1) and grafted.seq_dim == "T"


def test_graft_a_new_positions_input_for_a_rank_2_tensor():
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["T", D])], [_vi("y", TensorProto.FLOAT, ["T", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "p")
    assert grafted.seq_dim == "T"
    assert _run(grafted.model, x=X[0], p=IDS[0]).tolist() == (-T[IDS[0]]).astype(
        np.float32).tolist()


def test_graft_refuses_a_last_axis_of_1():
    model = _user()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 1
    with pytest.raises(BadParameterError, match=r"^shape mismatch: tensor 'x' has shape \['B', "
                                                r"'S', 1\], the PE outputs \[N, 4\]"):
        graft_model(model, _pe(), MANIFEST, "x", "pos")


def test_graft_at_one_output_of_a_node_with_several():
    """h is one half of a Split; the other half still feeds y2: only h is replaced."""
    model = _model([helper.make_node("Split", ["x"], ["h", "g"], axis=-1, num_outputs=2),
                    helper.make_node("Neg", ["h"], ["y"]), helper.make_node("Abs", ["g"], ["y2"])],
                   [_vi("x", TensorProto.FLOAT, ["B", "S", 2 * D]),
                    _vi("pos", TensorProto.INT64, ["B", "S"])],
                   [_vi("y", TensorProto.FLOAT, ["B", "S", D]),
                    _vi("y2", TensorProto.FLOAT, ["B", "S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    split = grafted.model.graph.node[0]
    assert split.op_type == "Split" and list(split.output) == [OWN + "replaced", "g"]
    x = np.arange(2 * 3 * 2 * D, dtype=np.float32).reshape(2, 3, 2 * D)
    session = ort.InferenceSession(grafted.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    y, y2 = session.run(None, {"x": x, "pos": IDS})
    assert y.tolist() == (-T[IDS]).astype(np.float32).tolist()
    assert y2.tolist() == np.abs(x[..., D:]).tolist()


def test_graft_own_prefix_skips_every_prefix_the_pe_took():
    """A PE whose four names (input, output, table, node) each take graft0/ .. graft3/: the
    graft's own names go under graft4/ (one more than the PE has names: one is always free)."""
    pe = _pe()
    pe.graph.input[0].name = "graft0/p"
    pe.graph.output[0].name = "graft1/o"
    pe.graph.initializer[0].name = "graft2/t"
    node = pe.graph.node[0]
    node.input[:] = ["graft2/t", "graft0/p"]
    node.output[:] = ["graft1/o"]
    node.name = "graft3/n"
    grafted = graft_model(_user(), pe, MANIFEST, "h", "pos")
    assert grafted.model.graph.node[0].name == "edgepe_pe0/graft4/positions_shape"
    assert _run(grafted.model, x=X, pos=IDS).tolist() == (-T[IDS]).astype(np.float32).tolist()


def test_splice_found_replaces_several_constants_and_a_node_output():
    """Two constants the model reads as they are and one node output: both constants' bytes
    count, and the node output after them is replaced too."""
    model = _model([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                    helper.make_node("Add", ["x", "b1"], ["s1"]),
                    helper.make_node("Add", ["s1", "b2"], ["s2"]),
                    helper.make_node("Add", ["s2", "h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [L, D])], [_vi("y", TensorProto.FLOAT, [L, D])],
                   [numpy_helper.from_array(np.ones((L, D), np.float32), "b1"),
                    numpy_helper.from_array(np.ones((L, D), np.float32), "b2")])
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    model.ir_version = 3
    pe = _model([helper.make_node("Neg", ["t"], ["o1"]), helper.make_node("Abs", ["t"], ["o2"]),
                 helper.make_node("Identity", ["t"], ["o3"])], [],
                [_vi(o, TensorProto.FLOAT, [L, D]) for o in ("o1", "o2", "o3")],
                [numpy_helper.from_array(T.astype(np.float32), "t")])
    pe.graph.ClearField("input")
    grafted = splice.splice_found(model, pe, {"o1": "b1", "o2": "b2", "o3": "h"}, "unused", {})
    b1, b2 = model.graph.initializer
    relu = onnx.NodeProto()
    relu.CopyFrom(model.graph.node[0])
    relu.output[0] = "edgepe_pe0/replaced2"
    assert grafted.removed_nodes == 1
    assert grafted.removed_bytes == b1.ByteSize() + b2.ByteSize() + relu.ByteSize()
    assert grafted.model.ir_version == 8  # opset 18 (the unknown domain aside) needs IR 8
    x = np.zeros((L, D), np.float32)
    assert _run(grafted.model, x=x).tolist() == (-T + np.abs(T) + T).astype(np.float32).tolist()


def test_splice_found_at_one_output_of_a_node_with_several():
    model = _model([helper.make_node("Split", ["x"], ["h", "g"], axis=-1, num_outputs=2),
                    helper.make_node("Neg", ["h"], ["y"]), helper.make_node("Abs", ["g"], ["y2"])],
                   [_vi("x", TensorProto.FLOAT, [L, 2 * D])],
                   [_vi("y", TensorProto.FLOAT, [L, D]), _vi("y2", TensorProto.FLOAT, [L, D])])
    pe = _model([helper.make_node("Identity", ["t"], ["o"])], [],
                [_vi("o", TensorProto.FLOAT, [L, D])],
                [numpy_helper.from_array(T.astype(np.float32), "t")])
    pe.graph.ClearField("input")
    grafted = splice.splice_found(model, pe, {"o": "h"}, "unused", {})
    assert list(grafted.model.graph.node[1].output) == ["edgepe_pe0/replaced0", "g"]
    assert grafted.removed_nodes == 0


def test_graft_arange_of_an_input_of_unknown_rank():
    """Taken as rank 2 (axis 1 by default, -2 .. 1 allowed); onnx's full check then refuses the
    model (an input needs a shape), in one line either way."""
    model = _user(pos_name=None)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(BadParameterError) as exc:
        graft_model(model, _pe(), MANIFEST, "h", "arange:x:2")
    assert str(exc.value) == "--positions arange:x:2: axis 2 is outside 'x''s 2 axes"
    with pytest.raises(BadParameterError, match="^the grafted model does not pass onnx.checker: "):
        graft_model(model, _pe(), MANIFEST, "h", "arange:x")


def test_value_type_reads_a_model_shape_inference_disagrees_with():
    """A stale value_info (h declared [3], Relu of x [2]): lenient inference keeps it, strict would
    raise; graft reads models as they come."""
    model = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
    model.graph.value_info.append(_vi("h", TensorProto.FLOAT, [3]))
    assert splice._value_type(model, "h") == (TensorProto.FLOAT, [3])


def test_record_and_check_runs_the_full_check():
    """Add(float, int64) passes onnx's basic check; the full check (shape inference) refuses
    it."""
    model = _model([helper.make_node("Add", ["x", "pos"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2]), _vi("pos", TensorProto.INT64, [2])],
                   [_vi("y", TensorProto.FLOAT, [2])])
    onnx.checker.check_model(model)
    with pytest.raises(BadParameterError, match=r"^the grafted model does not pass onnx\.checker: "
                                                r"\[ShapeInferenceError\]"):
        splice._record_and_check(model, 0, {})


def test_the_dead_cone_is_walked_through_every_branch():
    """h = a + b, a = |x| + relu(x), b = -relu(x): the walk meets relu twice; all five nodes go."""
    model = _model([helper.make_node("Relu", ["x"], ["c"], name="c"),
                    helper.make_node("Abs", ["x"], ["d"], name="d"),
                    helper.make_node("Add", ["d", "c"], ["a"], name="a"),
                    helper.make_node("Neg", ["c"], ["b"], name="b"),
                    helper.make_node("Add", ["a", "b"], ["h"], name="h"),
                    helper.make_node("Neg", ["h"], ["y"], name="neg")],
                   [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                    _vi("pos", TensorProto.INT64, ["B", "S"])],
                   [_vi("y", TensorProto.FLOAT, ["B", "S", D])])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 5
    assert [n.name for n in grafted.model.graph.node][-1] == "neg"
    assert not {"a", "b", "c", "d", "h"} & {n.name for n in grafted.model.graph.node}


def test_a_cone_node_read_by_a_node_is_kept_beside_a_subgraph():
    """m (in the cone) is read by Abs; an If elsewhere reads only x in its branch: the reads of
    the subgraph add to the graph's, they do not replace them."""
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b_out"])], "b", [],
                               [_vi("b_out", TensorProto.FLOAT, ["B", "S", D])])
    model = _chain([helper.make_node("Abs", ["m"], ["z"], name="abs"),
                    helper.make_node("If", ["flag"], ["w"], name="if", then_branch=branch,
                                     else_branch=branch)],
                   [_vi("z", TensorProto.FLOAT, ["B", "S", D]),
                    _vi("w", TensorProto.FLOAT, ["B", "S", D])],
                   [numpy_helper.from_array(np.array(True), "flag")])
    grafted = graft_model(model, _pe(), MANIFEST, "h", "pos")
    assert grafted.removed_nodes == 1
    assert "mul" in {n.name for n in grafted.model.graph.node}


def test_reconcile_ends_its_line_with_the_converters_first():
    from onnx import version_converter

    model = _user()
    model.opset_import[0].version = 17
    model.graph.node.append(helper.make_node("NoSuchOp", ["x"], ["z"]))
    try:
        version_converter.convert_version(model, 18)
    except Exception as exc:  # noqa: BLE001 - what onnx says, to compare with
        first = str(exc).strip().splitlines()[0]
    pe = _pe()
    pe.graph.node.insert(0, helper.make_node("BitwiseAnd", ["positions", "positions"], ["p2"]))
    pe.graph.node[1].input[1] = "p2"
    with pytest.raises(BadParameterError) as exc:
        splice.reconcile(model, pe)
    assert str(exc.value) == ("onnx's version converter takes neither the PE (opset 18) to the "
                              f"model's opset 17 nor the model up to 18: {first}")


# ---- the range guard of RoPE's tables (issue 41) ------------------------------------------------


@pytest.mark.parametrize("elem", [TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT])
def test_range_guard_passes_0_to_max_len_and_fails_outside(elem):
    """RoPE's PE covers positions 0 .. max_len - 1: the guard gives those back unchanged and
    fails a run at -1 or max_len (the model's own cos/sin would answer there)."""
    pe = helper.make_model(helper.make_graph(
        [], "pe", [_vi("p", elem, ["N"])], [_vi("p", elem, ["N"])]))
    guard, name = splice._range_guard(pe, "g/", "pos", {"scheme": "rope", "max_len": 5})
    assert name == "g/range_guard/positions"
    model = helper.make_model(helper.make_graph(
        list(guard.node), "m", [_vi("pos", elem, ["N"])], [_vi(name, elem, ["N"])],
        list(guard.initializer)), opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    inside = np.arange(5).astype(dtype)
    assert session.run(None, {"pos": inside})[0].tolist() == inside.tolist()
    for bad in ([0, 5], [-1, 2], [1 << 20]):
        with pytest.raises(Exception, match="out of"):
            session.run(None, {"pos": np.asarray(bad).astype(dtype)})
    # not RoPE, or no max_len: no nodes, the positions themselves
    for record in ({"scheme": "learned", "max_len": 5}, {"scheme": "rope"}):
        none, same = splice._range_guard(pe, "g/", "pos", record)
        assert (list(none.node), same) == ([], "pos")


def test_splice_found_guards_rope_and_counts_the_guard_in_the_pe():
    """With the record's max_len, RoPE's PE reads the guarded positions: the same values at
    0 .. max_len - 1, a failed run past them; the guard's bytes are the PE's."""
    rows = len(COS)
    plain = splice.splice_found(_two_tables(), _pe_two(), {"c_out": "cos", "s_out": "sin"},
                                "position_ids", {"scheme": "rope"})
    guarded = splice.splice_found(_two_tables(), _pe_two(), {"c_out": "cos", "s_out": "sin"},
                                  "position_ids", {"scheme": "rope", "max_len": rows})
    assert _run(guarded.model, position_ids=IDS).tolist() == \
        _run(plain.model, position_ids=IDS).tolist()
    with pytest.raises(Exception, match="out of"):
        _run(guarded.model, position_ids=np.full_like(IDS, rows))
    guard, name = splice._range_guard(_pe_two(), "edgepe_pe0/", "position_ids",
                                      {"scheme": "rope", "max_len": rows})
    longer = 2 * (len(name) - len("position_ids"))  # the two Gathers read the longer name
    assert guarded.pe_bytes - plain.pe_bytes == sum(n.ByteSize() for n in guard.node) + sum(
        t.ByteSize() for t in guard.initializer) + longer
    assert [n.op_type for n in guarded.model.graph.node][:7] == [
        "Less", "Less", "Not", "Or", "Cast", "Gather", "Add"]
