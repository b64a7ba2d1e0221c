"""graft's RoPE lowering at known values (edgepe.graft.lower; issue 33: mutmut survivors): tiny
hand-built rotate-half and GPT-J rotations over graft-style tables, fused by ``lower_rope`` /
``lower_interleaved`` / ``feed_tables``, run on onnxruntime against numpy's rotation, and every
pattern that must not be fused. tests/test_graft_hf.py lowers real transformers exports.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.graft import lower

P = "edgepe_pe0/"
# the positions every rotation reads: graft's (or the model's) expanded to [B, S]
BATCHED = f"{P}batched_positions"
BATCHING = ["Shape", "Gather", "Expand"]  # its nodes, just before the first rotation
L, B, H, S, R = 8, 1, 2, 3, 8
HALF = R // 2
ANGLES = np.arange(L)[:, None] * (1.0 / 10 ** (np.arange(HALF) / HALF))[None]
COS, SIN = np.cos(ANGLES).astype(np.float32), np.sin(ANGLES).astype(np.float32)
Q = np.random.default_rng(0).standard_normal((B, H, S, R)).astype(np.float32)
IDS = np.array([[5, 0, 7]], np.int64)


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def _rotate_half_nodes(x="q", out="out", axis=3, steps=True, tag=""):
    """transformers' apply_rotary_pos_emb on ``x``: Add(Mul(x, cos'), Mul(Concat(Neg(x2), x1),
    sin')) with cos' = Unsqueeze(cos, 1)."""
    t = tag
    nodes = [helper.make_node("Unsqueeze", ["cos", "one"], [f"cu{t}"]),
             helper.make_node("Unsqueeze", ["sin", "one"], [f"su{t}"]),
             helper.make_node("Mul", [x, f"cu{t}"], [f"m1{t}"]),
             helper.make_node("Slice", [x, "zero", "half", f"axis{axis}",
                                        *(["step1"] if steps else [])], [f"x1{t}"]),
             helper.make_node("Slice", [x, "half", "big", f"axis{axis}",
                                        *(["step1"] if steps else [])], [f"x2{t}"]),
             helper.make_node("Neg", [f"x2{t}"], [f"nx2{t}"]),
             helper.make_node("Concat", [f"nx2{t}", f"x1{t}"], [f"rot{t}"], axis=-1),
             helper.make_node("Mul", [f"rot{t}", f"su{t}"], [f"m2{t}"]),
             helper.make_node("Add", [f"m1{t}", f"m2{t}"], [out])]
    return nodes


def _tables_nodes():
    """The graft's tables [L, R/2] read by its squeezed positions, doubled to [B, S, R]."""
    return [helper.make_node("Identity", ["position_ids"], [f"{P}positions_squeezed"]),
            helper.make_node("Gather", [f"{P}cos_table", f"{P}positions_squeezed"], ["ch"]),
            helper.make_node("Concat", ["ch", "ch"], ["cos"], axis=-1),
            helper.make_node("Gather", [f"{P}sin_table", f"{P}positions_squeezed"], ["sh"]),
            helper.make_node("Concat", ["sh", "sh"], ["sin"], axis=-1)]


def _inits():
    return [numpy_helper.from_array(COS, f"{P}cos_table"),
            numpy_helper.from_array(SIN, f"{P}sin_table"),
            _const("one", [1]), _const("zero", [0]), _const("half", [HALF]),
            _const("big", [2**62]), _const("axis3", [3]), _const("axis-1", [-1]),
            _const("step1", [1])]


def _rope_model(rotations=None, opset=18, outputs=("out",)):
    nodes = [*_tables_nodes(), *(rotations if rotations is not None else _rotate_half_nodes())]
    model = helper.make_model(helper.make_graph(
        nodes, "m", [_vi("q", TensorProto.FLOAT, [B, H, "S", R]),
                     _vi("position_ids", TensorProto.INT64, [B, "S"])],
        [_vi(o, TensorProto.FLOAT, [B, H, "S", R]) for o in outputs], _inits()),
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 23 else 8
    return model


def _rotated(q=Q, ids=IDS):
    cos, sin = np.concatenate([COS[ids]] * 2, -1)[:, None], np.concatenate([SIN[ids]] * 2,
                                                                           -1)[:, None]
    rot = np.concatenate([-q[..., HALF:], q[..., :HALF]], -1)
    return q * cos + rot * sin


def _run(model, **feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_the_test_model_rotates_half():
    np.testing.assert_allclose(_run(_rope_model(), q=Q, position_ids=IDS)[0], _rotated(),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
def test_lower_rope_fuses_the_rotation(lowering):
    model = _rope_model(opset=23 if lowering == "rotary23" else 18)
    fused, removed = lower.lower_rope(model, P, "cos", "sin", lowering)
    assert fused == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Identity", *BATCHING, "RotaryEmbedding"], ops
    # the Add, its 2 Muls, 2 Unsqueezes, 2 Slices, Neg, Concat, and the tables' 2 Gathers and 2
    # Concats: 13, plus the fused op itself
    assert removed == 13 + 1
    node = model.graph.node[4]
    assert node.output == ["out"] and node.name == f"{P}rotary0"
    if lowering == "ort":
        assert node.domain == "com.microsoft"
        assert list(node.input) == ["q", BATCHED, f"{P}cos_table", f"{P}sin_table"]
        assert ("com.microsoft", 1) in [(o.domain, o.version) for o in model.opset_import]
    else:
        assert node.domain == ""
        assert list(node.input) == ["q", f"{P}cos_table", f"{P}sin_table", BATCHED]
        assert "com.microsoft" not in [o.domain for o in model.opset_import]
    assert {a.name: a.i for a in node.attribute}["interleaved"] == 0
    assert sorted(t.name for t in model.graph.initializer) == [
        f"{P}batched_positions/axes", f"{P}cos_table", f"{P}sin_table"]
    batch, axes, expand = model.graph.node[1:4]
    assert batch.input == ["q"] and expand.input == [f"{P}positions_squeezed", axes.output[0]]
    assert numpy_helper.to_array(next(t for t in model.graph.initializer
                                      if t.name == axes.input[1])).tolist() == [0, 2]
    lower.check_lowered(model)
    np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], _rotated(), rtol=0,
                               atol=1e-6)


def _fused(rotations, lowering="ort", extra_inits=(), outputs=("out",), opset=None):
    model = _rope_model(rotations, opset=opset or (23 if lowering == "rotary23" else 18),
                        outputs=outputs)
    model.graph.initializer.extend(extra_inits)
    return model, lower.lower_rope(model, P, "cos", "sin", lowering)


NONE_FOUND = ("--rope-lowering: no rotate-half arithmetic (Add(Mul(x, cos), Mul(Concat(Neg(x2), "
              "x1), sin))) found on the RoPE's tensors")


def _edited(edit):
    nodes = _rotate_half_nodes()
    edit({n.output[0]: n for n in nodes})
    return nodes


def test_lower_rope_takes_the_last_axis_as_minus_one_and_no_steps():
    for rotations in (_rotate_half_nodes(axis="-1"), _rotate_half_nodes(steps=False)):
        model, (fused, _) = _fused(rotations)
        assert fused == 1
        np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], _rotated(), rtol=0,
                                   atol=1e-6)


