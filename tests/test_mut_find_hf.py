"""Fast, direct tests of ``edgepe.graft.find_hf`` (issue 33's mutation testing of the module).

Each test builds a tiny ONNX graph by hand (the subgraph an exporter writes for one PE family,
a few nodes) or loads one of the small Optimum fixtures under ``tests/data/optimum`` and calls
the module's functions directly: what ``find_pe`` finds (family, replaced tensors, positions,
the one-line description, the parameters), what it must not find (each condition of each
matcher broken once), and the artifacts ``build_found`` makes, run by onnxruntime against
values computed here independently (the PE's definition in float64/float32 numpy or Python's
``math``, the ALiBi paper's slopes written out). No transformers model runs: the whole file takes
seconds, so mutmut can rerun it for every mutant.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from edgepe.contract.errors import BadParameterError
from edgepe.graft import find_hf as fh
from edgepe.graft.find import _constants, graph_index

DATA = Path(__file__).resolve().parent / "data" / "optimum"
EPS32 = 2.0**-23  # np.spacing(np.float32(1))
# the ALiBi paper's slopes for 4 heads: 2^(-8 (h + 1) / 4)
SLOPES4 = np.array([0.25, 0.0625, 0.015625, 0.00390625], np.float32)
INV = np.array([1.0, 0.01], np.float32)  # 1 / 10000^(2i / 4), i = 0, 1: head size 4
INV3 = INV.reshape(1, 2, 1)  # as Optimum's exports hold it
SLOPES41 = SLOPES4.reshape(4, 1)  # as Bloom holds them


def _model(nodes, inputs, outputs, inits=None, opset=18):
    graph = oh.make_graph(nodes, "g", inputs, outputs,
                          [nh.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _vi(name, elem, dims):
    return oh.make_tensor_value_info(name, elem, dims)


def _run(pe, **feeds):
    session = ort.InferenceSession(pe.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                    strict=True))


def _find(model, matcher):
    graph = model.graph
    makers, readers = graph_index(graph)
    return matcher(graph, _constants(graph), makers, readers)


def _fixture(family):
    return onnx.load(str(DATA / family / "model.onnx"))


# --- the half-layout RoPE as torch.onnx.export (dynamo) writes it -------------------------------


def _rope_model(factor=None, sin_factor="same", mul_order=0, inv=INV, concat=("f", "f"),
                cast_op="Cast", cos_extra_reader=False):
    """positions [1, s] -> Unsqueeze -> Cast -> Mul(inv_freq) -> Concat(f, f) -> Cos, Sin (each
    optionally times a scalar constant)."""
    nodes = [oh.make_node("Unsqueeze", ["position_ids", "axes"], ["pos"]),
             oh.make_node(cast_op, ["pos"], ["posf"], **({"to": TP.FLOAT} if cast_op == "Cast"
                                                         else {})),
             oh.make_node("Mul", ["posf", "inv_freq"][::1 if mul_order == 0 else -1], ["f"]),
             oh.make_node("Concat", list(concat), ["emb"], axis=-1),
             oh.make_node("Cos", ["emb"], ["cos"]), oh.make_node("Sin", ["emb"], ["sin"])]
    inits = {"axes": np.array([-1], np.int64), "inv_freq": inv}
    outs = ["cos", "sin"]
    sin_factor = factor if sin_factor == "same" else sin_factor
    if factor is not None:
        nodes.append(oh.make_node("Mul", ["cos", "a_cos"], ["cos_a"]))
        inits["a_cos"] = np.array(factor, np.float32)
        outs[0] = "cos_a"
    if sin_factor is not None:
        nodes.append(oh.make_node("Mul", ["a_sin", "sin"], ["sin_a"]))
        inits["a_sin"] = np.array(sin_factor, np.float32)
        outs[1] = "sin_a"
    if cos_extra_reader:
        nodes.append(oh.make_node("Neg", ["cos"], ["neg"]))
        outs.append("neg")
    return _model(nodes, [_vi("position_ids", TP.INT64, [1, "s"])],
                  [_vi(o, TP.FLOAT, None) for o in outs], inits)


def test_rope_found_with_its_description_and_parameters():
    found = fh.find_pe(_rope_model())
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("rope", ["cos", "sin"], "pos")
    assert f.where == ("(half layout, R=4, inv_freq 'inv_freq' [2]) at Cos 'cos' / Sin 'sin', "
                       "positions from input 'position_ids' (via 'pos')")
    assert f.describe() == "rope " + f.where
    assert np.array_equal(f.params.pop("inv_freq"), INV)
    factor = f.params.pop("attention_factor")
    assert type(factor) is np.float32 and factor == 1.0
    assert f.params == {"inv_freq_name": "inv_freq", "layout": "half", "rotary_dim": 4,
                        "choice": None}


@pytest.mark.parametrize("order", [0, 1])
def test_rope_attention_factor_multiplies_both_and_replaces_the_products(order):
    f, = fh.find_pe(_rope_model(factor=1.1386294, mul_order=order))
    assert f.replaces == ["cos_a", "sin_a"]
    assert f.where == ("(half layout, R=4, inv_freq 'inv_freq' [2], attention factor 1.13863) "
                       "at Cos 'cos' / Sin 'sin', positions from input 'position_ids' "
                       "(via 'pos')")
    assert f.params["attention_factor"] == np.float32(1.1386294)


@pytest.mark.parametrize("model", [
    _rope_model(factor=2.0, sin_factor=3.0),   # two different factors
    _rope_model(factor=2.0, sin_factor=None),  # only cos scaled
    _rope_model(factor=None, sin_factor=2.0),  # only sin scaled
    _rope_model(concat=("f", "posf")),          # not Concat(f, f)
    _rope_model(concat=("f", "f", "f")),
    _rope_model(inv=INV.astype(np.float64)),    # a float64 inv_freq
    _rope_model(inv=np.array([[1.0, 0.01]], np.float32)),  # not 1-D
    _rope_model(cast_op="Identity"),            # no Cast of the positions
], ids=["factors", "cos-only", "sin-only", "concat", "concat3", "f64", "2d", "no-cast"])
def test_rope_not_found_when_one_condition_breaks(model):
    assert _find(model, fh._rope) == []
    assert _find(model, fh._rope_matmul) == []


def test_rope_with_a_second_reader_of_cos_keeps_the_unscaled_pair():
    """A Cos read by two nodes is not scaled by one of them: the replaced tensors are Cos/Sin
    themselves, and Sin (read once, by its scalar Mul) must then be unscaled too."""
    f, = _find(_rope_model(cos_extra_reader=True, factor=None, sin_factor=None), fh._rope)
    assert f.replaces == ["cos", "sin"]
    assert _find(_rope_model(cos_extra_reader=True, factor=2.0), fh._rope) == []


def _edit(model, op, **changes):
    """A copy of ``model`` with the first ``op`` node's fields replaced."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    node = next(n for n in model.graph.node if n.op_type == op)
    for key, value in changes.items():
        if key == "op_type":
            node.op_type = value
        else:
            getattr(node, key)[:] = value
    return model


def test_rope_needs_a_sin_of_the_same_angle_and_a_mul_making_it():
    model = _rope_model()
    assert _find(_edit(model, "Sin", input=["f"]), fh._rope) == []  # Sin of another tensor
    assert _find(_edit(model, "Concat", op_type="Sum"), fh._rope) == []
    assert _find(_edit(model, "Mul", op_type="Add"), fh._rope) == []


def _longrope_model(if_true=INV * 0.5, names=("long_inv", "short_inv"), cond_const=False):
    nodes = [oh.make_node("Unsqueeze", ["position_ids", "axes"], ["pos"]),
             oh.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
             oh.make_node("Where", ["use_long", *names], ["inv_chosen"]),
             oh.make_node("Mul", ["inv_chosen", "posf"], ["f"]),
             oh.make_node("Concat", ["f", "f"], ["emb"], axis=-1),
             oh.make_node("Cos", ["emb"], ["cos"]), oh.make_node("Sin", ["emb"], ["sin"])]
    inits = {"axes": np.array([-1], np.int64), "long_inv": if_true, "short_inv": INV}
    inputs = [_vi("position_ids", TP.INT64, [1, "s"]), _vi("use_long", TP.BOOL, [1])]
    return _model(nodes, inputs, [_vi("cos", TP.FLOAT, None), _vi("sin", TP.FLOAT, None)],
                  inits)


def test_longrope_found_with_both_inv_freq_and_the_condition():
    f, = fh.find_pe(_longrope_model())
    assert (f.family, f.replaces, f.positions) == ("rope", ["cos", "sin"], "pos")
    assert f.where == ("(half layout, R=4, inv_freq 'long_inv' or 'short_inv' [2] chosen at "
                       "run time by 'use_long' (longrope)) at Cos 'cos' / Sin 'sin', positions "
                       "from input 'position_ids' (via 'pos')")
    assert f.params["inv_freq_name"] == "inv_chosen"
    assert np.array_equal(f.params["inv_freq"], INV)  # the if_false (short) one
    choice = f.params["choice"]
    assert choice["condition"] == "use_long" and choice["names"] == ["long_inv", "short_inv"]
    assert np.array_equal(choice["if_true"], INV * 0.5)
    assert np.array_equal(choice["if_false"], INV)


def test_longrope_not_found_when_a_branch_is_not_a_1d_constant_or_shapes_differ():
    assert _find(_longrope_model(if_true=np.ones(3, np.float32)), fh._rope) == []
    assert _find(_longrope_model(if_true=np.ones((1, 2), np.float32)), fh._rope) == []
    bad = _longrope_model(names=("long_inv", "posf"))  # the false branch is not a constant
    assert _find(bad, fh._rope) == []
    bad = _longrope_model(names=("posf", "short_inv"))
    assert _find(bad, fh._rope) == []


# --- RoPE at opset 23: ONNX's RotaryEmbedding reading Cos/Sin caches ----------------------------


def _fused_model(ops=2, interleaved=(0, 0), factor=None, factors=None, domain="", slot_swap=False,
                 extra_reader=False, sin=True, names=True, output_cache=False):
    """positions -> Unsqueeze -> Cast -> Mul(inv_freq) = f [1, s, 2]; per op: Cos(f), Sin(f)
    (optionally times a scalar), RotaryEmbedding(x, cos, sin) chained."""
    nodes = [oh.make_node("Unsqueeze", ["position_ids", "axes"], ["pos"]),
             oh.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
             oh.make_node("Mul", ["posf", "inv_freq"], ["f"])]
    inits = {"axes": np.array([-1], np.int64), "inv_freq": INV}
    x = "x"
    factors = factors or [factor] * ops
    outputs = []
    for k in range(ops):
        cos, sin_ = f"cos{k}", f"sin{k}"
        nodes.append(oh.make_node("Cos", ["f"], [cos]))
        if sin:
            nodes.append(oh.make_node("Sin", ["f"], [sin_]))
        if factors[k] is not None:
            inits[f"a{k}"] = np.array(factors[k], np.float32)
            nodes.append(oh.make_node("Mul", [cos, f"a{k}"], [f"{cos}_a"]))
            nodes.append(oh.make_node("Mul", [f"a{k}", sin_], [f"{sin_}_a"]))
            cos, sin_ = f"{cos}_a", f"{sin_}_a"
        caches = [sin_, cos] if slot_swap else [cos, sin_]
        layout = {} if interleaved[k] is None else {"interleaved": interleaved[k]}
        nodes.append(oh.make_node("RotaryEmbedding", [x, *caches], [f"y{k}"],
                                  name=f"rot{k}" if names else "", num_heads=2,
                                  domain=domain, **layout))
        x = f"y{k}"
    if output_cache:
        outputs.append(_vi("cos1", TP.FLOAT, None))
    if extra_reader:
        nodes.append(oh.make_node("Neg", ["f"], ["neg"]))
        outputs.append(_vi("neg", TP.FLOAT, None))
    opsets = [oh.make_opsetid("", 23)] + ([oh.make_opsetid(domain, 1)] if domain else [])
    graph = oh.make_graph(nodes, "g", [_vi("position_ids", TP.INT64, [1, "s"]),
                                       _vi("x", TP.FLOAT, [1, "s", 8])],
                          [_vi(x, TP.FLOAT, [1, "s", 8]), *outputs],
                          [nh.from_array(v, k) for k, v in inits.items()])
    return oh.make_model(graph, opset_imports=opsets)


def test_fused_rope_found_once_for_every_op_with_the_duplicates_mapped():
    found = fh.find_pe(_fused_model())
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("rope", ["cos0", "sin0"], "pos")
    assert f.where == ("(half layout, R=4, inv_freq 'inv_freq' [2]) at the caches of 2 "
                       "RotaryEmbedding ops (opset 23), positions from input 'position_ids' "
                       "(via 'pos')")
    assert np.array_equal(f.params.pop("inv_freq"), INV)
    factor = f.params.pop("attention_factor")
    assert type(factor) is np.float32 and factor == 1.0
    assert f.params == {"inv_freq_name": "inv_freq", "layout": "half", "rotary_dim": 4,
                        "choice": None, "fused": True,
                        "duplicates": {"cos1": "cos0", "sin1": "sin0"}}


def test_fused_rope_one_op_unnamed_and_interleaved_with_a_factor():
    f, = fh.find_pe(_fused_model(ops=1, interleaved=(1,), factor=0.5, names=False))
    assert f.replaces == ["cos0_a", "sin0_a"]
    assert f.where == ("(interleaved layout, R=4, inv_freq 'inv_freq' [2], attention factor "
                       "0.5) at the caches of 1 RotaryEmbedding ops (opset 23), positions from "
                       "input 'position_ids' (via 'pos')")
    assert f.params["layout"] == "interleaved" and f.params["duplicates"] == {}
    assert f.params["attention_factor"] == np.float32(0.5)
    # three unnamed ops count as one name; named, three
    assert "caches of 1 " in fh.find_pe(_fused_model(ops=3, interleaved=(0,) * 3,
                                                     names=False))[0].where
    assert "caches of 3 " in fh.find_pe(_fused_model(ops=3, interleaved=(0,) * 3))[0].where


@pytest.mark.parametrize("kwargs", [
    {"interleaved": (0, 1)},           # two layouts
    {"factors": [0.5, 2.0]},           # two attention factors
    {"domain": "com.microsoft"},        # not ONNX's RotaryEmbedding
    {"slot_swap": True},               # the caches in the wrong slots
    {"extra_reader": True},             # f read by something else as well
    {"sin": False},                     # no Sin cache
], ids=["layouts", "factors", "domain", "slots", "reader", "no-sin"])
def test_fused_rope_not_found_when_one_condition_breaks(kwargs):
    if kwargs.get("sin") is False:  # RotaryEmbedding(x, cos, cos): the sin slot is a Cos
        model = _fused_model(ops=1, sin=False)
        node = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding")
        node.input[:] = ["x", "cos0", "cos0"]
    else:
        model = _fused_model(**kwargs)
    assert _find(model, fh._rope_fused) == []


