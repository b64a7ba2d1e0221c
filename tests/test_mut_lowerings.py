"""Fast focused tests of ``edgepe.graphs.lowerings`` (issue 33's mutation testing): the
``arith32``, ``float`` and ``trunc`` column builders called directly on a tiny graph, run on
onnxruntime, against numpy's int64 bits.

The expected bits share no code with the builders: column ``j`` is bit ``shifts[j]`` of
``p = pos mod 2^wrap[j]`` (``p ^ (p >> 1)`` for Gray), 0 where ``shifts[j] >= wrap[j]``, written
with numpy's int64 ``mod``, ``>>`` and ``&``. Positions: the edges of each lowering's accepted
range (``LOWERING_LIMITS``: ``2^31 - 1`` for arith32, ``2^24`` for float and trunc), 0, +-1,
values on both sides of ``2^wrap``, and seeded random ones over the whole range. Widths: the
largest each lowering takes (30, 24, 23) and small ones, with columns past the width.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgepe.contract.config import LOWERING_LIMITS
from edgepe.contract.errors import BadParameterError
from edgepe.graphs._common import Graph
from edgepe.graphs.lowerings import (
    MAX_ARITH32_BITS,
    MAX_FLOAT_BITS,
    MAX_TRUNC_BITS,
    arith32_columns,
    check_width,
    float_columns,
    trunc_columns,
)

BUILDERS = {"arith32": arith32_columns, "float": float_columns, "trunc": trunc_columns}
# The output element type each builder's docstring promises.
OUT_TYPE = {"arith32": TensorProto.INT32, "float": TensorProto.FLOAT, "trunc": TensorProto.INT32}
# The ops each lowering may use (module docstring): no bitwise op, no Floor/Mod for trunc.
OPS = {"arith32": {"Cast", "Mod", "Div", "Add"},
       "float": {"Cast", "Mul", "Floor", "Sub", "Abs"},
       "trunc": {"Cast", "Mul", "Sub", "Add"}}


def _positions(limit: int, wrap: int, seed: int = 0) -> np.ndarray:
    """int64 positions within ``+-limit``: edges, the neighbourhood of ``+-2^wrap``, random."""
    m = 1 << wrap
    edges = [0, 1, -1, 2, -2, 3, m - 1, m, m + 1, -m, -m + 1, -m - 1, 2 * m - 1, 2 * m + 1,
             m // 2, m // 2 - 1, -(m // 2), limit, -limit, limit - 1, -limit + 1,
             limit // 2, -(limit // 2) - 1]
    rng = np.random.default_rng(seed)
    pos = np.concatenate([np.asarray(edges, np.int64),
                          rng.integers(-limit, limit, 3000, endpoint=True, dtype=np.int64),
                          rng.integers(-4 * m, 4 * m, 500, endpoint=True, dtype=np.int64)])
    return pos[np.abs(pos) <= limit]


def expected(x: np.ndarray, shifts, wrap, gray: bool) -> np.ndarray:
    """Bit ``shifts[j]`` of ``x[:, j] mod 2^wrap[j]`` (Gray: of ``p ^ (p >> 1)``), numpy int64."""
    shifts = np.asarray(shifts, np.int64)
    wrap = np.broadcast_to(np.asarray(wrap, np.int64), shifts.shape)
    p = np.mod(x, np.left_shift(np.int64(1), wrap))
    if gray:
        p = p ^ (p >> 1)
    return np.where(shifts < wrap, (p >> np.minimum(shifts, 62)) & 1, 0)


def build(lowering: str, columns: int, shifts, wrap, gray: bool) -> onnx.ModelProto:
    """A graph ``x [N, columns] int64 -> y [N, W]`` made of the builder's nodes alone."""
    g = Graph("lowering")
    y = BUILDERS[lowering](g, "x", np.asarray(shifts, np.int64), np.asarray(wrap, np.int64),
                           gray)
    model = helper.make_model(
        helper.make_graph(g.nodes, "lowering",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", columns])],
                          [helper.make_tensor_value_info(y, OUT_TYPE[lowering],
                                                         ["N", len(shifts)])],
                          g.initializers),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)  # types and shapes inferred and checked
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def check(lowering: str, x: np.ndarray, shifts, wrap, gray: bool) -> np.ndarray:
    model = build(lowering, x.shape[1], shifts, wrap, gray)
    got = run(model, x)
    want = expected(x, shifts, wrap, gray)
    assert got.shape == want.shape
    assert got.dtype == (np.float32 if lowering == "float" else np.int32)
    # exact: every value is the integer 0 or 1 (float's too)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    np.testing.assert_array_equal(got, want.astype(got.dtype))
    return got


WIDEST = {"arith32": MAX_ARITH32_BITS, "float": MAX_FLOAT_BITS, "trunc": MAX_TRUNC_BITS}


@pytest.mark.parametrize("gray", [False, True], ids=["plain", "gray"])
@pytest.mark.parametrize("lowering", ["arith32", "float", "trunc"])
def test_every_column_of_the_widest_width_and_past_it(lowering, gray):
    """One width, the largest the lowering takes, every bit 0..w-1 and two columns past it."""
    w = WIDEST[lowering]
    x = _positions(LOWERING_LIMITS[lowering], w)[:, None]
    shifts = np.arange(w + 2)
    bits = check(lowering, x, shifts, w, gray)
    assert bits[:, w:].max() == 0 and bits[:, : w].max() == 1  # masked, and not all zero