def test_lower_rope_fuses_every_rotation_and_leaves_other_adds():
    nodes = [*_rotate_half_nodes(), *_rotate_half_nodes(x="out", out="out2", tag="k"),
             helper.make_node("Add", ["out2", "q"], ["plus"]),  # not of two Muls
             helper.make_node("Relu", ["q"], ["r"]), helper.make_node("Mul", ["q", "q"], ["qq"]),
             helper.make_node("Add", ["qq", "r"], ["mixed"])]  # one Mul, one Relu
    model, (fused, removed) = _fused(nodes, outputs=("plus", "mixed"))
    assert fused == 2 and removed == 9 * 2 + 4 + 2
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert [n.name for n in rotary] == [f"{P}rotary0", f"{P}rotary1"]
    assert [n.op_type for n in model.graph.node].count("Add") == 2
    want = _rotated(_rotated()) + Q
    np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], want, rtol=0, atol=1e-5)


def test_lower_rope_through_a_float32_cast_and_traced_halves():
    """Optimum's form: cos/sin cast to float32 before the Unsqueeze; the halves' bounds one traced
    tensor, each through its own Unsqueeze."""
    def edit(n):
        n["cu"].input[0] = "cos32"
        n["x1"].input[2] = "end"
        n["x2"].input[1] = "start"

    nodes = [helper.make_node("Cast", ["cos", ], ["cos32"], to=TensorProto.FLOAT),
             helper.make_node("Identity", ["four"], ["h"]),
             helper.make_node("Unsqueeze", ["h", "zero"], ["end"]),
             helper.make_node("Unsqueeze", ["h", "zero"], ["start"]), *_edited(edit)]
    model, (fused, _) = _fused(nodes, extra_inits=[_const("four", 4)])
    assert fused == 1
    np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], _rotated(), rtol=0,
                               atol=1e-6)


def _refused(nodes, extra_inits=()):
    with pytest.raises(BadParameterError) as exc:
        _fused(nodes, extra_inits=extra_inits)
    assert str(exc.value) == NONE_FOUND


@pytest.mark.parametrize("change", [
    "cast16", "step2", "start1", "second_axis2", "end3", "start3", "not_neg",
    "not_concat", "three_inputs", "other_x1", "other_x2", "traced_axes", "traced_sources",
    "unsqueeze_other", "both_in_one_mul", "rot_not_made"])
def test_lower_rope_leaves_what_is_not_rotate_half(change):
    extra = [_const("step2", [2]), _const("one_", [1]), _const("three", [3]),
             _const("four", 4), _const("axis2", [2])]
    pre = []

    def edit(n):
        if change == "cast16":
            pre.append(helper.make_node("Cast", ["cos"], ["cos16"], to=TensorProto.FLOAT16))
            pre.append(helper.make_node("Cast", ["cos16"], ["cos32"], to=TensorProto.FLOAT))
            n["cu"].input[0] = "cos16"
        elif change == "step2":
            n["x1"].input[4] = "step2"
        elif change == "start1":
            n["x1"].input[1] = "one_"
        elif change == "axis2":
            n["x1"].input[3] = "axis2"
        elif change == "second_axis2":
            n["x2"].input[3] = "axis2"
        elif change == "end3":
            n["x1"].input[2] = "three"
        elif change == "start3":
            n["x2"].input[1] = "three"
        elif change == "not_neg":
            n["nx2"].op_type = "Abs"
        elif change == "not_concat":
            n["rot"].op_type = "Sum"
            del n["rot"].attribute[:]
        elif change == "three_inputs":
            n["rot"].input.append("x1")
        elif change == "other_x1":
            pre.append(helper.make_node("Identity", ["q"], ["q2"]))
            n["x1"].input[0] = "q2"
        elif change == "other_x2":
            pre.append(helper.make_node("Identity", ["q"], ["q2"]))
            n["x2"].input[0] = "q2"
        elif change in ("traced_axes", "traced_sources"):
            pre.extend([helper.make_node("Identity", ["four"], ["h"]),
                        helper.make_node("Identity", ["four"], ["h2"]),
                        helper.make_node("Unsqueeze", ["h", "zero"], ["end"]),
                        helper.make_node("Unsqueeze", ["h2" if change == "traced_sources" else
                                                       "h", "zero"], ["start"])])
            if change == "traced_axes":
                pre[-1].input[1] = "one_"
            n["x1"].input[2] = "end"
            n["x2"].input[1] = "start"
        elif change == "unsqueeze_other":
            n["cu"].op_type = "Identity"
            del n["cu"].input[1:]
        elif change == "both_in_one_mul":
            n["m1"].input[0] = "su"
            n["m2"].input[:] = ["q", "q"]
        elif change == "rot_not_made":
            n["m2"].input[0] = "q"

    nodes = _edited(edit)
    _refused([*pre, *nodes], extra)


