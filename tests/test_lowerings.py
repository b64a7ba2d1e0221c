"""The ``arith32`` and ``float`` lowerings of the bit family (issue 17): parity with the reference
for every position they accept, exactness at the edge of float32's integers, refusals past it.

The expected bits come from two places that share no code with the graphs: the scheme's torch
module (``reference``) and a plain numpy formula (``((pos mod 2^n) >> k) & 1``).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _export_helpers import (
    BIT_FAMILY,
    assert_parity,
    feeds_for,
    graph,
    odd_width,
    reference,
    run_ort,
)

from edgepe.contract.config import LOWERING_LIMITS
from edgepe.contract.errors import BadParameterError

NEW = ["arith32", "float"]
EDGE = 2**24


def _within(feeds: dict, limit: int) -> dict:
    """The feeds' positions with every coordinate within ``+-limit`` (what the lowering accepts)."""
    pos = feeds["positions"]
    keep = np.abs(pos).reshape(len(pos), -1).max(axis=1) <= limit
    return {**feeds, "positions": pos[keep]}


def _bits(pos: np.ndarray, n: int, width: int) -> np.ndarray:
    """Bit ``k`` of ``pos mod 2^n`` (0 for ``k >= n``), as float32, from numpy's int64: the
    residue's little-endian bytes unpacked (20x faster than a shift per bit, which was most of
    the slow ±2^24 sweeps' time)."""
    r = np.ascontiguousarray(np.mod(pos, np.int64(1) << n), dtype="<i8")  # in [0, 2^n)
    bits = np.unpackbits(r.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    bits = np.pad(bits, ((0, 0), (0, max(0, width - 64))))
    return bits[:, :width].astype(np.float32)


@pytest.mark.parametrize("width", ["default", "odd"])
@pytest.mark.parametrize("max_len", [1, 255, 1000])
@pytest.mark.parametrize("lowering", NEW)
@pytest.mark.parametrize("scheme", BIT_FAMILY)
def test_new_lowerings_match_the_reference(scheme, lowering, max_len, width):
    """Every position 0..L-1 and the probe (negatives, 2^n wraps, 2^24 edges, random ones), all
    that the lowering accepts, exactly (or within the scheme's float tolerance)."""
    d, params = odd_width(scheme, max_len) if width == "odd" else (None, {})
    config, module, model = graph(scheme, max_len, d, params=params, randomise=True,
                                  lowering=lowering)
    feeds = _within(feeds_for(config), LOWERING_LIMITS[lowering])
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize("lowering", NEW)
def test_new_lowerings_use_no_bitwise_op_and_no_int64_arithmetic(lowering):
    _, _, model = graph("gray", 300, lowering=lowering)
    m = onnx.load_from_string(model)
    ops = {n.op_type for n in m.graph.node}
    assert not ops & {"BitShift", "BitwiseAnd", "BitwiseXor", "BitwiseOr", "BitwiseNot"}
    int64_inits = [t.name for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT64]
    # the arithmetic's constants are int32 or float32; Unsqueeze's axes are int64 by the spec
    assert int64_inits == ["last_axis"]
    first = m.graph.node[1]  # Unsqueeze, then the one Cast from the int64 input
    assert first.op_type == "Cast"


def test_float_lowering_is_exact_at_the_edge_of_float32_integers():
    """n = 24 (max_len 2^24 - 1, the largest allowed): positions around 0, 2^23 and +-2^24,
    and 200,000 random ones in [-2^24, 2^24], against numpy's int64 bits and the module."""
    length = EDGE - 1
    config, module, model = graph("binary-bits", length, lowering="float")
    edges = [0, 1, -1, 2**23 - 1, 2**23, 2**23 + 1, -(2**23), EDGE - 2, EDGE - 1, EDGE,
             -EDGE, -EDGE + 1, -EDGE + 2]
    rng = np.random.default_rng(24)
    pos = np.concatenate([np.asarray(edges, np.int64),
                          rng.integers(-EDGE, EDGE, 200_000, endpoint=True, dtype=np.int64)])
    got = run_ort(model, {"positions": pos})
    np.testing.assert_array_equal(got, _bits(pos, 24, 24))
    assert_parity(config, got, reference(config, module, {"positions": pos}))


@pytest.mark.parametrize("scheme,params", [("gray", {}), ("hierarchical", {"widths": "24,3"}),
                                           ("binary-signed", {})])
def test_float_lowering_edges_for_gray_multi_index_and_signed(scheme, params):
    length = EDGE - 1 if scheme != "hierarchical" else 8
    config, module, model = graph(scheme, length, params=params, lowering="float")
    edges = np.asarray([0, 1, -1, EDGE - 1, EDGE, -EDGE, -EDGE + 1, 2**23, -(2**23) - 1],
                       np.int64)
    pos = edges if config.scheme.arity is None else np.stack([edges, edges[::-1]], axis=1)
    feeds = {"positions": pos}
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


@pytest.mark.parametrize(
    "lowering,scheme,max_len,params,needle",
    [("float", "binary-bits", EDGE, None, "up to 24"),
     ("float", "hierarchical", 8, {"widths": "25,2"}, "needs 25"),
     ("arith32", "gray", 2**30, None, "needs 31"),
     ("arith32", "binary-signed", 2**31, None, "up to 30")])
def test_widths_past_the_exact_range_are_refused(lowering, scheme, max_len, params, needle):
    # The parameters are read, never changed: pytest shares them between runs in one process
    # (mutmut runs the tests twice in its process, then in forks of it).
    with pytest.raises(BadParameterError, match=needle):
        graph(scheme, max_len, params=params, lowering=lowering)


@pytest.mark.parametrize("lowering,limit", [("float", EDGE), ("arith32", 2**31 - 1),
                                            ("bitwise", None), ("arith", None)])
def test_the_manifest_limits_positions_to_what_the_lowering_computes_exactly(
        tmp_path, lowering, limit):
    """``positions.limit`` records the accepted range; ``edgepe.load`` refuses past it."""
    import edgepe
    from edgepe.contract.config import ExportConfig
    from edgepe.export import export
    from edgepe.schemes import resolve

    out = tmp_path / f"gray-{lowering}.onnx"
    result = export(ExportConfig(resolve("gray", 64), lowering=lowering, out=out))
    assert result.manifest["positions"]["limit"] == limit
    session = edgepe.load(out)
    if limit is None:
        assert session.encode(np.asarray([2**62])).shape == (1, 7)
        return
    assert session.encode(np.asarray([limit, -limit])).shape == (2, 7)
    with pytest.raises(Exception, match="within"):
        session.encode(np.asarray([limit + 1]))


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["binary-bits", "gray"])
def test_float_lowering_sweeps_every_position_in_plus_minus_2_24(scheme):
    """Exhaustive: all 2^25 + 1 positions in [-2^24, 2^24] at n = 24, in chunks of 2^21, against
    numpy's int64 bits (Gray: of ``p ^ (p >> 1)``)."""
    _, _, model = graph(scheme, EDGE - 1, lowering="float")
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    step = 2**21
    for start in range(-EDGE, EDGE + 1, step):
        pos = np.arange(start, min(start + step, EDGE + 1), dtype=np.int64)
        want_of = np.mod(pos, np.int64(1) << 24)
        if scheme == "gray":
            want_of = want_of ^ (want_of >> 1)
        got, want = session.run(None, {"positions": pos})[0], _bits(want_of, 24, 24)
        if not np.array_equal(got, want):  # the fast check; numpy's report where it fails
            np.testing.assert_array_equal(got, want, err_msg=f"chunk {start}")


@pytest.mark.parametrize("lowering", NEW)
@pytest.mark.parametrize("scheme", ["binary", "fourier-binary"])
def test_int8_projection_graphs_take_the_new_lowerings_bit_for_bit(scheme, lowering):
    """The int8 projection reads the same 0/1 bits whatever the lowering: outputs identical to
    the bitwise int8 graph's over every position the lowering accepts."""
    base_config, _, base = graph(scheme, 300, quantize="int8")
    _, _, model = graph(scheme, 300, quantize="int8", lowering=lowering)
    feeds = _within(feeds_for(base_config), LOWERING_LIMITS[lowering])
    np.testing.assert_array_equal(run_ort(model, feeds), run_ort(base, feeds))