@pytest.mark.parametrize("gray", [False, True], ids=["plain", "gray"])
@pytest.mark.parametrize("w", [1, 2, 3, 5])
@pytest.mark.parametrize("lowering", ["arith32", "float", "trunc"])
def test_small_widths_wrap_every_position(lowering, w, gray):
    """Small widths: positions far past ``2^w`` (both signs) wrap; columns up to w + 3."""
    x = _positions(LOWERING_LIMITS[lowering], w, seed=w)[:, None]
    check(lowering, x, np.arange(w + 4), w, gray)


@pytest.mark.parametrize("gray", [False, True], ids=["plain", "gray"])
@pytest.mark.parametrize("lowering", ["arith32", "float"])
def test_one_width_per_column_on_its_own_coordinate(lowering, gray):
    """``x [N, W]`` with a width per column (hierarchical's levels: shifts out of order, some
    past their column's width), each column its own coordinate."""
    widths = np.asarray([3, 3, 3, 3, 1, WIDEST[lowering], WIDEST[lowering], 6, 6, 6, 6])
    shifts = np.asarray([0, 2, 1, 3, 0, 0, WIDEST[lowering] - 1, 5, 4, 6, 2])
    limit = LOWERING_LIMITS[lowering]
    rng = np.random.default_rng(7)
    x = rng.integers(-limit, limit, (2000, len(widths)), endpoint=True, dtype=np.int64)
    x[:4] = [[limit], [-limit], [0], [-1]]
    check(lowering, x, shifts, widths, gray)


def test_arith32_keeps_every_position_the_manifest_accepts():
    """``|pos| <= 2^31 - 1``: the int32 Cast is exact there, so even width 30's top bit and the
    bits of ``-(2^31 - 1)`` (two's complement wrap) are right."""
    limit = LOWERING_LIMITS["arith32"]
    assert limit == 2**31 - 1
    x = np.asarray([limit, -limit, limit - 2**30, -(2**30), 2**30, 2**30 - 1], np.int64)[:, None]
    got = check("arith32", x, np.arange(31), 30, False)
    assert got[0, 29] == 1 and got[1, :30].tolist() == [1] + [0] * 29  # -(2^31-1) = 1 mod 2^30


@pytest.mark.parametrize("lowering", ["arith32", "float", "trunc"])
def test_only_the_lowerings_ops_and_one_cast_per_target_type(lowering):
    """No bitwise op and no int64 arithmetic: the int64 input is Cast once to int32 (arith32),
    to float32 (float), or once to each (trunc); every initializer is int32 or float32."""
    model = build(lowering, 1, np.arange(6), 4, True)
    ops = [n.op_type for n in model.graph.node]
    assert set(ops) <= OPS[lowering], set(ops) - OPS[lowering]
    from_input = sorted(helper.get_attribute_value(n.attribute[0]) for n in model.graph.node
                        if n.op_type == "Cast" and n.input[0] == "x")
    assert from_input == {"arith32": [TensorProto.INT32], "float": [TensorProto.FLOAT],
                          "trunc": sorted([TensorProto.INT32, TensorProto.FLOAT])}[lowering]
    assert {t.data_type for t in model.graph.initializer} <= {TensorProto.INT32,
                                                              TensorProto.FLOAT}
    names = [t.name for t in model.graph.initializer]
    assert len(names) == len(set(names))


def test_trunc_refuses_two_widths():
    """trunc's ``+ 2^w`` repair takes one modulus: a width per column is refused."""
    g = Graph("t")
    with pytest.raises(BadParameterError) as err:
        trunc_columns(g, "x", np.arange(3), np.asarray([3, 3, 2]), False)
    assert str(err.value) == "--lowering trunc takes one bit width for every column"
    trunc_columns(g, "x", np.arange(3), np.asarray([3, 3, 3]), False)  # one width: accepted


@pytest.mark.parametrize("lowering,widest,why", [
    ("arith32", 30, "2^30 is int32's largest power of two"),
    ("float", 24, "float32 is exact for integers up to 2^24 only"),
    ("trunc", 23, "float32 is exact for integers up to 2^24 only")])
def test_check_width_refuses_one_past_the_widest_and_says_why(lowering, widest, why):
    check_width(lowering, np.asarray([1, widest, 2]))  # the widest itself is accepted
    with pytest.raises(BadParameterError) as err:
        check_width(lowering, np.asarray([1, widest + 1, 2]))
    assert str(err.value) == (
        f"--lowering {lowering} supports bit widths up to {widest} ({why}); this configuration "
        f"needs {widest + 1} (max_len up to 2^{widest} - 1): use --lowering arith or bitwise, "
        "or --mode table")
    # each builder checks before it builds anything
    g = Graph("t")
    with pytest.raises(BadParameterError, match=f"needs {widest + 1} "):
        BUILDERS[lowering](g, "x", np.arange(3), np.asarray(widest + 1), False)
    assert not g.nodes
