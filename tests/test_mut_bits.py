"""Fast focused tests of ``edgepe.graphs.bits`` (issue 33's mutation testing): the mask form's
helpers called directly, ``bit_columns`` on a tiny graph, and the bit family's builders on tiny
configurations, run on onnxruntime.

Expected values come from code that shares nothing with the graphs: numpy's int64 ``mod``,
``>>`` and ``&`` for bits, IEEE facts for the masks' powers of two (``float32(2^k) * 2^-k == 1``,
``2^-126`` is float32's smallest normal), and the schemes' torch modules (``module.encode``) for
the encodings, within ``spec.tolerance`` (exact for the exact schemes).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from edgepe.contract.config import ExportConfig, base_manifest
from edgepe.contract.errors import BadParameterError
from edgepe.formats.onnx import output_shape
from edgepe.graphs import bits as B
from edgepe.graphs._common import Graph
from edgepe.schemes import build, resolve

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TINY = 2.0**-126  # float32's smallest normal


def _int64_positions(seed: int = 0) -> np.ndarray:
    """Edges of int64 and of 2^32, 2^62, and random int64 of every magnitude, both signs."""
    edges = [0, 1, -1, 2, -2, 7, 255, 256, -256, 2**31 - 1, 2**31, -(2**31), 2**32 - 1, 2**32,
             2**32 + 5, 2**40 + 7, -(2**40) - 3, 2**61, 2**62 - 1, 2**62, 2**62 + 1, -(2**62),
             -(2**62) - 1, INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1]
    rng = np.random.default_rng(seed)
    random = rng.integers(INT64_MIN, INT64_MAX, 600, dtype=np.int64, endpoint=True)
    random >>= rng.integers(0, 63, 600)
    return np.concatenate([np.asarray(edges, np.int64), random])


def _expected_bits(x: np.ndarray, shifts, wrap: int, gray: bool) -> np.ndarray:
    """Bit ``shifts[j]`` of ``x mod 2^wrap`` (of its Gray code), 0 past the width; numpy uint64
    arithmetic (two's complement: the low bits of a negative int64 are those of x mod 2^64)."""
    u = x.astype(np.uint64)[:, None]
    p = u & np.uint64((1 << wrap) - 1) if wrap < 64 else u
    if gray:
        p = p ^ (p >> np.uint64(1))
    shifts = np.asarray(shifts)
    bit = (p >> np.minimum(shifts, 63).astype(np.uint64)) & np.uint64(1)
    return np.where(shifts < wrap, bit, 0).astype(np.int64)


def _run(model: onnx.ModelProto, **feeds) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


# --- the mask form's helpers -------------------------------------------------------------------

def test_bit_masks_are_the_powers_of_two_in_the_width_type():
    """``2^k`` as int32 (width 32) or int64 (the default width): the top bit is the type's
    minimum, the two's complement pattern of ``2^(width-1)``."""
    small = B.bit_masks(5, 32)
    assert small.dtype == np.int32 and small.tolist() == [1, 2, 4, 8, 16]
    full32 = B.bit_masks(32, 32)
    assert full32.dtype == np.int32 and full32[31] == np.iinfo(np.int32).min
    assert full32[:31].tolist() == [1 << k for k in range(31)]
    default = B.bit_masks(40)
    assert default.dtype == np.int64 and default.tolist() == [1 << k for k in range(40)]
    full64 = B.bit_masks(64, 64)
    assert full64.dtype == np.int64 and full64[63] == INT64_MIN
    assert B.bit_masks(3).dtype == np.int64  # the default width is 64, whatever n


def test_mask_inverse_undoes_each_masks_float_exactly():
    """``float32(mask_k) * inverse_k == 1`` for every bit, the sign bit's negative mask too."""
    for n, width in ((32, 32), (5, 32), (32, 64), (40, 64), (64, 64)):
        inverse = B.mask_inverse(n, width)
        assert inverse.dtype == np.float32 and inverse.shape == (n,)
        masks = B.bit_masks(n, width).astype(np.float32)
        np.testing.assert_array_equal(masks * inverse, np.ones(n, np.float32))
        np.testing.assert_array_equal(np.abs(inverse), np.ldexp(1.0, -np.arange(n)))
    assert B.mask_inverse(32, 32)[31] == -(2.0**-31)
    assert B.mask_inverse(32, 32)[30] == 2.0**-30
    assert (B.mask_inverse(32, 64) > 0).all()  # bit 31 of an int64 mask is positive
    assert B.mask_inverse(64, 64)[63] == -(2.0**-63) and B.mask_inverse(64, 64)[62] > 0


def test_mask_width_is_32_up_to_32_bits_then_64():
    assert [B.mask_width(n) for n in (1, 2, 31, 32)] == [32] * 4
    assert [B.mask_width(n) for n in (33, 40, 63, 64)] == [64] * 4


def test_mask_weights_takes_as_many_bits_as_the_width_has():
    assert B._mask_weights(np.ones((32, 2), np.float32), 32) is not None
    assert B._mask_weights(np.ones((33, 2), np.float32), 32) is None
    assert B._mask_weights(np.ones((64, 2), np.float32)) is not None  # default width 64
    assert B._mask_weights(np.ones((65, 2), np.float32)) is None


def test_mask_weights_scales_each_row_exactly_and_keeps_float32():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(10, 4)).astype(np.float32)
    scaled = B._mask_weights(w, 32)
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled, w * np.ldexp(1.0, -np.arange(10))[:, None])