def test_fused_rope_default_layout_and_the_ai_onnx_domain():
    f, = _find(_fused_model(interleaved=(None, None)), fh._rope_fused)  # no attribute: half
    assert f.params["layout"] == "half"
    assert _find(_fused_model(interleaved=(None, 0)), fh._rope_fused) != []
    assert _find(_fused_model(interleaved=(None, 1)), fh._rope_fused) == []
    model = _fused_model(ops=1)
    for node in model.graph.node:
        if node.op_type == "RotaryEmbedding":
            node.domain = "ai.onnx"
    assert len(_find(model, fh._rope_fused)) == 1


def test_fused_rope_needs_both_caches_and_a_read_angle():
    model = _fused_model(ops=1)
    rot = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding")
    rot.input[:] = ["x", "posf", "sin0"]  # no Cos cache: the cos slot holds something else
    model.graph.node.remove(next(n for n in model.graph.node if n.op_type == "Cos"))
    assert _find(model, fh._rope_fused) == []
    nodes = [oh.make_node("Unsqueeze", ["position_ids", "axes"], ["pos"]),
             oh.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
             oh.make_node("Mul", ["posf", "inv_freq"], ["f"])]  # f read by nothing
    model = _model(nodes, [_vi("position_ids", TP.INT64, [1, "s"])], [_vi("f", TP.FLOAT, None)],
                   {"axes": np.array([-1], np.int64), "inv_freq": INV})
    assert fh.find_pe(model) == []


def test_fused_rope_refuses_a_cache_read_by_a_non_rotary_node_or_by_none():
    model = _fused_model(ops=1)
    model.graph.node.append(oh.make_node("Neg", ["cos0"], ["n"]))
    assert _find(model, fh._rope_fused) == []
    model = _fused_model(ops=1)
    rot = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding")
    rot.input.append("pos")  # a fourth input (position_ids): not the cache form
    assert _find(model, fh._rope_fused) == []
    model = _fused_model(ops=1)
    model.graph.node.remove(next(n for n in model.graph.node if n.op_type == "RotaryEmbedding"))
    assert _find(model, fh._rope_fused) == []  # Cos/Sin read by nothing
    model = _fused_model(ops=1, factor=0.5)
    model.graph.node.remove(next(n for n in model.graph.node if n.op_type == "RotaryEmbedding"))
    assert _find(model, fh._rope_fused) == []  # the scaled caches read by nothing


def test_fused_rope_needs_a_float32_1d_inv_freq_and_a_cast():
    model = _fused_model(ops=1)
    for t in model.graph.initializer:
        if t.name == "inv_freq":
            t.CopyFrom(nh.from_array(INV.astype(np.float64), "inv_freq"))
    assert _find(model, fh._rope_fused) == []
    assert _find(_edit(_fused_model(ops=1), "Cast", op_type="Identity"), fh._rope_fused) == []
    model = _fused_model(ops=1)
    model.graph.initializer.append(nh.from_array(INV, "inv2"))
    _mul = next(n for n in model.graph.node if n.op_type == "Mul")
    _mul.input[:] = ["inv2", "inv_freq"]  # two constants: no positions
    assert _find(model, fh._rope_fused) == []


def _names(model):
    return [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node]


def test_merge_duplicates_rewires_the_readers_and_removes_the_dead_makers():
    model = _fused_model(factor=0.5)
    before = _names(model)
    f, = fh.find_pe(model)
    assert f.params["duplicates"] == {"cos1_a": "cos0_a", "sin1_a": "sin0_a"}
    merged, removed = fh.merge_duplicates(model, f)
    assert removed == 4  # Mul, Cos, Mul, Sin of the second op
    assert _names(model) == before  # a copy: the model given is untouched
    after = _names(merged)
    assert ("RotaryEmbedding", ["y0", "cos0_a", "sin0_a"], ["y1"]) in after
    gone = [("Cos", ["f"], ["cos1"]), ("Sin", ["f"], ["sin1"]),
            ("Mul", ["cos1", "a1"], ["cos1_a"]), ("Mul", ["a1", "sin1"], ["sin1_a"])]
    assert all(n in before and n not in after for n in gone)
    assert [n for n in before if n not in gone and n[0] != "RotaryEmbedding"] == \
        [n for n in after if n[0] != "RotaryEmbedding"]
    assert len(after) == len(before) - 4
    x = np.arange(1 * 3 * 8, dtype=np.float32).reshape(1, 3, 8) / 10
    pos = np.array([[0, 5, 9]], np.int64)
    assert np.array_equal(_run(model, position_ids=pos, x=x)["y1"],
                          _run(merged, position_ids=pos, x=x)["y1"])


def test_merge_duplicates_keeps_a_maker_still_read_and_does_nothing_without_duplicates():
    model = _fused_model(output_cache=True)  # cos1 is also a graph output
    f, = fh.find_pe(model)
    merged, removed = fh.merge_duplicates(model, f)
    assert removed == 1  # Sin sin1 only
    assert ("Cos", ["f"], ["cos1"]) in _names(merged)
    assert ("Sin", ["f"], ["sin1"]) not in _names(merged)
    one, = fh.find_pe(_fused_model(ops=1))
    same, removed = fh.merge_duplicates(model, one)
    assert same is model and removed == 0
    same, removed = fh.merge_duplicates(model, fh.Found("learned", ["t"], "p", "w"))
    assert same is model and removed == 0


def test_merge_duplicates_stops_at_a_graph_input_and_at_a_removed_node():
    """A duplicate that is a graph input has no maker; two duplicates made by one node remove
    it once."""
    nodes = [oh.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2),
             oh.make_node("Add", ["a", "c"], ["s"]), oh.make_node("Add", ["b", "d"], ["t"])]
    model = _model(nodes, [_vi("x", TP.FLOAT, [2]), _vi("c", TP.FLOAT, [1]),
                           _vi("d", TP.FLOAT, [1]), _vi("e", TP.FLOAT, [1])],
                   [_vi("s", TP.FLOAT, None), _vi("t", TP.FLOAT, None)])
    f = fh.Found("rope", ["c", "e"], "", "", {"duplicates": {"a": "c", "b": "e", "d": "e"}})
    merged, removed = fh.merge_duplicates(model, f)
    assert removed == 1
    assert _names(merged) == [("Add", ["c", "c"], ["s"]), ("Add", ["e", "e"], ["t"])]


# --- _ancestors, _origin, _through, _scalar_factor, _scalar_add, _attr -------------------------


def _chain(*ops, start="p"):
    """``start`` through unary nodes ``ops``: the makers dict of tensors t1, t2, ..."""
    nodes, name = [], start
    for i, op in enumerate(ops, 1):
        nodes.append(oh.make_node(op, [name], [f"t{i}"]))
        name = f"t{i}"
    return {o: n for n in nodes for o in n.output}


def test_ancestors_walks_the_cone_up_to_its_limit():
    nodes = [oh.make_node("CumSum", ["mask", "axis"], ["c"]),
             oh.make_node("Sub", ["c", "one"], ["d"]), oh.make_node("Mul", ["d", "mask"], ["e"]),
             oh.make_node("Unsqueeze", ["e", ""], ["u"])]
    makers = {o: n for n in nodes for o in n.output}
    assert fh._ancestors("u", makers) == ({"Unsqueeze", "Mul", "Sub", "CumSum"},
                                          {"mask", "axis", "one"})
    assert fh._ancestors("mask", makers) == (set(), {"mask"})
    ops, leaves = fh._ancestors("u", makers, limit=2)
    assert ops == {"Unsqueeze", "Mul"} and leaves == set()
    ops, leaves = fh._ancestors("t63", _chain(*["Neg"] * 63))
    assert ops == {"Neg"} and leaves == {"p"}  # 63 nodes, then the input
    ops, leaves = fh._ancestors("t64", _chain(*["Neg"] * 64))
    assert ops == {"Neg"} and leaves == set()  # 64 nodes: the default limit, the input unseen


def test_origin_in_words():
    inputs = {"p", "mask", "n"}
    assert fh._origin("p", {}, inputs) == "from input 'p'"
    assert fh._origin("t3", _chain("Unsqueeze", "Cast", "Expand"), inputs) == \
        "from input 'p' (via 't3')"
    assert fh._origin("t3", _chain("Reshape", "Identity", "Squeeze"), inputs) == \
        "from input 'p' (via 't3')"
    assert fh._origin("t12", _chain(*["Identity"] * 12), inputs) == "'t12'"  # past 12 steps
    assert fh._origin("t11", _chain(*["Identity"] * 11), inputs) == \
        "from input 'p' (via 't11')"
    assert fh._origin("w", {}, inputs) == "'w'"  # an initializer: no maker, not an input
    nodes = [oh.make_node("CumSum", ["mask", "axis"], ["c"]),
             oh.make_node("Range", ["zero", "n", "one"], ["r"]),
             oh.make_node("Add", ["c", "r"], ["s"]), oh.make_node("Cast", ["s"], ["sc"]),
             oh.make_node("Add", ["p", "two"], ["q"])]
    makers = {o: n for n in nodes for o in n.output}
    assert fh._origin("sc", makers, inputs) == "'sc' (from 'mask', 'n' by CumSum and Range)"
    assert fh._origin("r", makers, inputs) == "'r' (from 'n' by Range)"
    assert fh._origin("q", makers, inputs) == "'q' (from 'p')"
    assert fh._origin("q", makers, set()) == "'q' (from no input)"
    assert fh._origin("r", makers, set()) == "'r' (from no input by Range)"  # (hgr)
    makers["r"].domain = "com.microsoft"  # another op than ONNX's Range: not said as one
    assert fh._origin("r", makers, inputs) == "'r' (from 'n')"


def test_through_climbs_first_inputs_of_the_given_ops_only():
    makers = _chain("Cast", "Expand", "Cast", "Neg", "Identity")
    assert fh._through("t5", makers, ("Identity",)) == ("t4", makers["t4"])
    assert fh._through("t3", makers, ("Cast", "Expand")) == ("p", None)
    assert fh._through("t4", makers, ("Cast",)) == ("t4", makers["t4"])
    eight = _chain(*["Cast"] * 8)
    assert fh._through("t8", eight, ("Cast",)) == ("p", None)
    nine = _chain(*["Cast"] * 9)
    assert fh._through("t9", nine, ("Cast",)) == ("t1", nine["t1"])  # at most 8 steps


def test_scalar_factor_and_scalar_add():
    consts = {"k": np.array(2.5, np.float32), "v": np.array([1.0, 2.0], np.float32),
              "one": np.array([3], np.int64), "f": np.array(1.5, np.float32),
              "u": np.array(7, np.uint8)}
    mul = oh.make_node("Mul", ["x", "k"], ["y"])
    assert fh._scalar_factor(mul, consts) == (2.5, "x")
    assert fh._scalar_factor(oh.make_node("Mul", ["k", "x"], ["y"]), consts) == (2.5, "x")
    assert fh._scalar_factor(oh.make_node("Mul", ["x", "v"], ["y"]), consts) is None
    assert fh._scalar_factor(oh.make_node("Mul", ["x", "z"], ["y"]), consts) is None
    assert fh._scalar_factor(oh.make_node("Add", ["x", "k"], ["y"]), consts) is None
    assert fh._scalar_add(oh.make_node("Add", ["x", "one"], ["y"]), consts) == 3
    assert fh._scalar_add(oh.make_node("Add", ["one", "x"], ["y"]), consts) == 3
    assert fh._scalar_add(oh.make_node("Add", ["x", "u"], ["y"]), consts) == 7
    assert fh._scalar_add(oh.make_node("Add", ["x", "f"], ["y"]), consts) is None  # a float
    assert fh._scalar_add(oh.make_node("Add", ["x", "v"], ["y"]), consts) is None
    assert fh._scalar_add(oh.make_node("Sub", ["x", "one"], ["y"]), consts) is None
    assert fh._scalar_add(oh.make_node("Add", ["x", "z"], ["y"]), consts) is None


def test_attr_reads_a_value_or_the_default():
    node = oh.make_node("Gather", ["a", "b"], ["c"], axis=1)
    assert fh._attr(node, "axis") == 1
    assert fh._attr(node, "batch_dims") is None
    assert fh._attr(node, "batch_dims", 7) == 7


# --- position tables: learned, GPT-J, fairseq/XGLM, Marian --------------------------------------

RNG = np.random.default_rng(0)
WPE = RNG.standard_normal((6, 4)).astype(np.float32)