def test_lower_rope_needs_the_float32_tables():
    model = _rope_model()
    model.graph.initializer.remove(model.graph.initializer[0])
    with pytest.raises(BadParameterError) as exc:
        lower.lower_rope(model, P, "cos", "sin", "ort")
    assert str(exc.value) == lower.TABLES_NEEDED == (
        "--rope-lowering needs the float32 RoPE tables (--mode table, not with --quantize int8 "
        "or --mode sliced)")


def _partial(concat_axis=-1, rest_start="rot8", reader=False):
    """Partial rotary (GPT-NeoX): v [.., 12], x = v[..., :8] rotated, Concat(it, v[..., 8:])."""
    nodes = [helper.make_node("Slice", ["v", "zero", "rot8", "axis3"], ["q"]),
             *_rotate_half_nodes(),
             helper.make_node("Slice", ["v", rest_start, "big", "axis3"], ["rest"]),
             helper.make_node("Concat", ["out", "rest"], ["full"], axis=concat_axis)]
    outputs = [_vi("full", TensorProto.FLOAT, [B, H, "S", 12])]
    if reader:  # q read once more: the op cannot take all of v
        nodes.append(helper.make_node("Identity", ["q"], ["q_copy"]))
        outputs.append(_vi("q_copy", TensorProto.FLOAT, [B, H, "S", R]))
    model = helper.make_model(helper.make_graph(
        [*_tables_nodes(), *nodes], "m",
        [_vi("v", TensorProto.FLOAT, [B, H, "S", 12]),
         _vi("position_ids", TensorProto.INT64, [B, "S"])], outputs,
        [*_inits(), _const("rot8", [R]), _const("rot7", [7])]),
        opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


V = np.random.default_rng(1).standard_normal((B, H, S, 12)).astype(np.float32)


def test_rotary23_fuses_partial_rotary_over_all_of_v():
    model = _partial()
    fused, _ = lower.lower_rope(model, P, "cos", "sin", "rotary23")
    assert fused == 1
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[0] == "v" and node.output == ["full"]
    assert {a.name: a.i for a in node.attribute} == {"interleaved": 0, "rotary_embedding_dim": R}
    assert "Concat" not in [n.op_type for n in model.graph.node]
    want = np.concatenate([_rotated(V[..., :R]), V[..., R:]], -1)
    np.testing.assert_allclose(_run(model, v=V, position_ids=IDS)[0], want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("change", [{"concat_axis": 2}, {"rest_start": "rot7"}, {"reader": True}])
def test_rotary23_partial_rotary_needs_the_exact_pattern(change):
    """Concatenated on another axis, the rest not from R on, or x read elsewhere: only the
    rotation of x is fused (the Concat stays)."""
    model = _partial(**change)
    if change.get("concat_axis") == 2:
        model.graph.output[0].type.tensor_type.ClearField("shape")
    fused, _ = lower.lower_rope(model, P, "cos", "sin", "rotary23")
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert fused == 1 and node.input[0] == "q" and node.output == ["out"]
    assert {a.name: a.i for a in node.attribute} == {"interleaved": 0}
    assert "Concat" in [n.op_type for n in model.graph.node]


# ---- feed_tables, to_opset, check_lowered, _drop, _prune -----------------------------------------


def _onnx_rotary(cos="cos", sin="sin", domain=""):
    """An opset-23 export's own RotaryEmbedding reading caches [B, S, R/2] gathered from the
    graft's tables (what a graft leaves before feed_tables)."""
    nodes = [helper.make_node("Identity", ["position_ids"], [f"{P}positions_squeezed"]),
             helper.make_node("Gather", [f"{P}cos_table", f"{P}positions_squeezed"], ["cos"]),
             helper.make_node("Gather", [f"{P}sin_table", f"{P}positions_squeezed"], ["sin"]),
             helper.make_node("RotaryEmbedding", ["q", cos, sin], ["out"], domain=domain,
                              name="rope")]
    model = helper.make_model(helper.make_graph(
        nodes, "m", [_vi("q", TensorProto.FLOAT, [B, H, "S", R]),
                     _vi("position_ids", TensorProto.INT64, [B, "S"])],
        [_vi("out", TensorProto.FLOAT, [B, H, "S", R])], _inits()[:2]),
        opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


def test_feed_tables_points_onnx_rotary_at_the_tables():
    model = _onnx_rotary()
    before = _run(model, q=Q, position_ids=IDS)[0]
    np.testing.assert_allclose(before, _rotated(), rtol=0, atol=1e-6)
    assert lower.feed_tables(model, P, "cos", "sin") == (1, 2)  # the two Gathers went
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert list(node.input) == ["q", f"{P}cos_table", f"{P}sin_table",
                                f"{P}positions_squeezed"]
    np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], before, rtol=0, atol=0)
    # another domain's op, or one reading other caches, is left alone
    other = _onnx_rotary(domain="com.microsoft")
    assert lower.feed_tables(other, P, "cos", "sin") == (0, 0)
    swapped = _onnx_rotary(cos="sin", sin="cos")
    assert lower.feed_tables(swapped, P, "cos", "sin") == (0, 0)
    ai = _onnx_rotary(domain="ai.onnx")
    assert lower.feed_tables(ai, P, "cos", "sin")[0] == 1
    missing = _onnx_rotary()
    missing.graph.initializer.pop()
    with pytest.raises(BadParameterError) as exc:
        lower.feed_tables(missing, P, "cos", "sin")
    assert str(exc.value) == lower.TABLES_NEEDED


def test_to_opset_converts_up_and_keeps_node_metadata():
    model = _rope_model()
    node = model.graph.node[0]
    node.name = "ident"
    entry = node.metadata_props.add()
    entry.key, entry.value = "pkg.torch.stack", "here"
    converted = lower.to_opset(model)
    assert next(o.version for o in converted.opset_import if o.domain == "") == 23
    assert converted.ir_version == 11  # what opset 23 needs (onnx 1.18 made both)
    kept = {n.name: [(p.key, p.value) for p in n.metadata_props] for n in converted.graph.node}
    assert kept["ident"] == [("pkg.torch.stack", "here")]
    np.testing.assert_allclose(_run(converted, q=Q, position_ids=IDS)[0], _rotated(), rtol=0,
                               atol=1e-6)
    # a node the converter rewrote keeps what it has; nodes without metadata stay without
    assert all(not n.metadata_props for n in converted.graph.node if n.name != "ident")
    assert lower.to_opset(converted) is converted
    assert lower.to_opset(model, 18) is model  # at 18 already
    custom = helper.make_model(helper.make_graph([], "g", [], []),
                               opset_imports=[helper.make_opsetid("my", 1)])
    assert lower.to_opset(custom) is custom  # no default-domain opset: nothing to convert


def test_to_opset_refuses_what_the_converter_cannot_take():
    model = _rope_model()
    model.graph.node.append(helper.make_node("NoSuchOp", ["q"], ["z"]))
    with pytest.raises(BadParameterError) as exc:
        lower.to_opset(model)
    message = str(exc.value)
    assert message.startswith("--rope-lowering rotary23 needs opset 23 and this model is opset "
                              "18: onnx's version converter cannot take it there (")
    assert message.endswith("); use --rope-lowering ort, or export the model at opset 23")
    assert "\n" not in message


def test_check_lowered_is_one_line():
    model = _rope_model()
    lower.check_lowered(model)
    model.graph.node[-1].input[0] = "nowhere"
    with pytest.raises(BadParameterError) as exc:
        lower.check_lowered(model)
    assert str(exc.value).startswith("the lowered model does not pass onnx.checker: ")
    assert "nowhere" in str(exc.value) and "\n" not in str(exc.value)


def test_prune_drops_what_nothing_reads_repeatedly():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
         helper.make_node("Abs", ["x", "w"], ["c"]), helper.make_node("Identity", ["x"], ["y"])],
        "g", [_vi("x", TensorProto.FLOAT, [1])], [_vi("y", TensorProto.FLOAT, [1]),
                                                  _vi("kept", TensorProto.FLOAT, [1])],
        [_const("w", [1]), _const("kept", [1]), _const("unread", [1])])
    lower._prune(graph)
    assert [n.op_type for n in graph.node] == ["Identity"]
    assert [t.name for t in graph.initializer] == ["kept"]


