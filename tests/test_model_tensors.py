"""The graphs graft puts in a model's place (edgepe/graphs/model_tensors.py), run on onnxruntime
with tiny tables and compared with NumPy computed here: each option (squeeze, cast, duplicate,
int8, the longrope Where), each interface name and shape (issue 33: the mutation run of that
module runs these first; milliseconds each).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from edgepe.graphs import model_tensors as mt

COS = np.array([[1.0, 0.5], [0.25, -1.0], [2.0, 0.0]], np.float32)  # [L=3, W=2]
SIN = np.array([[0.0, -0.5], [0.75, 1.0], [-2.0, 0.125]], np.float32)


def _run(model, **feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def _dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def test_int8_tables_scale_bound_and_rounding():
    table = np.array([[127.0, -63.5], [0.5, -127.0]], np.float32)  # max |t| = 127: scale 1
    q, scale, bound = mt.int8_tables({"t": table})["t"]
    assert (scale, bound) == (1.0, 0.5)
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q, [[127, -64], [0, -127]])  # half to even: -63.5 -> -64
    q, scale, bound = mt.int8_tables({"z": np.zeros((2, 2), np.float32)})["z"]
    assert (scale, bound) == (1.0, 0.5) and not q.any()  # an all-zero table: scale 1
    q, scale, bound = mt.int8_tables({"s": np.array([[0.254]], np.float32)})["s"]
    assert scale == float(np.float32(0.254 / 127)) and bound == scale / 2
    np.testing.assert_array_equal(q, [[127]])


def test_int8_tables_of_an_empty_table():
    q, scale, bound = mt.int8_tables({"e": np.zeros((0, 2), np.float32)})["e"]
    assert (scale, bound) == (1.0, 0.5) and q.shape == (0, 2)


def test_float64_inputs_are_stored_as_float32():
    model = mt.gathered_tables({"cos": COS.astype(np.float64)}, 18, [2, 1])
    assert model.graph.initializer[-1].data_type == TensorProto.FLOAT
    for model in (mt.alibi_bias(np.array([[0.5]]), 18, [1, 1, 2]),
                  mt.alibi_distance_bias(np.array([0.5]), 2, 18)):
        (slopes,) = [t for t in model.graph.initializer if t.name == "slopes"]
        assert slopes.data_type == TensorProto.FLOAT


def test_gathered_tables_squeeze_rows_names_and_shapes():
    model = mt.gathered_tables({"cos": COS, "sin": SIN}, 18, [None, "seq", 1])
    assert model.opset_import[0].version == 18 and model.ir_version == 8
    (inp,) = model.graph.input
    assert inp.name == "positions" and inp.type.tensor_type.elem_type == TensorProto.INT64
    assert _dims(inp) == ["positions_0", "seq", 1]
    assert [o.name for o in model.graph.output] == ["cos", "sin"]
    assert [_dims(o) for o in model.graph.output] == [["positions_0", "seq", 2]] * 2
    positions = np.array([[[2], [0]], [[1], [1]]], np.int64)  # [B=2, S=2, 1]
    got = _run(model, positions=positions)
    np.testing.assert_array_equal(got["cos"], COS[positions[..., 0]])
    np.testing.assert_array_equal(got["sin"], SIN[positions[..., 0]])
    assert not any(n.op_type in ("Sin", "Cos") for n in model.graph.node)


def test_gathered_tables_without_squeeze_casting_int32_and_duplicating():
    model = mt.gathered_tables({"cos": COS}, 17, [4], positions_type=TensorProto.INT32,
                               squeeze=False, duplicate=True, ir_version=9)
    assert model.ir_version == 9 and model.opset_import[0].version == 17
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT32
    assert _dims(model.graph.output[0]) == [4, 4]  # [..., 2W]
    got = _run(model, positions=np.array([0, 2, 1, 0], np.int32))["cos"]
    rows = COS[[0, 2, 1, 0]]
    np.testing.assert_array_equal(got, np.concatenate([rows, rows], axis=-1))
    assert [n.op_type for n in model.graph.node] == ["Cast", "Gather", "Concat"]
    assert sum(t.dims[0] for t in model.graph.initializer) == 3  # the halves stored once
    # duplicated rows of rank-3 positions concatenate on the last axis
    model = mt.gathered_tables({"cos": COS}, 18, [1, 2, 1], duplicate=True)
    got = _run(model, positions=np.array([[[1], [2]]], np.int64))["cos"]
    rows = COS[[1, 2]][None]
    np.testing.assert_array_equal(got, np.concatenate([rows, rows], axis=-1))


def test_gathered_tables_int8_within_half_a_step():
    model = mt.gathered_tables({"cos": COS, "sin": SIN}, 19, [5, 1], quantize="int8")
    positions = np.array([[0], [1], [2], [2], [0]], np.int64)
    got = _run(model, positions=positions)
    for name, table in (("cos", COS), ("sin", SIN)):
        scale = np.abs(table).max() / 127
        err = np.abs(got[name] - table[positions[:, 0]]).max()
        assert err <= np.float32(scale) / 2 * (1 + 1e-6), (name, err)
        stored = {t.name: t for t in model.graph.initializer}[f"{name}_table_int8"]
        assert stored.data_type == TensorProto.INT8
    assert {n.op_type for n in model.graph.node} >= {"Gather", "DequantizeLinear"}


def test_gathered_tables_choose_per_call_with_a_condition():
    long = {"cos": COS * 10}
    model = mt.gathered_tables({"cos": COS}, 18, [3, 1], if_true=long, condition_shape=[None])
    cond = model.graph.input[1]
    assert cond.name == "condition" and cond.type.tensor_type.elem_type == TensorProto.BOOL
    assert _dims(cond) == ["condition_0"]
    other = mt.gathered_tables({"cos": COS}, 18, [3, 1], if_true=long, condition_shape=[1])
    assert _dims(other.graph.input[1]) == [1]
    positions = np.array([[0], [2], [1]], np.int64)
    for flag, table in ((True, COS * 10), (False, COS)):
        got = _run(model, positions=positions, condition=np.array([flag]))["cos"]
        np.testing.assert_array_equal(got, table[[0, 2, 1]])


def test_alibi_bias_is_slopes_times_key_positions():
    slopes = np.array([[0.5], [0.25]], np.float32)  # [H=2, 1]
    model = mt.alibi_bias(slopes, 17, [None, 1, "T"], ir_version=7)
    assert model.ir_version == 7 and model.opset_import[0].version == 17
    assert mt.alibi_bias(slopes, 18, [1, 1, 1]).ir_version == 8
    assert _dims(model.graph.output[0]) == ["positions_0", 2, "T"]
    positions = np.array([[[0, 1, 5]]], np.int64)  # [B=1, 1, T=3]
    got = _run(model, positions=positions)["bias"]
    np.testing.assert_array_equal(got, [[[0, 0.5, 2.5], [0, 0.25, 1.25]]])
    model = mt.alibi_bias(slopes, 18, [1, 1, 2], positions_type=TensorProto.INT32)
    got = _run(model, positions=np.array([[[3, 4]]], np.int32))["bias"]
    np.testing.assert_array_equal(got, [[[1.5, 2.0], [0.75, 1.0]]])


def test_alibi_distance_bias_from_a_range():
    model = mt.alibi_distance_bias(np.array([0.5, 0.25], np.float32), 4, 17, ir_version=9)
    assert model.ir_version == 9 and not model.graph.input
    assert model.opset_import[0].version == 17
    assert mt.alibi_distance_bias(np.ones(1, np.float32), 2, 18).ir_version == 8
    assert _dims(model.graph.output[0]) == [2, 1, 4]
    got = _run(model)["bias"]
    distance = np.array([-3, -2, -1, 0], np.float32)  # u - (L - 1), u = 0 .. 3
    np.testing.assert_array_equal(got, [[0.5 * distance], [0.25 * distance]])
    assert len(model.graph.initializer) == 4  # start, end, step, H slopes: no [H, 1, L] table


@pytest.mark.parametrize(("attention", "lowering"), [(1.0, "bitwise"), (0.5, "trunc")])
def test_sliced_rope_is_within_its_bound_of_the_definition(attention, lowering):
    from edgepe.graphs.sliced import bound

    inv_freq = np.array([1.0, 0.1], np.float32)
    widths = (3, 3)  # positions 0 .. 63
    model = mt.sliced_rope(inv_freq, widths, ("c", "s"), 18, [None, 1],
                           positions_type=TensorProto.INT32, attention=attention,
                           lowering=lowering, ir_version=9)
    assert model.ir_version == 9 and [o.name for o in model.graph.output] == ["c", "s"]
    assert [_dims(o) for o in model.graph.output] == [["positions_0", 4]] * 2
    assert not any(n.op_type in ("Sin", "Cos") for n in model.graph.node)
    p = np.arange(64, dtype=np.int32)[:, None]
    got = _run(model, positions=p)
    angle = p.astype(np.float64) * inv_freq.astype(np.float64)
    for name, f in (("c", np.cos), ("s", np.sin)):
        half = attention * f(angle)
        want = np.concatenate([half, half], axis=-1)
        err = np.abs(got[name] - want).max()
        assert err <= bound(widths, attention), (name, err)


def test_recipe_distance_matches_a_direct_computation_and_chunks_do_not_matter():
    inv_freq = np.array([1.0, 1e-2], np.float32)
    p = np.arange(300, dtype=np.float32)[:, None]
    angle32 = p * inv_freq
    exact = p.astype(np.float64) * inv_freq.astype(np.float64)
    want = max(np.abs(np.float32(0.5) * f(angle32.astype(np.float64)).astype(np.float32)
                      - 0.5 * f(exact)).max() for f in (np.cos, np.sin))
    assert mt.recipe_distance(inv_freq, 300, 0.5) == pytest.approx(want, rel=0, abs=0)
    assert mt.recipe_distance(inv_freq, 300, 0.5, chunk=7) == mt.recipe_distance(
        inv_freq, 300, 0.5)
    assert mt.recipe_distance(inv_freq, 300) > 0  # float32 angles are not exact at p = 299
    assert mt.recipe_distance(inv_freq, 0) == 0.0
    assert mt.recipe_distance(inv_freq, 300) == mt.recipe_distance(inv_freq, 300, 1.0)
    # float64 frequencies are the model's float32 ones (the model multiplies in float32)
    assert mt.recipe_distance(inv_freq.astype(np.float64), 300) == mt.recipe_distance(
        inv_freq, 300)


def test_models_pass_the_full_checker():
    for model in (mt.gathered_tables({"cos": COS}, 18, [2, 1]),
                  mt.alibi_distance_bias(np.ones(1, np.float32), 2, 18)):
        onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("attention", [None, 2.0])
def test_sliced_rope_of_batched_positions_defaults_and_float64_frequencies(attention):
    from edgepe.graphs.sliced import bound

    widths = (2, 2)  # positions 0 .. 15
    kwargs = {} if attention is None else {"attention": attention}
    a = 1.0 if attention is None else attention
    model = mt.sliced_rope(np.array([0.5, 0.05]), widths, ("c", "s"), 19, [1, "S", 1],
                           **kwargs)
    assert model.ir_version == 8 and model.opset_import[0].version == 19
    assert _dims(model.graph.input[0]) == [1, "S", 1]
    assert [_dims(o) for o in model.graph.output] == [[1, "S", 4]] * 2
    p = np.array([[[0], [7], [15]]], np.int64)
    got = _run(model, positions=p)
    angle = p[..., 0, None].astype(np.float64) * np.float32([0.5, 0.05]).astype(np.float64)
    for name, f in (("c", np.cos), ("s", np.sin)):
        assert got[name].shape == (1, 3, 4)
        want = np.concatenate([a * f(angle)] * 2, axis=-1)
        assert np.abs(got[name] - want).max() <= bound(widths, a), name


def test_recipe_distance_refuses_positions_past_float32s_exact_integers(monkeypatch):
    # issue 41: graft's --max-len 2^63 looped here 2^48 times; past 2^24 float32 positions
    # are not the positions anyway
    from edgepe.contract.errors import BadParameterError

    assert mt.EXACT_POSITIONS == 1 << 24
    inv_freq = np.asarray([1.0, 0.01], np.float32)
    for max_len in (2**24 + 1, 2**63):
        with pytest.raises(BadParameterError, match=f"^--max-len {max_len}: a RoPE's positions "
                                                    "are float32, exact up to 16777216"):
            mt.recipe_distance(inv_freq, max_len)
    # the edge itself runs (shown on a small edge: 2^24 positions would take a GB here)
    monkeypatch.setattr(mt, "EXACT_POSITIONS", 10)
    assert mt.recipe_distance(inv_freq, 10) == mt.recipe_distance(inv_freq, 10, chunk=3)
    with pytest.raises(BadParameterError, match="^--max-len 11: "):
        mt.recipe_distance(inv_freq, 11)
