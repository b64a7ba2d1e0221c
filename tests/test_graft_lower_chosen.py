"""graft's RoPE lowering when the model picks its tables at run time (issue 40 point 6: Phi-3's
longrope; edgepe.graft.lower._caches): a hand-built rotate-half over graft-style short and long
tables chosen by a ``Where`` on the model's scalar condition, fused by ``lower_rope``, run on
onnxruntime against numpy's rotation with each table. tests/test_graft_lower_longrope.py grafts a
real Phi-3 export (slow).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_graft_lower import COS, HALF, IDS, SIN, P, Q, _inits, _rotate_half_nodes, _run, _vi

from edgepe.contract.errors import BadParameterError
from edgepe.graft import lower

LONG = (COS * 0.5, SIN * 0.5)  # any other table: the long one, scaled (an attention factor)


def _chosen_model(where_inputs=None, opset=18):
    """graft's splice of a run-time choice: rows of both tables, ``Where(long, if_true, rows)``
    per tensor, then transformers' rotate-half of ``q``."""
    nodes = [helper.make_node("Identity", ["position_ids"], [f"{P}positions_squeezed"])]
    for t in ("cos", "sin"):
        for kind in ("", "_if_true"):
            nodes += [helper.make_node("Gather", [f"{P}{t}{kind}_table",
                                                  f"{P}positions_squeezed"], [f"{t}{kind}_h"]),
                      helper.make_node("Concat", [f"{t}{kind}_h"] * 2,
                                       [f"{P}{t}{kind}_rows_out"], axis=-1)]
        ins = (where_inputs or {}).get(t, ["long", f"{P}{t}_if_true_rows_out",
                                           f"{P}{t}_rows_out"])
        nodes.append(helper.make_node("Where", ins, [t]))
    inits = [*_inits(), numpy_helper.from_array(LONG[0], f"{P}cos_if_true_table"),
             numpy_helper.from_array(LONG[1], f"{P}sin_if_true_table")]
    graph = helper.make_graph(
        [*nodes, *_rotate_half_nodes()], "m",
        [_vi("q", TensorProto.FLOAT, [1, 2, "S", 8]), _vi("position_ids", TensorProto.INT64,
                                                          [1, "S"]),
         _vi("long", TensorProto.BOOL, [])],
        [_vi("out", TensorProto.FLOAT, [1, 2, "S", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 23 else 8
    return model


def _rotated(cos_t, sin_t):
    cos = np.concatenate([cos_t[IDS]] * 2, -1)[:, None]
    sin = np.concatenate([sin_t[IDS]] * 2, -1)[:, None]
    return Q * cos + np.concatenate([-Q[..., HALF:], Q[..., :HALF]], -1) * sin


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
def test_the_rotations_read_the_table_the_condition_chooses(lowering):
    model = _chosen_model(opset=23 if lowering == "rotary23" else 18)
    for flag, tables in ((False, (COS, SIN)), (True, LONG)):  # the model as grafted
        got = _run(model, q=Q, position_ids=IDS, long=np.array(flag))[0]
        np.testing.assert_allclose(got, _rotated(*tables), rtol=0, atol=1e-6)
    fused, removed = lower.lower_rope(model, P, "cos", "sin", lowering)
    assert fused == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Identity", "Where", "Where", "Shape", "Gather", "Expand", "RotaryEmbedding"], \
        ops  # (the positions expanded to [B, S] before the rotation)
    chosen = [f"{P}cos_cache_chosen", f"{P}sin_cache_chosen"]
    wheres = model.graph.node[1:3]
    assert [list(n.input) for n in wheres] == [
        ["long", f"{P}cos_if_true_table", f"{P}cos_table"],
        ["long", f"{P}sin_if_true_table", f"{P}sin_table"]]
    assert [n.output[0] for n in wheres] == chosen
    assert [n.name for n in wheres] == [f"{c}/where" for c in chosen]
    rotary = model.graph.node[6]
    assert [i for i in rotary.input if i.startswith(P)] == (
        [f"{P}batched_positions", *chosen] if lowering == "ort"
        else [*chosen, f"{P}batched_positions"])
    # 19 nodes of the model as grafted went (all but the Identity), counted as lower_rope
    # counts (plus the fused op), less the two Wheres it adds
    assert removed == 19 + 1 - 2
    lower.check_lowered(model)
    for flag, tables in ((False, (COS, SIN)), (True, LONG)):  # the fused model, both branches
        got = _run(model, q=Q, position_ids=IDS, long=np.array(flag))[0]
        np.testing.assert_allclose(got, _rotated(*tables), rtol=0, atol=1e-6)


def test_one_table_needs_no_choice():
    """Without the ``_if_true`` tables the caches are the tables themselves (no node added)."""
    from test_graft_lower import _rope_model

    model = _rope_model()
    lower.lower_rope(model, P, "cos", "sin", "ort")
    assert [n.op_type for n in model.graph.node] == ["Identity", "Shape", "Gather", "Expand",
                                                     "RotaryEmbedding"]
    assert list(model.graph.node[4].input[2:]) == [f"{P}cos_table", f"{P}sin_table"]


@pytest.mark.parametrize("where", [
    {"cos": ["long", f"{P}cos_rows_out", f"{P}cos_if_true_rows_out"]},  # the branches swapped
    {"cos": ["long", f"{P}cos_if_true_rows_out", f"{P}sin_rows_out"]},  # another tensor
])
def test_a_choice_graft_did_not_make_is_refused(where):
    with pytest.raises(BadParameterError, match=r"^--rope-lowering: this RoPE's tables are "
                       r"chosen at run time and no Where on the model's condition makes 'cos'$"):
        lower.lower_rope(_chosen_model(where), P, "cos", "sin", "ort")


def test_no_where_at_all_is_refused():
    model = _chosen_model()
    node = next(n for n in model.graph.node if n.output[0] == "cos")
    node.op_type, node.input[:] = "Identity", [f"{P}cos_rows_out"]
    with pytest.raises(BadParameterError, match="no Where on the model's condition makes 'cos'"):
        lower.lower_rope(model, P, "cos", "sin", "ort")


def test_cos_made_by_no_node_is_refused():
    """cos a graph input (no node makes it, so no Where): refused in the same line, not an
    AttributeError on the missing maker."""
    from onnx import TensorProto, helper

    model = _chosen_model()
    node = next(n for n in model.graph.node if n.output[0] == "cos")
    model.graph.node.remove(node)
    model.graph.input.append(helper.make_tensor_value_info("cos", TensorProto.FLOAT, None))
    with pytest.raises(BadParameterError, match="no Where on the model's condition makes 'cos'"):
        lower.lower_rope(model, P, "cos", "sin", "ort")