def test_mask_weights_accepts_the_smallest_normal_and_refuses_subnormals():
    """A scaled value of exactly ``2^-126`` is normal (accepted); ``2^-128`` is subnormal
    (refused), although it is exact in float32 and scales back exactly: the rule, not a rounding,
    refuses it."""
    w = np.ones((4, 2), np.float32)
    w[0, 1] = TINY  # row 0: times 2^0
    assert B._mask_weights(w, 32) is not None
    w[3, 0] = 2.0**-125  # row 3: times 2^-3 -> 2^-128
    sub = np.float32(2.0**-128)
    assert sub != 0 and sub * np.float32(8) == np.float32(2.0**-125)  # exact both ways
    assert B._mask_weights(w, 32) is None
    w[3, 0] = np.inf  # a non-finite weight scales and unscales to itself
    assert B._mask_weights(w, 32) is not None


def _config(scheme: str, max_len: int, d_model=None, params=None, **options) -> ExportConfig:
    return ExportConfig(scheme=resolve(scheme, max_len, d_model, None, params), **options)


def test_mask_scaling_is_for_the_bitwise_lowering_and_exact_weights_only():
    w = np.ones((8, 3), np.float32)
    np.testing.assert_array_equal(B.mask_scaling(_config("binary", 255), w), B.mask_inverse(8, 32))
    assert B.mask_scaling(_config("binary", 255, lowering="arith"), w) is None
    w[5, 0] = 2.0**-122  # times 2^-5: subnormal
    assert B.mask_scaling(_config("binary", 255), w) is None


# --- bit_columns ---------------------------------------------------------------------------------

def _columns_model(lowering: str, shifts, wrap: int, gray: bool) -> onnx.ModelProto:
    g = Graph("columns")
    config = _config("gray", 64, lowering=lowering)
    y = B.bit_columns(g, config, "x", shifts, wrap, gray)
    out_type = {"bitwise": TensorProto.UINT64, "arith": TensorProto.INT64}[lowering]
    model = helper.make_model(
        helper.make_graph(g.nodes, "columns",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, ["N", 1])],
                          [helper.make_tensor_value_info(y, out_type, ["N", len(shifts)])],
                          g.initializers),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("gray", [False, True], ids=["plain", "gray"])
@pytest.mark.parametrize("wrap", [1, 3, 62])
@pytest.mark.parametrize("lowering", ["bitwise", "arith"])
def test_bit_columns_read_every_bit_of_every_int64(lowering, wrap, gray):
    """Every int64 (extremes included) wraps at ``2^wrap``; columns past the width read 0; the
    arith lowering's widest width (62) is accepted."""
    x = _int64_positions(wrap)
    shifts = list(range(wrap + 2))
    got = _run(_columns_model(lowering, shifts, wrap, gray), x=x[:, None])
    np.testing.assert_array_equal(got.astype(np.int64), _expected_bits(x, shifts, wrap, gray))


