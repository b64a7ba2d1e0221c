"""The audit of every bit-family compute graph, and the audit itself on graphs that must fail it.

DESIGN.md: bit-family compute graphs use only Cast-to-unsigned, BitShift, BitwiseAnd/Xor (and
shape plumbing) on the positions (binary/fourier-binary: BitwiseAnd alone, on int32), then a
single cast to float; no trig, no Exp, no table with a row per position.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _export_helpers import BIT_FAMILY, INTEGER_FAMILY, graph, odd_width
from onnx import TensorProto, helper

from edgepe.audit import audit

# What may touch position-derived integers before the float cast, per lowering.
BITWISE_INTEGER_OPS = {"Cast", "Unsqueeze", "Gather", "BitShift", "BitwiseAnd", "BitwiseXor"}
ARITH_INTEGER_OPS = {"Cast", "Unsqueeze", "Gather", "Mod", "Div", "Add"}
# Where integers become floats: the hybrid schemes cast the position for their linear part too;
# binary-smooth selects one of two constants per bit instead of casting.
BOUNDARIES = {"hybrid-int-binary": ["Cast", "Cast"], "binary-gated": ["Cast", "Cast"],
              "binary-smooth": ["Where"]}
# Linear projections of the bits: Cast to int32, BitwiseAnd with the masks 2^k, Cast, Gemm by
# pre-scaled weights.
MASK_FORM = {"binary", "fourier-binary"}
MAX_LEN = 100  # no width of these configurations is 100, so a [100, .] initializer is a table


@pytest.mark.parametrize("width", ["default", "odd"])
@pytest.mark.parametrize("lowering", ["bitwise", "arith"])
@pytest.mark.parametrize("scheme", BIT_FAMILY)
def test_bit_family_compute_graph_audit(scheme, lowering, width):
    d, params = odd_width(scheme, MAX_LEN) if width == "odd" else (None, {})
    config, _, model = graph(scheme, MAX_LEN, d, params=params, lowering=lowering)
    proto = onnx.load_from_string(model)
    a = audit(proto)
    assert a.integer_only, a.violations
    assert a.float_boundaries == BOUNDARIES.get(scheme, ["Cast"])
    assert set(a.integer_ops) <= (BITWISE_INTEGER_OPS if lowering == "bitwise"
                                  else ARITH_INTEGER_OPS)
    assert a.bitwise == (lowering == "bitwise")
    assert a.trig_free and not a.transcendental
    assert a.tables == []
    ops = {n.op_type for n in proto.graph.node}
    forbidden = {"Sin", "Cos", "Exp"} | (set() if config.scheme.arity else {"Gather"})
    assert not ops & forbidden
    for init in proto.graph.initializer:
        assert MAX_LEN not in list(init.dims), (init.name, list(init.dims))
    casts = [n for n in proto.graph.node if n.op_type == "Cast"
             and n.attribute[0].i in (TensorProto.UINT64,)]
    # to unsigned once for BitShift; the projection schemes' mask form ANDs the positions cast
    # to int32 (n <= 32 here; onnxruntime's CPU BitwiseAnd takes int32), never to unsigned
    mask_form = lowering == "bitwise" and scheme in MASK_FORM
    assert len(casts) == (1 if lowering == "bitwise" and not mask_form else 0)
    if mask_form:
        nodes = proto.graph.node
        assert [n.op_type for n in nodes] == ["Cast", "BitwiseAnd", "Cast", "Gemm"]
        assert nodes[0].input[0] == "positions" and nodes[0].attribute[0].i == TensorProto.INT32


@pytest.mark.parametrize("scheme", INTEGER_FAMILY)
def test_integer_family_graph_audit(scheme):
    _, _, model = graph(scheme, MAX_LEN, 7)
    a = audit(onnx.load_from_string(model))
    assert a.integer_only and a.float_boundaries == ["Cast"] and a.trig_free and not a.tables
    assert not a.bitwise


def test_table_graph_is_reported_as_a_table():
    config, _, model = graph("binary", MAX_LEN, 16, mode="table")
    a = audit(onnx.load_from_string(model))
    assert a.tables == [("table", [MAX_LEN, 16])]
    assert not a.integer_only  # the floats come from a Gather of stored rows, not a cast


def test_trig_graph_is_not_trig_free():
    _, _, model = graph("sinusoidal", MAX_LEN, 8)
    a = audit(onnx.load_from_string(model))
    assert not a.trig_free and {"Sin", "Cos"} <= set(a.transcendental)


def _model(nodes, out_type, inits=()):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", out_type, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_audit_flags_floats_turned_back_into_integers():
    m = _model([helper.make_node("Cast", ["positions"], ["f"], to=TensorProto.FLOAT),
                helper.make_node("Floor", ["f"], ["g"]),
                helper.make_node("Cast", ["g"], ["y"], to=TensorProto.INT64)], TensorProto.INT64)
    a = audit(m)
    assert not a.integer_only and "Cast turns floats back into integers" in a.violations


def test_audit_flags_a_non_integer_op_on_positions():
    m = _model([helper.make_node("Cast", ["positions"], ["u"], to=TensorProto.UINT64),
                helper.make_node("TopK", ["u", "k"], ["y", "i"])], TensorProto.UINT64,
               [onnx.numpy_helper.from_array(np.array([1], np.int64), "k")])
    a = audit(m)
    assert not a.integer_only and any("TopK" in v for v in a.violations)


def test_an_output_of_unknown_type_is_not_counted_as_an_integer():
    """An op shape inference cannot type (a custom domain's): its output's type is unknown,
    whether declared UNDEFINED (y) or not declared at all (t), and unknown is not integer: each
    node on the positions is a violation, not an integer op (hmut4: the audit's verdict on a
    graph it cannot type must not be "integer-only")."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["positions"], ["t"], domain="com.example"),
         helper.make_node("Identity", ["t"], ["y"], domain="com.example")], "g",
        [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("com.example", 1)])
    a = audit(m)
    assert a.violations == ["Identity makes floats from position-derived integers"] * 2
    assert not a.integer_only and a.integer_ops == []


def test_a_wrong_declared_shape_does_not_hide_the_inferred_types():
    """A declared output shape that inference contradicts ([5, 7, 9] for an Unsqueeze of [N])
    fails strict shape inference; the audit's lenient one still types the undeclared
    intermediate (u: int32), so the Cast stays an integer op, not a float boundary."""
    m = _model([helper.make_node("Cast", ["positions"], ["u"], to=TensorProto.INT32),
                helper.make_node("Unsqueeze", ["u", "axes"], ["y"])], TensorProto.INT32,
               [onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")])
    m.graph.output[0].type.tensor_type.shape.dim.extend(
        [onnx.TensorShapeProto.Dimension(dim_value=v) for v in (5, 7, 9)])
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(m, strict_mode=True)
    a = audit(m)
    assert a.integer_ops == ["Cast", "Unsqueeze"] and a.float_boundaries == []
    assert a.integer_only
