"""Fast focused tests of ``edgepe.graphs.sliced`` (issue 33's mutation testing; issue 34's mode).

Tiny plans and widths, every function called directly, the results checked against values
derived here by hand (plans, slice indices, table bytes, limits) or computed independently
in float64 with numpy (``a_i cos(pos w_i)``, ``a_i sin(pos w_i)`` on the stored float32
``w_i`` and ``a_i``) and held to the module's stated ``bound``. Each onnxruntime session is of
a graph of a few dozen nodes over at most a few hundred positions: milliseconds.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from edgepe.contract.config import ExportConfig, base_manifest
from edgepe.contract.errors import BadParameterError
from edgepe.formats.onnx import output_shape
from edgepe.graphs import builder
from edgepe.graphs import sliced as sl
from edgepe.graphs._common import Graph
from edgepe.schemes import build, resolve

TRIG = {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh"}
W = np.array([1.0, 0.37, 0.011], dtype=np.float32)  # k = 3 inverse frequencies
SCALE = np.array([1.25, 1.0, 0.75], dtype=np.float32)  # a = 1.25 (yarn's attention factor)


def run_graph(g: Graph, outputs: list[str], feeds: dict, opset: int = 18,
              ms: bool = False) -> list[np.ndarray]:
    """Run ``g``'s nodes with ``outputs`` (each behind an Identity) on onnxruntime CPU."""
    named = [f"out{i}" for i in range(len(outputs))]
    nodes = [*g.nodes, *(helper.make_node("Identity", [o], [n]) for o, n in zip(outputs, named,
                                                                                   strict=True))]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, list(v.shape))
              for name, v in feeds.items()]
    imports = [helper.make_opsetid("", opset), *([helper.make_opsetid("com.microsoft", 1)]
                                                 if ms else [])]
    # the outputs' dtypes from ONNX shape inference of the graph without outputs
    bare = helper.make_model(helper.make_graph(nodes, "t", inputs, [], g.initializers),
                             opset_imports=imports)
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(bare).graph.value_info}
    # (com.microsoft ops have no ONNX inference: their outputs here are float32)
    outs = [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None)
            for n in named]
    graph = helper.make_graph(nodes, "t", inputs, outs, g.initializers)
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 11 if opset >= 23 else 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(named, feeds)


def exact(p: np.ndarray, w: np.ndarray, scale: np.ndarray | None = None):
    """float64 ``(a cos(p w), a sin(p w))`` ``[N, k]`` on the float32 ``w`` and ``a``."""
    theta = p.astype(np.float64)[:, None] * w.astype(np.float32).astype(np.float64)[None, :]
    a = 1.0 if scale is None else scale.astype(np.float32).astype(np.float64)[None, :]
    return a * np.cos(theta), a * np.sin(theta)


# -- plans ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_len,plan", [
    (0, (1,)), (1, (1,)), (2, (1,)), (3, (2,)), (64, (6,)), (65, (4, 3)), (4096, (6, 6)),
    (4097, (7, 6)), (2**24, (12, 12)), (2**24 + 1, (9, 8, 8)), (2**25 + 1, (9, 9, 8)),
    (2**36 + 1, (10, 9, 9, 9)), (2**36, (12, 12, 12))])
def test_default_plan_by_hand(max_len, plan):
    """bits = bit_length(max_len - 1) (at least 1): one slice to 6 bits, two to 24, then
    ceil(bits / 12) slices, the wider ones first, widths differing by at most one."""
    assert sl.default_plan(max_len) == plan


def test_parse_plan_reads_widths_and_refuses_bad_ones():
    assert sl.parse_plan(None, 65) == (4, 3)
    assert sl.parse_plan("8,7", 32768) == (8, 7)
    assert sl.parse_plan(" 4, 3,3", 1000) == (4, 3, 3)
    assert sl.parse_plan([5, "4"], 512) == (5, 4)
    assert sl.parse_plan("3", 8) == (3,)  # 2^3 = 8 positions: exactly max_len
    assert sl.parse_plan("16", 1) == (16,) and sl.parse_plan("1", 2) == (1,)
    assert sl.parse_plan("15,14", 1) == (15, 14)  # 29 bits: the definition's last
    for text in ("8;7", "", "a,1", [None], 5):
        with pytest.raises(BadParameterError, match=r"^--slices must be comma-separated bit "
                           r"widths, most significant first \(e\.g\. 8,7\), got "):
            sl.parse_plan(text, 8)
    for text in ("0", "17", "3,0", [], "4,-1"):
        with pytest.raises(BadParameterError, match=r"^--slices widths must be 1 to 16 bits "
                           r"each, got "):
            sl.parse_plan(text, 1)
    with pytest.raises(BadParameterError, match=r"^--slices 3 cover positions below 2\^3 = 8, "
                       r"fewer than max_len 9: add bits$"):
        sl.parse_plan("3", 9)
    with pytest.raises(BadParameterError, match=r"^--slices 15,15 span 30 bits; positions are "
                       r"defined below 2\^29 \(pos \* w exact in float64\)$"):
        sl.parse_plan("15,15", 1)


def test_plan_text_and_position_limit():
    assert sl.plan_text((8, 7)) == "8,7" and sl.plan_text([np.int64(12)]) == "12"
    assert sl.position_limit((8, 7)) == 32767 == sl.position_limit((8, 7), "trunc")
    assert sl.position_limit((13, 13)) == 2**26 - 1  # bitwise: what the slices hold
    assert sl.position_limit((13, 13), "trunc") == 2**24  # float32 Cast exact to 2^24
    assert sl.position_limit((13, 13), "clip32") == 2**24
    assert sl.position_limit((12, 12), "trunc") == 2**24 - 1


# -- the bound -----------------------------------------------------------------------------


@pytest.mark.parametrize("x,half_ulp", [(0.25, 2.0**-25), (1.0, 2.0**-25), (1.2, 2.0**-24),
                                        (2.0, 2.0**-24), (2.5, 2.0**-23), (4.0, 2.0**-23),
                                        (4.5, 2.0**-22)])
def test_half_ulp_below(x, half_ulp):
    """Half an ulp of float32 values up to x: 2^-25 below 1, 2^(e - 25) for 2^(e-1) < x <= 2^e
    (float32's spacing just below 2^e is 2^(e - 24))."""
    assert sl._half_ulp_below(x) == half_ulp
    below = np.float32(x)  # the largest float32 <= x has half an ulp of at most half_ulp
    assert float(np.spacing(np.nextafter(below, np.float32(0)))) / 2 <= half_ulp