@pytest.mark.parametrize("gray", [False, True], ids=["plain", "gray"])
def test_bitwise_columns_take_63_bits(gray):
    x = _int64_positions(63)
    shifts = list(range(64))
    got = _run(_columns_model("bitwise", shifts, 63, gray), x=x[:, None])
    np.testing.assert_array_equal(got.astype(np.int64), _expected_bits(x, shifts, 63, gray))


def test_arith_columns_refuse_63_bits_with_the_way_out():
    with pytest.raises(BadParameterError) as err:
        B.bit_columns(Graph("t"), _config("gray", 64, lowering="arith"), "x", [0, 1], [3, 63])
    assert str(err.value) == ("--lowering arith supports bit widths up to 62; this "
                              "configuration needs 63: use --lowering bitwise")


# --- the builders ------------------------------------------------------------------------------

def make(scheme, max_len, d_model=None, params=None, seed=0, **options):
    config = _config(scheme, max_len, d_model, params, **options)
    module = build(config.scheme, seed=seed)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    fn = getattr(B, scheme.replace("-", "_"))
    model = fn(config, module, manifest)
    onnx.checker.check_model(model, full_check=True)
    return config, module, model


def _positions(config, extra=()) -> np.ndarray:
    s = config.scheme
    rng = np.random.default_rng(s.max_len)
    values = np.concatenate([np.arange(min(s.max_len, 300)),
                             np.asarray([-1, -2, s.max_len, 2**s.n_bits + 3, *extra], np.int64),
                             rng.integers(-(2**20), 2**20, 200, dtype=np.int64)])
    if s.arity is not None:
        values = np.stack([values, values[::-1]], axis=1)
    return values.astype(np.int64)


def check_encode(config, module, model, pos) -> np.ndarray:
    """The graph's output against ``module.encode`` (``spec.tolerance``; exact for exact
    schemes), in the config's dtype."""
    got = _run(model, positions=pos)
    with torch.no_grad():
        want = module.encode(torch.from_numpy(pos)).numpy()
    assert got.dtype == np.dtype(config.dtype)
    assert got.shape == want.shape
    rtol, atol = config.scheme.spec.tolerance
    if config.dtype == "float16":
        want = want.astype(np.float16)
        np.testing.assert_array_equal(got, want)  # one rounding of equal float32 values
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


BITWISE = {"BitShift", "BitwiseAnd", "BitwiseXor", "BitwiseOr", "BitwiseNot"}


@pytest.mark.parametrize("lowering", ["arith32", "float", "trunc"])
def test_gray_narrow_lowerings_read_the_gray_code(lowering):
    """Positions within the lowering's limit; odd positions are where Gray and plain bits
    differ."""
    config, module, model = make("gray", 1000, lowering=lowering)
    check_encode(config, module, model, _positions(config, [2**24, -(2**24), 2**24 - 1]))


def test_gray_arith_lowering_without_a_bitwise_op():
    config, module, model = make("gray", 1000, lowering="arith")
    assert not set(_ops(model)) & BITWISE
    check_encode(config, module, model, _positions(config, [INT64_MIN, INT64_MAX]))


@pytest.mark.parametrize("scheme", ["binary", "fourier-binary"])
def test_projection_under_the_arith_lowering_is_the_shift_form_without_a_bitwise_op(scheme):
    """``--lowering arith`` makes the projection schemes take the shift form (0/1 bits, MatMul
    with the unscaled weights), no bitwise op."""
    config, module, model = make(scheme, 300, lowering="arith")
    ops = _ops(model)
    assert "MatMul" in ops and "Gemm" not in ops and not set(ops) & BITWISE
    check_encode(config, module, model, _positions(config, [INT64_MIN, INT64_MAX]))


