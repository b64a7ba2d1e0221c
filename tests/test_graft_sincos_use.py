"""A ``[sin | cos]`` table's PE kind follows its consumer, not whichever value pattern matched
first (issue 40 point 2): GPT-J's RoPE table and Marian's sinusoidal table hold the same values,
so a table split into a rotation's sin and cos is RoPE and one added to the embeddings is an
absolute sinusoidal PE, whatever gather reads it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.graft.discover import discover
from edgepe.graft.find import graph_index
from edgepe.graft.find_hf import _table_use, find_pe

L, D = 16, 8


def _table():
    """``[sin(p w) | cos(p w)]``, ``w = 10000^(-2i/D)``, as torch computes it in float32."""
    w = (1.0 / 10000.0 ** (np.arange(0, D, 2, dtype=np.float32) / D)).astype(np.float32)
    angle = np.arange(L, dtype=np.float32)[:, None] * w[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def _model(use: str):
    """``table[position_ids]`` added to ``x`` (``use="add"``), or split into sin and cos that
    rotate ``x`` (``"split"``, through a Reshape first as exporters write)."""
    nodes = [helper.make_node("Gather", ["table", "position_ids"], ["rows"], axis=0)]
    if use == "add":
        nodes.append(helper.make_node("Add", ["x", "rows"], ["y"]))
    else:
        nodes += [helper.make_node("Reshape", ["rows", "shape"], ["rows2"]),
                  helper.make_node("Split", ["rows2", "halves"], ["sin", "cos"], axis=-1),
                  helper.make_node("Mul", ["xh", "cos"], ["a"]),
                  helper.make_node("Mul", ["xh", "sin"], ["b"]),
                  helper.make_node("Add", ["a", "b"], ["y"])]
    width = D if use == "add" else D // 2
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("x" if use == "add" else "xh", TensorProto.FLOAT,
                                       ["batch", "seq", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", width])],
        [numpy_helper.from_array(_table(), "table"),
         numpy_helper.from_array(np.array([0, -1, D], np.int64), "shape"),
         numpy_helper.from_array(np.array([D // 2, D // 2], np.int64), "halves")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("use, family", [("add", "sinusoidal"), ("split", "rope")])
def test_sincos_table_kind_follows_its_consumer(use, family):
    model = _model(use)
    for found in (find_pe(model), discover(model)[0]):
        assert [f.family for f in found] == [family], [f.describe() for f in found]
        one = found[0]
        assert one.params["sincos"] is (family == "rope")
        assert one.params.get("layout") == ("half" if family == "sinusoidal" else None)
        assert one.describe().startswith(
            "sinusoidal (Marian sinusoidal [sin | cos] table 'table' [16, 8]" if use == "add"
            else "rope (GPT-J [sin | cos] table 'table' [16, 8]"), one.describe()


def test_table_use_is_none_where_the_consumer_says_neither_or_both():
    _, readers = graph_index(_model("split").graph)
    assert _table_use("rows", readers) == "rope"
    assert _table_use("rows", readers, depth=1) is None  # the Split is behind the Reshape
    _, readers = graph_index(_model("add").graph)
    assert _table_use("rows", readers) == "sinusoidal"
    assert _table_use("y", readers) is None  # nothing reads the output
    both = _model("add")
    both.graph.node.append(helper.make_node("Split", ["rows", "h"], ["s", "c"], axis=-1))
    assert _table_use("rows", graph_index(both.graph)[1]) is None
    sliced = _model("add")  # a Slice of the rows (torch's tensor[..., :half]) is a split too
    sliced.graph.node[1].CopyFrom(helper.make_node("Slice", ["rows", "s0", "s1"], ["y"]))
    assert _table_use("rows", graph_index(sliced.graph)[1]) == "rope"


def _chain(reshapes: int, dead_branch: bool = False):
    """``rows`` through ``reshapes`` Reshapes into a Split; ``dead_branch``: a second Reshape
    of ``rows``, read by nothing, after the first in the graph."""
    nodes, name = [], "rows"
    for i in range(reshapes):
        nodes.append(helper.make_node("Reshape", [name, "shape"], [f"r{i}"]))
        name = f"r{i}"
    nodes.append(helper.make_node("Split", [name, "halves"], ["sin", "cos"], axis=-1))
    if dead_branch:
        nodes.append(helper.make_node("Reshape", ["rows", "shape"], ["unread"]))
    return graph_index(helper.make_graph(nodes, "g", [], []))[1]


def test_table_use_looks_six_nodes_deep_along_every_branch():
    """The default depth: a Split behind 5 pass-through nodes is seen (the sixth step), behind
    6 it is not; every pass-through reader of one tensor is followed, not only the last."""
    assert _table_use("rows", _chain(5)) == "rope"
    assert _table_use("rows", _chain(6)) is None
    assert _table_use("rows", _chain(1, dead_branch=True)) == "rope"