def test_drop_declares_the_contrib_domain_once_for_ort():
    for lowering, domains in (("ort", ["", "com.microsoft"]), ("rotary23", [""])):
        model = _rope_model()
        add = model.graph.node[-1]
        model.graph.node.append(helper.make_node("Identity", ["q"], ["out2"]))
        model.graph.output[0].name = "out2"
        # the rotation's 9 nodes, the tables' 4 and the positions' Identity nothing reads now
        assert lower._drop(model, [add], lowering) == 9 + 4 + 1
        assert [o.domain for o in model.opset_import] == domains
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    lower._drop(model, [], "ort")
    assert [o.domain for o in model.opset_import] == ["", "com.microsoft"]


# ---- lower_interleaved: GPT-J's rotate_every_two on [B, S, H, D] ---------------------------------

SC = np.concatenate([SIN, COS], axis=1)  # the graft's [sin | cos] rows, [L, R]
VJ = np.random.default_rng(2).standard_normal((B, S, H, 12)).astype(np.float32)


def _rep(src, tag):
    """GPT-J's repeat_interleave(rows[:, :, None, :], 2, 3): [B, S, R/2] -> [B, S, 1, R]."""
    return [helper.make_node("Unsqueeze", [src, "m1"], [f"{tag}_u"]),
            helper.make_node("Expand", [f"{tag}_u", "pair"], [f"{tag}_e"]),
            helper.make_node("Reshape", [f"{tag}_e", "bsr"], [f"{tag}_r"]),
            helper.make_node("Unsqueeze", [f"{tag}_r", "two"], [f"{tag}_rep"])]


