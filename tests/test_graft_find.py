"""``graft --scheme binary``'s search (edgepe/graft/find.py) on hand-built graphs, one read path
of the table at a time: whole, sliced to a sequence length, gathered by an input, gathered by a
``Range`` over a traced length; and each near miss that is not the pattern (issue 33: the
mutation run of find.py runs these first; milliseconds each).

The table a candidate must hold is the demo's ``(arange(L)[:, None] >> arange(n)) & 1`` with
``n = ceil(log2(L + 1))``, written out by hand below for L = 5 (n = 3).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.graft import find
from edgepe.graft.splice import Positions

BITS5 = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], np.float32)
W = np.arange(12, dtype=np.float32).reshape(3, 4) / 8  # [n, D] projection


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(nodes, inits, inputs=("ids",), table=BITS5, weight=W, before=()):
    inits = [*before, _const("pe_table", table), _const("proj", weight), *inits]
    ins = [helper.make_tensor_value_info(i, TensorProto.INT64, ["B", "S"]) for i in inputs]
    graph = helper.make_graph(nodes, "g", ins,
                              [helper.make_tensor_value_info("pe", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _matmul(rows="pe_table"):
    return helper.make_node("MatMul", [rows, "proj"], ["pe"])


def _length_of_ids(start=1):
    """``Shape(ids)[start]`` as a 0-d tensor ``len``: the traced sequence length."""
    return [helper.make_node("Shape", ["ids"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["len"], axis=0)], [
        _const("one", np.array(start, np.int64))]


def test_the_whole_table_times_the_projection_is_found():
    (c,) = find.detect(_model([_matmul()], []), "binary")
    assert (c.at, c.table, c.max_len, c.weight_name, c.positions) == (
        "pe", "pe_table", 5, "proj", None)
    assert c.weight.dtype == np.float32
    np.testing.assert_array_equal(c.weight, W)


def test_a_table_after_one_that_is_not_the_bits_is_found():
    other = _const("other", np.ones((5, 3), np.float32))  # the same shape, other values
    (c,) = find.detect(_model([_matmul()], [], before=[other]), "binary")
    assert c.table == "pe_table"
    for first in (np.arange(3), np.ones((5, 3), np.int64)):  # 1-D, or not float
        (c,) = find.detect(_model([_matmul()], [], before=[_const("first", first)]), "binary")
        assert c.table == "pe_table"


def test_a_table_with_leading_unit_axes_is_found_on_its_last_two():
    (c,) = find.detect(_model([_matmul()], [], table=BITS5[None, None]), "binary")
    assert c.max_len == 5


@pytest.mark.parametrize("table", [
    BITS5.astype(np.int64),                       # not float
    BITS5[0],                                     # 1-D
    np.stack([BITS5, BITS5]),                     # a leading axis of 2
    BITS5[:, :2],                                 # width 2 != n(5) = 3
    BITS5[::-1].copy(),                           # the right shape, other bits
], ids=["int", "1d", "batch2", "narrow", "reversed"])
def test_a_table_that_is_not_the_bits_is_not_found(table):
    assert find.detect(_model([_matmul()], [], table=table), "binary") == []


@pytest.mark.parametrize("weight", [W[:2], W[0], None], ids=["rows", "1d", "input"])
def test_a_matmul_whose_weight_is_not_n_by_d_constant_is_not_found(weight):
    if weight is None:  # the weight is a graph input, not a constant
        model = _model([helper.make_node("MatMul", ["pe_table", "w_in"], ["pe"])], [],
                       inputs=("ids", "w_in"))
    else:
        model = _model([_matmul()], [], weight=weight)
    assert find.detect(model, "binary") == []


def test_the_table_as_the_second_matmul_operand_is_not_the_pattern():
    model = _model([helper.make_node("MatMul", ["proj2", "pe_table"], ["pe"])],
                   [_const("proj2", np.ones((2, 5), np.float32))])
    assert find.detect(model, "binary") == []


def test_a_table_gathered_by_an_input_reads_those_positions():
    model = _model([helper.make_node("Gather", ["pe_table", "ids"], ["rows"], axis=0),
                    _matmul("rows")], [])
    found = find.detect(model, "binary")
    assert [(c.at, c.positions) for c in found] == [("pe", Positions("input", "ids"))]


def test_a_gather_without_an_axis_reads_rows():
    model = _model([helper.make_node("Gather", ["pe_table", "ids"], ["rows"]), _matmul("rows")],
                   [])
    (c,) = find.detect(model, "binary")
    assert c.positions == Positions("input", "ids")


def test_a_gather_by_a_constant_index_is_found_with_unknown_positions():
    model = _model([helper.make_node("Gather", ["pe_table", "k"], ["rows"], axis=0),
                    _matmul("rows")], [_const("k", np.array([0, 1], np.int64))])
    (c,) = find.detect(model, "binary")
    assert c.positions is None


def test_a_gather_on_another_axis_is_not_a_row_read():
    model = _model([helper.make_node("Gather", ["pe_table", "ids"], ["rows"], axis=1),
                    _matmul("rows")], [])
    assert find.detect(model, "binary") == []
    # axis -2 of the 2-D table is its row axis
    model = _model([helper.make_node("Gather", ["pe_table", "ids"], ["rows"], axis=-2),
                    _matmul("rows")], [])
    (c,) = find.detect(model, "binary")
    assert c.positions == Positions("input", "ids")


def test_a_table_gathered_by_a_range_over_the_sequence_length_reads_arange():
    length, inits = _length_of_ids(start=1)
    nodes = [*length,
             helper.make_node("Range", ["zero", "len", "step"], ["idx"]),
             helper.make_node("Gather", ["pe_table", "idx"], ["rows"], axis=0), _matmul("rows")]
    inits += [_const("zero", np.array(0, np.int64)), _const("step", np.array(1, np.int64))]
    (c,) = find.detect(_model(nodes, inits), "binary")
    assert c.positions == Positions("arange", "ids", 1)


def test_a_gather_by_a_computed_index_is_found_with_unknown_positions():
    nodes = [helper.make_node("Abs", ["ids"], ["idx"]),
             helper.make_node("Gather", ["pe_table", "idx"], ["rows"], axis=0), _matmul("rows")]
    (c,) = find.detect(_model(nodes, []), "binary")
    assert c.positions is None


def _sliced(starts=(0,), axes=(0,), steps=None, end="len", extra=()):
    length, inits = _length_of_ids()
    args = ["pe_table", "starts", end, "axes" if axes is not None else ""]
    inits += [_const("starts", np.array(starts, np.int64))]
    if axes is not None:
        inits.append(_const("axes", np.array(axes, np.int64)))
    if steps is not None:
        args.append("steps")
        inits.append(_const("steps", np.array(steps, np.int64)))
    nodes = [*length, *extra, helper.make_node("Slice", args, ["rows"]), _matmul("rows")]
    return _model(nodes, inits)


def test_a_slice_from_row_0_to_the_sequence_length_reads_arange():
    (c,) = find.detect(_sliced(), "binary")
    assert (c.at, c.positions) == ("pe", Positions("arange", "ids", 1))
    (c,) = find.detect(_sliced(axes=None), "binary")  # no axes: axis 0
    assert c.positions == Positions("arange", "ids", 1)
    (c,) = find.detect(_sliced(axes=(-2,), steps=(1,)), "binary")
    assert c.positions == Positions("arange", "ids", 1)


@pytest.mark.parametrize(("starts", "axes", "steps"), [((1,), (0,), None), ((0,), (1,), None),
                                                       ((0,), (0,), (2,))])
def test_a_slice_that_does_not_start_at_0_step_1_on_rows_is_not_a_read(starts, axes, steps):
    assert find.detect(_sliced(starts, axes, steps), "binary") == [
        # the whole-table MatMul is absent too: the MatMul reads the slice
    ]


def test_a_slice_whose_starts_are_not_constant_is_not_a_read():
    length, inits = _length_of_ids()
    nodes = [*length, helper.make_node("Slice", ["pe_table", "ids", "len"], ["rows"]),
             _matmul("rows")]
    assert find.detect(_model(nodes, inits), "binary") == []


def test_the_length_is_traced_through_shape_ops_and_a_shape_slice():
    # Shape(ids, start=1, end=2) -> Cast -> Squeeze -> Unsqueeze -> Reshape -> Identity
    nodes = [helper.make_node("Shape", ["ids"], ["s"], start=1, end=2)]
    name = "s"
    for i, op in enumerate(("Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity")):
        kwargs = {"to": TensorProto.INT64} if op == "Cast" else {}
        ins = [name] + (["ax"] if op in ("Squeeze", "Unsqueeze") else
                        ["shp"] if op == "Reshape" else [])
        nodes.append(helper.make_node(op, ins, [f"t{i}"], **kwargs))
        name = f"t{i}"
    inits = [_const("ax", np.array([0], np.int64)), _const("shp", np.array([1], np.int64)),
             _const("starts", np.array([0], np.int64)), _const("axes", np.array([0], np.int64))]
    nodes += [helper.make_node("Slice", ["pe_table", "starts", name, "axes"], ["rows"]),
              _matmul("rows")]
    (c,) = find.detect(_model(nodes, inits), "binary")
    assert c.positions == Positions("arange", "ids", 1)


def _traced(nodes, inits, end):
    inits = [*inits, _const("starts", np.array([0], np.int64)),
             _const("axes", np.array([0], np.int64))]
    nodes = [*nodes, helper.make_node("Slice", ["pe_table", "starts", end, "axes"], ["rows"]),
             _matmul("rows")]
    return find.detect(_model(nodes, inits), "binary")


@pytest.mark.parametrize(("start", "end", "found"), [
    (0, 1, Positions("arange", "ids", 0)), (1, 2, Positions("arange", "ids", 1)),
    (None, 1, Positions("arange", "ids", 0)),  # start defaults to 0
    (0, 2, None), (None, None, None), (-1, 0, None)])
def test_a_shape_slice_must_be_one_axis_at_a_nonnegative_start(start, end, found):
    kwargs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    (c,) = _traced([helper.make_node("Shape", ["ids"], ["s"], **kwargs)], [], "s")
    assert c.positions == found


def test_a_gathered_shape_entry_adds_the_shapes_start():
    nodes = [helper.make_node("Shape", ["ids"], ["s"], start=1),
             helper.make_node("Gather", ["s", "k"], ["len"], axis=0)]
    (c,) = _traced(nodes, [_const("k", np.array([0], np.int64))], "len")
    assert c.positions == Positions("arange", "ids", 1)  # entry 0 of Shape[1:] is axis 1


@pytest.mark.parametrize("case", ["two_indices", "not_a_shape", "shape_of_a_constant",
                                  "index_not_constant"])
def test_a_gather_that_is_not_one_entry_of_an_input_shape_is_untraced(case):
    shape_of = "pe_table" if case == "shape_of_a_constant" else "ids"
    maker = helper.make_node("Shape" if case != "not_a_shape" else "Abs", [shape_of], ["s"])
    index = np.array([0, 1] if case == "two_indices" else [1], np.int64)
    k = "ids" if case == "index_not_constant" else "k"
    nodes = [maker, helper.make_node("Gather", ["s", k], ["len"], axis=0)]
    (c,) = _traced(nodes, [_const("k", index)], "len")
    assert c.positions is None


def test_a_length_that_is_a_graph_input_or_unknown_op_is_untraced():
    (c,) = _traced([], [], "ids")  # made by no node
    assert c.positions is None
    (c,) = _traced([helper.make_node("Shape", ["ids"], ["s0"], start=1, end=2),
                    helper.make_node("Neg", ["s0"], ["s"])], [], "s")
    assert c.positions is None


@pytest.mark.parametrize(("hops", "traced"), [(7, True), (8, False)])
def test_the_length_trace_follows_at_most_eight_nodes(hops, traced):
    nodes = [helper.make_node("Shape", ["ids"], ["s0"], start=1, end=2)]
    for i in range(hops):
        nodes.append(helper.make_node("Identity", [f"s{i}"], [f"s{i + 1}"]))
    (c,) = _traced(nodes, [], f"s{hops}")
    assert c.positions == (Positions("arange", "ids", 1) if traced else None)


def test_an_op_with_shapes_attributes_that_is_not_shape_is_untraced():
    """Only Shape's start/end name an input axis: another op reading the input, even one
    carrying attributes of those names (a custom-domain op), is not a length."""
    span = helper.make_node("Span", ["ids"], ["s"], domain="com.example", start=1, end=2)
    (c,) = _traced([span], [], "s")
    assert c.positions is None


class _CountingGraph:
    """A GraphProto whose ``node`` list counts the walks over it."""

    def __init__(self, graph):
        self._graph, self.walks = graph, 0

    @property
    def node(self):
        self.walks += 1
        return self._graph.node

    def __getattr__(self, name):
        return getattr(self._graph, name)


def _walks_to_detect(reads: int) -> int:
    """``detect``'s walks over the nodes of a model reading the table ``reads`` times by a
    ``Range`` over the length and ``reads`` times by a ``Slice`` to it."""
    length, inits = _length_of_ids()
    nodes = [*length, helper.make_node("Range", ["zero", "len", "step"], ["idx"])]
    inits += [_const(n, np.array(v, np.int64)) for n, v in (("zero", 0), ("step", 1))]
    inits += [_const(n, np.array([0], np.int64)) for n in ("starts", "axes")]
    for i in range(reads):
        nodes += [helper.make_node("Gather", ["pe_table", "idx"], [f"g{i}"], axis=0),
                  helper.make_node("MatMul", [f"g{i}", "proj"], [f"pe_g{i}"]),
                  helper.make_node("Slice", ["pe_table", "starts", "len", "axes"], [f"s{i}"]),
                  helper.make_node("MatMul", [f"s{i}", "proj"], [f"pe_s{i}"])]
    model = _model(nodes, inits)
    graph = _CountingGraph(model.graph)
    found = find.detect(type("Model", (), {"graph": graph})(), "binary")
    assert [c.positions for c in found] == [Positions("arange", "ids", 1)] * (2 * reads)
    return graph.walks


def test_detection_walks_the_nodes_a_fixed_number_of_times_whatever_the_reads():
    """Issue 41: each traced read uses the one ``graph_index`` map (a map per read of a table
    read 15,000 times made detection quadratic)."""
    assert _walks_to_detect(1) == _walks_to_detect(4)


def test_the_length_trace_builds_its_own_map_when_none_is_given():
    length, inits = _length_of_ids()
    graph = _model([*length, _matmul()], inits).graph
    consts = find._constants(graph)
    makers, _ = find.graph_index(graph)
    want = Positions("arange", "ids", 1)
    assert find._trace_length(graph, "len", {"ids"}, consts, makers) == want
    assert find._trace_length(graph, "len", {"ids"}, consts) == want


def test_constants_include_constant_nodes_and_identities_of_them():
    value = helper.make_tensor("v", TensorProto.FLOAT, [5, 3], BITS5.ravel().tolist())
    nodes = [helper.make_node("Constant", [], ["table_c"], value=value),
             helper.make_node("Identity", ["table_c"], ["table_i"]),
             helper.make_node("Identity", ["ids"], ["not_const"]),
             helper.make_node("Constant", [], ["k"], value_int=3),
             helper.make_node("MatMul", ["table_i", "proj"], ["pe"])]
    graph = _model(nodes, []).graph
    consts = find._constants(graph)
    assert set(consts) == {"pe_table", "proj", "table_c", "table_i"}
    np.testing.assert_array_equal(consts["table_i"], BITS5)
    found = find.detect(helper.make_model(graph), "binary")
    assert sorted(c.table for c in found) == ["table_i"]  # pe_table is read by nothing


def test_graph_index_makers_and_readers():
    a = helper.make_node("Abs", ["x"], ["y"])
    b = helper.make_node("Add", ["y", "x"], ["z"])
    graph = helper.make_graph([a, b], "g", [], [])
    makers, readers = find.graph_index(graph)
    assert makers == {"y": a, "z": b}
    assert readers == {"x": [a, b], "y": [b]}


def test_only_binary_is_detectable():
    with pytest.raises(BadParameterError) as info:
        find.detect(_model([_matmul()], []), "gray")
    assert str(info.value) == ("graft --scheme finds binary in a model; for 'gray' export it "
                               "and pass --pe ARTIFACT --at TENSOR")


def test_the_built_artifact_takes_export_options():
    (c,) = find.detect(_model([_matmul()], []), "binary")
    _, manifest = find.build_detected(c, "binary", quantize="int8", lowering="arith")
    assert manifest["inputs"]["quantize"] == "int8" and manifest["lowering"] == "arith"


def test_the_built_artifact_holds_the_models_weight_and_names_it():
    (c,) = find.detect(_model([_matmul()], []), "binary")
    model, manifest = find.build_detected(c, "binary")
    assert manifest["max_len"] == 5 and manifest["d_model"] == 4
    assert manifest["weights_from"] == {"initializer": "proj",
                                        "sha256": hashlib.sha256(W.tobytes()).hexdigest()}
    data = model.SerializeToString()
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    import onnxruntime as ort

    out = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"positions": np.arange(5, dtype=np.int64)})[0]
    np.testing.assert_allclose(out, BITS5 @ W, rtol=0, atol=1e-6)


# --- ops by (domain, op_type) (hgr) ---------------------------------------------------------


@pytest.mark.parametrize("domain, name", [
    ("", "Range"), ("ai.onnx", "Range"), ("com.microsoft", "com.microsoft.Range"),
    ("ai.onnx.ml", "ai.onnx.ml.Range"), ("evil", "evil.Range")])
def test_op_is_the_op_type_in_onnxs_domain_only(domain, name):
    assert find.op(helper.make_node("Range", ["a", "b", "c"], ["r"], domain=domain)) == name


def test_a_range_of_another_domain_is_no_traced_length():
    """``_table_read``: a table gathered by com.microsoft's Range of the length is not read as
    ONNX's Range over it (unknown positions, not ``arange``)."""
    length, inits = _length_of_ids()
    nodes = [*length, helper.make_node("Range", ["zero", "len", "one"], ["rows"],
                                       domain="com.microsoft"),
             helper.make_node("Gather", ["pe_table", "rows"], ["picked"]), _matmul("picked")]
    (c,) = find.detect(_model(nodes, [*inits, _const("zero", np.array(0, np.int64))]), "binary")
    assert c.positions is None