def test_projection_weights_without_an_exact_scaling_take_the_shift_form():
    """A weight whose row scaling would be subnormal: the bitwise lowering falls back to the
    shift form (BitShift, MatMul), same outputs as the module."""
    config = _config("binary", 300)
    module = build(config.scheme, seed=0)
    with torch.no_grad():
        module.projection.weight[0, 7] = 2.0**-120  # row 7 of W^T: times 2^-7 -> 2^-127
    manifest = base_manifest(config, output_shape(config), config.dtype)
    model = B.binary(config, module, manifest)
    ops = _ops(model)
    assert "BitShift" in ops and "MatMul" in ops and "Gemm" not in ops
    got = check_encode(config, module, model, _positions(config))
    assert (got[:, 0] != 0).any()


def test_fourier_binary_past_32_bits_ands_int64_positions_with_int64_masks():
    """n > 32: no Cast to int32 in front (it would drop bits 32 and up), int64 masks."""
    config, module, model = make("fourier-binary", 2**40)
    n = config.scheme.n_bits
    assert n > 32
    assert model.graph.node[0].op_type == "BitwiseAnd"  # of the int64 input itself
    masks = next(t for t in model.graph.initializer if t.name == "bit_masks")
    assert masks.data_type == TensorProto.INT64
    pos = _positions(config, [2**32, 2**39 + 2**33, -(2**35), 2**40 - 1, INT64_MIN, INT64_MAX])
    check_encode(config, module, model, pos)


@pytest.mark.parametrize("scheme", ["binary", "binary-smooth", "binary-signed", "binary-bits",
                                    "gray", "binary-gated"])
def test_float16_output_is_the_float32_value_rounded_once(scheme):
    config, module, model = make(scheme, 255, dtype="float16")
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    check_encode(config, module, model, _positions(config))


@pytest.mark.parametrize("max_len", [1, 2, 3])
@pytest.mark.parametrize("scheme", ["binary-gated", "hybrid-int-binary"])
def test_the_linear_part_divides_by_max_len_minus_1_or_by_1(scheme, max_len):
    """``pos / (L - 1)``, ``L = 1`` dividing by 1: L = 2 divides by exactly 1."""
    config, module, model = make(scheme, max_len, seed=5)
    check_encode(config, module, model, _positions(config))


@pytest.mark.parametrize("d_model", [1, 2, 3, 5])
def test_hybrid_keeps_d_model_over_2_linear_columns(d_model):
    """``d // 2`` linear columns (one for d = 2 and 3), the bits in the rest; d = 1 has no
    linear column, and its graph computes none (no Div, Expand or Concat)."""
    config, module, model = make("hybrid-int-binary", 2, d_model=d_model)
    got = check_encode(config, module, model, _positions(config))
    assert got.shape[1] == d_model
    linear = {"Div", "Expand", "Concat"} & set(_ops(model))
    assert linear == (set() if d_model == 1 else {"Div", "Expand", "Concat"})


@pytest.mark.parametrize("lowering", ["arith32", "float", "trunc"])
@pytest.mark.parametrize("scheme,params", [("binary-2d", None),
                                           ("hierarchical", {"widths": "5,5"})])
def test_multi_index_schemes_gather_with_int32_indices_under_the_narrow_lowerings(
        scheme, params, lowering):
    """The int32/float lowerings keep int64 out of the graph but for the input: the Gather's
    coordinate indices are int32, no initializer is int64 (equal widths: trunc takes one)."""
    config, module, model = make(scheme, 64, params=params, lowering=lowering)
    coordinate = next(t for t in model.graph.initializer if t.name == "coordinate")
    assert coordinate.data_type == TensorProto.INT32
    assert TensorProto.INT64 not in {t.data_type for t in model.graph.initializer}
    check_encode(config, module, model, _positions(config))


@pytest.mark.parametrize("scheme,params", [("binary-2d", None), ("hierarchical", {"widths": "5,3"}),
                                           ("binary-multilevel", None)])
def test_multi_index_and_multilevel_schemes_bitwise(scheme, params):
    config, module, model = make(scheme, 64, params=params)
    check_encode(config, module, model, _positions(config, [INT64_MIN, INT64_MAX]))