def _gptj_table(length, width):
    """GPT-J's ``create_sinusoidal_positions`` (transformers) in float32 as torch computes it:
    ``inv_freq = 1 / 10000^(arange(0, W, 2) / W)``, ``[sin | cos]`` of the float32 angle."""
    inv = (1.0 / (np.float32(10000.0) ** (np.arange(0, width, 2, dtype=np.float32)
                                          / np.float32(width)))).astype(np.float32)
    angle = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def _fairseq_table(length, width):
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` (XGLM), row 1 (padding) zero,
    with Python's math per element."""
    half = width // 2
    step = math.log(10000) / (half - 1)
    table = np.array([[math.sin(p * math.exp(-i * step)) for i in range(half)]
                      + [math.cos(p * math.exp(-i * step)) for i in range(half)]
                      for p in range(length)], np.float32)
    table[1] = 0
    return table


def _marian_table(length, width):
    """Marian's ``_init_weight``: ``pos / 10000^(2 (j // 2) / D)``, sin of the even columns,
    cos of the odd ones, in float64, then float32."""
    enc = np.array([[p / 10000 ** (2 * (j // 2) / width) for j in range(width)]
                    for p in range(length)])
    out = np.empty((length, width))
    out[:, : width // 2] = np.sin(enc[:, 0::2])
    out[:, width // 2:] = np.cos(enc[:, 1::2])
    return out.astype(np.float32)


def _gather_model(table=WPE, indices="position_ids", pre=(), op="Gather", axis=0, name="wpe",
                  token_embedding=True, extra_inputs=(), extra_inits=None, **attrs):
    """``Gather(table, pre(indices))`` (and a token embedding ``Gather(wte, input_ids)``)."""
    nodes, inits = [], {name: table, "wte": np.ones((10, 4), np.float32),
                        **(extra_inits or {})}
    name_in = indices
    for i, (kind, *args) in enumerate(pre):
        out = f"i{i}"
        nodes.append(oh.make_node(kind, [name_in, *args], [out]))
        name_in = out
    if op == "GatherND":
        nodes.append(oh.make_node("GatherND", [name, name_in], ["pe"], **attrs))
    else:
        nodes.append(oh.make_node(op, [name, name_in], ["pe"], axis=axis))
    if token_embedding:
        nodes.append(oh.make_node("Gather", ["wte", "input_ids"], ["tok"], axis=0))
    inputs = [_vi("input_ids", TP.INT64, [1, "s"])] + [
        _vi(n, TP.INT64, [1, "s"]) for n in (indices, *extra_inputs)
        if n != "input_ids"]
    return _model(nodes, inputs, [_vi("pe", TP.FLOAT, None)], inits)


def test_learned_table_found_and_the_token_embedding_not():
    found = fh.find_pe(_gather_model())
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("learned", ["pe"], "position_ids")
    assert f.where == ("(table 'wpe' [6, 4]) at Gather 'pe', positions from input "
                       "'position_ids'")
    assert f.params.pop("table") is not None
    assert f.params == {"table_name": "wpe", "offset": 0, "squeeze": False, "sincos": False}


def test_learned_table_with_an_offset_through_reshapes():
    two = {"two": np.array(2, np.int64), "shape": np.array([-1], np.int64)}
    f, = _find(_gather_model(pre=[("Add", "two")], extra_inits=two), fh._learned)
    assert f.params["offset"] == 2 and f.positions == "i0"
    assert f.where == ("(table 'wpe' [6, 4], positions + offset 2) at Gather 'pe', positions "
                       "'i0' (from 'position_ids')")
    four = [("Add", "two"), ("Reshape", "shape"), ("Identity",), ("Cast",), ("Squeeze",)]
    f, = _find(_gather_model(pre=four, extra_inits=two), fh._learned)
    assert f.params["offset"] == 2
    for kind in ("Unsqueeze", "Flatten"):
        f, = _find(_gather_model(pre=[("Add", "two"), (kind,)], extra_inits=two), fh._learned)
        assert f.params["offset"] == 2, kind
    five = [*four, ("Identity",)]  # five reshapes: not followed that far
    f, = _find(_gather_model(pre=five, extra_inits=two), fh._learned)
    assert f.params["offset"] == 0
    f, = _find(_gather_model(pre=[("Neg",), ("Add", "two")], extra_inits=two), fh._learned)
    assert f.params["offset"] == 2
    f, = _find(_gather_model(pre=[("Add", "two"), ("Neg",)], extra_inits=two), fh._learned)
    assert f.params["offset"] == 0


def test_learned_table_by_range_or_cumsum_and_not_by_other_indices():
    nodes = [oh.make_node("Range", ["zero", "n", "one"], ["r"]),
             oh.make_node("Gather", ["wpe", "r"], ["pe"], axis=0)]
    inits = {"wpe": WPE, "zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    model = _model(nodes, [_vi("n", TP.INT64, [])], [_vi("pe", TP.FLOAT, None)], inits)
    f, = fh.find_pe(model)
    assert f.family == "learned"
    assert f.where == "(table 'wpe' [6, 4]) at Gather 'pe', positions 'r' (from 'n' by Range)"
    nodes = [oh.make_node("CumSum", ["mask", "axis"], ["c"]),
             oh.make_node("Gather", ["wpe", "c"], ["pe"], axis=0)]
    model = _model(nodes, [_vi("mask", TP.INT64, [1, "s"])], [_vi("pe", TP.FLOAT, None)],
                   {"wpe": WPE, "axis": np.array(1, np.int64)})
    f, = fh.find_pe(model)
    assert f.where == ("(table 'wpe' [6, 4]) at Gather 'pe', positions 'c' (from 'mask' by "
                       "CumSum)")
    assert _find(_gather_model(indices="idx"), fh._learned) == []  # no position in sight
    assert _find(_gather_model(indices="my_position"), fh._learned) != []  # "position" in name
    # the positions' cone reaches input_ids or inputs_embeds: a token embedding
    for tokens in ("input_ids", "inputs_embeds"):
        model = _gather_model(pre=[("Add", tokens)], extra_inputs=(tokens,))
        assert _find(model, fh._learned) == [], tokens


@pytest.mark.parametrize("kwargs", [
    {"axis": 1},                                   # not gathered on axis 0
    {"op": "GatherElements"},
    {"table": WPE.astype(np.float64)},
    {"table": WPE[None]},                          # 3-D
    {"table": WPE[0]},                             # 1-D
], ids=["axis", "op", "f64", "3d", "1d"])
def test_learned_not_found_when_one_condition_breaks(kwargs):
    assert _find(_gather_model(token_embedding=False, **kwargs), fh._learned) == []


def test_learned_gather_axis_defaults_to_0_and_only_inputs_named_position_count():
    model = _gather_model()
    del next(n for n in model.graph.node if n.output[0] == "pe").attribute[:]
    assert len(_find(model, fh._learned)) == 1  # Gather's axis defaults to 0
    # an input named position_ids elsewhere in the graph does not make idx positions
    model = _gather_model(indices="idx", extra_inputs=("position_ids",))
    assert _find(model, fh._learned) == []
    # nor does an initializer whose name says position
    nodes = [oh.make_node("Add", ["idx", "position_offset"], ["q"]),
             oh.make_node("Gather", ["wpe", "q"], ["pe"], axis=0)]
    model = _model(nodes, [_vi("idx", TP.INT64, [1, "s"])], [_vi("pe", TP.FLOAT, None)],
                   {"wpe": WPE, "position_offset": np.array(1, np.int64)})
    assert _find(model, fh._learned) == []


def test_learned_table_read_by_a_gather_of_a_non_constant():
    nodes = [oh.make_node("Gather", ["w", "position_ids"], ["pe"], axis=0)]
    model = _model(nodes, [_vi("w", TP.FLOAT, [6, 4]), _vi("position_ids", TP.INT64, [1])],
                   [_vi("pe", TP.FLOAT, None)])
    assert _find(model, fh._learned) == []


def _gathernd_model(table, axes=-1, batch_dims=None):
    attrs = {} if batch_dims is None else {"batch_dims": batch_dims}
    return _gather_model(table=table, pre=[("Unsqueeze", "axes")], op="GatherND", name="emb",
                         extra_inits={"axes": np.array([axes], np.int64)}, **attrs)


def test_gptj_table_read_by_gathernd_is_rope():
    table = _gptj_table(8, 4)
    f, = fh.find_pe(_gathernd_model(table))
    assert (f.family, f.replaces, f.positions) == ("rope", ["pe"], "i0")
    assert f.where == ("(GPT-J [sin | cos] table 'emb' [8, 4]) at GatherND 'pe', positions "
                       "from input 'position_ids' (via 'i0')")
    assert f.params["squeeze"] is True and f.params["sincos"] is True
    assert f.params["offset"] == 0 and "layout" not in f.params
    f, = fh.find_pe(_gathernd_model(WPE, batch_dims=0))  # any table by GatherND: learned
    assert (f.family, f.params["squeeze"], f.params["sincos"]) == ("learned", True, False)
    assert f.where.startswith("(table 'emb' [6, 4]) at GatherND 'pe'")
    assert _find(_gathernd_model(table, axes=0), fh._learned) == []
    assert _find(_gathernd_model(table, batch_dims=1), fh._learned) == []
    model = _gathernd_model(table)  # Unsqueeze with its axes as an input (not the opset-13 form)
    node = next(n for n in model.graph.node if n.op_type == "Unsqueeze")
    del node.input[1:]
    assert _find(model, fh._learned) == []
    model = _gather_model(table=table, pre=[("Neg",)], op="GatherND", name="emb")
    assert _find(model, fh._learned) == []  # no Unsqueeze in front
    model = _gather_model(table=table, pre=[("Unsqueeze", "ax")], op="GatherND", name="emb",
                          extra_inputs=())
    assert _find(model, fh._learned) == []  # the axes not a constant


def test_fairseq_and_marian_tables_read_by_gather_are_sinusoidal():
    f, = fh.find_pe(_gather_model(table=_fairseq_table(8, 8), name="emb"))
    assert f.family == "sinusoidal" and "layout" not in f.params
    assert f.where == ("(fairseq/XGLM sinusoidal [sin | cos] table 'emb' [8, 8]) at Gather "
                       "'pe', positions from input 'position_ids'")
    marian = _marian_table(8, 8)
    f, = fh.find_pe(_gather_model(table=marian, name="emb"))
    assert f.family == "sinusoidal" and f.params["layout"] == "half"
    assert f.where == ("(Marian sinusoidal [sin | cos] table 'emb' [8, 8]) at Gather 'pe', "
                       "positions from input 'position_ids'")
    exact = np.array([[math.sin(p / 10000 ** (2 * i / 8)) for i in range(4)]
                      + [math.cos(p / 10000 ** (2 * i / 8)) for i in range(4)]
                      for p in range(8)])
    assert f.params["definition_distance"] == pytest.approx(
        float(np.abs(exact - marian).max()), rel=1e-6, abs=1e-12)
    # GPT-J's table read by Gather (not GatherND) is not GPT-J's RoPE: it is Marian's (the same
    # definition, w_i = 10000^(-2i/D), [sin | cos])
    f, = fh.find_pe(_gather_model(table=_gptj_table(8, 4), name="emb"))
    assert (f.family, f.params["sincos"], f.params["layout"]) == ("sinusoidal", False, "half")


def _angle_slack_edges(table, accepts, row, half):
    """Column 0 (w = 1) of ``row``: the angle is ``row`` radians, so the slack is ``4 ulp(1) +
    row 2^-19``; 0.9 of it off is accepted, 1.1 refused, on the sin half and the cos half."""
    slack = 4 * EPS32 + row * 2.0**-19
    for column, exact in ((0, math.sin(row)), (half, math.cos(row))):
        for scale, want in ((0.9, True), (1.1, False), (-0.9, True), (-1.1, False)):
            off = table.copy()
            off[row, column] = exact + scale * slack
            assert accepts(off) is want, (column, scale)


def test_is_sincos_recognises_gptj_within_4_ulp_only():
    table = _gptj_table(16, 8)
    assert fh._is_sincos(table)
    assert fh._is_sincos(table[:2])  # two rows
    assert not fh._is_sincos(table[:1])  # one row: too short to tell
    assert not fh._is_sincos(_gptj_table(16, 6)[:, :5])  # an odd width
    assert not fh._is_sincos(np.concatenate([table[:, 4:], table[:, :4]], axis=1))  # [cos|sin]
    edge = table.copy()
    edge[0, 0] = 4 * EPS32  # sin(0) = 0: exactly 4 ulp(1) off
    assert fh._is_sincos(edge)
    edge[0, 0] = 5 * EPS32
    assert not fh._is_sincos(edge)
    assert not fh._is_sincos(_gptj_table(16, 8) * np.float32(1 + 2**-10))
    _angle_slack_edges(table, fh._is_sincos, row=11, half=4)
    assert not fh._is_sincos(_fairseq_table(16, 8))  # other frequencies


def test_is_fairseq_sinusoidal():
    table = _fairseq_table(12, 8)
    assert fh._is_fairseq_sinusoidal(table)
    assert fh._is_fairseq_sinusoidal(table[:3])
    assert fh._is_fairseq_sinusoidal(_fairseq_table(5, 4))  # half = 2
    assert not fh._is_fairseq_sinusoidal(table[:2])  # too short: row 1 is the padding
    assert not fh._is_fairseq_sinusoidal(table[:, :7])  # odd width
    padded = table.copy()
    padded[1, 3] = 1e-30
    assert not fh._is_fairseq_sinusoidal(padded)  # row 1 not zero
    edge = table.copy()
    edge[0, 0] = 4 * EPS32  # sin(0) = 0: exactly 4 ulp(1) off
    assert fh._is_fairseq_sinusoidal(edge)
    edge[0, 0] = 5 * EPS32
    assert not fh._is_fairseq_sinusoidal(edge)
    _angle_slack_edges(table, fh._is_fairseq_sinusoidal, row=11, half=4)
    assert not fh._is_fairseq_sinusoidal(_marian_table(12, 8))
    assert not fh._is_fairseq_sinusoidal(np.zeros((4, 2), np.float32))  # half = 1


def test_half_sinusoidal_distance_recognises_marian_within_its_bound():
    table = _marian_table(4, 8)
    exact = np.array([[math.sin(p / 10000 ** (2 * i / 8)) for i in range(4)]
                      + [math.cos(p / 10000 ** (2 * i / 8)) for i in range(4)]
                      for p in range(4)])
    assert fh._half_sinusoidal_distance(table) == pytest.approx(
        float(np.abs(exact - table).max()), rel=1e-6, abs=1e-12)
    assert fh._half_sinusoidal_distance(table[:3]) is not None
    assert fh._half_sinusoidal_distance(table[:2]) is None  # too short
    assert fh._half_sinusoidal_distance(table[:, :7]) is None  # odd width
    assert fh._half_sinusoidal_distance(np.zeros((4, 2), np.float32)) is None  # half = 1
    bound = 4 * 2.0**-23 + 4 * 2.0**-24  # L = 4: 3 * 2^-22, a float32
    edge = table.copy()
    edge[0, 0] = bound  # sin(0) = 0
    assert fh._half_sinusoidal_distance(edge) == bound
    edge[0, 0] = np.nextafter(np.float32(bound), np.float32(1))
    assert fh._half_sinusoidal_distance(edge) is None
    assert fh._half_sinusoidal_distance(_fairseq_table(4, 8)) is None


# --- ALiBi: Bloom's Mul and MPT's constant ------------------------------------------------------


def _bloom_model(slopes=SLOPES41, order=0, source="CumSum", cast="Cast"):
    first = (oh.make_node("CumSum", ["attention_mask", "axis"], ["c"]) if source == "CumSum" else
             oh.make_node("Range", ["zero", "attention_mask", "one"], ["c"]) if source == "Range"
             else oh.make_node("Neg", ["attention_mask"], ["c"]))
    nodes = [first, oh.make_node("Sub", ["c", "one"], ["d"]),
             oh.make_node("Mul", ["d", "attention_mask"], ["e"]),
             oh.make_node("Unsqueeze", ["e", "axes"], ["pos"]),
             oh.make_node(cast, ["pos"], ["posf"], **({"to": TP.FLOAT} if cast == "Cast" else {})),
             oh.make_node("Mul", ["slopes", "posf"][:: 1 if order == 0 else -1], ["alibi"])]
    inits = {"axis": np.array(1, np.int64), "one": np.array(1, np.int64),
             "zero": np.array(0, np.int64), "axes": np.array([1], np.int64), "slopes": slopes}
    return _model(nodes, [_vi("attention_mask", TP.INT64, [1, "t"])],
                  [_vi("alibi", TP.FLOAT, None)], inits)


@pytest.mark.parametrize("order", [0, 1])
def test_bloom_alibi_found(order):
    found = fh.find_pe(_bloom_model(order=order))
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("alibi", ["alibi"], "pos")
    assert f.where == ("(slopes 'slopes' [4, 1]) at Mul 'alibi', positions 'pos' (from "
                       "'attention_mask' by CumSum)")
    assert np.array_equal(f.params["slopes"], SLOPES4.reshape(4, 1))
    assert f.params["slopes_name"] == "slopes" and len(f.params) == 2
    f, = _find(_bloom_model(order=order, source="Range"), fh._alibi)
    assert f.where.endswith("(from 'attention_mask' by Range)")


@pytest.mark.parametrize("kwargs", [
    {"slopes": SLOPES4.reshape(4, 1).astype(np.float64)}, {"slopes": SLOPES4},
    {"slopes": np.ones((4, 2), np.float32)}, {"source": "Neg"}, {"cast": "Identity"}],
    ids=["f64", "1d", "4x2", "no-cumsum", "no-cast"])
def test_bloom_alibi_not_found_when_one_condition_breaks(kwargs):
    assert _find(_bloom_model(**kwargs), fh._alibi) == []


def _mpt_model(bias, reader="Slice", constant_node=False):
    nodes = [oh.make_node(reader, ["bias", "starts", "ends", "axes"][: 4 if reader == "Slice"
                                                                      else 2], ["out"])]
    inits = {"starts": np.array([0], np.int64), "ends": np.array([2], np.int64),
             "axes": np.array([2], np.int64)}
    if constant_node:
        nodes.insert(0, oh.make_node("Constant", [], ["bias"], value=nh.from_array(bias)))
    else:
        inits["bias"] = bias
    return _model(nodes, [], [_vi("out", TP.FLOAT, None)], inits)


def _mpt_bias(length, slopes=SLOPES4):
    """``m_h (u - (L - 1))``, ``u = 0 .. L-1``, each product in float32 (as torch does)."""
    distance = np.arange(1 - length, 1).astype(np.float32)
    return (slopes[:, None, None] * distance[None, None, :]).astype(np.float32)


@pytest.mark.parametrize("constant_node", [False, True])
def test_mpt_bias_found(constant_node):
    found = fh.find_pe(_mpt_model(_mpt_bias(6), constant_node=constant_node))
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("alibi", ["bias"], "")
    assert f.where == ("(MPT bias constant 'bias' [4, 1, 6], slopes of the ALiBi paper's rule) "
                       "sliced by the model")
    assert np.array_equal(f.params.pop("slopes"), SLOPES4)
    assert f.params == {"length": 6, "table_name": "bias"}
    assert len(fh.find_pe(_mpt_model(_mpt_bias(2)))) == 1  # the shortest
    assert len(fh.find_pe(_mpt_model(_mpt_bias(6, np.array([2.0**-4, 2.0**-8], np.float32))))) == 1


@pytest.mark.parametrize("bias, reader", [
    (_mpt_bias(1), "Slice"),                       # one position: nothing to tell
    (_mpt_bias(6), "Neg"),                         # not sliced
    (_mpt_bias(6) * np.float32(2), "Slice"),       # other slopes
    (_mpt_bias(6).astype(np.float64), "Slice"),
    (_mpt_bias(6).reshape(4, 6, 1), "Slice"),      # not [H, 1, L]
    (_mpt_bias(6).reshape(4, 6), "Slice"),
], ids=["L1", "reader", "slopes", "f64", "H-L-1", "2d"])
def test_mpt_bias_not_found_when_one_condition_breaks(bias, reader):
    assert fh.find_pe(_mpt_model(bias, reader)) == []


# --- Optimum's exports (TorchScript): RoPE by MatMul, GPT-J by GatherElements --------------------


def _matmul_model(perm=(0, 2, 1), inv=INV3, axes=1, factor=None, to_inv="Cast",
                  second="Cast"):
    """Optimum's RoPE angle: Transpose(MatMul(Expand(inv_freq [1, R/2, 1]) cast,
    Cast(Unsqueeze(position_ids, 1))), perm) -> Concat(f, f) -> Cos, Sin."""
    nodes = [oh.make_node("Expand", ["inv3", "shape"], ["e"]),
             oh.make_node(to_inv, ["e"], ["ec"], **({"to": TP.FLOAT} if to_inv == "Cast"
                                                    else {})),
             oh.make_node("Unsqueeze", ["position_ids", "axes"], ["u"]),
             oh.make_node("Cast", ["u"], ["uc"], to=TP.FLOAT),
             oh.make_node(second, ["uc"], ["uc2"], **({"to": TP.FLOAT} if second == "Cast"
                                                      else {})),
             oh.make_node("MatMul", ["ec", "uc2"], ["mm"]),
             oh.make_node("Transpose", ["mm"], ["t"], perm=list(perm)),
             oh.make_node("Concat", ["t", "t"], ["emb"], axis=-1),
             oh.make_node("Cos", ["emb"], ["cos"]), oh.make_node("Sin", ["emb"], ["sin"])]
    inits = {"inv3": inv, "shape": np.array([1, 2, 1], np.int64),
             "axes": np.array([axes], np.int64)}
    outs = ["cos", "sin"]
    if factor is not None:
        inits["a"] = np.array(factor, np.float32)
        nodes += [oh.make_node("Mul", ["cos", "a"], ["cos_a"]),
                  oh.make_node("Mul", ["sin", "a"], ["sin_a"])]
        outs = ["cos_a", "sin_a"]
    return _model(nodes, [_vi("position_ids", TP.INT64, [1, "s"])],
                  [_vi(o, TP.FLOAT, None) for o in outs], inits)


def test_rope_by_matmul_found():
    found = fh.find_pe(_matmul_model())
    assert len(found) == 1
    f = found[0]
    assert (f.family, f.replaces, f.positions) == ("rope", ["cos", "sin"], "position_ids")
    assert f.where == ("(half layout, R=4, inv_freq 'inv3' [2] by MatMul) at Cos 'cos' / Sin "
                       "'sin', positions from input 'position_ids'")
    assert np.array_equal(f.params.pop("inv_freq"), INV)
    factor = f.params.pop("attention_factor")
    assert type(factor) is np.float32 and factor == 1.0
    assert f.params == {"inv_freq_name": "inv3", "layout": "half", "rotary_dim": 4,
                        "choice": None, "flat_positions": True}
    f, = fh.find_pe(_matmul_model(factor=0.25, to_inv="Identity"))
    assert f.replaces == ["cos_a", "sin_a"] and f.params["attention_factor"] == np.float32(0.25)
    assert ", attention factor 0.25) at Cos" in f.where


@pytest.mark.parametrize("kwargs", [
    {"perm": (0, 1, 2)}, {"inv": INV.reshape(1, 2, 1).astype(np.float64)},
    {"inv": INV.reshape(2, 1, 1)}, {"inv": INV.reshape(1, 1, 2)}, {"inv": INV.reshape(1, 2)},
    {"axes": 2}, {"second": "Neg"}, {"to_inv": "Neg"}],
    ids=["perm", "f64", "shape0", "shape2", "2d", "axes", "not-unsqueeze", "inv-through-neg"])
def test_rope_by_matmul_not_found_when_one_condition_breaks(kwargs):
    assert _find(_matmul_model(**kwargs), fh._rope_matmul) == []


def test_rope_by_matmul_needs_each_link():
    model = _matmul_model()
    assert _find(_edit(model, "Sin", input=["t"]), fh._rope_matmul) == []
    assert _find(_edit(model, "Concat", input=["t", "mm"]), fh._rope_matmul) == []
    assert _find(_edit(model, "Concat", input=["t", "t", "t"]), fh._rope_matmul) == []
    assert _find(_edit(model, "Concat", op_type="Sum"), fh._rope_matmul) == []
    assert _find(_edit(model, "Transpose", op_type="Identity"), fh._rope_matmul) == []
    assert _find(_edit(model, "MatMul", op_type="Mul"), fh._rope_matmul) == []
    assert _find(_edit(model, "Unsqueeze", input=["position_ids"]), fh._rope_matmul) == []
    model = _matmul_model(factor=2.0)
    model.graph.node[-1].input[:] = ["sin", "sin"]  # sin times a non-constant
    assert _find(model, fh._rope_matmul) == []
    model = _matmul_model()
    model.graph.initializer.append(nh.from_array(np.array(3.0, np.float32), "b"))
    model.graph.node.append(oh.make_node("Mul", ["sin", "b"], ["sin_b"]))
    assert _find(model, fh._rope_matmul) == []  # sin scaled, cos not
    model.graph.node.append(oh.make_node("Neg", ["cos"], ["n"]))
    model.graph.node.append(oh.make_node("Neg", ["cos"], ["n2"]))
    assert _find(model, fh._rope_matmul) == []  # cos read twice (unscaled), sin scaled


def _gather_elements_model(table, axis=1, axes=-1, three_d=True, unsqueeze=True):
    nodes = [oh.make_node("Expand", ["emb3" if three_d else "emb", "shape"], ["e"]),
             oh.make_node("Tile", ["e", "reps"], ["t"]),
             oh.make_node("Unsqueeze" if unsqueeze else "Identity",
                          ["position_ids", "axes"][: 2 if unsqueeze else 1], ["u"]),
             oh.make_node("Expand", ["u", "shape_p"], ["ue"]),
             oh.make_node("Tile", ["ue", "reps_p"], ["ut"]),
             oh.make_node("GatherElements", ["t", "ut"], ["pe"], axis=axis)]
    inits = {"emb3" if three_d else "emb": table[None] if three_d else table,
             "shape": np.array([1, 1, 1], np.int64), "reps": np.array([1, 1, 1], np.int64),
             "axes": np.array([axes], np.int64), "shape_p": np.array([1, 1, 1], np.int64),
             "reps_p": np.array([1, 1, 4], np.int64)}
    return _model(nodes, [_vi("position_ids", TP.INT64, [1, "s"])],
                  [_vi("pe", TP.FLOAT, None)], inits)


@pytest.mark.parametrize("axes, three_d", [(-1, True), (2, False)])
def test_gptj_by_gather_elements_found(axes, three_d):
    table = _gptj_table(8, 4)
    found = fh.find_pe(_gather_elements_model(table, axes=axes, three_d=three_d))
    assert len(found) == 1
    f = found[0]
    name = "emb3" if three_d else "emb"
    assert (f.family, f.replaces, f.positions) == ("rope", ["pe"], "position_ids")
    assert f.where == (f"(GPT-J [sin | cos] table {name!r} [8, 4]) at GatherElements 'pe', "
                       "positions from input 'position_ids'")
    assert np.array_equal(f.params.pop("table"), table)
    assert f.params == {"table_name": name, "offset": 0, "squeeze": False, "sincos": True}


@pytest.mark.parametrize("kwargs", [
    {"axis": 0}, {"axes": 1}, {"unsqueeze": False}, {"table": WPE},
    {"table": _gptj_table(8, 4).astype(np.float64)}, {"table": _gptj_table(8, 4)[None, None]}],
    ids=["axis", "axes", "no-unsqueeze", "not-sincos", "f64", "4d"])
def test_gptj_by_gather_elements_not_found_when_one_condition_breaks(kwargs):
    kwargs = dict(kwargs)  # a copy: the parametrized dict is shared between runs
    table = kwargs.pop("table", _gptj_table(8, 4))
    if table.ndim == 4:
        model = _gather_elements_model(_gptj_table(8, 4))
        model.graph.initializer[0].CopyFrom(nh.from_array(table, "emb3"))
    else:
        model = _gather_elements_model(table, **kwargs)
    assert _find(model, fh._gptj_gather_elements) == []
    model = _gather_elements_model(_gptj_table(8, 4))
    node = next(n for n in model.graph.node if n.op_type == "Unsqueeze")
    del node.input[1:]
    assert _find(model, fh._gptj_gather_elements) == []
    model = _gather_elements_model(_gptj_table(8, 4))
    del next(n for n in model.graph.node if n.op_type == "GatherElements").attribute[:]
    assert _find(model, fh._gptj_gather_elements) == []  # axis 0 by default
    model = _gather_elements_model(_gptj_table(8, 4))
    model.graph.initializer[0].CopyFrom(nh.from_array(_gptj_table(8, 4)[None].repeat(2, 0),
                                                      "emb3"))
    assert _find(model, fh._gptj_gather_elements) == []  # [2, L, R]: not one table


# the inv_freq of each Optimum fixture, from its config.json: 1 / theta^(2i / R) in float32
# (llama-linear: / factor 2; partial rotary: R of the head size 8)
def _default_inv(rotary, theta=10000.0):
    return (1.0 / (np.float32(theta) ** (np.arange(0, rotary, 2, dtype=np.float32)
                                         / np.float32(rotary)))).astype(np.float32)


@pytest.mark.parametrize("family, rotary, scale", [
    ("llama", 8, 1.0), ("mistral", 8, 1.0), ("qwen2", 8, 1.0), ("phi", 4, 1.0),
    ("gpt_neox", 2, 1.0), ("llama-linear", 8, 0.5)])
def test_optimum_rope_fixtures_found_with_their_inv_freq(family, rotary, scale):
    import json

    config = json.loads((DATA / family / "config.json").read_text())
    theta = config.get("rope_theta", 10000.0)
    found = fh.find_pe(_fixture(family))
    assert [(f.family, f.positions) for f in found] == [("rope", "position_ids")]
    f = found[0]
    prefix = "/gpt_neox" if family == "gpt_neox" else "/model"
    assert f.replaces == [f"{prefix}/rotary_emb/Mul_1_output_0",
                          f"{prefix}/rotary_emb/Mul_2_output_0"]
    assert f.params["rotary_dim"] == rotary and f.params["flat_positions"] is True
    assert np.array_equal(f.params["inv_freq"],
                          (_default_inv(rotary, theta) * np.float32(scale)).astype(np.float32))
    assert f.params["attention_factor"] == 1.0
    assert f.where.startswith(f"(half layout, R={rotary}, inv_freq ")
    assert f.where.endswith(f"[{rotary // 2}] by MatMul) at Cos '{prefix}/rotary_emb/Cos_output_0'"
                            f" / Sin '{prefix}/rotary_emb/Sin_output_0', positions from input "
                            "'position_ids'")


def test_optimum_fixtures_of_the_other_families():
    yarn, = fh.find_pe(_fixture("llama-yarn"))
    # yarn's attention factor 0.1 ln(factor) + 1 (config: factor 4)
    assert yarn.params["attention_factor"] == np.float32(0.1 * math.log(4) + 1)
    gptj, = fh.find_pe(_fixture("gptj"))
    assert (gptj.family, gptj.params["sincos"], gptj.positions) == ("rope", True, "position_ids")
    assert np.abs(gptj.params["table"] - _gptj_table(256, 4)).max() <= 4 * EPS32
    mpt, = fh.find_pe(_fixture("mpt"))
    assert np.array_equal(mpt.params["slopes"], SLOPES4) and mpt.params["length"] == 256
    bloom, = fh.find_pe(_fixture("bloom"))
    assert np.array_equal(bloom.params["slopes"], SLOPES4.reshape(4, 1))
    assert bloom.where.endswith("(from 'attention_mask' by CumSum)")
    gpt2, = fh.find_pe(_fixture("gpt2"))
    assert (gpt2.family, gpt2.params["offset"], gpt2.positions) == ("learned", 0,
                                                                    "position_ids")
    opt, = fh.find_pe(_fixture("opt"))
    assert (opt.family, opt.params["offset"]) == ("learned", 2)
    assert opt.params["table"].shape == (258, 32)


# --- streams ---------------------------------------------------------------------------------


def _two_tables(first="position_ids", second="decoder_position_ids", shared=False):
    nodes = [oh.make_node("Gather", ["wpe", first], ["pe"], axis=0),
             oh.make_node("Add", [second, "position_ids"] if shared else [second, "zero"],
                          ["dpos"]),
             oh.make_node("Gather", ["dwpe", "dpos"], ["dpe"], axis=0)]
    inputs = [_vi(n, TP.INT64, [1, "s"]) for n in dict.fromkeys((first, second, "position_ids"))]
    return _model(nodes, inputs, [_vi("pe", TP.FLOAT, None), _vi("dpe", TP.FLOAT, None)],
                  {"wpe": WPE, "dwpe": WPE * 2, "zero": np.array(0, np.int64)})


def test_streams_tells_one_pe_per_input_from_two_on_one():
    model = _two_tables()
    found = fh.find_pe(model)
    assert [f.replaces for f in found] == [["pe"], ["dpe"]]
    assert fh.streams(model, found) == ["'position_ids'", "'decoder_position_ids'"]
    shared = _two_tables(shared=True)
    assert fh.streams(shared, fh.find_pe(shared)) is None  # the decoder's reads both
    assert fh.streams(model, found[:1]) is None
    assert fh.streams(model, [found[0], fh.Found("alibi", ["x"], "position_ids", "")]) is None
    assert fh.streams(model, [found[0], fh.Found("learned", ["x"], "", "")]) is None
    assert fh.streams(model, [found[0], fh.Found("learned", ["x"], "wpe", "")]) is None
    three = [*found, fh.Found("learned", ["x"], "position_ids", "")]
    assert fh.streams(model, three) is None  # the third overlaps the first
    nodes = [oh.make_node("Add", ["a", "b"], ["ab"])]
    model = _model(nodes, [_vi(n, TP.INT64, [1]) for n in "abc"], [_vi("ab", TP.INT64, None)])
    two = [fh.Found("learned", ["x"], "ab", ""), fh.Found("learned", ["y"], "c", "")]
    assert fh.streams(model, two) == ["'a', 'b'", "'c'"]


# --- the artifacts: rope_tables, build_found, sliced_found ---------------------------------------


def _cos_sin(positions, inv, factor=1.0):
    """The model's recipe per element with Python's math: the float32 angle ``p * w``, cos/sin
    rounded to float32, times the float32 attention factor in float32."""
    a = np.float32(factor)
    cos = [[np.float32(np.float32(math.cos(float(np.float32(p) * w))) * a) for w in inv]
           for p in positions]
    sin = [[np.float32(np.float32(math.sin(float(np.float32(p) * w))) * a) for w in inv]
           for p in positions]
    return np.array(cos, np.float32), np.array(sin, np.float32)


def test_rope_tables_are_the_models_float32_recipe():
    inv = np.array([1.0, 0.37, 1e-3], np.float32)
    found = fh.Found("rope", ["c", "s"], "p", "", {"inv_freq": inv,
                                                   "attention_factor": np.float32(1.1386294)})
    tables = fh.rope_tables(found, 40)
    cos, sin = _cos_sin(range(40), inv, 1.1386294)
    assert list(tables) == ["c", "s"]
    assert tables["c"].dtype == np.float32 and tables["s"].dtype == np.float32
    assert np.array_equal(tables["c"], cos) and np.array_equal(tables["s"], sin)
    other = np.array([2.0, 0.5, 0.25], np.float32)
    tables = fh.rope_tables(found, 5, other)  # longrope's other inv_freq
    cos, sin = _cos_sin(range(5), other, 1.1386294)
    assert np.array_equal(tables["c"], cos) and np.array_equal(tables["s"], sin)


def _sha(*tables):
    digest = hashlib.sha256()
    for t in tables:
        digest.update(np.ascontiguousarray(t, np.float32).tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("factor", [None, 1.1386294])
def test_build_found_rope_table_gathers_the_rows(factor):
    model = _rope_model(factor=factor)
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 8)
    cos, sin = _cos_sin(range(8), INV, factor or 1.0)
    a = float(np.float32(factor or 1.0))
    assert record == {
        "scheme": "rope", "layout": "half", "rotary_dim": 4,
        "inv_freq": {"initializer": "inv_freq", "dtype": "float32",
                     "values": [1.0, float(np.float32(0.01))]},
        "attention_factor": a, "max_len": 8, "mode": "table", "quantize": "none",
        "tables_sha256": _sha(cos, sin), "replaces": f.replaces, "positions": "pos"}
    assert [i.name for i in pe.graph.input] == ["positions"]
    dims = pe.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 0, 1] and dims[1].dim_param == "s"
    assert pe.graph.input[0].type.tensor_type.elem_type == TP.INT64
    assert next(o.version for o in pe.opset_import if o.domain == "") == 18
    out = _run(pe, positions=np.array([[[7], [0], [3]]], np.int64))
    rows = [7, 0, 3]
    assert np.array_equal(out[f.replaces[0]][0], np.concatenate([cos[rows], cos[rows]], 1))
    assert np.array_equal(out[f.replaces[1]][0], np.concatenate([sin[rows], sin[rows]], 1))


def test_build_found_rope_int8_and_the_default_length():
    model = _rope_model()
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, None, quantize="int8")
    assert record["max_len"] == fh.DEFAULT_MAX_LEN == 4096
    assert record["quantize"] == "int8" and record["mode"] == "table"
    cos, sin = _cos_sin(range(4096), INV)
    assert record["tables_sha256"] == _sha(cos, sin)
    # symmetric int8 per table: scale max|t| / 127 (both tables reach 1 in magnitude), bound
    # half of it
    assert record["quant"] == {"bound": float(np.float32(1 / 127)) / 2}
    out = _run(pe, positions=np.array([[[5], [4095]]], np.int64))
    assert np.abs(out["cos"][0] - np.concatenate([cos[[5, 4095]]] * 2, 1)).max() <= \
        float(np.float32(1 / 127)) / 2 + 1e-7


def test_build_found_rope_over_the_limit():
    model = _rope_model()
    f, = fh.find_pe(model)
    # 64 positions x R=4 x 4 B = 1024 B: at the limit, a table; one byte less: sliced
    _, record = fh.build_found(model, f, 64, table_bytes_limit=1024)
    assert record["mode"] == "table"
    _, record = fh.build_found(model, f, 64, table_bytes_limit=1023)
    assert record["mode"] == "sliced"
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, 64, table_bytes_limit=1023, mode="table")
    assert str(err.value) == (
        "the tables for 64 positions would be 1,024 B, over graft's 1,023 B limit; give fewer "
        "positions (--max-len), --quantize int8 or --mode sliced")
    # int8: a byte a value, 256 B; never sliced on its own (the int8 table was asked for)
    _, record = fh.build_found(model, f, 64, quantize="int8", table_bytes_limit=256)
    assert (record["mode"], record["quantize"]) == ("table", "int8")
    with pytest.raises(BadParameterError, match="would be 256 B, over graft's 255 B limit"):
        fh.build_found(model, f, 64, quantize="int8", table_bytes_limit=255)


def test_check_size_counts_bytes_as_stored():
    fh._check_size(10, 5, "none", 40)
    fh._check_size(40, 5, "int8", 40)
    with pytest.raises(BadParameterError, match="^the tables for 5 positions would be 44 B, "
                       "over graft's 40 B limit;"):
        fh._check_size(11, 5, "none", 40)
    with pytest.raises(BadParameterError, match="would be 2,000 B, over graft's 1,999 B"):
        fh._check_size(2000, 7, "int8", 1999)


def test_build_found_longrope_holds_both_tables_and_the_models_condition():
    model = _longrope_model()
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 6)
    short, long_ = _cos_sin(range(6), INV), _cos_sin(range(6), INV * 0.5)
    assert record == {
        "scheme": "rope", "layout": "half", "rotary_dim": 4,
        "inv_freq": {"initializer": "inv_chosen", "dtype": "float32",
                     "values": [1.0, float(np.float32(0.01))]},
        "attention_factor": 1.0,
        "inv_freq_if": {"condition": "use_long", "initializer": "long_inv",
                        "values": [0.5, float(np.float32(0.005))]},
        "condition": "use_long", "max_len": 6, "mode": "table", "quantize": "none",
        "tables_sha256": _sha(*short, *long_), "replaces": ["cos", "sin"], "positions": "pos"}
    assert len(pe.graph.input) == 2
    condition = pe.graph.input[1]
    assert [d.dim_value for d in condition.type.tensor_type.shape.dim] == [1]
    positions = np.array([[[5], [2]]], np.int64)
    for flag, (cos, sin) in ((False, short), (True, long_)):
        out = _run(pe, **{pe.graph.input[0].name: positions,
                          condition.name: np.array([flag])})
        assert np.array_equal(out["cos"][0], np.concatenate([cos[[5, 2]]] * 2, 1)), flag
        assert np.array_equal(out["sin"][0], np.concatenate([sin[[5, 2]]] * 2, 1)), flag
    # both pairs count against the limit: 6 x 4 x 2 x 4 B = 192 B
    fh.build_found(model, f, 6, table_bytes_limit=192)
    with pytest.raises(BadParameterError, match="would be 192 B, over graft's 191 B limit"):
        fh.build_found(model, f, 6, table_bytes_limit=191)  # never sliced on its own
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, 6, mode="sliced")
    assert str(err.value) == ("--mode sliced: longrope picks one of two inv_freq at run time; "
                              "graft it as tables (--mode table)")


def test_build_found_rope_sliced_record_and_values():
    from edgepe.graphs import sliced as sl
    from edgepe.graphs.model_tensors import recipe_distance

    model = _rope_model(factor=1.25)
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 100, mode="sliced")
    bound = record.pop("bound")
    distance = record.pop("recipe_distance")
    assert record.pop("proof_bound") == bound + distance
    assert bound == sl.bound(sl.default_plan(100), 1.25)
    assert distance == recipe_distance(INV, 100, 1.25)
    assert record == {
        "scheme": "rope", "layout": "half", "rotary_dim": 4,
        "inv_freq": {"initializer": "inv_freq", "dtype": "float32",
                     "values": [1.0, float(np.float32(0.01))]},
        "attention_factor": 1.25, "max_len": 100, "mode": "sliced",
        "slices": list(sl.default_plan(100)), "lowering": "bitwise", "quantize": "none",
        "replaces": ["cos_a", "sin_a"], "positions": "pos"}
    assert not {"Cos", "Sin"} & {n.op_type for n in pe.graph.node}
    p = np.arange(100)
    out = _run(pe, positions=p.reshape(1, 100, 1).astype(np.int64))
    angle = p[:, None] * INV.astype(np.float64)[None, :]
    for name, fn in (("cos_a", np.cos), ("sin_a", np.sin)):
        exact = 1.25 * np.concatenate([fn(angle)] * 2, 1)
        assert np.abs(out[name][0] - exact).max() <= bound, name
    # past the table limit with no mode: sliced on its own
    _, auto = fh.build_found(model, f, 100, table_bytes_limit=100 * 4 * 4 - 1)
    assert auto["mode"] == "sliced" and auto["lowering"] == "bitwise"


def test_sliced_below_opset_18_slices_by_float_arithmetic_up_to_its_limit():
    from edgepe.graphs import sliced as sl

    model = _rope_model()
    model.opset_import[0].version = 17
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 70, mode="sliced")
    assert record["lowering"] == "trunc" and record["slices"] == list(sl.default_plan(70))
    assert not {"BitShift", "BitwiseAnd"} & {n.op_type for n in pe.graph.node}
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, sl.TRUNC_LIMIT + 1, mode="sliced")
    assert str(err.value) == ("--mode sliced in an opset-17 model slices by float arithmetic, "
                              f"exact below {2**24} positions; got --max-len {2**24 + 1}")


def test_positions_of_the_wrong_shape_are_refused_in_both_modes():
    model = _rope_model()
    f, = fh.find_pe(model)
    flat = fh.Found("rope", f.replaces, "position_ids", f.where, dict(f.params))
    message = ("the positions tensor 'position_ids' of the PE graft found has shape "
               "[1, 's']; graft takes [..., 1] (positions[..., None])")
    for mode in ("table", "sliced"):
        with pytest.raises(BadParameterError) as err:
            fh.build_found(model, flat, 8, mode=mode)
        assert str(err.value) == message, mode
    nowhere = fh.Found("rope", f.replaces, "nowhere", f.where, dict(f.params))
    for mode in ("table", "sliced"):
        with pytest.raises(BadParameterError, match=r"'nowhere' .* has shape None; graft"):
            fh.build_found(model, nowhere, 8, mode=mode)
    scalar = _model([oh.make_node("Cast", ["p"], ["q"], to=TP.FLOAT)],
                    [_vi("p", TP.INT64, [])], [_vi("q", TP.FLOAT, None)])
    at_scalar = fh.Found("rope", f.replaces, "p", f.where, dict(f.params))
    for mode in ("table", "sliced"):
        with pytest.raises(BadParameterError, match=r"'p' .* has shape \[\]; graft"):
            fh.build_found(scalar, at_scalar, 8, mode=mode)


def test_build_found_refuses_modes_it_does_not_have():
    model = _rope_model()
    f, = fh.find_pe(model)
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, 8, mode="compute")
    assert str(err.value) == ("--mode 'compute': a PE graft finds goes in as a table or sliced "
                              "(RoPE)")
    learned = _gather_model()
    g, = fh.find_pe(learned)
    with pytest.raises(BadParameterError) as err:
        fh.build_found(learned, g, None, mode="sliced")
    assert str(err.value) == ("--mode sliced computes RoPE's half-layout cos/sin; the PE found "
                              f"is learned ({g.where})")
    gptj = _gathernd_model(_gptj_table(8, 4))
    g, = fh.find_pe(gptj)
    with pytest.raises(BadParameterError, match="^--mode sliced computes RoPE's half-layout "
                       r"cos/sin; the PE found is rope \(\(GPT-J"):
        fh.build_found(gptj, g, None, mode="sliced")


def test_build_found_int32_positions_keep_their_type():
    model = _rope_model()
    model.graph.input[0].type.tensor_type.elem_type = TP.INT32
    f, = fh.find_pe(model)
    pe, _ = fh.build_found(model, f, 8)
    assert pe.graph.input[0].type.tensor_type.elem_type == TP.INT32
    out = _run(pe, positions=np.array([[[3]]], np.int32))
    cos, _ = _cos_sin([3], INV)
    assert np.array_equal(out["cos"][0], np.concatenate([cos, cos], 1))
    pe, _ = fh.build_found(model, f, 8, mode="sliced")
    assert pe.graph.input[0].type.tensor_type.elem_type == TP.INT32


def test_build_found_fused_rope_feeds_half_caches_and_is_never_sliced():
    model = _fused_model(factor=0.5)
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 8)
    cos, sin = _cos_sin(range(8), INV, 0.5)
    assert record == {
        "scheme": "rope", "layout": "half", "rotary_dim": 4,
        "inv_freq": {"initializer": "inv_freq", "dtype": "float32",
                     "values": [1.0, float(np.float32(0.01))]},
        "attention_factor": 0.5, "max_len": 8, "mode": "table", "quantize": "none",
        "tables_sha256": _sha(cos, sin), "replaces": ["cos0_a", "sin0_a"], "positions": "pos"}
    out = _run(pe, positions=np.array([[[6], [1]]], np.int64))
    assert np.array_equal(out["cos0_a"][0], cos[[6, 1]])  # [.., R/2]: not duplicated
    assert np.array_equal(out["sin0_a"][0], sin[[6, 1]])
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, 8, mode="sliced")
    assert str(err.value) == ("--mode sliced makes RoPE's cos/sin [.., R]; this model's "
                              "RotaryEmbedding ops read [.., R/2] caches: they go in as tables "
                              "(--mode table)")
    with pytest.raises(BadParameterError, match="would be 128 B, over graft's 127 B limit"):
        fh.build_found(model, f, 8, table_bytes_limit=127)


def test_build_found_flat_positions_of_optimum():
    model = _matmul_model()
    f, = fh.find_pe(model)
    for mode in ("table", "sliced"):
        pe, record = fh.build_found(model, f, 16, mode=mode)
        assert record["mode"] == mode and record["positions"] == "position_ids"
        value = pe.graph.input[0]
        dims = value.type.tensor_type.shape.dim
        assert len(dims) == 2 and dims[0].dim_value == 1 and dims[1].dim_param == "s"
        out = _run(pe, **{value.name: np.array([[9, 0, 15]], np.int64)})
        cos, sin = _cos_sin([9, 0, 15], INV)
        tolerance = 0 if mode == "table" else record["bound"] + record["recipe_distance"]
        assert np.abs(out["cos"] - np.concatenate([cos, cos], 1)[None]).max() <= tolerance
        assert np.abs(out["sin"] - np.concatenate([sin, sin], 1)[None]).max() <= tolerance


def test_flat_positions_puts_an_unsqueeze_in_front():
    from edgepe.graphs.model_tensors import gathered_tables

    pe = gathered_tables({"o": WPE}, 18, ["b", "s", 1], squeeze=True)
    name = pe.graph.input[0].name
    flat = fh._flat_positions(pe)
    assert len(pe.graph.input[0].type.tensor_type.shape.dim) == 3  # a copy
    node = flat.graph.node[0]
    assert (node.op_type, list(node.input), list(node.output)) == (
        "Unsqueeze", [name, f"{name}_column_axis"], [f"{name}_column"])
    axis = next(t for t in flat.graph.initializer if t.name == f"{name}_column_axis")
    assert nh.to_array(axis).tolist() == [-1] and nh.to_array(axis).dtype == np.int64
    assert [d.dim_param for d in flat.graph.input[0].type.tensor_type.shape.dim] == ["b", "s"]
    assert all(name not in n.input for n in flat.graph.node[1:])
    out = _run(flat, **{name: np.array([[4, 1]], np.int64)})
    assert np.array_equal(out["o"][0], WPE[[4, 1]])


@pytest.mark.parametrize("max_len", [None, 10])
def test_build_found_bloom_alibi_computes_paper_slopes_times_positions(max_len):
    model = _bloom_model()
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, max_len)
    assert record == {"scheme": "alibi", "heads": 4, "slopes": "paper", "model_slopes": "slopes",
                      "mode": "compute", "quantize": "none", "max_len": max_len or 4096,
                      "replaces": ["alibi"], "positions": "pos"}
    value = pe.graph.input[0]
    assert value.type.tensor_type.elem_type == TP.INT64
    dims = value.type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[:2]] == [1, 1] and dims[2].dim_param == "t"
    positions = np.array([[[0, 1, 2, 7]]], np.int64)
    out = _run(pe, **{value.name: positions})
    bias = next(iter(out.values()))
    assert np.array_equal(bias, SLOPES4.reshape(1, 4, 1) * positions.astype(np.float32))
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, max_len, quantize="int8")
    assert str(err.value) == ("--quantize int8: ALiBi's bias is slope x position, no table to "
                              "quantise")


def test_build_found_bloom_alibi_refuses_other_slopes_and_guesses_unknown_shapes():
    model = _bloom_model(slopes=(SLOPES4 * np.float32(2)).reshape(4, 1))
    f, = fh.find_pe(model)
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, None)
    assert str(err.value) == ("the model's ALiBi slopes 'slopes' differ from the ALiBi paper's "
                              "rule for 4 heads (edgepe's alibi) by up to 0.25; graft keeps "
                              "the model as is")
    nowhere = fh.Found("alibi", ["alibi"], "nowhere", "",
                       {"slopes": SLOPES4.reshape(4, 1), "slopes_name": "slopes"})
    pe, record = fh.build_found(_bloom_model(), nowhere, None)
    value = pe.graph.input[0].type.tensor_type
    assert value.elem_type == TP.INT64 and record["positions"] == "nowhere"
    assert [d.dim_param or d.dim_value for d in value.shape.dim] == ["batch", 1, "seq"]


def _bloom_unmasked(pos_dims=("s",), opset=17):
    """Bloom exported without a mask input (issue 40): slopes [4, 1, 1] times int32 positions
    [S] from a Range, the bias [4, 1, S]; discover finds it by its values, slopes_shape kept."""
    nodes = [oh.make_node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
             oh.make_node("Mul", ["slopes", "posf"], ["alibi"])]
    model = _model(nodes, [_vi("pos", TP.INT32, list(pos_dims) if pos_dims else None)],
                   [_vi("alibi", TP.FLOAT, None)], {"slopes": SLOPES4.reshape(4, 1, 1)}, opset)
    found = fh.Found("alibi", ["alibi"], "pos", "", {
        "slopes": SLOPES41, "slopes_shape": [4, 1, 1], "slopes_name": "slopes",
        "discovered": True})
    return model, found


def _dims(value):
    return [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]


def test_build_found_alibi_found_by_values_keeps_the_models_shapes_and_types():
    """``_alibi_shaped`` through build_found: the model's own slopes shape [H, 1, 1] against
    positions [S] gives [H, 1, S] (numpy's broadcast, as the model's Mul), its positions' int32
    kept, its opset and the lowest IR version that opset needs (splice takes the max of the
    model's and the PE's: an IR-8 model stays IR 8), and the checker's full check passes."""
    model, found = _bloom_unmasked()
    pe, record = fh.build_found(model, found, None)
    assert record["model_slopes"] == "slopes" and record["positions"] == "pos"
    onnx.checker.check_model(pe, full_check=True)
    assert [(o.domain, o.version) for o in pe.opset_import] == [("", 17)]
    assert pe.ir_version == oh.find_min_ir_version_for(list(pe.opset_import)) == 8
    (value,), (out,) = pe.graph.input, pe.graph.output
    assert value.type.tensor_type.elem_type == TP.INT32 and _dims(value) == ["s"]
    assert out.type.tensor_type.elem_type == TP.FLOAT and _dims(out) == [4, 1, "s"]
    positions = np.array([0, 1, 5, 4095], np.int32)
    (bias,) = _run(pe, **{value.name: positions}).values()
    assert bias.dtype == np.float32 and bias.shape == (4, 1, 4)
    assert np.array_equal(bias, SLOPES4.reshape(4, 1, 1) * positions.astype(np.float32))
    # the model's own run of its Mul gives the same [4, 1, S] values
    (theirs,) = _run(model, pos=positions).values()
    assert np.array_equal(bias, theirs)


def test_alibi_shaped_broadcasts_like_numpy_and_names_unknown_axes():
    """Positions of unknown shape are ``[seq]``; an axis with no name or size gets
    ``positions_<i>``; slopes [H, 1] of lower rank than positions [B, 1, S] align on the last
    axis ([B, H, S]); float64 slopes are stored float32 (the bias is float32)."""
    model, found = _bloom_unmasked(pos_dims=None, opset=18)
    pe, _ = fh.build_found(model, found, None)
    assert _dims(pe.graph.input[0]) == ["seq"] and _dims(pe.graph.output[0]) == [4, 1, "seq"]
    pe = fh._alibi_shaped(SLOPES4.reshape(4, 1, 1), 18, [None], TP.INT64)
    assert _dims(pe.graph.input[0]) == ["positions_0"]
    assert _dims(pe.graph.output[0]) == [4, 1, "positions_0"]
    pe = fh._alibi_shaped(SLOPES41.astype(np.float64), 18, ["b", 1, None], TP.INT64)
    assert _dims(pe.graph.input[0]) == ["b", 1, "positions_2"]
    assert _dims(pe.graph.output[0]) == ["b", 4, "positions_2"]
    assert pe.graph.initializer[0].data_type == TP.FLOAT
    positions = np.array([[[0, 3, 9]], [[2, 2, 2]]], np.int64)
    (bias,) = _run(pe, **{pe.graph.input[0].name: positions}).values()
    assert bias.shape == (2, 4, 3)
    assert np.array_equal(bias, SLOPES41[None] * positions.astype(np.float32))
    onnx.checker.check_model(pe, full_check=True)


W4 = np.array([1.0, 1.0, 0.1, 0.1], np.float32)  # an interleaved angle's own 4 columns


def _columns_rope():
    """An interleaved angle discover found by its values (issue 40): its K = 4 columns stored
    as they are (``columns``), not R/2 = 2 columns each doubled."""
    nodes = [oh.make_node("Cast", ["p"], ["pf"], to=TP.FLOAT),
             oh.make_node("Mul", ["pf", "w"], ["angle"]),
             oh.make_node("Cos", ["angle"], ["cos"]), oh.make_node("Sin", ["angle"], ["sin"])]
    model = _model(nodes, [_vi("p", TP.INT64, [1, "s", 1])],
                   [_vi("cos", TP.FLOAT, None), _vi("sin", TP.FLOAT, None)], {"w": W4})
    found = fh.Found("rope", ["cos", "sin"], "p", "", {
        "inv_freq": W4, "inv_freq_name": "angle", "attention_factor": np.float32(1.0),
        "layout": "interleaved", "rotary_dim": 4, "choice": None, "columns": 4,
        "flat_positions": False, "discovered": True})
    return model, found


def test_build_found_rope_columns_count_all_their_bytes_and_refuse_sliced():
    """Both tables' K values per position count against the size limit (not R/2 doubled),
    over it the refusal (an angle of its own columns has no sliced form to fall back to), the
    rows stored column for column, and --mode sliced refused in one line."""
    model, found = _columns_rope()
    limit = 16 * 2 * 4 * 4  # 16 positions, two tables of K = 4 float32 columns
    pe, record = fh.build_found(model, found, 16, table_bytes_limit=limit)
    assert (record["mode"], record["layout"], record["max_len"]) == ("table", "interleaved", 16)
    out = _run(pe, **{pe.graph.input[0].name: np.arange(16).reshape(1, 16, 1)})
    angle = np.arange(16, dtype=np.float32)[:, None] * W4
    assert np.array_equal(out["cos"][0], np.cos(angle.astype(np.float64)).astype(np.float32))
    assert np.array_equal(out["sin"][0], np.sin(angle.astype(np.float64)).astype(np.float32))
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, found, 16, table_bytes_limit=limit - 1)
    assert str(err.value) == ("the tables for 16 positions would be 512 B, over graft's 511 B "
                              "limit; give fewer positions (--max-len), --quantize int8 or "
                              "--mode sliced")
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, found, 16, mode="sliced")
    assert str(err.value) == ("--mode sliced makes RoPE's half-layout cos/sin; this model's "
                              "angle is interleaved: it goes in as tables (--mode table)")


def _whisper_whole(opset):
    """Whisper's encoder table ``[12, 8]`` as ``discover.whole_sinusoids`` finds it (added whole
    at Add 'h'), one element off by 2^-12: the rebuilt table's distance from it is not 0."""
    w = np.exp(-math.log(10000) / 3 * np.arange(4))  # log_timescale_increment: D/2 - 1 = 3
    angle = np.arange(12)[:, None] * w[None, :]
    table = np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)
    table[3, 1] += np.float32(2.0**-12)
    model = _model([oh.make_node("Add", ["x", "T"], ["h"])], [_vi("x", TP.FLOAT, [1, 12, 8])],
                   [_vi("h", TP.FLOAT, None)], {"T": table}, opset)
    found = fh.Found("sinusoidal", ["T"], "", "", {"whole": True, "table": table,
                                                  "table_name": "T", "add": "h"})
    return model, found, table


def test_build_found_whole_table_records_where_and_bounds_int8_on_top_of_the_distance():
    """build_whole: edgepe's table at the model's opset, its positions Range(0, 12) inside the
    PE; the record graft stores (``edgepe.graft.N``) names the table, the Add, the positions'
    source, and its proof bound is the rebuilt table's distance plus int8's bound."""
    from edgepe.graft.discover import WHISPER_PARAMS

    model, found, table = _whisper_whole(19)
    pe, record = fh.build_found(model, found, 99, "int8", mode="table")  # max_len: the model's
    assert [(o.domain, o.version) for o in pe.opset_import] == [("", 19)]
    assert len(pe.graph.input) == 0 and pe.graph.node[0].op_type == "Range"
    (out,) = _run(pe).values()
    assert out.shape == (12, 8)
    assert {k: v for k, v in record.items() if k not in ("manifest", "quant")} == {
        "scheme": "sinusoidal", **WHISPER_PARAMS, "table": "T", "added_at": "h", "max_len": 12,
        "mode": "table", "quantize": "int8", "replaces": ["T"], "positions": None,
        "positions_from": "Range(0, 12) inside the PE (the table's rows)",
        "table_distance": record["table_distance"], "proof_bound": record["proof_bound"]}
    assert 2.0**-13 < record["table_distance"] < 2.0**-11  # the bump, within float32 recipe
    assert 0 < record["quant"]["bound"] < 2.0**-7
    assert record["proof_bound"] == record["table_distance"] + record["quant"]["bound"]
    assert np.abs(out.astype(np.float64) - table).max() <= record["proof_bound"]
    model, found, table = _whisper_whole(17)  # float32 rows at opset 17
    pe, record = fh.build_found(model, found, None, mode="table")
    assert [(o.domain, o.version) for o in pe.opset_import] == [("", 17)]
    assert record["proof_bound"] == record["table_distance"] > 0
    (out,) = _run(pe).values()
    assert np.abs(out.astype(np.float64) - table).max() == record["table_distance"]


def test_build_found_mpt_bias_from_a_range():
    model = _mpt_model(_mpt_bias(6))
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, 99)  # the constant's length, whatever is asked
    assert record == {"scheme": "alibi", "heads": 4, "slopes": "paper", "mode": "compute",
                      "quantize": "none", "max_len": 6, "model_table": "bias",
                      "replaces": ["bias"], "positions": None}
    assert len(pe.graph.input) == 0
    assert np.array_equal(_run(pe)["bias"], _mpt_bias(6))
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, None, quantize="int8")
    assert str(err.value) == ("--quantize int8: MPT's ALiBi bias goes in as slope x distance, "
                              "no table to quantise")


def test_build_found_learned_table_keeps_its_rows():
    model = _gather_model()
    f, = fh.find_pe(model)
    for max_len in (None, 6):
        pe, record = fh.build_found(model, f, max_len)
        assert record == {"scheme": "learned", "table": "wpe", "offset": 0, "max_len": 6,
                          "mode": "table", "quantize": "none", "tables_sha256": _sha(WPE),
                          "replaces": ["pe"], "positions": "position_ids"}
        out = _run(pe, positions=np.array([[5, 0, 2]], np.int64))
        assert np.array_equal(out["pe"][0], WPE[[5, 0, 2]])
    with pytest.raises(BadParameterError) as err:
        fh.build_found(model, f, 7)
    assert str(err.value) == "--max-len 7: the model's position table 'wpe' has 6 rows"
    pe, record = fh.build_found(model, f, None, quantize="int8")
    scale = float(np.float32(np.abs(WPE).max() / 127))
    assert record["quant"] == {"bound": scale / 2} and record["quantize"] == "int8"
    with pytest.raises(BadParameterError, match="would be 96 B, over graft's 95 B limit"):
        fh.build_found(model, f, None, table_bytes_limit=95)
    fh.build_found(model, f, None, table_bytes_limit=96)
    nowhere = fh.Found("learned", ["pe"], "nowhere", "", {**f.params})
    pe, _ = fh.build_found(model, nowhere, None)
    value = pe.graph.input[0].type.tensor_type
    assert value.elem_type == TP.INT64
    assert [d.dim_param or d.dim_value for d in value.shape.dim] == ["batch", "seq"]


def test_build_found_gptj_gathernd_table_squeezes_and_says_its_layout():
    table = _gptj_table(8, 4)
    model = _gathernd_model(table)
    f, = fh.find_pe(model)
    pe, record = fh.build_found(model, f, None)
    assert record == {"scheme": "rope", "table": "emb", "offset": 0, "layout": "interleaved",
                      "rotary_dim": 4, "table_layout": "sin|cos", "max_len": 8, "mode": "table",
                      "quantize": "none", "tables_sha256": _sha(table), "replaces": ["pe"],
                      "positions": "i0"}
    out = _run(pe, positions=np.array([[[7], [1]]], np.int64))
    assert np.array_equal(out["pe"][0], table[[7, 1]])
    nowhere = fh.Found("rope", ["pe"], "nowhere", "", {**f.params})
    pe, _ = fh.build_found(model, nowhere, None)
    dims = pe.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", "seq", 1]


def test_build_found_sinusoidal_tables_say_what_they_are():
    marian = _marian_table(8, 8)
    model = _gather_model(table=marian, name="emb")
    f, = fh.find_pe(model)
    _, record = fh.build_found(model, f, None)
    distance = record.pop("definition_distance")
    assert distance == f.params["definition_distance"]
    assert record == {"scheme": "sinusoidal", "table": "emb", "offset": 0, "layout": "half",
                      "frequencies": "base", "base": 10000.0, "max_len": 8, "mode": "table",
                      "quantize": "none", "tables_sha256": _sha(marian), "replaces": ["pe"],
                      "positions": "position_ids"}
    fairseq = _fairseq_table(8, 8)
    model = _gather_model(table=fairseq, name="emb")
    f, = fh.find_pe(model)
    _, record = fh.build_found(model, f, None)
    assert record == {"scheme": "sinusoidal", "table": "emb", "offset": 0, "max_len": 8,
                      "mode": "table", "quantize": "none", "tables_sha256": _sha(fairseq),
                      "replaces": ["pe"], "positions": "position_ids"}


# --- check_hf_config --------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
         "rope_theta": 10000.0, "max_position_embeddings": 32}  # head size 4: INV


def test_check_hf_config_rope_equal_bit_for_bit():
    f, = fh.find_pe(_rope_model())
    length, record = fh.check_hf_config(f, LLAMA, None)
    assert length == 32  # max_position_embeddings
    assert record == {"scheme": "rope", "model_type": "llama",
                      "params": {"base": 10000.0, "freq_dtype": "float32", "layout": "half",
                                 "rope_type": "default"},
                      "inv_freq": "equal to edgepe's rope scheme (freq_dtype=float32) bit for "
                                  "bit"}
    length, _ = fh.check_hf_config(f, LLAMA, 8)
    assert length == 8
    no_length = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    assert fh.check_hf_config(f, no_length, None)[0] is None


def test_check_hf_config_rope_partial_rotary_compares_the_first_frequencies():
    inv = np.array([1.0, 0.1], np.float32)  # 1 / 10000^(2i / 8), i = 0, 1: R = 4 of head size 8
    f, = fh.find_pe(_rope_model(inv=inv))
    config = {**LLAMA, "hidden_size": 16}
    assert fh.check_hf_config(f, config, None)[1]["inv_freq"].startswith("equal")
    f, = fh.find_pe(_rope_model())  # [1, 0.01]: R = 4's frequencies, not head size 8's
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(f, config, None)
    gap = float(np.float64(np.float32(0.1)) - np.float64(np.float32(0.01)))
    assert str(err.value) == (
        f"the model's inv_freq 'inv_freq' [2] differs from edgepe's rope for this config ([2], "
        f"by up to {gap:.3g}): the config is not this model's, or its scaling is not static "
        "(dynamic NTK); graft without --from-hf-config keeps the model's own")


def test_check_hf_config_rope_of_another_size_is_refused():
    f, = fh.find_pe(_rope_model(inv=np.array([1.0, 0.1, 0.01, 0.001], np.float32)))
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(f, LLAMA, None)
    assert str(err.value).startswith("the model's inv_freq 'inv_freq' [4] differs from edgepe's "
                                     "rope for this config ([2]): the config is not")


def test_check_hf_config_yarn_attention_factor_of_the_rotated_slots():
    """yarn scales cos/sin by 0.1 ln(factor) + 1 on the rotated slots only (phi, R = 2 of head
    size 4: edgepe's rope holds [1.0693, 1] per slot): a model scaling by it passes, one
    scaling by 1 is refused in one line naming both factors."""
    phi = {"model_type": "phi", "hidden_size": 8, "num_attention_heads": 2,
           "rope_theta": 10000.0, "max_position_embeddings": 32, "partial_rotary_factor": 0.5,
           "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                            "original_max_position_embeddings": 16}}
    yarn = np.float32(0.1 * math.log(2.0) + 1.0)
    inv = np.array([1.0], np.float32)  # 1 / 10000^0: yarn leaves the fastest frequency as is
    f, = fh.find_pe(_rope_model(factor=yarn, inv=inv))
    assert f.params["rotary_dim"] == 2
    length, record = fh.check_hf_config(f, phi, None)
    assert length == 32 and record["params"]["rope_type"] == "yarn"
    assert record["inv_freq"].startswith("equal to edgepe's rope scheme")
    f, = fh.find_pe(_rope_model(factor=None, inv=inv))
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(f, phi, None)
    assert str(err.value) == (f"the model scales cos/sin by 1, edgepe's rope for this config by "
                              f"{float(yarn):.9g} (the attention factor): the config is not "
                              "this model's")


def test_check_hf_config_refuses_another_family_and_dynamic_ntk_past_its_length():
    f, = fh.find_pe(_rope_model())
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(f, {"model_type": "bloom", "n_head": 4, "hidden_size": 8}, None)
    assert str(err.value) == (f"--from-hf-config describes a 'alibi' model; the PE graft found "
                              f"is rope ({f.where})")
    dynamic = {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    assert fh.check_hf_config(f, dynamic, None)[0] == 32
    assert fh.check_hf_config(f, dynamic, 32)[0] == 32
    with pytest.raises(BadParameterError, match="at most 32 are faithful; give --max-len at "
                       "most that"):
        fh.check_hf_config(f, dynamic, 33)


def test_check_hf_config_longrope_compares_both_sets_and_gptj_skips_the_check():
    """Issue 40: longrope's short set (the Where's false branch) and long set (its true branch)
    are each edgepe's for the config's short_factor and long_factor, and the attention factor
    too; lists that are not the model's (all 9.0) are refused, naming the initializer."""
    f, = fh.find_pe(_longrope_model())  # short INV, long INV * 0.5, no cos/sin scale
    config = {"model_type": "phi3", "hidden_size": 8, "num_attention_heads": 2,
              "max_position_embeddings": 32, "original_max_position_embeddings": 16,
              "rope_scaling": {"type": "longrope", "short_factor": [1, 1],
                               "long_factor": [2, 2], "attention_factor": 1.0}}
    length, record = fh.check_hf_config(f, config, None)
    assert length == 32
    assert record["inv_freq"] == ("equal to edgepe's rope scheme (freq_dtype=float32) bit for "
                                  "bit, short_factor's and long_factor's")
    # --max-len 8, within the original 16: the long set is still long_factor's (the model
    # picks it past 16 positions whatever the table's length)
    assert fh.check_hf_config(f, config, 8)[0] == 8
    assert record["params"]["short_factor"] == [1.0, 1.0]  # tuples written as lists
    assert record["params"]["long_factor"] == [2.0, 2.0]
    for key, name in (("long_factor", "long_inv"), ("short_factor", "short_inv")):
        wrong = {**config, "rope_scaling": {**config["rope_scaling"], key: [9.0, 9.0]}}
        with pytest.raises(BadParameterError, match=f"^the model's inv_freq '{name}' \\[2\\] "
                           "differs from edgepe's rope for this config \\(\\[2\\], by up to"):
            fh.check_hf_config(f, wrong, None)
    # no attention_factor: sqrt(1 + ln 2 / ln 16) = 1.118..., the model scales by 1
    derived = {**config, "rope_scaling": {k: v for k, v in config["rope_scaling"].items()
                                          if k != "attention_factor"}}
    with pytest.raises(BadParameterError, match="^the model scales cos/sin by 1, edgepe's rope "
                       "for this config by 1.118"):
        fh.check_hf_config(f, derived, None)
    f, = fh.find_pe(_gathernd_model(_gptj_table(8, 4)))
    gptj = {"model_type": "gptj", "n_embd": 8, "n_head": 1, "rotary_dim": 4, "n_positions": 8}
    length, record = fh.check_hf_config(f, gptj, None)
    assert length is None and "inv_freq" not in record  # the table keeps its rows
    assert fh.check_hf_config(f, gptj, 8)[0] == 8


def test_check_hf_config_a_choice_against_another_rope_type_is_one_set_at_the_length():
    """A model choosing between two inv_freq (its Where) checked against a config that is not
    longrope: both branches are compared with the config's one set at the table's length, none
    at a sequence length past it (dynamic NTK's frequencies grow there: 33 > 32)."""
    f, = fh.find_pe(_longrope_model(if_true=INV))  # both branches the default frequencies
    dynamic = {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    length, record = fh.check_hf_config(f, dynamic, None)
    assert length == 32 and record["params"]["rope_type"] == "dynamic"
    assert record["inv_freq"].endswith("bit for bit, short_factor's and long_factor's")


def test_check_hf_config_learned_keeps_the_tables_rows():
    f, = fh.find_pe(_gather_model())
    opt = {"model_type": "opt", "hidden_size": 4, "max_position_embeddings": 6}
    length, record = fh.check_hf_config(f, opt, None)
    assert length is None
    assert record == {"scheme": "learned", "model_type": "opt", "params": {"offset": 2}}
    assert fh.check_hf_config(f, opt, 5)[0] == 5


def test_check_hf_config_marian_table_against_edgepe_sinusoidal():
    marian = _marian_table(8, 8)
    f, = fh.find_pe(_gather_model(table=marian, name="emb"))
    config = {"model_type": "marian", "d_model": 8, "max_position_embeddings": 8}
    length, record = fh.check_hf_config(f, config, None)
    assert length is None
    gap = float(record["table"].split()[1])
    assert 0 <= gap <= 4 * 2.0**-23 + 8 * 2.0**-24
    assert record["table"] == (f"within {gap:.3g} of edgepe's sinusoidal (layout=half) for this "
                               "config (its float32 angle p * w against the model's float64)")
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(f, {**config, "d_model": 16}, None)
    assert str(err.value) == ("--from-hf-config describes sinusoidal d_model 16 with "
                              "{'layout': 'half'}; the PE found is Marian's (" + f.where + ")")
    xglm = {"model_type": "xglm", "d_model": 8, "max_position_embeddings": 8}
    with pytest.raises(BadParameterError, match="^--from-hf-config describes sinusoidal "
                       "d_model 8 with .*'frequencies': 'fairseq'.*; the PE found is Marian's"):
        fh.check_hf_config(f, xglm, None)
    # at one entry (sin(0) = 0) the table exactly at the bound, 2^-20 for L = 8, then past it
    bound = 4 * 2.0**-23 + 8 * 2.0**-24
    off = marian.copy()
    off[0, 0] = np.float32(bound)
    f, = fh.find_pe(_gather_model(table=off, name="emb"))
    assert fh.check_hf_config(f, config, None)[1]["table"].startswith("within 9.54e-07 of")
    off[0, 0] = np.float32(bound * 1.25)
    off_found = fh.Found("sinusoidal", ["pe"], "position_ids", "w",
                         {**f.params, "table": off, "table_name": "emb"})
    with pytest.raises(BadParameterError) as err:
        fh.check_hf_config(off_found, config, None)
    assert str(err.value) == ("the model's table 'emb' differs from edgepe's sinusoidal for this "
                              "config by 1.19e-06: the config is not this model's")
    off[0, 0] = np.nextafter(np.float32(bound), np.float32(1))
    with pytest.raises(BadParameterError, match="by 9.54e-07: the config"):
        fh.check_hf_config(fh.Found("sinusoidal", ["pe"], "position_ids", "w",
                                    {**f.params, "table": off, "table_name": "emb"}),
                           config, None)


def test_check_hf_config_fairseq_table_is_not_compared_as_marian():
    f, = fh.find_pe(_gather_model(table=_fairseq_table(8, 8), name="emb"))
    xglm = {"model_type": "xglm", "d_model": 8, "max_position_embeddings": 8}
    length, record = fh.check_hf_config(f, xglm, None)
    assert length is None and "table" not in record and record["scheme"] == "sinusoidal"


def test_sliced_trunc_limit_is_inclusive(monkeypatch):
    """Exactly ``TRUNC_LIMIT`` positions are sliced by float arithmetic, one more refused (the
    limit lowered to 70 here: at 2^24 the recipe distance alone takes seconds)."""
    from edgepe.graphs import sliced as sl

    monkeypatch.setattr(sl, "TRUNC_LIMIT", 70)
    model = _rope_model()
    model.opset_import[0].version = 17
    f, = fh.find_pe(model)
    assert fh.build_found(model, f, 70, mode="sliced")[1]["lowering"] == "trunc"
    with pytest.raises(BadParameterError, match="exact below 70 positions; got --max-len 71$"):
        fh.build_found(model, f, 71, mode="sliced")


# --- decoys: a near-miss of the same kind before the real subgraph ------------------------------


def _prefixed(model, prefix):
    """``model``'s graph with every tensor name prefixed (a second, independent subgraph)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph

    def name(n):
        return prefix + n if n else n

    for node in graph.node:
        node.input[:] = [name(n) for n in node.input]
        node.output[:] = [name(n) for n in node.output]
        node.name = name(node.name)
    for value in (*graph.input, *graph.output, *graph.initializer):
        value.name = name(value.name)
    return graph


def _with_decoy(decoy, model):
    """One model: ``decoy``'s nodes and initializers (names prefixed ``d_``) first, then
    ``model``'s."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    first = _prefixed(decoy, "d_")
    graph = model.graph
    nodes = [*first.node, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.input.extend(first.input)
    graph.output.extend(first.output)
    inits = [*first.initializer, *graph.initializer]  # the decoy's constants first too (MPT's)
    del graph.initializer[:]
    graph.initializer.extend(inits)
    return model


def _matmul_scaled_sin_only():
    model = _matmul_model()
    model.graph.initializer.append(nh.from_array(np.array(3.0, np.float32), "b"))
    model.graph.node.append(oh.make_node("Mul", ["sin", "b"], ["sin_b"]))
    return model


DECOYS = {  # matcher -> (the real model, near-misses failing at each of its checks in turn)
    "rope": (fh._rope, _rope_model, lambda: [
        _edit(_rope_model(), "Sin", input=["f"]), _edit(_rope_model(), "Mul", op_type="Add"),
        _rope_model(inv=np.ones((1, 2), np.float32)), _rope_model(cast_op="Identity"),
        _rope_model(factor=2.0, sin_factor=3.0)]),
    "fused": (fh._rope_fused, _fused_model, lambda: [
        _edit(_fused_model(), "Cast", op_type="Identity"), _fused_model(extra_reader=True),
        _fused_model(factors=[0.5, 2.0]), _fused_model(interleaved=(0, 1))]),
    "matmul": (fh._rope_matmul, _matmul_model, lambda: [
        _edit(_matmul_model(), "Sin", input=["t"]), _matmul_model(perm=(0, 1, 2)),
        _edit(_matmul_model(), "MatMul", op_type="Mul"),
        _matmul_model(inv=INV3.astype(np.float64)), _matmul_model(axes=2),
        _matmul_scaled_sin_only()]),
    "gather_elements": (fh._gptj_gather_elements,
                        lambda: _gather_elements_model(_gptj_table(8, 4)), lambda: [
                            _gather_elements_model(WPE), _gather_elements_model(
                                _gptj_table(8, 4), axes=1)]),
    "learned": (fh._learned, _gather_model, lambda: [
        _gathernd_model(_gptj_table(8, 4), axes=0), _gather_model(indices="idx")]),
    "mpt": (fh._mpt_alibi, lambda: _mpt_model(_mpt_bias(6)), lambda: [
        _mpt_model(_mpt_bias(6) * np.float32(2))]),
}


@pytest.mark.parametrize("kind", sorted(DECOYS))
def test_a_near_miss_before_the_pe_does_not_hide_it(kind):
    matcher, real, decoys = DECOYS[kind]
    want = [(f.family, f.replaces, f.positions) for f in _find(real(), matcher)]
    assert len(want) == 1
    for i, decoy in enumerate(decoys()):
        assert _find(decoy, matcher) == [], (kind, i)
        got = [(f.family, f.replaces, f.positions) for f in _find(_with_decoy(decoy, real()),
                                                                  matcher)]
        assert got == want, (kind, i)


# --- more kills: each a behaviour the tests above leave open -----------------------------------


def test_ancestors_visits_a_shared_node_once():
    """D(q, a, b), a = A(c), b = B(c), c = C(p), q = Q(r): c is reached twice."""
    nodes = [oh.make_node("Q", ["r"], ["q"]), oh.make_node("C", ["p"], ["c"]),
             oh.make_node("A", ["c"], ["a"]), oh.make_node("B", ["c"], ["b"]),
             oh.make_node("D", ["q", "a", "b"], ["d"])]
    makers = {o: n for n in nodes for o in n.output}
    assert fh._ancestors("d", makers) == ({"D", "A", "B", "C", "Q"}, {"p", "r"})
    # five nodes within a limit of five: C is counted once
    assert fh._ancestors("d", makers, limit=5)[0] == {"D", "A", "B", "C", "Q"}


def test_large_real_tables_are_recognised_with_the_models_float32_angles():
    """GPT-J (2048 positions, R = 64) and XGLM (2048, D = 64) tables as transformers/fairseq
    compute them in torch float32: their angles are float32 products, off the exact ones by up
    to half an ulp of 2048 (1.2e-4), far past the 4-ulp / 1e-5 tolerances, so only the models'
    own float32 recipe recognises them."""
    import torch

    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))
    angle = torch.einsum("i,j->ij", torch.arange(2048, dtype=torch.float), inv)
    gptj = torch.cat((torch.sin(angle), torch.cos(angle)), dim=1).numpy()
    assert fh._is_sincos(gptj)
    step = math.log(10000) / (32 - 1)
    w = torch.exp(torch.arange(32, dtype=torch.float) * -step)
    angle = torch.arange(2048, dtype=torch.float).unsqueeze(1) * w.unsqueeze(0)
    xglm = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).numpy()
    xglm[1] = 0
    assert fh._is_fairseq_sinusoidal(xglm)


def test_mpt_bias_of_sixteen_heads_is_float32_products():
    """16 heads: slopes 2^(-k/2), not powers of two, so the bias holds float32-rounded
    products (MPT's int32 distance times float32 slopes)."""
    slopes = np.array([2.0 ** (-0.5 * (i + 1)) for i in range(16)], np.float32)
    bias = _mpt_bias(6, slopes)
    exact = slopes.astype(np.float64)[:, None, None] * np.arange(-5, 1)[None, None, :]
    assert not np.array_equal(bias, exact)  # the float32 rounding is visible
    f, = fh.find_pe(_mpt_model(bias))
    assert f.params["length"] == 6 and np.array_equal(f.params["slopes"], slopes)


def test_an_unread_mpt_shaped_constant_is_not_found():
    model = _mpt_model(_mpt_bias(6))
    model.graph.initializer.append(nh.from_array(_mpt_bias(4), "unread"))
    assert [f.replaces for f in fh.find_pe(model)] == [["bias"]]


def test_identity_links_in_gptj_gather_elements_and_positions_made_by_an_op():
    model = _gather_elements_model(_gptj_table(8, 4))
    graph = model.graph
    for node in graph.node:
        if node.op_type == "GatherElements":
            node.input[:] = ["t_id", "ut_id"]
    graph.node.extend([oh.make_node("Identity", ["t"], ["t_id"]),
                       oh.make_node("Identity", ["ut"], ["ut_id"])])
    rest = [n for n in graph.node if n.op_type != "GatherElements"]
    gather = [n for n in graph.node if n.op_type == "GatherElements"]
    del graph.node[:]
    graph.node.extend([*rest, *gather])
    f, = _find(model, fh._gptj_gather_elements)
    assert f.params["table_name"] == "emb3"
    # positions made by an op: described by where they come from
    model = _gather_elements_model(_gptj_table(8, 4))
    graph = model.graph
    graph.initializer.append(nh.from_array(np.array(0, np.int64), "zero"))
    graph.node.insert(0, oh.make_node("Add", ["position_ids", "zero"], ["pos"]))
    next(n for n in graph.node if n.op_type == "Unsqueeze").input[0] = "pos"
    f, = _find(model, fh._gptj_gather_elements)
    assert f.positions == "pos"
    assert f.where.endswith("positions 'pos' (from 'position_ids')")


def test_rope_by_matmul_edge_cases():
    model = _matmul_model()  # positions made by an op
    graph = model.graph
    graph.initializer.append(nh.from_array(np.array(0, np.int64), "zero"))
    graph.node.insert(0, oh.make_node("Add", ["position_ids", "zero"], ["pos"]))
    next(n for n in graph.node if n.op_type == "Unsqueeze").input[0] = "pos"
    f, = fh.find_pe(model)
    assert f.positions == "pos" and f.where.endswith("positions 'pos' (from 'position_ids')")
    # the MatMul's positions side is a graph input: nothing to climb
    model = _edit(_matmul_model(), "MatMul", input=["ec", "position_ids"])
    assert _find(model, fh._rope_matmul) == []
    model = _matmul_model()  # a Transpose with no perm attribute (the reverse of the axes)
    del next(n for n in model.graph.node if n.op_type == "Transpose").attribute[:]
    assert _find(model, fh._rope_matmul) == []


def test_scalar_add_wants_one_integer():
    consts = {"v": np.array([3, 4], np.int64)}
    assert fh._scalar_add(oh.make_node("Add", ["x", "v"], ["y"]), consts) is None


def test_rope_tables_need_one_name_per_table():
    found = fh.Found("rope", ["only_cos"], "p", "", {"inv_freq": INV,
                                                     "attention_factor": np.float32(1)})
    with pytest.raises(ValueError):
        fh.rope_tables(found, 4)


def test_gathernd_table_marian_allows_but_gptj_does_not_is_a_learned_table():
    """A low frequency (w_3 = 10^-3 at p = 1: angle 10^-3) moved by 2e-6: inside Marian's flat
    slack (4 ulp(1) + L 2^-24 = 4.3e-6 for L = 64), outside GPT-J's (4 ulp(1) + 10^-3 2^-19 =
    4.8e-7). Read by GatherND (GPT-J's read, not Marian's Gather) it is a learned table."""
    table = _marian_table(64, 8)
    table[1, 3] = math.sin(1e-3) + 2e-6
    assert not fh._is_sincos(table) and fh._half_sinusoidal_distance(table) is not None
    f, = fh.find_pe(_gathernd_model(table))
    assert (f.family, f.params["squeeze"], "layout" in f.params) == ("learned", True, False)
    f, = fh.find_pe(_gather_model(table=table, name="emb"))  # by Gather: Marian's
    assert (f.family, f.params["layout"]) == ("sinusoidal", "half")


def test_bloom_alibi_int32_positions_keep_their_type():
    model = _bloom_model()
    model.graph.input[0].type.tensor_type.elem_type = TP.INT32
    for t in model.graph.initializer:
        if t.name in ("axis", "one", "zero"):
            t.CopyFrom(nh.from_array(nh.to_array(t).astype(np.int32), t.name))
    f, = fh.find_pe(model)
    pe, _ = fh.build_found(model, f, None)
    value = pe.graph.input[0]
    assert value.type.tensor_type.elem_type == TP.INT32
    out = _run(pe, **{value.name: np.array([[[0, 3]]], np.int32)})
    assert np.array_equal(next(iter(out.values())), SLOPES41[None] * np.float32([0, 3]))


def test_build_found_learned_keeps_the_models_dims_and_quantizes_int8():
    model = _gather_model()
    f, = fh.find_pe(model)
    pe, _ = fh.build_found(model, f, None)
    dims = pe.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value or d.dim_param for d in dims] == [1, "s"]
    pe, record = fh.build_found(model, f, None, quantize="int8")
    assert any(t.data_type == TP.INT8 for t in pe.graph.initializer)
    out = _run(pe, positions=np.array([[0, 1, 2, 3, 4, 5]], np.int64))["pe"][0]
    assert not np.array_equal(out, WPE)  # int8 rows, not the float32 table
    assert np.abs(out - WPE).max() <= record["quant"]["bound"] * (1 + 1e-6)
    with pytest.raises(BadParameterError, match="^the tables for 6 positions would be 96 B"):
        fh.build_found(model, f, None, table_bytes_limit=95)


def test_check_hf_config_uses_the_configs_rope_parameters():
    theta = 500000.0
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, 4, 2, dtype=np.float32)
                                        / np.float32(4)))).astype(np.float32)
    f, = fh.find_pe(_rope_model(inv=inv))
    _, record = fh.check_hf_config(f, {**LLAMA, "rope_theta": theta}, None)
    assert record["params"]["base"] == theta and record["inv_freq"].startswith("equal")
    with pytest.raises(BadParameterError, match="differs from edgepe's rope"):
        fh.check_hf_config(f, LLAMA, None)  # theta 10000: other frequencies


def _t5_found(lo=13, hi=18):
    return fh.Found("t5-bias", ["bucket"], "relative", "(...)", {
        "direction": "bidirectional", "num_buckets": 8, "max_distance": 16,
        "max_distance_range": [lo, hi], "table_name": "E", "heads": 4, "discovered": True})


@pytest.mark.parametrize("max_distance", [13, 18])
def test_check_hf_config_of_t5_takes_the_configs_max_distance_within_the_fitted_range(
        max_distance):
    f = _t5_found()
    config = {"model_type": "t5", "relative_attention_num_buckets": 8, "num_heads": 4,
              "relative_attention_max_distance": max_distance}
    length, record = fh.check_hf_config(f, config, None)
    assert f.params["max_distance"] == max_distance and length is None
    assert record["buckets"] == ("equal to edgepe's t5-bias for this config's num_buckets and "
                                 "max_distance, at every relative position up to 2^20")
    assert record["params"] == {"num_buckets": 8, "max_distance": max_distance,
                                "direction": "bidirectional"}


@pytest.mark.parametrize(("change", "words"), [
    ({"relative_attention_max_distance": 12}, "num_buckets 8, max_distance 12, 4 heads"),
    ({"relative_attention_max_distance": 19}, "num_buckets 8, max_distance 19, 4 heads"),
    ({"relative_attention_num_buckets": 16}, "num_buckets 16, max_distance 16, 4 heads"),
    ({"num_heads": 3}, "num_buckets 8, max_distance 16, 3 heads"),
])
def test_check_hf_config_of_t5_refuses_a_config_giving_other_buckets(change, words):
    f = _t5_found()
    config = {"model_type": "t5", "relative_attention_num_buckets": 8, "num_heads": 4,
              "relative_attention_max_distance": 16, **change}
    with pytest.raises(BadParameterError) as info:
        fh.check_hf_config(f, config, None)
    assert str(info.value) == (
        f"--from-hf-config describes T5's bias with {words}; the model's bidirectional buckets "
        "'bucket' are those of num_buckets 8, max_distance 13..18, gathering 4 heads: the config "
        "is not this model's")
    assert f.params["max_distance"] == 16  # left as fitted
    one = _t5_found(16, 16)
    with pytest.raises(BadParameterError, match="max_distance 16, gathering 4 heads: the "):
        fh.check_hf_config(one, config, None)


# --- what graft looks for, from one list (hgr) ----------------------------------------------


def test_looked_for_is_every_family_in_order_the_last_after_and():
    words = list(fh.LOOKED_FOR.values())
    assert fh.looked_for() == ", ".join(words[:-1]) + " and " + words[-1]
    assert fh.looked_for().startswith("RoPE (Cos/Sin of float32(p) * w, any layout, one per "
                                      "base; or GPT-J's [sin | cos] table gathered by positions), "
                                      "multimodal RoPE (")
    assert fh.looked_for().endswith(", ALiBi (slopes times positions; MPT's constant bias) and "
                                    "T5's relative position bias (a table gathered by buckets "
                                    "of k - q)")
    assert fh.looked_for().count(" and ") == 1


def test_a_found_of_a_family_graft_does_not_name_is_an_internal_error():
    for family in fh.LOOKED_FOR:
        assert fh.Found(family, ["t"], "p", "(w)").family == family
    with pytest.raises(AssertionError, match=r"^family 'Rope' not in LOOKED_FOR$"):
        fh.Found("Rope", ["t"], "p", "(w)")


def test_a_fused_rotation_of_another_domain_reads_no_caches():
    """``_rope_fused``: caches read by onnxruntime's com.microsoft RotaryEmbedding (another op
    than ONNX's opset-23 one, other inputs) are not the fused form."""
    nodes = [oh.make_node("Cast", ["pos"], ["p"], to=TP.FLOAT),
             oh.make_node("Mul", ["p", "inv"], ["f"]),
             oh.make_node("Cos", ["f"], ["c"]), oh.make_node("Sin", ["f"], ["s"]),
             oh.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"], domain="com.microsoft")]
    graph = oh.make_graph(nodes, "g", [], [], [nh.from_array(INV, "inv")])
    consts = _constants(graph)
    makers, readers = graph_index(graph)
    assert fh._rope_fused(graph, consts, makers, readers) == []
    graph.node[-1].domain = ""  # ONNX's: found
    makers, readers = graph_index(graph)
    (found,) = fh._rope_fused(graph, consts, makers, readers)
    assert found.replaces == ["c", "s"]