def test_constant_nodes_of_another_domain_are_not_constants():
    nodes = [helper.make_node("Constant", [], ["c"], value=_const("v", np.ones(2, np.float32))),
             helper.make_node("Constant", [], ["d"], domain="evil",
                              value=_const("w", np.ones(2, np.float32))),
             helper.make_node("Identity", ["c"], ["e"], domain="evil")]
    assert set(find._constants(helper.make_graph(nodes, "g", [], []))) == {"c"}


def test_foreign_ops_words_each_kind_once_with_its_count():
    ms = "com.microsoft"
    nodes = [helper.make_node("Gelu", ["a"], ["g1"], domain=ms),
             helper.make_node("GatherND", ["t", "i"], ["g2"], domain=ms),
             helper.make_node("Gelu", ["g1"], ["g3"], domain=ms),
             helper.make_node("Foo", ["a"], ["g4"], domain=ms),  # no ONNX op of that name
             helper.make_node("Gelu", ["a"], ["g5"]),  # ONNX's own
             helper.make_node("Gelu", ["a"], ["g6"], domain="ai.onnx")]
    assert find.foreign_ops(helper.make_graph(nodes, "g", [], [])) == [
        f"{ms}.Gelu x2 at 'g1' (domain '{ms}', another op than ONNX's Gelu, not read as it)",
        f"{ms}.GatherND at 'g2' (domain '{ms}', another op than ONNX's GatherND, not read as "
        "it)"]
    assert find.foreign_ops(helper.make_graph(nodes[4:], "g", [], [])) == []