def _bound_by_hand(n: int, a: float) -> float:
    """The module doc's recurrence, written out: U(a), B_2, or E iterated over middle slices."""
    ua = 2.0**-25 if a <= 1 else 2.0 ** (math.ceil(math.log2(a)) - 25)
    r2 = math.sqrt(2)
    if n == 1:
        total = ua
    else:
        e = r2 * 2.0**-25
        for _ in range(n - 2):
            e = e * (1 + 2.0**-24) + 4 * r2 * 2.0**-25
        total = a * (1 + 2.0**-24) * e + r2 * ua + a * 2.0**-24 + ua
    return total * (1 + 2.0**-20)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("a", [1.0, 1.25, 3.0])
def test_bound_is_the_documented_recurrence(n, a):
    assert sl.bound((5,) * n, a) == pytest.approx(_bound_by_hand(n, a), rel=1e-12, abs=0)
    assert sl.bound((5,) * n, 0.5) == sl.bound((5,) * n)  # a below 1: the other tables' 1


def test_bound_values_of_the_doc():
    assert sl.bound((8, 7)) == pytest.approx((2 * math.sqrt(2) + 3) * 2.0**-25
                                             * (1 + 2.0**-20), rel=1e-7)
    assert 1.73e-7 < sl.bound((8, 7)) < 1.74e-7 and 3.4e-7 < sl.bound((8, 8, 8)) < 3.5e-7


def test_tolerance_adds_the_reference_rounding_and_the_apply_term():
    b = sl.bound((6, 6))
    assert sl.tolerance((6, 6), 1.0) == b + 2.0**-25
    assert sl.tolerance((6, 6), 1.0, apply=True) == b + 2.0**-25 + 2.0**-23
    assert sl.tolerance((6, 6), 1.5) == sl.bound((6, 6), 1.5) + 2.0**-24
    assert sl.tolerance((6, 6), 0.5) == b + 2.0**-25


# -- tables --------------------------------------------------------------------------------


def test_slice_tables_are_float64_angles_stored_float32():
    w64 = np.array([1.0, 0.37, 0.011])  # float64: the tables use its float32 rounding
    scale64 = np.array([1.25, 1.1, 0.75])
    tables = sl.slice_tables(w64, (2, 3), scale64)  # least significant first: 3 bits, then 2
    assert [t[0].shape for t in tables] == [(8, 3), (4, 3)]
    assert all(t.dtype == np.float32 for pair in tables for t in pair)
    c0, s0 = exact(np.arange(8), w64)
    np.testing.assert_array_equal(tables[0][0], c0.astype(np.float32))
    np.testing.assert_array_equal(tables[0][1], s0.astype(np.float32))
    c1, s1 = exact(np.arange(4) * 8, w64, scale64)  # the top slice: shift 3, times scale
    np.testing.assert_array_equal(tables[1][0], c1.astype(np.float32))
    np.testing.assert_array_equal(tables[1][1], s1.astype(np.float32))
    extra = sl.slice_tables(w64, (2, 3), top_extra=True)
    assert [t[0].shape for t in extra] == [(8, 3), (5, 3)]  # one more row s = 2^w on top only
    c1, s1 = exact(np.arange(5) * 8, w64)
    np.testing.assert_array_equal(extra[1][0], c1.astype(np.float32))
    np.testing.assert_array_equal(extra[1][1], s1.astype(np.float32))
    three = sl.slice_tables(w64, (1, 2, 2))  # shifts 0, 2, 4
    for (cos, sin), shift, rows in zip(three, (0, 2, 4), (4, 4, 2), strict=True):
        c, s = exact(np.arange(rows) * 2**shift, w64)
        np.testing.assert_array_equal(cos, c.astype(np.float32))
        np.testing.assert_array_equal(sin, s.astype(np.float32))


def test_binary_tables_are_sums_of_the_rows_of_set_bits():
    weights = np.array([[1, -2], [10, 20], [100, -100]], dtype=np.int8)
    t = sl.binary_tables(weights, [2, 1], integer=True)  # slices: bits 0-1, then bit 2
    assert [x.dtype for x in t] == [np.int16, np.int16]
    np.testing.assert_array_equal(t[0], [[0, 0], [1, -2], [10, 20], [11, 18]])
    np.testing.assert_array_equal(t[1], [[0, 0], [100, -100]])
    past = sl.binary_tables(weights, [2, 2], integer=True)  # bit 3 is past n_bits: always 0
    np.testing.assert_array_equal(past[1], [[0, 0], [100, -100], [0, 0], [100, -100]])
    # float32 rows summed in float64 then rounded once: 1 + 2^-24 + 2^-24 is 1 + 2^-23, where
    # float32 additions in order would round each step back to 1
    f = np.array([[1.0], [2.0**-24], [2.0**-24]], dtype=np.float32)
    (ft,) = sl.binary_tables(f, [3], integer=False)
    assert ft.dtype == np.float32 and ft[7, 0] == np.float32(1 + 2.0**-23)
    assert ft[6, 0] == np.float32(2.0**-23) and ft[1, 0] == 1.0


# -- slicing -------------------------------------------------------------------------------


def _indices(widths, lowering, p):
    g = Graph("t")
    low = list(reversed(widths))
    idx, top = sl._slice_indices(g, "positions", low, lowering, "p_")
    out = run_graph(g, [*idx, top], {"positions": p})
    return g, low, out


def _expected_indices(low, p, lowering):
    shifts = np.cumsum([0, *low[:-1]])
    if lowering == "bitwise":  # floor(pos / 2^k) & mask, the top signed
        idx = [(p >> k) & ((1 << w) - 1) for k, w in zip(shifts[:-1], low[:-1], strict=True)]
        return idx, p >> shifts[-1]
    a = np.abs(p)  # |pos|'s slices, the top + 2^w_top where pos < 0
    idx = [(a >> k) & ((1 << w) - 1) for k, w in zip(shifts[:-1], low[:-1], strict=True)]
    return idx, (a >> shifts[-1]) + (1 << low[-1]) * (p < 0)