def _gptj(heads=H, partial=False, cast=None, positions=True, steps=2, rows_split=True,
          flat_op="Reshape", stack_inputs=2, neg="Neg", odd_start=1, opset=18, x_source=None,
          rest_start="rot8", concat_order=("rotated", "rest"), extra_reader=False, axis="axis3"):
    nodes = [helper.make_node("Identity", ["v_in"], ["v"])]  # q as a projection makes it
    ids = f"{P}positions_squeezed" if positions else "position_ids"
    if positions:
        nodes.append(helper.make_node("Identity", ["position_ids"], [ids]))
    nodes.append(helper.make_node("Gather", [f"{P}sc_table", ids], ["sc"]))
    rows = "sc"
    if cast is not None:
        nodes.append(helper.make_node("Cast", ["sc"], ["sc32"], to=cast))
        rows = "sc32"
    if rows_split:
        nodes.append(helper.make_node("Split", [rows], ["sin_r", "cos_r"], axis=-1,
                                      num_outputs=2))
    else:
        nodes += [helper.make_node("Slice", [rows, "zero", "four", "m1"], ["sin_r"]),
                  helper.make_node("Slice", [rows, "four", "big", "m1"], ["cos_r"])]
    nodes += [*_rep("cos_r", "c"), *_rep("sin_r", "s")]
    x = "v"
    if partial:
        nodes.append(helper.make_node("Slice", ["v", "zero", "rot8", "axis3"], ["x"]))
        x = "x"
    x_in = x_source or x
    nodes += [helper.make_node("Mul", [x, "c_rep"], ["m_cos"]),
              helper.make_node("Slice", [x_in, "zero", "big", axis, "step2"], ["even"]),
              helper.make_node("Slice", [x, "one" if odd_start == 1 else "zero", "big", axis,
                                         "step2" if steps == 2 else "step1"], ["odd"]),
              helper.make_node(neg, ["odd"], ["nodd"]),
              helper.make_node("Unsqueeze", ["nodd", "m1"], ["nodd_u"]),
              helper.make_node("Unsqueeze", ["even", "m1"], ["even_u"]),
              helper.make_node("Concat", ["nodd_u", "even_u", *(["even_u"] if stack_inputs == 3
                                                                else [])], ["stack"], axis=-1),
              helper.make_node(flat_op, ["stack", "flat4"] if flat_op == "Reshape" else
                               ["stack"], ["flat"]),
              helper.make_node("Mul", ["flat", "s_rep"], ["m_sin"]),
              helper.make_node("Add", ["m_cos", "m_sin"], ["rotated"])]
    out = "rotated"
    if partial:
        nodes += [helper.make_node("Slice", ["v", rest_start, "big", "axis3"], ["rest"]),
                  helper.make_node("Concat", list(concat_order), ["full"], axis=-1)]
        out = "full"
    outputs = []
    if extra_reader:  # the rotation read once more
        nodes.append(helper.make_node("Identity", ["rotated"], ["rotated_copy"]))
        outputs.append(_vi("rotated_copy", TensorProto.FLOAT, [B, "S", heads, R]))
    width = 12 if partial else R
    inits = [numpy_helper.from_array(SC, f"{P}sc_table"), _const("m1", [-1]),
             _const("two", [2]), _const("pair", [1, 1, 1, 2]), _const("bsr", [0, 0, R]),
             _const("zero", [0]), _const("one", [1]), _const("four", [HALF]),
             _const("big", [2**62]), _const("axis3", [3]), _const("step2", [2]),
             _const("step1", [1]), _const("rot8", [R]), _const("flat4", [0, 0, 0, R])]
    model = helper.make_model(helper.make_graph(
        nodes, "m", [_vi("v_in", TensorProto.FLOAT, [B, "S", heads, width]),
                     _vi("position_ids", TensorProto.INT64, [B, "S"])],
        [_vi(out, TensorProto.FLOAT, [B, "S", heads, width]), *outputs],
        [*inits, _const("rot7", [7]), _const("axism1", [-1])]),
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 23 else 8
    return model


def _every_two(x, ids=IDS):
    cos = np.repeat(COS[ids], 2, axis=-1)[:, :, None]
    sin = np.repeat(SIN[ids], 2, axis=-1)[:, :, None]
    rot = np.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
    return x * cos + rot * sin


def test_the_gptj_test_model_rotates_every_two():
    got = _run(_gptj(), v_in=VJ[..., :R], position_ids=IDS)[0]
    np.testing.assert_allclose(got, _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
@pytest.mark.parametrize("partial", [False, True])
def test_lower_interleaved_fuses_gptj(lowering, partial):
    model = _gptj(partial=partial, opset=23 if lowering == "rotary23" else 18)
    fused, removed = lower.lower_interleaved(model, P, "sc", lowering)
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert fused == 1 and len(rotary) == 1
    node = rotary[0]
    assert node.name == f"{P}rotary0"
    assert {a.name: a.i for a in node.attribute} == {"interleaved": 1, "num_heads": H,
                                                     "rotary_embedding_dim": R}
    caches = [f"{P}cos_cache", f"{P}sin_cache"]
    if lowering == "ort":
        assert node.domain == "com.microsoft"
        assert list(node.input) == [f"{P}rotary0/flat", BATCHED, *caches]
    else:
        assert node.domain == ""
        assert list(node.input) == [f"{P}rotary0/flat", *caches, BATCHED]
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Identity", "Identity", "Reshape", *BATCHING, "RotaryEmbedding", "Shape",
                   "Reshape"], ops
    flat, _, shape, back = (model.graph.node[i] for i in (2, 6, 7, 8))
    assert model.graph.node[3].input == [f"{P}rotary0/flat"]  # [B, S, H D]: axes 0, 1
    assert model.graph.node[5].input[0] == f"{P}positions_squeezed"
    source = "v"
    assert flat.input[0] == source and shape.input[0] == source
    assert back.output[0] == ("full" if partial else "rotated")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits[caches[0]].tolist() == COS.tolist() and inits[caches[1]].tolist() == SIN.tolist()
    assert inits[f"{P}flat_shape"].tolist() == [0, 0, -1]
    assert inits[f"{P}batched_positions/axes"].tolist() == [0, 1]
    # removed: every node of the rotation but the two Identities (what _drop counts), plus 3
    # per fused rotation (lower_interleaved's count; lower_rope adds 1 per rotation)
    assert removed == len(_gptj(partial=partial).graph.node) - 2 + 3
    v = VJ if partial else VJ[..., :R]
    want = np.concatenate([_every_two(VJ[..., :R]), VJ[..., R:]], -1) if partial else \
        _every_two(v)
    np.testing.assert_allclose(_run(model, v_in=v, position_ids=IDS)[0], want, rtol=0,
                               atol=1e-6)


def test_lower_interleaved_reads_a_float32_cast_and_the_models_own_positions():
    model = _gptj(cast=TensorProto.FLOAT, positions=False)
    assert lower.lower_interleaved(model, P, "sc", "ort")[0] == 1
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[1] == BATCHED
    assert next(n for n in model.graph.node if n.output[0] == BATCHED).input[0] == "position_ids"
    np.testing.assert_allclose(_run(model, v_in=VJ[..., :R], position_ids=IDS)[0],
                               _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


NO_GPTJ = ("--rope-lowering: no GPT-J rotation (Add(Mul(x, cos), Mul(rotate_every_two(x), sin)) "
           "on [B, S, H, D] with static H) found on the [sin | cos] rows")


@pytest.mark.parametrize(("change", "message"), [
    ({"rows_split": False}, "--rope-lowering: no Split of GPT-J's [sin | cos] rows 'sc' into sin "
                            "and cos found"),
    ({"cast": TensorProto.DOUBLE}, "--rope-lowering: no Split of GPT-J's [sin | cos] rows 'sc' "
                                   "into sin and cos found"),
    ({"heads": "H"}, NO_GPTJ), ({"steps": 1}, NO_GPTJ), ({"odd_start": 0}, NO_GPTJ),
    ({"flat_op": "Identity"}, NO_GPTJ), ({"stack_inputs": 3}, NO_GPTJ), ({"neg": "Abs"}, NO_GPTJ),
    ({"x_source": "position_ids"}, NO_GPTJ)])
def test_lower_interleaved_leaves_what_is_not_gptj(change, message):
    model = _gptj(**change)
    with pytest.raises(BadParameterError) as exc:
        lower.lower_interleaved(model, P, "sc", "ort")
    assert str(exc.value) == message


def test_lower_interleaved_needs_the_table():
    model = _gptj()
    model.graph.initializer.remove(model.graph.initializer[0])
    with pytest.raises(BadParameterError) as exc:
        lower.lower_interleaved(model, P, "sc", "ort")
    assert str(exc.value) == lower.TABLES_NEEDED


def test_check_lowered_refuses_a_type_clash_in_one_line():
    """The full check's shape inference raises InferenceError, not ValidationError: one line
    too."""
    model = _rope_model()
    model.graph.node[-1].input[1] = "position_ids"  # Add(float, int64)
    with pytest.raises(BadParameterError, match=r"^the lowered model does not pass onnx\.checker: "
                                                r"\[ShapeInferenceError\]"):
        lower.check_lowered(model)


@pytest.mark.parametrize("change", [{"rest_start": "rot7"}, {"concat_order": ("rest", "rotated")},
                                    {"extra_reader": True}])
def test_lower_interleaved_partial_needs_the_exact_pattern(change):
    """The rest not from R on, the Concat the other way round, or the rotation read elsewhere:
    only the rotation of x = v[..., :R] is fused (the Concat stays)."""
    model = _gptj(partial=True, **change)
    if "concat_order" in change or "rest_start" in change:
        model.graph.output[0].type.tensor_type.ClearField("shape")
    assert lower.lower_interleaved(model, P, "sc", "ort")[0] == 1
    flatten = next(n for n in model.graph.node if n.name == f"{P}rotary0/flatten")
    assert flatten.input[0] == "x" and "Concat" in [n.op_type for n in model.graph.node]
    shape = next(n for n in model.graph.node if n.name == f"{P}rotary0/shape")
    assert shape.input[0] == "x"


def test_lower_interleaved_takes_the_last_axis_as_minus_one():
    model = _gptj(axis="axism1")
    assert lower.lower_interleaved(model, P, "sc", "ort")[0] == 1
    np.testing.assert_allclose(_run(model, v_in=VJ[..., :R], position_ids=IDS)[0],
                               _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


# ---- what the first mutmut run of lower.py showed untested ---------------------------------------


def _maker(model, output):
    return next(n for n in model.graph.node if output in n.output)


def _lower_j(model, lowering="ort"):
    return lower.lower_interleaved(model, P, "sc", lowering)


def _refused_j(model, message=NO_GPTJ):
    with pytest.raises(BadParameterError) as exc:
        _lower_j(model)
    assert str(exc.value) == message


def test_lower_interleaved_names_its_nodes_and_counts_in_ints():
    model = _gptj()
    fused, removed = _lower_j(model)
    assert isinstance(removed, int) and removed == 22 - 2 + 3
    assert [n.name for n in model.graph.node][2:] == [
        f"{P}rotary0/flatten", f"{BATCHED}/input_shape", f"{BATCHED}/shape", BATCHED,
        f"{P}rotary0", f"{P}rotary0/shape", f"{P}rotary0/unflatten"]
    lower.check_lowered(model)  # the contrib domain is declared


def test_lower_interleaved_refuses_a_source_without_a_static_4d_shape():
    """v a model input (no inferred shape) or of rank 3: H is not known, nothing is fused."""
    model = _gptj()
    model.graph.node.remove(model.graph.node[0])
    model.graph.input[0].name = "v"
    _refused_j(model)
    flat = _gptj()
    flat.graph.node[0].op_type = "Flatten"
    flat.graph.node[0].attribute.append(helper.make_attribute("axis", 3))
    _refused_j(flat)


def test_lower_interleaved_reads_heads_through_computed_shapes():
    """v = Reshape(v_flat [B, S, H D], Concat(Shape(v_flat)[:2], [H, D])): onnx's data
    propagation gives the static H."""
    model = _gptj()
    ident = model.graph.node[0]
    model.graph.node.remove(ident)
    model.graph.node.insert(0, helper.make_node("Shape", ["v_in"], ["bs"], start=0, end=2))
    model.graph.node.insert(1, helper.make_node("Concat", ["bs", "hd"], ["shp"], axis=0))
    model.graph.node.insert(2, helper.make_node("Reshape", ["v_in", "shp"], ["v"]))
    model.graph.initializer.append(_const("hd", [H, R]))
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = H * R
    model.graph.input[0].type.tensor_type.shape.dim.pop()
    assert _lower_j(model)[0] == 1
    got = _run(model, v_in=VJ[..., :R].reshape(B, S, H * R), position_ids=IDS)[0]
    np.testing.assert_allclose(got, _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


def test_lower_interleaved_with_tile_and_the_wrapper_limit():
    """Optimum's Tile in repeat_interleave is walked through; a seventh wrapper is not."""
    model = _gptj()
    expand = _maker(model, "c_e")
    expand.op_type = "Tile"
    assert _lower_j(model)[0] == 1
    deep = _gptj()
    rep = _maker(deep, "c_rep")
    rep.output[0] = "c_w0"
    for k in range(3):
        deep.graph.node.append(helper.make_node(
            "Reshape", [f"c_w{k}", "same"], ["c_rep" if k == 2 else f"c_w{k + 1}"]))
    deep.graph.initializer.append(_const("same", [0, 0, 1, R]))
    _refused_j(deep)


def test_lower_interleaved_looks_past_other_adds_and_muls():
    """Adds of inputs, of two Muls of v, of cos alone, of sin alone, before the rotation: passed
    over, the rotation still fused."""
    model = _gptj()
    decoys = [helper.make_node("Add", ["v", "v"], ["d0"]),
              helper.make_node("Mul", ["v", "v"], ["vv"]),
              helper.make_node("Add", ["vv", "vv"], ["d1"]),
              helper.make_node("Mul", ["v", "c_rep"], ["vc"]),
              helper.make_node("Add", ["vc", "vv"], ["d2"]),
              helper.make_node("Mul", ["v", "s_rep"], ["vs"]),
              helper.make_node("Add", ["vv", "vs"], ["d3"])]
    at = list(model.graph.node).index(_maker(model, "m_cos"))
    for k, node in enumerate(decoys):
        model.graph.node.insert(at + k, node)
    assert _lower_j(model)[0] == 1


def test_lower_interleaved_takes_the_operands_in_either_order():
    model = _gptj()
    for name in ("m_cos", "m_sin"):
        node = _maker(model, name)
        node.input[:] = list(reversed(node.input))
    assert _lower_j(model)[0] == 1
    np.testing.assert_allclose(_run(model, v_in=VJ[..., :R], position_ids=IDS)[0],
                               _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


def test_lower_interleaved_finds_the_split_among_casts_and_refuses_others():
    """Two float32 Casts of the rows, the Split reading the second: found. A Split in three, or
    rows nothing reads: no Split of the rows."""
    model = _gptj()
    split = _maker(model, "sin_r")
    at = list(model.graph.node).index(split)
    model.graph.node.insert(at, helper.make_node("Cast", ["sc"], ["unread"], to=TensorProto.FLOAT))
    model.graph.node.insert(at + 1, helper.make_node("Cast", ["sc"], ["sc32"],
                                                     to=TensorProto.FLOAT))
    split.input[0] = "sc32"
    assert _lower_j(model)[0] == 1
    message = ("--rope-lowering: no Split of GPT-J's [sin | cos] rows 'sc' into sin and cos "
               "found")
    three = _gptj()
    split = _maker(three, "sin_r")
    split.output.append("extra")
    split.attribute[1].i = 3
    _refused_j(three, message)
    unread = _gptj()
    _maker(unread, "sin_r").input[0] = "v"
    _refused_j(unread, message)


def test_lower_interleaved_optimum_positions_are_those_gathering_the_table():
    model = _gptj(positions=False)
    model.graph.input.append(_vi("tok", TensorProto.INT64, [B, "S"]))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((4, 1), np.float32), "E"))
    model.graph.node.insert(0, helper.make_node("Gather", ["E", "tok"], ["emb"]))
    assert _lower_j(model)[0] == 1
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[1] == BATCHED
    assert next(n for n in model.graph.node if n.output[0] == BATCHED).input[0] == "position_ids"


@pytest.mark.parametrize("change", ["no_steps", "computed_start", "not_unsqueezed"])
def test_lower_interleaved_every_two_needs_constant_steps_of_two(change):
    model = _gptj()
    odd = _maker(model, "odd")
    if change == "no_steps":
        del odd.input[4:]
    elif change == "computed_start":
        # the batch size (1), from the positions' shape: a tensor, not a constant
        model.graph.node.insert(0, helper.make_node("Shape", ["position_ids"], ["batch"],
                                                    start=0, end=1))
        odd.input[1] = "batch"
    else:
        stack = _maker(model, "stack")
        stack.input[:] = ["nodd", "even"]
    _refused_j(model)


def test_lower_interleaved_partial_whose_rotation_is_an_output():
    """x = v[..., :R] sliced, the rotation itself the model's output (no Concat reads it): the
    rotation of x is fused."""
    model = _gptj(partial=True)
    concat = _maker(model, "full")
    model.graph.node.remove(concat)
    model.graph.node.remove(_maker(model, "rest"))
    model.graph.output[0].name = "rotated"
    model.graph.output[0].type.tensor_type.shape.dim[3].dim_value = R
    assert _lower_j(model)[0] == 1
    assert _maker(model, "rotated").op_type == "Reshape"
    np.testing.assert_allclose(_run(model, v_in=VJ, position_ids=IDS)[0], _every_two(VJ[..., :R]),
                               rtol=0, atol=1e-6)


def test_lower_rope_defaults_to_ort_and_reads_operands_in_either_order():
    nodes = _rotate_half_nodes()
    for node in nodes:
        if node.output[0] in ("m1", "m2"):
            node.input[:] = list(reversed(node.input))
    model = _rope_model(nodes)
    assert lower.lower_rope(model, P, "cos", "sin")[0] == 1
    assert [n.domain for n in model.graph.node if n.op_type == "RotaryEmbedding"] == [
        "com.microsoft"]
    np.testing.assert_allclose(_run(model, q=Q, position_ids=IDS)[0], _rotated(), rtol=0,
                               atol=1e-6)


def test_lower_rope_looks_past_decoys_before_the_rotation():
    """Before the real rotation: an Add of inputs, of two Muls without cos/sin, of cos alone, a
    rotation whose Concat is a Sum, one whose halves are not Slices of x, one with step 2."""
    decoys = [helper.make_node("Add", ["q", "q"], ["d0"]),
              helper.make_node("Mul", ["q", "q"], ["qq"]),
              helper.make_node("Add", ["qq", "qq"], ["d1"])]
    for tag, flaw in (("a", "concat"), ("b", "slice"), ("c", "step"), ("d", "cos_only")):
        nodes = _rotate_half_nodes(out=f"d_{tag}", tag=tag)
        made = {n.output[0]: n for n in nodes}
        if flaw == "concat":
            made[f"rot{tag}"].op_type = "Sum"
            del made[f"rot{tag}"].attribute[:]
        elif flaw == "slice":
            made[f"x1{tag}"].op_type = "Identity"
            del made[f"x1{tag}"].input[1:]
        elif flaw == "step":
            made[f"x1{tag}"].input[4] = "step2"
        else:
            made[f"m2{tag}"].input[1] = "qq"
        decoys += nodes
    model = _rope_model([*decoys, *_rotate_half_nodes()])
    model.graph.initializer.append(_const("step2", [2]))
    assert lower.lower_rope(model, P, "cos", "sin", "ort")[0] == 1
    assert next(n for n in model.graph.node if n.op_type == "RotaryEmbedding").output == ["out"]


@pytest.mark.parametrize("change", ["axes_minus_1", "concat_axis_3"])
def test_rotary23_partial_rotary_on_the_last_axis_either_way(change):
    model = _partial()
    if change == "axes_minus_1":
        for node in model.graph.node:
            if node.op_type == "Slice" and node.input[0] == "v":
                node.input[3] = "axis-1"
    else:
        _maker(model, "full").attribute[0].i = 3
    assert lower.lower_rope(model, P, "cos", "sin", "rotary23")[0] == 1
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[0] == "v" and node.name == f"{P}rotary0"
    want = np.concatenate([_rotated(V[..., :R]), V[..., R:]], -1)
    np.testing.assert_allclose(_run(model, v=V, position_ids=IDS)[0], want, rtol=0, atol=1e-6)


def test_rotary23_partial_needs_slices_with_axes():
    """x sliced without an axes input (axis 0 by default): not the partial pattern."""
    model = _partial()
    del _maker(model, "q").input[3:]
    assert lower.lower_rope(model, P, "cos", "sin", "rotary23")[0] == 1
    (node,) = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert node.input[0] == "q"


def test_feed_tables_feeds_every_op():
    model = _onnx_rotary()
    model.graph.node.append(helper.make_node("RotaryEmbedding", ["out", "cos", "sin"], ["out2"]))
    model.graph.output[0].name = "out2"
    assert lower.feed_tables(model, P, "cos", "sin") == (2, 2)


def test_to_opset_reads_ai_onnx_and_keeps_other_domains():
    model = _rope_model()
    model.opset_import[0].domain = "ai.onnx"
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    converted = lower.to_opset(model)
    assert converted is not model
    assert max(o.version for o in converted.opset_import if o.domain in ("", "ai.onnx")) == 23


def test_to_opset_keeps_metadata_of_named_nodes_only():
    model = _rope_model()
    unnamed = model.graph.node[1]
    assert not unnamed.name
    entry = unnamed.metadata_props.add()
    entry.key, entry.value = "k", "v"
    converted = lower.to_opset(model)
    assert all(not n.metadata_props for n in converted.graph.node)


def test_to_opset_names_the_converters_error():
    from onnx import version_converter

    model = _rope_model()
    model.graph.node.append(helper.make_node("N" * 250, ["q"], ["z"]))
    try:
        version_converter.convert_version(model, 23)
    except Exception as exc:  # noqa: BLE001 - what onnx says, to compare with
        kind, reason = type(exc).__name__, " ".join(str(exc).split())[:200]
    assert len(reason) == 200
    with pytest.raises(BadParameterError) as exc:
        lower.to_opset(model)
    assert str(exc.value) == (
        f"--rope-lowering rotary23 needs opset 23 and this model is opset 18: onnx's version "
        f"converter cannot take it there ({kind}: {reason}); use --rope-lowering ort, or export "
        "the model at opset 23")


ROTATION = ("m_cos", "even", "odd", "nodd", "nodd_u", "even_u", "stack", "flat", "m_sin",
            "rotated")


def _with_second_rotation(flaw=None):
    """_gptj's model with a second rotation, of v2 (another projection of the same input),
    placed before the first; ``flaw`` spoils it."""
    model = _gptj()
    made = {n.output[0]: n for n in model.graph.node}
    clones = []
    for name in ROTATION:
        node = onnx.NodeProto()
        node.CopyFrom(made[name])
        node.input[:] = ["v2" if i == "v" else f"{i}2" if i in ROTATION else i
                         for i in node.input]
        node.output[:] = [f"{o}2" for o in node.output]
        clones.append(node)
    clone = {n.output[0]: n for n in clones}
    if flaw == "stack":
        clone["stack2"].op_type = "Sum"
        del clone["stack2"].attribute[:]
    elif flaw == "steps":
        clone["odd2"].input[4] = "step1"
    elif flaw == "heads":
        clone["m_cos2"].input[0] = "v_in"
        for name in ("even2", "odd2"):
            clone[name].input[0] = "v_in"
    at = list(model.graph.node).index(made["m_cos"])
    for k, node in enumerate([helper.make_node("Identity", ["v_in"], ["v2"]), *clones]):
        model.graph.node.insert(at + k, node)
    model.graph.output.append(_vi("rotated2", TensorProto.FLOAT, [B, "S", H, R]))
    return model


@pytest.mark.parametrize("flaw", [None, "stack", "steps", "heads"])
def test_lower_interleaved_every_rotation_after_one_it_passes_over(flaw):
    model = _with_second_rotation(flaw)
    fused, _ = _lower_j(model)
    assert fused == (2 if flaw is None else 1)
    assert _maker(model, "rotated").name == f"{P}rotary{1 if flaw is None else 0}/unflatten"
    if flaw in (None, "heads"):  # (the other flaws do not run: not a rotation)
        for out in _run(model, v_in=VJ[..., :R], position_ids=IDS):
            np.testing.assert_allclose(out, _every_two(VJ[..., :R]), rtol=0, atol=1e-6)


def test_lower_interleaved_needs_unsqueezes_around_the_stack():
    """Identity in place of the two Unsqueezes of rotate_every_two's stack: not GPT-J's."""
    model = _gptj()
    for name in ("nodd_u", "even_u"):
        node = _maker(model, name)
        node.op_type = "Identity"
        del node.input[1:]
    _refused_j(model)


def test_lower_interleaved_passes_over_an_add_of_model_inputs():
    model = _gptj()
    model.graph.node.insert(1, helper.make_node("Add", ["v_in", "v_in"], ["d"]))
    assert _lower_j(model)[0] == 1


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
def test_positions_of_one_row_are_expanded_to_the_batch(lowering):
    """A model called without position_ids makes them [1, S] (transformers'
    cache_position[None]); both RotaryEmbedding ops require [B, S] and refused a batch of 2."""
    model = _rope_model(opset=23 if lowering == "rotary23" else 18)
    for value in [*model.graph.input, *model.graph.output]:
        if value.name != "position_ids":
            value.type.tensor_type.shape.dim[0].dim_param = "b"
    for i, node in enumerate(model.graph.node):  # named as splice names a graft's nodes: the
        node.name = f"{P}n{i}"  # tables' Gathers read the positions too, and are no rotation
    q = np.random.default_rng(1).standard_normal((2, H, S, R)).astype(np.float32)
    lower.lower_rope(model, P, "cos", "sin", lowering)
    np.testing.assert_allclose(_run(model, q=q, position_ids=IDS)[0], _rotated(q, IDS), rtol=0,
                               atol=1e-6)