@pytest.mark.parametrize("lowering", sl.LOWERINGS)
@pytest.mark.parametrize("widths", [(3,), (2, 3), (2, 1, 2), (1, 2, 1, 2)])
def test_slice_indices_by_hand(lowering, widths):
    limit = (1 << sum(widths)) - 1
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    g, low, out = _indices(widths, lowering, p)
    idx, top = _expected_indices(low, p, lowering)
    assert len(out) == len(widths)
    for got, want in zip(out, [*idx, top], strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == (np.int64 if lowering == "bitwise" else np.int32)
    ops = [n.op_type for n in g.nodes]
    if lowering == "bitwise":
        assert set(ops) <= {"BitwiseAnd", "Sub", "Div"}
        if len(widths) == 2:
            assert len(ops) == 3  # the module's "3 nodes for two slices"
    else:
        assert not set(ops) & {"BitwiseAnd", "BitShift", "Mod", "Floor", "Abs", "Less", "Div"}
    assert all(i.name.startswith("p_") for i in g.initializers)


def test_trunc_slices_are_exact_to_2_24():
    p = np.array([2**24, -(2**24), 2**24 - 1, -(2**24) + 1, 2**23 + 5, -12345677], np.int64)
    for lowering in ("trunc", "clip32"):
        _, low, out = _indices((12, 13), lowering, p)
        idx, top = _expected_indices(low, p, lowering)
        np.testing.assert_array_equal(out[0], idx[0])
        np.testing.assert_array_equal(out[1], np.minimum(top, 2 * (1 << 12) - 1)
                                      if lowering == "clip32" else top)


def test_clip32_clamps_every_index_into_its_table():
    """Past the plan clip32 reads inside each table (trunc's indices run past them)."""
    widths = (2, 2)
    p = np.array([16, 17, 40, 100, -16, -40, -100, 2**20], dtype=np.int64)
    _, low, out = _indices(widths, "clip32", p)
    idx, top = _expected_indices(low, p, "trunc")
    np.testing.assert_array_equal(out[0], idx[0])  # a masked slice is in range anyway
    np.testing.assert_array_equal(out[1], np.clip(top, 0, 7))
    _, _, raw = _indices(widths, "trunc", p)
    np.testing.assert_array_equal(raw[1], top)
    assert raw[1].max() > 7


def test_a_lowering_that_does_not_slice_is_refused():
    with pytest.raises(BadParameterError, match=r"^--lowering arith does not apply to --mode "
                       r"sliced; it takes: bitwise, trunc, clip32$"):
        sl._slice_indices(Graph("t"), "positions", [2, 2], "arith", "p_")


# -- the columns graph ---------------------------------------------------------------------

SLOTS = [2, 0, 1, 0, 2]
KINDS = [sl.SIN, sl.COS, sl.COS, sl.SIN, sl.COS]


def _columns(widths, lowering, p, scale=None, slots=SLOTS, kinds=KINDS):
    g = Graph("t")
    out = sl.columns_graph(g, "positions", W, widths, slots, kinds, scale, lowering, "p_")
    return g, run_graph(g, [out], {"positions": p})[0]


def _columns_exact(p, scale=None, slots=SLOTS, kinds=KINDS):
    c, s = exact(p, W, scale)
    return np.stack([(s if kind == sl.SIN else c)[:, i] for i, kind in zip(slots, kinds,
                                                                          strict=True)], axis=1)


@pytest.mark.parametrize("lowering", sl.LOWERINGS)
@pytest.mark.parametrize("widths", [(3,), (2, 3), (2, 1, 2), (1, 1, 2, 1)])
@pytest.mark.parametrize("scaled", [False, True])
def test_columns_graph_every_position_within_the_bound(lowering, widths, scaled):
    scale = SCALE if scaled else None
    limit = (1 << sum(widths)) - 1
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    g, out = _columns(widths, lowering, p, scale)
    assert out.dtype == np.float32 and out.shape == (len(p), len(SLOTS))
    err = np.abs(out.astype(np.float64) - _columns_exact(p, scale)).max()
    assert err <= sl.bound(widths, 1.25 if scaled else 1.0), err
    ops = {n.op_type for n in g.nodes}
    assert not ops & TRIG
    assert all(n.startswith("p_") for n in (i.name for i in g.initializers))
    # the stored tables: sum_c 2^w_c rows x k slots x (cos, sin), one more top row if bitwise
    tables = [i for i in g.initializers if i.name[2:5] in ("cos", "sin") and i.dims[-1] == 3]
    rows = sum(1 << w for w in widths) + (1 if lowering == "bitwise" else 0)
    assert sum(math.prod(i.dims) for i in tables) == 2 * 3 * rows
    if lowering != "bitwise":  # CoreML: every index int32, none int64
        assert not [i.name for i in g.initializers if i.data_type == TensorProto.INT64]


def test_columns_graph_index_dtypes_follow_the_lowering():
    for lowering, dtype in (("bitwise", TensorProto.INT64), ("trunc", TensorProto.INT32)):
        g = Graph("t")
        sl.columns_graph(g, "positions", W, (2, 2), SLOTS, KINDS, None, lowering, "p_")
        slots = next(i for i in g.initializers if i.name == "p_slots")
        assert slots.data_type == dtype and list(onnx.numpy_helper.to_array(slots)) == SLOTS
        starts = [i for i in g.initializers if i.name.endswith("_start")]
        assert starts and {i.data_type for i in starts} == {dtype}


def test_columns_graph_far_positions():
    """clip32 runs at positions past the plan (reads the tables' edges), trunc fails there."""
    # and at every int64: past 2^31 the Cast to int32 overflows and the slices are garbage,
    # which the Clips keep inside the tables (2^32 + 2^30: a low slice of 2^30 on x86)
    p = np.array([16, 40, -100, 2**20, 2**31, 2**32 + 2**30, -(2**32) - 2**30, 2**40 + 3,
                  -(2**63), 2**63 - 1], dtype=np.int64)
    _, out = _columns((2, 2), "clip32", p)
    assert np.isfinite(out).all() and np.abs(out).max() <= 1 + 2.0**-20
    with pytest.raises(Exception, match="out of bounds|indices"):
        _columns((2, 2), "trunc", p[:4])


# -- fused angle additions (RotaryEmbedding) ----------------------------------------------


@pytest.mark.parametrize("rotary,opset", [("ort", 18), ("rotary23", 23)])
@pytest.mark.parametrize("widths", [(2, 3), (2, 1, 2)])
@pytest.mark.parametrize("scaled", [False, True])
def test_rotary_columns_within_the_bound(rotary, opset, widths, scaled):
    scale = SCALE if scaled else None
    limit = (1 << sum(widths)) - 1
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    far = np.array([limit + 1, -limit - 1, 2**40 + 3, -(2**63), 2**63 - 1], dtype=np.int64)
    g = Graph("t")
    out_name = sl.rotary_columns(g, "positions", W, widths, scale, rotary, "p_")
    out, wrapped = (run_graph(g, [out_name], {"positions": q}, opset, ms=rotary == "ort")[0]
                    for q in (p, far))
    c, s = exact(p, W, scale)
    assert out.shape == (len(p), 6)
    err = np.abs(out.astype(np.float64) - np.hstack([c, s])).max()
    assert err <= sl.bound(widths, 1.25 if scaled else 1.0), err
    # every id masked into its cache: a position past the plan wraps to pos mod 2^(bits + 1)
    # (the top slice keeps its sign bit)
    bits = sum(widths)
    folded = ((far + (1 << bits)) & ((1 << (bits + 1)) - 1)) - (1 << bits)
    c, s = exact(folded, W, scale)
    assert np.abs(wrapped.astype(np.float64) - np.hstack([c, s])).max() <= sl.bound(
        widths, 1.25 if scaled else 1.0)
    ops = [n.op_type for n in g.nodes]
    assert ops.count("RotaryEmbedding") == len(widths) - 1 and "Sub" not in ops
    # the one Add counts the rows folded per batch entry (issue 44)
    assert [n.input for n in g.nodes if n.op_type == "Add"] == [[g.nodes[1].output[0],
                                                                  "p_one_row"]]
    assert {n.domain for n in g.nodes if n.op_type == "RotaryEmbedding"} == {
        "com.microsoft" if rotary == "ort" else ""}


def test_rotary_columns_refuses_the_onnx_lowering():
    with pytest.raises(BadParameterError, match=r"^--rope-lowering onnx does not fuse sliced "
                       r"angle additions; choose ort or rotary23$"):
        sl.rotary_columns(Graph("t"), "positions", W, (2, 2), None, "onnx")
    with pytest.raises(ValueError, match="^cos-cos$"):
        sl.rotary_columns(Graph("t"), "positions", W, (2, 2), None, "ort", pairs="cos-cos")


# -- issue 44: rows folded into [batch, sequence] for CUDA's grid; sinusoidal's pairs ------


@pytest.mark.parametrize("n,folded", [
    (0, (0, 1)), (1, (1, 1)), (65534, (65534, 1)), (65535, (32768, 2)), (65536, (32768, 2)),
    (65537, (32769, 2)), (131069, (65535, 2)), (131070, (43690, 3)), (131071, (43691, 3)),
    (2**24, (65281, 257)), (65535 * 65535 - 1, (65535, 65535))])
def test_fold_by_hand(n, folded):
    assert sl.fold(n) == folded


def test_limits_and_max_rows():
    assert (sl.CUDA_GRID_YZ_LIMIT, sl.KERNEL_INT_LIMIT) == (65535, 2147483647)
    assert [sl.max_rows(w) for w in (1, 6, 128, 129)] == [2147483647, 357913941, 16777215,
                                                        16647160]


def _rotary_inputs(g: Graph) -> list[tuple[str, str, str]]:
    """Per RotaryEmbedding node: (x, position_ids, cos cache) names."""
    return [(n.input[0], n.input[1], n.input[2]) if n.domain == "com.microsoft" else
            (n.input[0], n.input[3], n.input[1]) for n in g.nodes
            if n.op_type == "RotaryEmbedding"]


@pytest.mark.parametrize("rotary,opset", [("ort", 18), ("rotary23", 23)])
@pytest.mark.parametrize("n", [65535, 65537, 131071])
def test_rotary_columns_fold_the_rows_and_keep_every_value(rotary, opset, n):
    """Past 65534 rows the ops see ``fold(n)``, ids of the same shape, caches at least as long
    as the sequence; the ``[n, 2k]`` rows are bit for bit those of short calls (``S = 1``)."""
    widths = (2, 1, 2)
    g = Graph("t")
    out = sl.rotary_columns(g, "positions", W, widths, SCALE, rotary, "p_")
    names = [name for triple in _rotary_inputs(g) for name in triple]
    p = (np.arange(n, dtype=np.int64) * 13) % 63 - 31
    got = run_graph(g, [out, *names], {"positions": p}, opset, ms=rotary == "ort")
    whole, shapes = got[0], [v.shape for v in got[1:]]
    b, s = sl.fold(n)
    assert (b * s > n) == (n % s != 0) and s > 1
    for x, ids, cache in zip(shapes[0::3], shapes[1::3], shapes[2::3], strict=True):
        assert x == (b, s, 6) and ids == (b, s) and cache[0] >= s
    parts = np.concatenate([run_graph(g, [out], {"positions": p[i:i + 30000]}, opset,
                                      ms=rotary == "ort")[0] for i in range(0, n, 30000)])
    assert whole.shape == (n, 6) and np.array_equal(whole, parts)
    c, sn = exact(p[:200], W, SCALE)
    assert np.abs(whole[:200] - np.hstack([c, sn])).max() <= sl.bound(widths, 1.25)


@pytest.mark.parametrize("widths,padded", [((2, 1, 2), True), ((13, 1), False)])
def test_rotary_columns_pad_short_caches_to_the_longest_fold(widths, padded):
    """A cache shorter than ``fold(max_rows(2k))[1]`` rows (5462 for k = 3) is padded with zero
    rows in the graph (``Expand``/``Concat`` of initializers), a longer one is left as it is;
    the file's initializers hold the slice tables and no padding."""
    g = Graph("t")
    sl.rotary_columns(g, "positions", W, widths, None, "ort", "p_")
    caches = [cache for _, _, cache in _rotary_inputs(g)]
    got = run_graph(g, caches, {"positions": np.arange(3, dtype=np.int64)}, 18, ms=True)
    longest = sl.fold(sl.max_rows(6))[1]
    assert longest == 5462
    rows = [(1 << w) for w in reversed(widths)][1:]
    rows[-1] *= 2  # the top slice's negative rows
    for cache, have in zip(got, rows, strict=True):
        assert cache.shape == (max(have, longest), 3)
        assert np.array_equal(cache[have:], np.zeros((max(0, longest - have), 3), np.float32))
        assert np.abs(cache[:have]).min(axis=1).max() > 0 or have == 2  # the table rows kept
    assert ("p_zero" in {i.name for i in g.initializers}) == padded
    assert [n.op_type for n in g.nodes].count("Expand") == 1 + padded * (len(widths) - 1)
    stored = sum(int(np.prod(i.dims)) for i in g.initializers if i.data_type == 1)
    # cos and sin of every slice (the top one a row more), the -1 and, when padding, the 0
    assert stored == sum(2 * (1 << w) * 3 for w in widths) + 2 * 3 + 1 + padded


@pytest.mark.parametrize("longest", [4, 5])
def test_rotary_columns_pad_only_a_cache_shorter_than_the_longest_fold(monkeypatch, longest):
    """The padding boundary (``have < longest``): with the kernels' int limit made small the
    longest fold is 4 or 5 rows; of widths (1, 1, 1) the middle cache holds 2 rows, the top one 4
    (its negative rows). A cache of exactly ``longest`` rows gets no Expand/Concat (issue 44:
    a zero-row pad is a node pair for nothing); a shorter one is padded by the difference."""
    monkeypatch.setattr(sl, "KERNEL_INT_LIMIT", 6 * (longest - 1) * sl.CUDA_GRID_YZ_LIMIT)
    assert sl.fold(sl.max_rows(6))[1] == longest
    g = Graph("t")
    out = sl.rotary_columns(g, "positions", W, (1, 1, 1), None, "ort", "p_")
    pads = [onnx.numpy_helper.to_array(i).tolist() for i in g.initializers
            if i.name.startswith("p_cache_pad")]
    assert pads == [[longest - 2, 3], *([[longest - 4, 3]] if longest > 4 else [])]
    ops = [n.op_type for n in g.nodes]
    # the positions' pad row, then one Expand per padded cache (its zeros) and two Concats
    assert ops.count("Expand") == 1 + len(pads) and ops.count("Concat") == 2 + 2 + 2 * len(pads)
    caches = [cache for _, _, cache in _rotary_inputs(g)]
    p = np.arange(-7, 8, dtype=np.int64)
    got = run_graph(g, [out, *caches], {"positions": p}, 18, ms=True)
    assert [v.shape for v in got[1:]] == [(longest, 3), (longest, 3)]
    c, s = exact(p, W)
    assert np.abs(got[0] - np.hstack([c, s])).max() <= sl.bound((1, 1, 1))


@pytest.mark.parametrize("rotary,opset", [("ort", 18), ("rotary23", 23)])
def test_rotary_columns_fold_around_multiples_of_a_small_grid_limit(monkeypatch, rotary, opset):
    """The fold in the graph at ``N`` just below, at and just above multiples of the grid limit
    (made 5 here, so a few rows do what 65535 does at 65535 x 2 = 131070): the ops see
    ``fold(N)`` (the graph's Div/Add/Mod on the positions' Shape, Python's fold the reference),
    the last entry padded, and the ``[N, 2k]`` rows bit for bit those of the unfolded graph."""
    widths = (2, 1, 2)
    plain = Graph("t")
    plain_out = sl.rotary_columns(plain, "positions", W, widths, SCALE, rotary, "p_")
    monkeypatch.setattr(sl, "CUDA_GRID_YZ_LIMIT", 5)
    # and the kernels' int limit small with it: at most 30 rows a call, caches padded to
    # fold(30)[1] = 7 rows (the real limit at grid 5 would pad them to 71582789 rows)
    monkeypatch.setattr(sl, "KERNEL_INT_LIMIT", 6 * 30)
    g = Graph("t")
    out = sl.rotary_columns(g, "positions", W, widths, SCALE, rotary, "p_")
    xs = [x for x, _, _ in _rotary_inputs(g)]
    for n in (1, 4, 5, 6, 9, 10, 11, 14, 15, 16, 24, 25, 26):
        p = (np.arange(n, dtype=np.int64) * 13) % 63 - 31
        got = run_graph(g, [out, *xs], {"positions": p}, opset, ms=rotary == "ort")
        b, s = sl.fold(n)
        assert (s, b * s - n < s) == (n // 5 + 1, True)
        assert [v.shape for v in got[1:]] == [(b, s, 6)] * 2, n
        want = run_graph(plain, [plain_out], {"positions": p}, opset, ms=rotary == "ort")[0]
        assert got[0].shape == (n, 6) and np.array_equal(got[0], want), n


@pytest.mark.parametrize("pairs", ["sin-cos", "sin-cos-interleaved"])
@pytest.mark.parametrize("rotary,opset", [("ort", 18), ("rotary23", 23)])
def test_rotary_columns_sinusoidal_pairs(pairs, rotary, opset):
    """``[sin | cos]`` (layout=half) and ``[sin_0, cos_0, ...]``: the sin caches negated, the
    interleaved op for the pairs, every position within the bound."""
    widths = (2, 3)
    limit = 31
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    g = Graph("t")
    out = sl.rotary_columns(g, "positions", W, widths, None, rotary, "p_", pairs=pairs)
    got = run_graph(g, [out], {"positions": p}, opset, ms=rotary == "ort")[0]
    c, s = exact(p, W)
    want = np.hstack([s, c]) if pairs == "sin-cos" else np.stack([s, c], -1).reshape(len(p), 6)
    assert np.abs(got - want).max() <= sl.bound(widths)
    rot = [n for n in g.nodes if n.op_type == "RotaryEmbedding"]
    assert [a.i for n in rot for a in n.attribute if a.name == "interleaved"] == [
        int(pairs == "sin-cos-interleaved")]


# -- graft ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lowering", sl.LOWERINGS)
def test_subgraph_is_prefixed_and_self_contained(lowering):
    nodes, inits, cos, sin = sl.subgraph(W, (2, 3), positions="ids", scale=SCALE,
                                         lowering=lowering, prefix="q_")
    assert (cos, sin) == ("q_cos", "q_sin")
    names = [i.name for i in inits] + [o for n in nodes for o in n.output]
    assert names and all(n.startswith("q_") for n in names) and len(set(names)) == len(names)
    assert {i for n in nodes for i in n.input} - set(names) == {"ids"}
    g = Graph("t")
    g.nodes, g.initializers = nodes, inits
    ids = np.arange(-31, 31, dtype=np.int64).reshape(2, 31)
    got_c, got_s = run_graph(g, [cos, sin], {"ids": ids})
    c, s = exact(ids.reshape(-1), W, SCALE)
    assert got_c.shape == got_s.shape == (2, 31, 3)
    b = sl.bound((2, 3), 1.25)
    assert np.abs(got_c.reshape(-1, 3) - c).max() <= b
    assert np.abs(got_s.reshape(-1, 3) - s).max() <= b


def test_cos_sin_default_prefix():
    g = Graph("t")
    cos, sin = sl.cos_sin(g, "positions", W, (3,))
    assert (cos, sin) == ("sliced_cos", "sliced_sin")
    assert all(i.name.startswith("sliced_") for i in g.initializers)
    p = np.arange(-7, 8, dtype=np.int64)
    got_c, got_s = run_graph(g, [cos, sin], {"positions": p})
    c, s = exact(p, W)
    assert np.abs(got_c - c).max() <= sl.bound((3,)) and np.abs(got_s - s).max() <= sl.bound((3,))


# -- the schemes' sliced graphs ------------------------------------------------------------


def make(scheme, max_len, d_model, params=None, **options):
    config = ExportConfig(scheme=resolve(scheme, max_len, d_model, None, params), mode="sliced",
                          **options)
    module = build(config.scheme)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    model = builder(scheme, "sliced")(config, module, manifest)
    return config, module, model, manifest


def run_model(model, **feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def definition(module, p):
    from edgepe.schemes.definition import Definition

    with torch.no_grad():
        return Definition(module).encode64(torch.from_numpy(p)).numpy()


def test_plan_of_counts_sinusoidal_offset():
    cfg = ExportConfig(scheme=resolve("sinusoidal", 64, 8, None, {"offset": "-3"}))
    assert sl.plan_of(cfg) == (4, 3)  # max_len 64 + |offset| 3 = 67: 7 bits
    cfg = ExportConfig(scheme=resolve("sinusoidal", 64, 8, None, {"offset": "1"}))
    assert sl.plan_of(cfg) == (4, 3)
    assert sl.plan_of(ExportConfig(scheme=resolve("sinusoidal", 64, 8, None, None))) == (6,)
    assert sl.plan_of(ExportConfig(scheme=resolve("rope", 64, 8, None, None))) == (6,)
    cfg = ExportConfig(scheme=resolve("rope", 64, 8, None, None), extra={"slices": "3,4"})
    assert sl.plan_of(cfg) == (3, 4)


@pytest.mark.parametrize("lowering", ["bitwise", "trunc"])
def test_record_writes_the_plan_bound_bytes_tolerance_and_limit(lowering):
    config = ExportConfig(scheme=resolve("rope", 4096, 16, None, None), mode="sliced",
                          lowering=lowering)
    manifest = base_manifest(config, output_shape(config), "float32")
    fields = set(manifest["positions"])
    sl._record(config, manifest, (7, 5), 1.0)
    assert set(manifest["positions"]) == fields  # the same fields, two of them set
    slots = 8
    extra = 2 * slots * 4 if lowering == "bitwise" else 0
    assert manifest["sliced"] == {
        "slices": [7, 5], "shifts": [5, 0], "bound": sl.bound((7, 5)),
        "table_bytes": 2 * (128 + 32) * slots * 4 + extra,
        "reference": "float64 definition (a cos/sin(pos w) in float64, stored float32 w and a)"}
    assert manifest["tolerance"] == {"rtol": 0.0, "atol": sl.tolerance((7, 5), 1.0)}
    assert manifest["positions"]["limit"] == 4095
    assert manifest["positions"]["out_of_range"] == "extrapolate"
    sl._record(config, manifest, (13, 13), 1.5, apply=True)
    assert manifest["positions"]["limit"] == 2**24  # rope's own limit: float32 positions
    assert manifest["tolerance"]["atol"] == sl.tolerance((13, 13), 1.5, apply=True)
    assert manifest["sliced"]["shifts"] == [13, 0] and manifest["sliced"]["bound"] == sl.bound(
        (13, 13), 1.5)


def test_record_takes_sinusoidal_offset_off_the_limit():
    config = ExportConfig(scheme=resolve("sinusoidal", 60, 8, None, {"offset": "-3"}),
                          mode="sliced")
    manifest = base_manifest(config, output_shape(config), "float32")
    sl._record(config, manifest, (2, 2, 2), 1.0)
    assert manifest["positions"]["limit"] == 63 - 3
    assert manifest["sliced"]["shifts"] == [4, 2, 0]
    sl._record(config, manifest, (1,), 1.0)
    assert manifest["positions"]["limit"] == 0  # never negative


@pytest.mark.parametrize("params", [None, {"layout": "half"}, {"offset": "3"},
                                    {"layout": "half", "offset": "-2"}])
@pytest.mark.parametrize("lowering", ["bitwise", "trunc"])
def test_sinusoidal_sliced_graph_within_the_bound(params, lowering):
    config, module, model, manifest = make("sinusoidal", 64, 6, params, lowering=lowering)
    widths = sl.plan_of(config)
    limit = manifest["positions"]["limit"]
    assert limit == (1 << sum(widths)) - 1 - abs(int((params or {}).get("offset", 0)))
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    out = run_model(model, positions=p)[0]
    assert out.shape == (len(p), 6)
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= sl.bound(widths)
    ops = {n.op_type for n in model.graph.node}
    assert not ops & TRIG
    if lowering != "bitwise":  # CoreML's lowering: no bitwise op, no Div
        assert not ops & {"BitwiseAnd", "BitShift", "Div"}, ops
    assert model.graph.name == "edgepe_sinusoidal_sliced"
    assert manifest["tolerance"]["atol"] == sl.tolerance(widths, 1.0)
    assert manifest["sliced"]["bound"] == sl.bound(widths)


@pytest.mark.parametrize("params", [None, {"rope_type": "yarn", "factor": 8.0,
                                           "original_max_position_embeddings": 16}])
@pytest.mark.parametrize("lowering", sl.LOWERINGS)
def test_rope_encode_sliced_graph_within_the_bound(params, lowering):
    config, module, model, manifest = make("rope", 128, 8, params, lowering=lowering,
                                           extra={"slices": "3,4"})
    a = float(module.scale.max()) if getattr(module, "scaled", False) else 1.0
    assert (a > 1) == bool(params)
    p = np.arange(-127, 128, dtype=np.int64)
    out = run_model(model, positions=p)[0]
    assert out.shape == (len(p), 8)
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= sl.bound((3, 4), a)
    assert manifest["tolerance"]["atol"] == sl.tolerance((3, 4), a)
    assert model.graph.name == "edgepe_rope_sliced"
    if lowering != "bitwise":
        assert not {n.op_type for n in model.graph.node} & {"BitwiseAnd", "BitShift", "Div"}


YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}


@pytest.mark.parametrize("params", [None, YARN])
@pytest.mark.parametrize("rotary,opset", [("ort", None), ("rotary23", 23)])
def test_rope_encode_fused_graph(rotary, opset, params):
    config, module, model, manifest = make("rope", 128, 8, params, opset=opset,
                                           extra={"slices": "3,4", "rope_lowering": rotary})
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("RotaryEmbedding") == 1
    p = np.arange(-127, 128, dtype=np.int64)
    out = run_model(model, positions=p)[0]
    a = float(module.scale.max()) if params else 1.0
    assert (a > 1) == bool(params)
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= sl.bound((3, 4), a)
    assert [o.name for o in model.graph.output] == ["pe"]
    dims = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["N", 8]
    domains = {o.domain: o.version for o in model.opset_import}
    assert ("com.microsoft" in domains) == (rotary == "ort")
    # one slice: nothing to fuse, the plain sliced graph
    _, _, one, _ = make("rope", 64, 8, opset=opset, extra={"rope_lowering": rotary})
    assert "RotaryEmbedding" not in {n.op_type for n in one.graph.node}
    assert "com.microsoft" not in {o.domain for o in one.opset_import}
    # ... so the trunc lowering takes it too (the refusal is for fusing after trunc slicing)
    _, module, one, _ = make("rope", 64, 8, opset=opset, lowering="trunc",
                             extra={"rope_lowering": rotary})
    p = np.arange(-63, 64, dtype=np.int64)
    out = run_model(one, positions=p)[0]
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= sl.bound((6,))
    assert not {n.op_type for n in one.graph.node} & {"BitwiseAnd", "Div"}


@pytest.mark.parametrize("rotary,opset", [("ort", None), ("rotary23", 23), ("onnx", None)])
def test_rope_encode_float16(rotary, opset):
    _, module, model, _ = make("rope", 128, 8, opset=opset, dtype="float16",
                               extra={"slices": "3,4", "rope_lowering": rotary})
    p = np.arange(-127, 128, dtype=np.int64)
    out = run_model(model, positions=p)[0]
    assert out.dtype == np.float16 and model.graph.output[0].type.tensor_type.elem_type == (
        TensorProto.FLOAT16)
    # float16 rounding of a value below 1: half a step, 2^-12
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= (
        sl.bound((3, 4)) + 2.0**-12)


@pytest.mark.parametrize("params", [None, {"layout": "half", "offset": 2}])
@pytest.mark.parametrize("rotary,opset", [("ort", None), ("rotary23", 23)])
def test_sinusoidal_fused_graph(rotary, opset, params):
    offset = (params or {}).get("offset", 0)
    config, module, model, manifest = make("sinusoidal", 128 - offset, 8, params, opset=opset,
                                           extra={"slices": "3,4", "rope_lowering": rotary})
    assert [n.op_type for n in model.graph.node].count("RotaryEmbedding") == 1
    p = np.arange(-127 - offset, 128 - offset, dtype=np.int64)
    out = run_model(model, positions=p)[0]
    assert np.abs(out.astype(np.float64) - definition(module, p)).max() <= sl.bound((3, 4))
    assert [o.name for o in model.graph.output] == ["pe"]
    assert ("com.microsoft" in {o.domain for o in model.opset_import}) == (rotary == "ort")
    assert manifest["sliced"]["slices"] == [3, 4]
    _, _, one, _ = make("sinusoidal", 64, 8, opset=opset, extra={"rope_lowering": rotary})
    assert "RotaryEmbedding" not in {n.op_type for n in one.graph.node}


def test_sinusoidal_fused_refusals():
    with pytest.raises(BadParameterError, match=r"^--rope-lowering 'rotary' is not one of: "
                       r"onnx, ort, rotary23$"):
        make("sinusoidal", 128, 8, extra={"rope_lowering": "rotary"})
    with pytest.raises(BadParameterError, match=r"^--rope-lowering ort fuses the sliced graph's "
                       r"angle additions after bitwise slicing; --lowering clip32 is for "
                       r"targets without RotaryEmbedding: drop one of them$"):
        make("sinusoidal", 128, 8, lowering="clip32", extra={"rope_lowering": "ort"})
    with pytest.raises(BadParameterError, match=r"^--rope-lowering rotary23 needs --opset 23 or "
                       r"later \(RotaryEmbedding\), got 18$"):
        make("sinusoidal", 128, 8, extra={"rope_lowering": "rotary23"})
    # the plain graph when nothing is asked
    _, _, plain, _ = make("sinusoidal", 128, 8, extra={"slices": "3,4"})
    assert "RotaryEmbedding" not in {n.op_type for n in plain.graph.node}


def test_rope_fused_refusals():
    with pytest.raises(BadParameterError, match=r"^--rope-lowering ort fuses the sliced graph's "
                       r"angle additions after bitwise slicing; --lowering trunc is for targets "
                       r"without RotaryEmbedding: drop one of them$"):
        make("rope", 128, 8, lowering="trunc", extra={"rope_lowering": "ort"})
    with pytest.raises(BadParameterError, match=r"^--rope-lowering rotary23 needs --opset 23 or "
                       r"later \(RotaryEmbedding\), got 22$"):
        make("rope", 128, 8, opset=22, extra={"rope_lowering": "rotary23"})


@pytest.mark.parametrize("params,lowering", [(None, "bitwise"),
                                             ({"layout": "half", "rotary_dim": 4}, "bitwise"),
                                             (YARN, "trunc")])
def test_rope_apply_sliced_graph(params, lowering):
    """The apply graph with the sliced cos/sin: the definition's rotation within the apply
    tolerance, and its rotary_dim slots only where the layout takes them."""
    from edgepe.schemes.definition import Definition

    config, module, model, manifest = make("rope", 64, 8, params, lowering=lowering,
                                           extra={"rope_graph": "apply", "slices": "3,3"})
    p = np.arange(64, dtype=np.int64)
    x = np.random.default_rng(0).uniform(-0.5, 0.5, (2, 64, 8)).astype(np.float32)
    y = run_model(model, x=x, positions=p)[0]
    with torch.no_grad():
        want = Definition(module).apply(torch.from_numpy(x), torch.from_numpy(p)).numpy()
    assert np.abs(y - want).max() <= manifest["tolerance"]["atol"]
    a = float(module.scale.max()) if params == YARN else 1.0
    assert manifest["tolerance"]["atol"] == sl.tolerance((3, 3), a, apply=True)
    ops = {n.op_type for n in model.graph.node}
    assert not ops & TRIG
    if lowering != "bitwise":
        assert not ops & {"BitwiseAnd", "BitShift", "Div"}


def test_frequencies():
    _, module, _, _ = make("rope", 64, 8, {"rope_type": "yarn", "factor": 8.0,
                                            "original_max_position_embeddings": 16})
    inv_freq, scale, a = sl._frequencies(module)
    assert inv_freq.dtype == scale.dtype == np.float32
    np.testing.assert_array_equal(inv_freq, module.inv_freq.numpy())
    np.testing.assert_array_equal(scale, module.scale.numpy())
    assert a == float(module.scale.max()) > 1
    _, plain, _, _ = make("rope", 64, 8)
    inv_freq, scale, a = sl._frequencies(plain)
    assert scale is None and a == 1.0 and inv_freq.dtype == np.float32


# -- the bit family ------------------------------------------------------------------------


def _binary_config(max_len, slices=None, **options):
    extra = {} if slices is None else {"slices": slices}
    return ExportConfig(scheme=resolve("binary", max_len, 6, None, None), mode="sliced",
                        extra=extra, **options)


def test_binary_plan():
    assert [_binary_config(n).scheme.n_bits for n in (511, 32, 64)] == [9, 6, 7]
    assert sl.binary_plan(_binary_config(511)) == (5, 4)
    assert sl.binary_plan(_binary_config(511, "3,3,3")) == (3, 3, 3)
    assert sl.binary_plan(_binary_config(32)) == (6,)  # 6 bits: one slice
    assert sl.binary_plan(_binary_config(64)) == (4, 3)
    with pytest.raises(BadParameterError, match=r"^--slices 4,4 must cover exactly the 9 bits "
                       r"of binary \(max_len 511\), got 8$"):
        sl.binary_plan(_binary_config(511, "4,4"))
    with pytest.raises(BadParameterError, match=r"^--slices 5,5 must cover exactly the 9 bits "):
        sl.binary_plan(_binary_config(511, "5,5"))


@pytest.mark.parametrize("slices", [None, "3,3,3", "9", "4,4,1"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_binary_sliced_graph_is_the_projection_of_the_bits(slices, dtype):
    config = _binary_config(511, slices, dtype=dtype)
    module = build(config.scheme)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    model = sl.binary(config, module, manifest)
    widths = sl.binary_plan(config)
    low = list(reversed(widths))
    assert manifest["sliced"]["slices"] == list(widths)
    assert manifest["sliced"]["shifts"] == np.cumsum([0, *low[:-1]]).tolist()[::-1]
    assert manifest["sliced"]["table_bytes"] == sum(1 << w for w in widths) * 6 * 4
    p = np.concatenate([np.arange(-600, 600), [2**40 + 5, -(2**50)]]).astype(np.int64)
    out = run_model(model, positions=p)[0]
    weights = module.projection.weight.detach().numpy().astype(np.float64).T  # [9, 6]
    bits = ((p.astype(np.uint64)[:, None] >> np.arange(9, dtype=np.uint64)) & 1)
    want = bits.astype(np.float64) @ weights
    # each table entry rounded once (2^-24 relative) and each Add of the n tables rounds once,
    # every value at most S = sum |w| over the bits of its column
    bound = (2 * len(widths) - 1) * 2.0**-24 * np.abs(weights).sum(axis=0).max()
    if dtype == "float16":  # and one float16 rounding: half a step of a value below 2^e
        assert out.dtype == np.float16
        bound += float(np.spacing(np.float16(np.abs(want).max()))) / 2
    assert np.abs(out.astype(np.float64) - want).max() <= bound
    assert [o.name for o in model.graph.output] == ["pe"]
    # one row per position: the output's first dimension is the positions' own symbol
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim
            ] == [model.graph.input[0].type.tensor_type.shape.dim[0].dim_param, 6] == ["N", 6]
    assert model.graph.name == "edgepe_binary_sliced"


def test_binary_sliced_refusals():
    module = build(_binary_config(511).scheme)
    for options, message in (
            ({"lowering": "trunc"}, r"^binary --mode sliced slices with BitShift/BitwiseAnd "
             r"\(--lowering bitwise\); other lowerings: --mode compute$"),
            ({"quantize": "int8"}, r"^binary --mode sliced --quantize int8 is a C header "
             r"\(--format c\); the int8 ONNX graph is --mode compute$")):
        config = _binary_config(511, **options)
        with pytest.raises(BadParameterError, match=message):
            sl.binary(config, module, base_manifest(config, output_shape(config), "float32"))


def test_defaults_are_bitwise_and_the_sliced_prefix():
    """``columns_graph``, ``rotary_columns`` and ``subgraph`` without the optional arguments:
    bitwise slicing (int64 indices, BitwiseAnd) and every name prefixed ``sliced_``."""
    g = Graph("t")
    out = sl.columns_graph(g, "positions", W, (2, 2), SLOTS, KINDS)
    assert "BitwiseAnd" in {n.op_type for n in g.nodes}
    assert next(i for i in g.initializers if i.name == "sliced_slots").data_type == (
        TensorProto.INT64)
    assert all(i.name.startswith("sliced_") for i in g.initializers)
    p = np.arange(-15, 16, dtype=np.int64)
    assert np.abs(run_graph(g, [out], {"positions": p})[0] - _columns_exact(p)).max() <= (
        sl.bound((2, 2)))
    g = Graph("t")
    sl.rotary_columns(g, "positions", W, (2, 2), None, "ort")
    assert g.initializers and all(i.name.startswith("sliced_") for i in g.initializers)
    nodes, inits, cos, sin = sl.subgraph(W, (2, 2))
    names = [i.name for i in inits] + [o for n in nodes for o in n.output]
    assert all(n.startswith("sliced_") for n in names) and (cos, sin) == ("sliced_cos",
                                                                          "sliced_sin")
    assert "BitwiseAnd" in {n.op_type for n in nodes}
