"""graft's proof helpers at known values (edgepe.graft.prove; issue 33: mutmut survivors): the
manifest numbers it trusts, the PE tolerance, the size caps at their edges, the difference of two
outputs, the sizes of a transformers export's symbolic axes, its feeds and its proof cases, and
a failing run's one line. The graft tests (tests/test_graft*.py) prove whole models; these pin
each helper's arithmetic and every refusal's message.
"""

from __future__ import annotations

import importlib
import math
import time
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgepe.contract.errors import ArtifactError, BadParameterError, ParityError
from edgepe.graft.report import OutputCheck

prove = importlib.import_module("edgepe.graft.prove")  # edgepe.graft.prove is also a function


# ---- numbers from the manifest ------------------------------------------------------------------


@pytest.mark.parametrize(("value", "want"), [
    (0.25, 0.25), (3, 3.0), (0, 0.0), ([0.5, 2, 1.0], 2.0), ([7], 7.0)])
def test_finite_takes_the_largest_non_negative_number(value, want):
    got = prove._finite(value, "quant.bound")
    assert got == want and isinstance(got, float)


@pytest.mark.parametrize("value", [
    -1e-9, math.inf, math.nan, True, "0.1", None, [], [0.1, -0.1], [0.1, "x"], {"a": 1},
    [0.1, True]])
def test_finite_refuses_anything_else_in_one_line(value):
    with pytest.raises(ArtifactError) as exc:
        prove._finite(value, "quant.bound")
    assert str(exc.value) == (f"the artifact's manifest quant.bound must be non-negative numbers, "
                              f"got {value!r}")


def test_pe_tolerance_is_atol_plus_rtol_times_the_largest_pe_plus_the_int8_bound():
    values = np.array([[0.5, -4.0], [2.0, 1.0]])
    manifest = {"tolerance": {"atol": 0.125, "rtol": 0.5}, "quant": {"bound": 0.25}}
    assert prove.pe_tolerance(manifest, values, quantised=False) == 0.125 + 0.5 * 4.0
    assert prove.pe_tolerance(manifest, values, quantised=True) == 0.125 + 2.0 + 0.25
    # an older manifest records the bound as max_abs_err; bound wins when both are there
    old = {**manifest, "quant": {"max_abs_err": 1.0}}
    assert prove.pe_tolerance(old, values, quantised=True) == 0.125 + 2.0 + 1.0
    both = {**manifest, "quant": {"bound": 0.25, "max_abs_err": 1.0}}
    assert prove.pe_tolerance(both, values, quantised=True) == 0.125 + 2.0 + 0.25
    # missing terms are 0; no rows: max|pe| is 0
    assert prove.pe_tolerance({"tolerance": {"rtol": 0.5}}, values, quantised=True) == 2.0
    assert prove.pe_tolerance({"tolerance": {"atol": 0.125}}, np.zeros((0, 2)), False) == 0.125
    assert prove.pe_tolerance({"quant": "no"}, values, quantised=True) == 0.0


def test_pe_tolerance_refuses_a_tolerance_that_is_not_an_object():
    with pytest.raises(ArtifactError) as exc:
        prove.pe_tolerance({"tolerance": [0.1]}, np.ones(2), quantised=False)
    assert str(exc.value) == "the artifact's manifest tolerance must be an object, got [0.1]"
    with pytest.raises(ArtifactError, match=r"manifest tolerance\.rtol must be non-negative"):
        prove.pe_tolerance({"tolerance": {"rtol": -1}}, np.ones(2), quantised=False)
    with pytest.raises(ArtifactError, match=r"manifest tolerance\.atol must be non-negative"):
        prove.pe_tolerance({"tolerance": {"atol": -1}}, np.ones(2), quantised=False)
    with pytest.raises(ArtifactError, match=r"manifest quant\.bound must be non-negative numbers, "
                                            r"got None"):
        prove.pe_tolerance({"quant": {}}, np.ones(2), quantised=True)


# ---- size caps ----------------------------------------------------------------------------------


def test_the_caps():
    assert prove.PROOF_TABLE_BYTES == 256 * 2**20 and prove.PROOF_MAX_LENGTH == 1 << 16


@pytest.mark.parametrize(("lengths", "max_len", "bad"), [
    ([1, 37], 37, None), ([38], 37, 38), ([0], 37, 0), ([-1], 37, -1),
    ([1 << 16], 1 << 20, None), ([(1 << 16) + 1], 1 << 20, (1 << 16) + 1), (None, 5, None),
    ([3, 6, 2], 5, 6)])
def test_lengths_are_1_to_the_smaller_of_max_len_and_the_cap(lengths, max_len, bad):
    if bad is None:
        prove.check_lengths(lengths, max_len)
        return
    with pytest.raises(BadParameterError) as exc:
        prove.check_lengths(lengths, max_len)
    cap = min(1 << 16, max_len)
    assert str(exc.value) == (f"--lengths {bad}: each length must be 1 .. {cap} (the PE's "
                              f"max_len {max_len}, graft's cap 65536)")


def test_the_proof_table_may_be_256_mib():
    rows = 256 * 2**20 // (4 * 64)  # 1 Mi rows of 64 float32: exactly 256 MiB
    prove.check_proof_size({"max_len": rows, "d_model": 64}, [4])
    with pytest.raises(BadParameterError) as exc:
        prove.check_proof_size({"max_len": rows + 1, "d_model": 64}, None)
    assert str(exc.value) == (
        f"max_len {rows + 1} x width 64: the proof's float32 PE table would be "
        f"{(rows + 1) * 256} bytes, over graft's cap of {256 * 2**20}; graft a shorter artifact, "
        "or pass --no-check")
    # a bias artifact's width is its heads; neither given: 1
    prove.check_proof_size({"max_len": 64 * 2**20, "heads": 1}, None)
    with pytest.raises(BadParameterError, match=r"x width 2: "):
        prove.check_proof_size({"max_len": 64 * 2**20, "heads": 2}, None)
    with pytest.raises(BadParameterError, match=r"x width 1: "):
        prove.check_proof_size({"max_len": 64 * 2**20 + 1, "d_model": None}, None)
    with pytest.raises(BadParameterError, match=r"--lengths 9: each length must be 1 \.\. 8"):
        prove.check_proof_size({"max_len": 8, "d_model": 4}, [9])


# ---- outputs ------------------------------------------------------------------------------------


def test_max_diff():
    assert prove._max_diff([1.0, 2.5], [1.5, -0.5]) == 3.0
    assert prove._max_diff(np.float32(1.0), np.float32(1.0)) == 0.0
    assert prove._max_diff(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    assert prove._max_diff(np.zeros(3), np.zeros(4)) == math.inf
    # float64 arithmetic: int8 outputs do not wrap around
    assert prove._max_diff(np.array([127], np.int8), np.array([-128], np.int8)) == 255.0


def _identity_model(dims, elem=TensorProto.FLOAT, name="x"):
    x = helper.make_tensor_value_info(name, elem, dims)
    y = helper.make_tensor_value_info("y", elem, dims)
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", [name], ["y"])],
                                                "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _identity_session(dims, elem=TensorProto.FLOAT, name="x"):
    return ort.InferenceSession(_identity_model(dims, elem, name).SerializeToString(),
                                providers=["CPUExecutionProvider"])


def test_a_run_that_fails_is_one_line_naming_the_length():
    session = _identity_session([2])
    feeds = {"x": np.zeros(3, np.float32)}
    with pytest.raises(BadParameterError) as exc:
        prove._run(session, ["y"], feeds, 3, "original")
    message = str(exc.value)
    assert message.startswith("the original model does not run at sequence length 3 (")
    assert message.endswith("); give lengths it takes with --lengths, or --no-check")
    assert "\n" not in message
    with pytest.raises(ParityError) as exc:
        prove._run(session, ["y"], feeds, 3, "grafted")
    assert str(exc.value).startswith("the grafted model fails at sequence length 3: ")
    assert prove._run(session, ["y"], {"x": np.ones(2, np.float32)}, 2, "grafted")[0].tolist() \
        == [1.0, 1.0]


def test_a_failing_runs_line_keeps_the_last_300_characters_or_the_type():
    class Failing:
        def __init__(self, exc):
            self.exc = exc

        def run(self, names, feeds, options=None):
            raise self.exc

    long = RuntimeError("x" * 100 + "y" * 300 + "\nsecond line")
    with pytest.raises(ParityError) as exc:
        prove._run(Failing(long), [], {}, 5, "grafted")
    assert str(exc.value) == "the grafted model fails at sequence length 5: " + "y" * 300
    with pytest.raises(ParityError) as exc:
        prove._run(Failing(KeyError()), [], {}, 5, "grafted")
    assert str(exc.value) == "the grafted model fails at sequence length 5: KeyError"
    with pytest.raises(BadParameterError) as exc:
        prove._run(Failing(ValueError("  \n")), [], {}, 5, "original")
    assert "(ValueError)" in str(exc.value)


def test_table_pe_gathers_rows_of_a_float32_table():
    table = np.arange(12, dtype=np.float64).reshape(4, 3) / 8
    model = prove.table_pe(table, 17)
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import] == [17]
    assert model.ir_version == helper.find_min_ir_version_for(model.opset_import, True)
    out = prove._session(model).run(None, {"positions": np.array([3, 0, 3])})[0]
    assert out.dtype == np.float32 and out.tolist() == table[[3, 0, 3]].tolist()
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 3]
    (dim,) = model.graph.input[0].type.tensor_type.shape.dim
    assert dim.dim_param == "N"  # the same N: onnx's shape inference ties the two
    assert prove._pe_values(model, 4).tolist() == table.astype(np.float32).tolist()


# ---- transformers exports -----------------------------------------------------------------------


def _inputs(*specs):
    return [SimpleNamespace(name=n, shape=list(s), type=t) for n, s, t in specs]


def test_dim_sizes_by_the_inputs_roles():
    inputs = _inputs(("input_ids", ["b", "s"], "tensor(int64)"),
                     ("attention_mask", ["b", "total"], "tensor(int64)"),
                     ("past_key_values.0.key", ["b", 4, "p", 8], "tensor(float)"),
                     ("position_ids", ["b", "s"], "tensor(int64)"))
    assert prove._dim_sizes(inputs, 2, 3, 5) == {"b": 2, "p": 5, "s": 3, "total": 8}
    # the first role to name an axis sizes it: past's axis 2 before input_ids' axis 1
    shared = _inputs(("past_key_values.0.key", ["b", 4, "n", 8], "tensor(float)"),
                     ("input_ids", ["b", "n"], "tensor(int64)"))
    assert prove._dim_sizes(shared, 2, 3, 5) == {"b": 2, "n": 5}
    mask_first = _inputs(("attention_mask", ["b", "n"], "tensor(int64)"),
                         ("inputs_embeds", ["b", "n", 16], "tensor(float)"))
    assert prove._dim_sizes(mask_first, 2, 3, 5) == {"b": 2, "n": 3}
    # other ranks than the roles' are not read; fixed sizes are not names
    odd = _inputs(("past_x", ["b", "p"], "tensor(float)"), ("input_ids", ["s"], "tensor(int64)"),
                  ("attention_mask", [1, "t", "u"], "tensor(int64)"),
                  ("input_ids_2", ["q", "r"], "tensor(int64)"))
    assert prove._dim_sizes(odd, 2, 3, 5) == {}
    assert prove._dim_sizes(_inputs(("input_ids", [2, "s"], "tensor(int64)")), 9, 3, 0) == {
        "s": 3}


def _session(*specs):
    return SimpleNamespace(get_inputs=lambda: _inputs(*specs))


def test_hf_feeds_mask_positions_and_dtypes():
    session = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                       ("attention_mask", ["b", "t"], "tensor(int64)"),
                       ("position_ids", ["b", "s"], "tensor(int32)"),
                       ("embeds", ["b", "s", 4], "tensor(float)"),
                       ("flags", ["b"], "tensor(bool)"),
                       ("other", ["z"], "tensor(double)"))
    feeds = prove.hf_feeds(session, 5, 0, 2, 64, np.random.default_rng(0))
    assert feeds["attention_mask"].tolist() == [[1] * 5, [0, 0, 1, 1, 1]]
    # cumsum - 1, 1 at padding (transformers' rule)
    assert feeds["position_ids"].tolist() == [[0, 1, 2, 3, 4], [1, 1, 0, 1, 2]]
    assert feeds["position_ids"].dtype == np.int32
    assert feeds["input_ids"].shape == (2, 5) and set(np.unique(feeds["input_ids"])) <= {0, 1}
    assert feeds["input_ids"].dtype == np.int64
    assert feeds["embeds"].shape == (2, 5, 4) and feeds["embeds"].dtype == np.float32
    assert not set(np.unique(feeds["embeds"])) <= {0.0, 1.0}  # standard normal
    assert feeds["flags"].tolist() == [True, True] and feeds["flags"].dtype == bool
    many = prove.hf_feeds(session, 64, 0, 0, 64, np.random.default_rng(0))
    assert set(np.unique(many["input_ids"])) == {0, 1}
    assert feeds["other"].shape == (5,) and feeds["other"].dtype == np.float64  # unknown: seq


def test_hf_feeds_with_a_cache_shift_and_no_padding():
    session = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                       ("attention_mask", ["b", "t"], "tensor(int64)"),
                       ("position_ids", ["b", "s"], "tensor(int64)"),
                       ("past_key_values.0.key", ["b", 2, "p", 4], "tensor(float)"))
    feeds = prove.hf_feeds(session, 2, 3, 1, 64, np.random.default_rng(0))
    assert feeds["attention_mask"].tolist() == [[1] * 5, [1] * 5]  # no padding with a cache
    assert feeds["position_ids"].tolist() == [[3, 4], [3, 4]]
    assert feeds["past_key_values.0.key"].shape == (2, 2, 3, 4)
    shifted = prove.hf_feeds(session, 2, 0, 0, 64, np.random.default_rng(0), shift=60)
    assert shifted["position_ids"].tolist() == [[60, 61], [60, 61]]
    # a mask or position input of another shape than the roles give is fed like any input
    odd = _session(("attention_mask", ["b", "s", "s"], "tensor(int64)"))
    assert set(np.unique(prove.hf_feeds(odd, 3, 0, 1, 64, np.random.default_rng(0))[
        "attention_mask"])) <= {0, 1}


def test_proof_cases():
    plain = _session(("input_ids", ["b", "s"], "tensor(int64)"))
    assert prove.proof_cases(plain, 64) == [(1, 0, 0, 0), (7, 0, 0, 0), (16, 0, 0, 0)]
    assert prove.proof_cases(plain, 5) == [(1, 0, 0, 0), (5, 0, 0, 0)]
    assert prove.proof_cases(plain, 64, [3, 9]) == [(3, 0, 0, 0), (9, 0, 0, 0)]
    masked = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                      ("attention_mask", ["b", "t"], "tensor(int64)"))
    assert prove.proof_cases(masked, 64)[-1] == (16, 0, 3, 0)
    assert prove.proof_cases(masked, 64, [2])[-1] == (2, 0, 1, 0)  # pad min(3, seq - 1)
    cached = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                      ("past_key_values.0.key", ["b", 2, "p", 4], "tensor(float)"))
    assert prove.proof_cases(cached, 64)[-2:] == [(3, 5, 0, 0), (1, 63, 0, 0)]
    assert prove.proof_cases(cached, 7)[-2:] == [(3, 4, 0, 0), (1, 6, 0, 0)]
    # with position_ids the last step keeps 8 cached tokens, shifted to end at 63 (issue 41)
    cached_positioned = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                                 ("position_ids", ["b", "s"], "tensor(int64)"),
                                 ("past_key_values.0.key", ["b", 2, "p", 4], "tensor(float)"))
    assert prove.proof_cases(cached_positioned, 64)[-2:] == [(3, 5, 0, 0), (1, 8, 0, 55)]
    assert prove.proof_cases(cached_positioned, 9)[-1] == (1, 8, 0, 0)
    assert prove.proof_cases(cached_positioned, 7)[-1] == (1, 6, 0, 0)
    # steps after at least one cached token: none of 3 tokens below max_len 4 (past -1 or 0)
    assert prove.proof_cases(cached, 2) == [(1, 0, 0, 0), (2, 0, 0, 0), (1, 1, 0, 0)]
    assert prove.proof_cases(cached, 3) == [(1, 0, 0, 0), (3, 0, 0, 0), (1, 2, 0, 0)]
    assert prove.proof_cases(cached, 4) == [(1, 0, 0, 0), (4, 0, 0, 0), (3, 1, 0, 0),
                                            (1, 3, 0, 0)]
    assert prove.proof_cases(cached, 1) == [(1, 0, 0, 0)]
    positioned = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                          ("position_ids", ["b", "s"], "tensor(int64)"))
    assert prove.proof_cases(positioned, 64)[-1] == (16, 0, 0, 48)  # ends at position 63
    assert prove.proof_cases(positioned, 16) == [(1, 0, 0, 0), (7, 0, 0, 0), (16, 0, 0, 0)]
    # cases past max_len are dropped
    assert prove.proof_cases(plain, 8, [8, 9]) == [(8, 0, 0, 0)]


def test_dim_sizes_from_one_role_alone():
    for name in ("input_ids", "inputs_embeds", "position_ids"):
        assert prove._dim_sizes(_inputs((name, ["b", "s"], "tensor(int64)")), 2, 3, 5) == {
            "b": 2, "s": 3}, name
    assert prove._dim_sizes(_inputs(("past_key_values.0.key", ["b", 4, "p", 8],
                                     "tensor(float)")), 2, 3, 5) == {"b": 2, "p": 5}
    assert prove._dim_sizes(_inputs(("attention_mask", ["b", "t"], "tensor(int64)")),
                            2, 3, 5) == {"b": 2, "t": 8}
    # a cross-attention cache (Optimum's decoder with past): the encoder's past + seq keys,
    # its mask with it; the decoder's own cache its past
    seq2seq = _inputs(("past_key_values.0.encoder.key", ["b", 4, "e", 8], "tensor(float)"),
                      ("past_key_values.0.decoder.key", ["b", 4, "p", 8], "tensor(float)"),
                      ("encoder_attention_mask", ["b", "e"], "tensor(int64)"),
                      ("input_ids", ["b", "s"], "tensor(int64)"))
    assert prove._dim_sizes(seq2seq, 2, 3, 5) == {"b": 2, "e": 8, "p": 5, "s": 3}
    # "encoder" as a part of the name, not within one
    assert prove._dim_sizes(_inputs(("past_encoders.key", ["b", 4, "p", 8], "tensor(float)")),
                            2, 3, 5) == {"b": 2, "p": 5}


def test_multimodal_position_ids_are_three_different_streams_in_range():
    """Qwen2-VL's position_ids [3, B, S] (issue 40): its batch and length are the last two axes,
    and hf_feeds fills it with three_streams of the positions it gives a [B, S] one."""
    multimodal = _inputs(("position_ids", [3, "b", "s"], "tensor(int64)"))
    assert prove._dim_sizes(multimodal, 2, 3, 5) == {"b": 2, "s": 3}
    # another rank-3 position input is read as [B, S, ..] still
    assert prove._dim_sizes(_inputs(("position_ids", ["b", "s", 3], "tensor(int64)")),
                            2, 3, 5) == {"b": 2, "s": 3}
    positions = np.asarray([[10, 11], [0, 5]])
    streams = prove.three_streams(positions, 12)
    assert streams.tolist() == [[[10, 11], [0, 5]], [[2, 3], [4, 9]], [[6, 7], [8, 1]]]
    assert prove.three_streams(np.arange(3), 3).tolist() == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    # the shift is max_len // 3, whole positions: 3 for 10
    assert prove.three_streams(np.asarray([9]), 10).tolist() == [[9], [2], [5]]
    assert prove.three_streams(np.asarray([9]), 10).dtype == np.int64
    session = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                       ("attention_mask", ["b", "t"], "tensor(int64)"),
                       ("position_ids", [3, "b", "s"], "tensor(int32)"))
    feeds = prove.hf_feeds(session, 5, 0, 2, 64, np.random.default_rng(0), shift=40)
    text = [[40, 41, 42, 43, 44], [41, 41, 40, 41, 42]]  # cumsum - 1, 1 at padding, shifted
    assert feeds["position_ids"].tolist() == prove.three_streams(np.asarray(text), 64).tolist()
    assert feeds["position_ids"].tolist()[1][0] == [61, 62, 63, 0, 1]  # + 21, wrapped at 64
    assert feeds["position_ids"].dtype == np.int32


def _grafted(name="positions", kind="input", new_input=False):
    return SimpleNamespace(positions=SimpleNamespace(name=name, kind=kind), new_input=new_input)


def test_feeds_for_a_proof_run():
    session = _session(("positions", ["B", "S"], "tensor(int32)"),
                       ("x", ["B", "S", 4], "tensor(float)"),
                       ("mask", ["B", "S"], "tensor(bool)"),
                       ("ids", [3, "S"], "tensor(int64)"))
    feeds = prove._feeds(session, 7, "S", _grafted(), 50, np.random.default_rng(0))
    ids = feeds["positions"]
    assert ids.shape == (2, 7) and ids.dtype == np.int32  # batch 2, the sequence the length
    assert ids.min() >= 0 and ids.max() == 49 and ids.flat[-1] == 49  # reaches max_len - 1
    assert feeds["x"].shape == (2, 7, 4) and feeds["x"].dtype == np.float32
    assert feeds["x"].std() > 0.5  # standard normal, not zeros
    assert feeds["mask"].dtype == bool and feeds["mask"].shape == (2, 7)
    assert feeds["mask"].any() and not feeds["mask"].all()  # random, about half true
    assert feeds["ids"].shape == (3, 7) and feeds["ids"].dtype == np.int64
    assert set(np.unique(feeds["ids"])) == {0, 1}
    # the sequence axis not known by name: every free axis gets the length
    unknown = prove._feeds(session, 7, None, _grafted(), 50, np.random.default_rng(0))
    assert unknown["x"].shape == (7, 7, 4)
    # positions graft made itself (the original gathered 0 .. S-1): arange
    new = prove._feeds(_session(("positions", ["S"], "tensor(int64)"),
                                ("x", ["S"], "tensor(float)")), 5, "S",
                       _grafted(new_input=True), 50, np.random.default_rng(0))
    assert new["positions"].tolist() == [0, 1, 2, 3, 4] and new["x"].shape == (5,)
    # positions that are not an input of the model: fed like any integer input
    inner = prove._feeds(_session(("positions", ["S"], "tensor(int64)")), 5, "S",
                         _grafted(kind="node"), 50, np.random.default_rng(0))
    assert set(np.unique(inner["positions"])) <= {0, 1}
    # the first positions are drawn from 0 on, not 1: over many draws 0 appears
    many = prove._feeds(_session(("positions", ["S"], "tensor(int64)")), 4000, "S",
                        _grafted(), 3, np.random.default_rng(0))
    assert set(np.unique(many["positions"])) == {0, 1, 2}


# ---- prove: tiny models grafted by graft_model, proved on onnxruntime ---------------------------

L, D = 8, 4
# rows of k/7 - 1/2 (k = 0..7 cycling): every row holds -1/2 (even rows) or +1/2 (odd rows)
T = ((np.arange(L * D).reshape(L, D) % 8) - 3.5) / 7


def _manifest(atol=0.0, rtol=0.0, quant=None, max_len=L):
    return {"kind": "pe", "scheme": "sinusoidal", "d_model": D, "max_len": max_len,
            "tolerance": {"atol": atol, "rtol": rtol}, "quant": quant}


def _model(nodes, inputs, outputs, inits=()):
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _squared(old=T, pos_dims=("B", "S"), batch_two=True):
    """``y = (rows of old at pos + z)^2`` (z: zeros [2, 1, 1] when ``batch_two``, so the model
    runs at batch 1 or 2 only); the PE to replace is ``pe_old``."""
    inits = [onnx.numpy_helper.from_array(old.astype(np.float32), "old_table"),
             onnx.numpy_helper.from_array(np.zeros((2 if batch_two else 1, 1, 1), np.float32),
                                          "z")]
    return _model([helper.make_node("Gather", ["old_table", "pos"], ["pe_old"]),
                   helper.make_node("Add", ["pe_old", "z"], ["h"]),
                   helper.make_node("Mul", ["h", "h"], ["y"])],
                  [_vi("pos", TensorProto.INT64, list(pos_dims))],
                  [_vi("y", TensorProto.FLOAT, [*pos_dims, D])], inits)


def _graft(original, at="pe_old", positions="pos", add=False, manifest=None):
    from edgepe.graft.splice import graft_model

    pe = prove.table_pe(T, 18)
    return graft_model(original, pe, manifest or _manifest(), at, positions, add), pe


ULP_QUARTER = 64 * 2.0**-25  # 64 ulp of 0.25 (float32), the squared PE's largest value


def test_prove_replacing_a_pe_by_the_same_rows_holds_it_to_64_ulp():
    original = _squared()
    grafted, pe = _graft(original)
    lengths, checks = prove.prove(original, grafted, pe, _manifest())
    # max_len 8: 2, max_len // 2 and max_len (positions reach max_len - 1); then positions
    # past the rows (the original's Gather refuses them) and negative ones (it wraps them, and
    # so does the grafted table: compared)
    assert lengths == [2, 4, 8, "positions 8, 9, 19 (the original refuses them), "
                                "positions -1, -2, -8"]
    (check,) = checks
    assert (check.name, check.max_abs_err) == ("y", 0.0)
    assert check.tolerance == ULP_QUARTER  # no PE tolerance: only the float term
    assert prove.prove(original, grafted, pe, _manifest(max_len=3))[0][:3] == [1, 2, 3]
    assert prove.prove(original, grafted, pe, _manifest(), lengths=(5, 3))[0][:2] == [5, 3]
    assert prove.prove(original, grafted, pe, _manifest(), trials=1)[1][0].tolerance \
        == ULP_QUARTER


def test_prove_tolerance_is_twice_the_gain_times_the_pe_tolerance():
    """y = pe^2 moves by 2|pe| d + d^2 when the PE moves by d: the gain measured with
    d = 1e-3 max(1, max|pe|) = 1e-3 is 2 * 1/2 + 1e-3 (where d has the sign of pe = +-1/2)."""
    original = _squared()
    grafted, pe = _graft(original)
    tol = _manifest(atol=0.01, rtol=0.02)  # eps = 0.01 + 0.02 * 1/2 = 0.02
    (check,) = prove.prove(original, grafted, pe, tol)[1]
    gain = (check.tolerance - ULP_QUARTER) / (2 * 0.02)
    assert gain == pytest.approx(1.001, abs=1e-4)
    # int8: the proven bound adds to eps when the original's own PE is the reference
    quant = {**tol, "quant": {"bound": 0.25}}
    (check,) = prove.prove(original, grafted, pe, quant)[1]
    assert (check.tolerance - ULP_QUARTER) / (2 * 0.27) == pytest.approx(1.001, abs=1e-4)
    # a single trial measures the same gain
    (check,) = prove.prove(original, grafted, pe, tol, trials=1)[1]
    assert (check.tolerance - ULP_QUARTER) / (2 * 0.02) == pytest.approx(1.001, abs=1e-4)


def test_prove_gain_with_a_pe_larger_than_one():
    """max|pe| = 2: the probe is 1e-3 * 2, so y = pe^2 moves by (2 * 2 + 2e-3) per unit."""
    from edgepe.graft.splice import graft_model

    big = T * 4
    original = _squared(big)
    pe = prove.table_pe(big, 18)
    grafted = graft_model(original, pe, _manifest(), "pe_old", "pos")
    (check,) = prove.prove(original, grafted, pe, _manifest(atol=0.01))[1]
    ulps = 64 * 2.0**-21  # 64 ulp of 4
    assert (check.tolerance - ulps) / 0.02 == pytest.approx(4.002, abs=1e-3)


def test_prove_measures_the_difference_at_the_last_position():
    old = T.copy()
    old[L - 1, 3] = 0.25  # the original's row max_len - 1 differs: 1/2 there in the PE
    original = _squared(old)
    grafted, pe = _graft(original)
    (check,) = prove.prove(original, grafted, pe, _manifest(atol=0.01))[1]
    assert check.max_abs_err == 0.25 - 0.0625 and not check.passed


def test_prove_an_added_pe_is_held_to_its_own_rows_without_the_int8_bound():
    """``add`` at a model input: the original has no PE, the reference is the original with
    the artifact's rows put in (err 0); the int8 bound does not count then."""
    original = _model([helper.make_node("Mul", ["x", "x"], ["y"])],
                      [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                       _vi("pos", TensorProto.INT64, ["B", "S"])],
                      [_vi("y", TensorProto.FLOAT, ["B", "S", D])])
    grafted, pe = _graft(original, at="x", add=True)
    assert grafted.add and grafted.from_input
    plain = prove.prove(original, grafted, pe, _manifest(atol=0.01))[1][0]
    quant = prove.prove(original, grafted, pe, _manifest(atol=0.01, quant={"bound": 0.5}))[1][0]
    assert plain.max_abs_err == 0.0 and plain.tolerance == quant.tolerance
    assert plain.tolerance > 2 * 0.01  # the gain (2 |x + pe|, x standard normal) is over 1


def test_prove_a_pe_put_at_a_model_input():
    """``--at`` a model input without ``add``: that input is gone, the PE makes it."""
    original = _model([helper.make_node("Mul", ["x", "x"], ["y"])],
                      [_vi("x", TensorProto.FLOAT, ["B", "S", D]),
                       _vi("pos", TensorProto.INT64, ["B", "S"])],
                      [_vi("y", TensorProto.FLOAT, ["B", "S", D])])
    grafted, pe = _graft(original, at="x")
    assert grafted.from_input and not grafted.add
    (check,) = prove.prove(original, grafted, pe, _manifest(quant={"bound": 0.5}))[1]
    assert check.max_abs_err == 0.0 and check.tolerance == ULP_QUARTER


def test_prove_new_positions_input_is_fed_0_to_s_minus_1():
    """The original gathers rows 0 .. S-1 itself (Range of x's sequence axis); graft makes a
    new positions input, fed arange (the original does not take it)."""
    one = onnx.numpy_helper.from_array(np.asarray(1, np.int64), "one")
    zero = onnx.numpy_helper.from_array(np.asarray(0, np.int64), "zero")
    axis = onnx.numpy_helper.from_array(np.asarray([0], np.int64), "axis")
    old = onnx.numpy_helper.from_array(T.astype(np.float32), "old_table")
    original = _model([helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
                       helper.make_node("Squeeze", ["s1", "axis"], ["s"]),
                       helper.make_node("Range", ["zero", "s", "one"], ["r"]),
                       helper.make_node("Gather", ["old_table", "r"], ["pe_old"]),
                       helper.make_node("Add", ["x", "pe_old"], ["y"])],
                      [_vi("x", TensorProto.FLOAT, ["B", "S", D])],
                      [_vi("y", TensorProto.FLOAT, ["B", "S", D])], [one, zero, axis, old])
    grafted, pe = _graft(original, positions="p")
    assert grafted.new_input
    (check,) = prove.prove(original, grafted, pe, _manifest())[1]
    assert check.max_abs_err == 0.0


def test_prove_a_static_sequence_axis_gives_its_one_length():
    for seq in (1, 3):
        original = _squared(pos_dims=(2, seq))
        grafted, pe = _graft(original)
        assert grafted.seq_dim == seq
        lengths, (check,) = prove.prove(original, grafted, pe, _manifest(), lengths=[5])
        assert lengths[0] == seq and check.max_abs_err == 0.0


def test_prove_refuses_lengths_and_sizes_before_running():
    original = _squared()
    grafted, pe = _graft(original)
    with pytest.raises(BadParameterError, match=r"^--lengths 9: each length must be 1 \.\. 8 "):
        prove.prove(original, grafted, pe, _manifest(), lengths=[9])
    with pytest.raises(BadParameterError, match=r"^max_len 67108864 x width 4: "):
        prove.prove(original, grafted, pe, _manifest(max_len=1 << 26))


def test_prove_names_the_model_that_fails_at_a_length():
    """The original taking sequence length 4 only is bad input; the grafted failing where the
    original runs is a failed proof."""
    original = _squared()
    fixed = onnx.numpy_helper.from_array(np.zeros((1, 4, 1), np.float32), "four")
    stuck = onnx.ModelProto.FromString(original.SerializeToString())
    stuck.graph.initializer.append(fixed)
    stuck.graph.node[-1].output[0] = "y4"
    stuck.graph.node.append(helper.make_node("Add", ["y4", "four"], ["y"]))
    grafted, pe = _graft(original)
    bad, _ = _graft(stuck)
    with pytest.raises(BadParameterError, match=r"^the original model does not run at sequence "
                                                r"length 2 \("):
        prove.prove(stuck, bad, pe, _manifest())
    import dataclasses

    broken = dataclasses.replace(grafted, model=bad.model)
    with pytest.raises(ParityError, match=r"^the grafted model fails at sequence length 2: "):
        prove.prove(original, broken, pe, _manifest())


def test_a_failing_session_logs_nothing(capfd):
    session = prove._session(_identity_model([2]))
    with pytest.raises(ParityError):
        prove._run(session, ["y"], {"x": np.zeros(3, np.float32)}, 3, "grafted")
    assert capfd.readouterr().err == ""


# ---- proof_manifest: the tolerance and bound come from this edgepe's rebuild --------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """binary at 16 x 8 (float32, int8) and binary-gated from a checkpoint (float32, int8)."""
    import torch

    from edgepe import api
    from edgepe.schemes import build, resolve

    folder = tmp_path_factory.mktemp("proof_manifest")
    ckpt = folder / "gated.pt"
    torch.save(build(resolve("binary-gated", 16, d_model=8), seed=3).state_dict(), ckpt)
    made = {"ckpt": ckpt}
    for name, scheme, options in (("float", "binary", {}), ("int8", "binary", {"quantize": "int8"}),
                                  ("gated", "binary-gated", {"checkpoint": ckpt}),
                                  ("gated_int8", "binary-gated", {"checkpoint": ckpt,
                                                                  "quantize": "int8"})):
        made[name] = api.export(api.make_config(scheme, 16, d_model=8, out=folder / f"{name}.onnx",
                                                **options), verify=False)[0].path
    return made


def _loosened(path):
    from edgepe.contract import manifest as manifest_io

    manifest = manifest_io.read(path)
    return manifest, {**manifest, "tolerance": {"atol": 1.0, "rtol": 1.0},
                      "quant": None if manifest["quant"] is None else {"bound": 9.0}}


def test_proof_manifest_takes_the_tolerance_from_the_rebuild(artifacts):
    for name in ("float", "int8"):
        true, loose = _loosened(artifacts[name])
        held = prove.proof_manifest(artifacts[name], loose)
        assert held == {**loose, "tolerance": true["tolerance"], "quant": true["quant"]}, name
    assert held["quant"]["bound"] < 0.01


def test_proof_manifest_of_a_checkpoint_artifact(artifacts):
    """Without its checkpoint, a float artifact is held to the registry's tolerance (rtol 2.4e-7,
    atol 1e-7 for binary_gated); an int8 one needs it (its bound comes from the weights), and a
    wrong checkpoint is refused."""
    from edgepe.contract.errors import CheckpointError

    true, loose = _loosened(artifacts["gated"])
    assert prove.proof_manifest(artifacts["gated"], loose) == {
        **loose, "tolerance": {"rtol": 2.4e-7, "atol": 1e-7}, "quant": None}
    assert prove.proof_manifest(artifacts["gated"], loose, artifacts["ckpt"])["tolerance"] == \
        true["tolerance"]
    with pytest.raises(CheckpointError, match="is not the one this artifact was exported from"):
        prove.proof_manifest(artifacts["gated"], loose, artifacts["float"])
    true, loose = _loosened(artifacts["gated_int8"])
    with pytest.raises(CheckpointError, match="pass it with --checkpoint FILE"):
        prove.proof_manifest(artifacts["gated_int8"], loose)
    assert prove.proof_manifest(artifacts["gated_int8"], loose, artifacts["ckpt"])["quant"] == \
        true["quant"]


# ---- prove_found: a transformers-like export whose cos table graft replaces ---------------------

E = np.array([[1.0] * D, [-1.0] * D], np.float32)  # token 0 -> +1, token 1 -> -1
# rows of k/2 - 3/4 (k = 0..3 cycling): every row holds -3/4 and +3/4
C = ((np.arange(L * D).reshape(L, D) % 4) - 1.5) / 2
ULP_3_4 = 2.0**-24  # one ulp of 0.75 (float32)


def _hf(cached=False, cos_output=False):
    """``y = E[input_ids] * C[position_ids] * mask`` with inputs named as transformers names
    them (``cached``: a KV cache input too, unused); ``cos``: the rows the PE replaces."""
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["emb"]),
             helper.make_node("Gather", ["C", "position_ids"], ["cos"]),
             helper.make_node("Mul", ["emb", "cos"], ["ec"])]
    if cached:
        nodes.append(helper.make_node("Identity", ["ec"], ["y"]))
    else:
        nodes += [helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
                  helper.make_node("Unsqueeze", ["mf", "two"], ["mu"]),
                  helper.make_node("Mul", ["ec", "mu"], ["y"])]
    inputs = [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
              _vi("attention_mask", TensorProto.INT64, ["b", "t"]),
              _vi("position_ids", TensorProto.INT64, ["b", "s"])]
    if cached:
        inputs.append(_vi("past_key_values.0.key", TensorProto.FLOAT, ["b", 2, "p", 4]))
    outputs = [_vi("y", TensorProto.FLOAT, ["b", "s", D])]
    if cos_output:
        outputs.append(_vi("cos", TensorProto.FLOAT, ["b", "s", D]))
    inits = [onnx.numpy_helper.from_array(E, "E"),
             onnx.numpy_helper.from_array(C.astype(np.float32), "C"),
             onnx.numpy_helper.from_array(np.asarray([2], np.int64), "two")]
    return _model(nodes, inputs, outputs, inits)


def _found(original, rows=C):
    from edgepe.graft.splice import splice_found

    return splice_found(original, prove.table_pe(rows, 18), {"pe": "cos"}, "position_ids",
                        {"scheme": "test"})


EVERY = "every position 0..7 (the replaced tensors)"
# position_ids past the 8 rows (the original's Gather refuses them) and negative (both wrap)
OUTSIDE = "positions 8, 9, 19 (the original refuses them), positions -1, -2, -8"


def test_prove_found_compares_outputs_and_the_replaced_tensor():
    original = _hf()
    grafted = _found(original)
    cases, checks = prove.prove_found(original, grafted, ["cos"], L)
    assert cases == ["1", "7", "8", "8 (left pad 3)", EVERY, OUTSIDE]
    assert [(c.name, c.max_abs_err, c.tolerance) for c in checks] == [
        ("y", 0.0, 64 * ULP_3_4), ("cos", 0.0, 4 * ULP_3_4)]
    # an int8 bound: the replaced tensor gets it; an output twice its gain (|E| = 1) times it
    y, cos = prove.prove_found(original, grafted, ["cos"], L, bound=0.01)[1]
    assert cos.tolerance == 0.01 + 4 * ULP_3_4
    assert (y.tolerance - 64 * ULP_3_4) / 0.02 == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(BadParameterError, match=r"^--lengths 9: each length must be 1 \.\. 8 "):
        prove.prove_found(original, grafted, ["cos"], L, lengths=[9])


def test_prove_found_checks_every_position_of_the_replaced_tensor():
    """A row the runs never reach (4: runs at positions 0, 1, 6, 7) differs: only the cone run
    at every position sees it, in the replaced tensor."""
    rows = C.copy()
    rows[4, 2] = 0.5  # 0.25 in the original
    original = _hf()
    cases, (y, cos) = prove.prove_found(original, _found(original, rows), ["cos"], L,
                                        lengths=[2])
    assert cases == ["2", "2 (left pad 1)", "2 (positions 6..7)", EVERY, OUTSIDE]
    assert (y.name, y.max_abs_err, cos.name, cos.max_abs_err) == ("y", 0.0, "cos", 0.25)
    assert not cos.passed and y.passed
    # reached by a run (default lengths 1, 7, 8): the output differs too
    _, (y, cos) = prove.prove_found(original, _found(original, rows), ["cos"], L)
    assert y.max_abs_err == 0.25 and cos.max_abs_err == 0.25


def test_prove_found_with_a_cache_decodes_at_the_last_position():
    original = _hf(cached=True, cos_output=True)
    rows = C.copy()
    rows[L - 1, 0] = -0.25  # -0.75 in the original: reached by the decode step at max_len - 1
    cases, checks = prove.prove_found(original, _found(original, rows), ["cos"], L, lengths=[2],
                                      bound=0.01)
    assert cases == ["2", "2 (left pad 1)", "3+5", "1+7", EVERY, OUTSIDE]
    assert [(c.name, c.max_abs_err) for c in checks] == [("y", 0.5), ("cos", 0.5)]
    # the gain is measured on the last run (the decode step): |E| = 1 there too
    assert (checks[0].tolerance - 64 * ULP_3_4) / 0.02 == pytest.approx(1.0, abs=1e-3)


def test_prove_found_exact_outputs_allows_the_outputs_no_ulp():
    """A cos one ulp off at a position the runs reach: within the replaced tensor's 4 ulp, and
    the output's 64; with ``exact_outputs`` (T5's integer buckets, issue 40) the output fails."""
    rows = C.copy().astype(np.float32)
    rows[1, 0] = np.nextafter(rows[1, 0], np.float32(1))
    original = _hf()
    y, cos = prove.prove_found(original, _found(original, rows), ["cos"], L)[1]
    assert (y.max_abs_err, y.tolerance, y.passed) == (ULP_3_4, 64 * ULP_3_4, True)
    assert cos.passed
    y, cos = prove.prove_found(original, _found(original, rows), ["cos"], L,
                               exact_outputs=True)[1]
    assert (y.max_abs_err, y.tolerance, y.passed) == (ULP_3_4, 0.0, False)
    assert (cos.tolerance, cos.passed) == (4 * ULP_3_4, True)


def test_prove_found_skips_a_replaced_tensor_the_grafted_model_no_longer_makes():
    """A lowered model fuses the replaced tensor away: only the outputs are compared."""
    original = _hf()
    mine = onnx.ModelProto.FromString(original.SerializeToString())
    for node in mine.graph.node:
        node.input[:] = ["fused" if n == "cos" else n for n in node.input]
        node.output[:] = ["fused" if n == "cos" else n for n in node.output]
    cases, checks = prove.prove_found(original, SimpleNamespace(model=mine), ["cos"], L)
    assert cases == ["1", "7", "8", "8 (left pad 3)", OUTSIDE]
    assert [(c.name, c.max_abs_err) for c in checks] == [("y", 0.0)]


def _bucketed(lut):
    """``y = T[lut[position_ids]]``, the int64 ``bucket`` the tensor a PE replaces (T5's
    buckets are, issue 40), from a ``lut [L]`` of rows of T (odd and even rows differ)."""
    return _model([helper.make_node("Gather", ["lut", "position_ids"], ["bucket"]),
                   helper.make_node("Gather", ["T", "bucket"], ["y"])],
                  [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                   _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                  [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                  [onnx.numpy_helper.from_array(np.asarray(lut, np.int64), "lut"),
                   onnx.numpy_helper.from_array(T.astype(np.float32), "T")])


def test_prove_found_holds_an_integer_replaced_tensor_exactly():
    """An int64 replaced tensor is compared as it is (not declared float) with no allowance: a
    bucket one off fails, in the tensor and (its row differs) in the output."""
    from edgepe.graft.splice import splice_found

    lut = np.arange(L)[::-1] % 4
    original = _bucketed(lut)
    for wrong, err in ((None, 0.0), (5, 1.0)):
        mine = lut.copy()
        if wrong is not None:
            mine[wrong] += 1
        pe = _model([helper.make_node("Gather", ["lut", "positions"], ["out"])],
                    [_vi("positions", TensorProto.INT64, ["b", "s"])],
                    [_vi("out", TensorProto.INT64, ["b", "s"])],
                    [onnx.numpy_helper.from_array(mine.astype(np.int64), "lut")])
        grafted = splice_found(original, pe, {"out": "bucket"}, "position_ids", {"scheme": "t"})
        _, (y, bucket) = prove.prove_found(original, grafted, ["bucket"], L)
        assert (bucket.name, bucket.max_abs_err, bucket.tolerance) == ("bucket", err, 0.0)
        assert bucket.passed == (wrong is None) and y.passed == (wrong is None)


def test_gain_of_each_output_per_unit_change_of_the_replaced_tensors():
    """y = E[ids] * cos * mask with |E| = 1: y moves one for one with cos (PROBE each)."""
    original = _hf()
    gain = prove._gain(original, ["cos"], [(8, 0, 0, 0)], L, ["y", "cos"], 0)
    assert list(gain) == ["y"] and gain["y"] == pytest.approx(1.0, abs=1e-3)
    # twice the embedding: twice the gain; the original model is left as it was
    doubled = onnx.ModelProto.FromString(original.SerializeToString())
    doubled.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(2 * E, "E"))
    before = doubled.SerializeToString()
    assert prove._gain(doubled, ["cos"], [(1, 0, 0, 0), (8, 0, 0, 0)], L, ["y"], 0)["y"] == \
        pytest.approx(2.0, abs=2e-3)
    assert doubled.SerializeToString() == before


def test_cone_run_computes_the_named_tensors_alone():
    original = _hf()
    ids = np.array([[7, 0, 3]], np.int64)
    feeds = {"position_ids": ids, "input_ids": np.zeros((1, 3), np.int64), "other": ids}
    out = prove._cone_run(original, ["cos"], feeds, 3, "original")
    assert list(out) == ["cos"] and out["cos"].tolist() == C[ids].astype(np.float32).tolist()
    with pytest.raises(ParityError, match="^the grafted model fails at sequence length 3: "):
        prove._cone_run(original, ["cos"], {"position_ids": ids.astype(np.int32)}, 3, "grafted")


# ---- what the survivors of a first mutmut run showed untested -----------------------------------


def test_a_session_is_cpu_only_and_silent(capfd):
    """Only onnxruntime's CPU provider (this build also lists Azure's), no warning; a kernel that
    fails at run time logs nothing (the error is the one line _run makes)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session = prove._session(_squared())
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ParityError, match="^the grafted model fails at sequence length 2: "):
        prove._run(session, ["y"], {"pos": np.zeros((3, 2), np.int64)}, 2, "grafted")
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_dim_sizes_of_an_encoder_decoder():
    """The decoder's ids [batch, seq]; the encoder's ids and mask [batch, past + seq]."""
    inputs = _inputs(("decoder_input_ids", ["db", "d"], "tensor(int64)"),
                     ("input_ids", ["b", "e"], "tensor(int64)"),
                     ("attention_mask", ["b", "e"], "tensor(int64)"))
    assert prove._dim_sizes(inputs, 2, 3, 5) == {"db": 2, "d": 3, "b": 2, "e": 8}
    # a decoder input of another rank is not the decoder's
    flat = _inputs(("decoder_input_ids", ["d"], "tensor(int64)"),
                   ("input_ids", ["b", "e"], "tensor(int64)"))
    assert prove._dim_sizes(flat, 2, 3, 5) == {"b": 2, "e": 3}


def test_prove_with_no_trial_measures_nothing():
    original = _squared()
    grafted, pe = _graft(original)
    lengths, (check,) = prove.prove(original, grafted, pe, _manifest(atol=0.5), trials=0)
    assert lengths == [2, 4, 8] and check.max_abs_err == 0.0
    assert check.tolerance == 0.0  # no element compared: no element's allowance


def _times_length(size=D, rows=None):
    """``y = pe * S`` (S: the sequence length, from the positions' shape): its gain is S."""
    rows = T if rows is None else rows
    nodes = [helper.make_node("Gather", ["old_table", "pos"], ["pe_old"]),
             helper.make_node("Shape", ["pos"], ["s_int"], start=1, end=2),
             helper.make_node("Cast", ["s_int"], ["s"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["pe_old", "s"], ["y"])]
    return _model(nodes, [_vi("pos", TensorProto.INT64, ["B", "S"])],
                  [_vi("y", TensorProto.FLOAT, ["B", "S", size])],
                  [onnx.numpy_helper.from_array(rows.astype(np.float32), "old_table")])


def test_prove_measures_the_gain_at_the_last_length():
    original = _times_length()
    grafted, pe = _graft(original)
    (check,) = prove.prove(original, grafted, pe, _manifest(atol=0.01))[1]
    ulps = 64 * 2.0**-21  # 64 ulp of 4 = 1/2 * 8, the largest output
    assert (check.tolerance - ulps) / 0.02 == pytest.approx(8.0, abs=1e-3)


def test_prove_perturbs_each_element_by_its_own_random_sign():
    """y = the sum of a wide PE row (64 zeros): the probe moves it by the sum of 64 random
    signs times the step, far below 64 steps (all one sign); the PE's own tolerance is 0.5."""
    wide = np.zeros((L, 64))
    rows = helper.make_node("ReduceSum", ["pe_old", "axes"], ["y"], keepdims=1)
    original = _model([helper.make_node("Gather", ["old_table", "pos"], ["pe_old"]), rows],
                      [_vi("pos", TensorProto.INT64, ["B", "S"])],
                      [_vi("y", TensorProto.FLOAT, ["B", "S", 1])],
                      [onnx.numpy_helper.from_array(wide.astype(np.float32), "old_table"),
                       onnx.numpy_helper.from_array(np.asarray([-1], np.int64), "axes")])
    from edgepe.graft.splice import graft_model

    pe = prove.table_pe(wide, 18)
    manifest = {**_manifest(atol=0.5), "d_model": 64}
    grafted = graft_model(original, pe, manifest, "pe_old", "pos")
    (check,) = prove.prove(original, grafted, pe, manifest)[1]
    gain = (check.tolerance - 64 * float(np.spacing(np.float32(0)))) / (2 * 0.5)
    assert check.max_abs_err == 0.0 and 0 < gain < 32


# a transformers-like model whose gain depends on the run: y = cos * w[position] * (16 - 15 mask)
W = np.arange(1, L + 1, dtype=np.float32).reshape(L, 1)  # w[p] = p + 1


def _weighted(scale=1.0, cos_rows=C):
    mf = [helper.make_node("Cast", ["attention_mask"], ["mi"], to=TensorProto.FLOAT),
          helper.make_node("Unsqueeze", ["mi", "two"], ["mf"]),
          helper.make_node("Mul", ["mf", "fifteen"], ["m15"]),
          helper.make_node("Sub", ["sixteen", "m15"], ["padf"])]
    nodes = [helper.make_node("Gather", ["C", "position_ids"], ["cos"]),
             helper.make_node("Gather", ["W", "position_ids"], ["w"]),
             helper.make_node("Mul", ["cos", "w"], ["cw"]), *mf,
             helper.make_node("Mul", ["cw", "padf"], ["y"])]
    inits = [onnx.numpy_helper.from_array(cos_rows.astype(np.float32), "C"),
             onnx.numpy_helper.from_array(W * np.float32(scale), "W"),
             onnx.numpy_helper.from_array(np.asarray([2], np.int64), "two"),
             onnx.numpy_helper.from_array(np.float32(15), "fifteen"),
             onnx.numpy_helper.from_array(np.float32(16), "sixteen")]
    return _model(nodes, [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                          _vi("attention_mask", TensorProto.INT64, ["b", "t"]),
                          _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                  [_vi("y", TensorProto.FLOAT, ["b", "s", D])], inits)


@pytest.mark.parametrize(("cases", "want"), [
    ([(8, 0, 0, 0), (2, 0, 0, 0)], 2.0),  # the last case only: positions 0, 1
    ([(2, 0, 0, 6)], 8.0),  # shifted to positions 6, 7
    ([(1, 0, 0, 0), (2, 0, 1, 0)], 32.0)])  # row 1's first token padded: w 2 (position 1) x 16
def test_gain_is_measured_on_the_last_case(cases, want):
    gain = prove._gain(_weighted(), ["cos"], cases, L, ["y", "cos"], 0)
    assert list(gain) == ["y"] and gain["y"] == pytest.approx(want, rel=1e-3)
    # a gain below 1 (w scaled by 1/4 at position 0): not rounded up to anything
    assert prove._gain(_weighted(0.25), ["cos"], [(1, 0, 0, 0)], L, ["y"], 0)["y"] == \
        pytest.approx(0.25, rel=1e-3)


def test_gain_probe_signs_are_a_fixed_draw_of_seed_plus_one():
    """y = the sum of a zero row of 64: its change is the sum of the first 64 probe signs (the
    draw of 4096 signs from seed + 1) times PROBE."""
    nodes = [helper.make_node("Gather", ["C", "position_ids"], ["cos"]),
             helper.make_node("ReduceSum", ["cos", "axes"], ["y"], keepdims=1)]
    model = _model(nodes, [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                           _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                   [_vi("y", TensorProto.FLOAT, ["b", "s", 1])],
                   [onnx.numpy_helper.from_array(np.zeros((L, 64), np.float32), "C"),
                    onnx.numpy_helper.from_array(np.asarray([-1], np.int64), "axes")])
    for seed in (0, 5):
        signs = np.random.default_rng(seed + 1).choice([-1.0, 1.0], size=4096)
        gain = prove._gain(model, ["cos"], [(2, 0, 0, 0)], L, ["y"], seed)["y"]
        assert gain == pytest.approx(abs(signs[:64].sum()), abs=1e-3)


def test_gain_probes_one_output_of_a_node_with_several():
    """cos and sin from one Split: only cos is probed (sin keeps its name)."""
    both = np.concatenate([C, C], axis=1)
    nodes = [helper.make_node("Gather", ["CS", "position_ids"], ["cs"]),
             helper.make_node("Split", ["cs"], ["cos", "sin"], axis=-1, num_outputs=2),
             helper.make_node("Mul", ["cos", "sin"], ["y"])]
    model = _model(nodes, [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                           _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                   [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                   [onnx.numpy_helper.from_array(both.astype(np.float32), "CS")])
    # y = cos * sin moves by |sin| <= 3/4 per unit of cos
    assert prove._gain(model, ["cos"], [(8, 0, 0, 0)], L, ["y"], 0)["y"] == pytest.approx(
        0.75, rel=1e-3)


def test_prove_found_measures_the_gain_on_its_last_run():
    """The weighted model, bound 1: the last run before the every-position one is the left-
    padded prefill (gain 32), not the first (1), the prefill before (8) or the cone run."""
    original = _weighted()
    grafted = _found(original)
    cases, (y, cos) = prove.prove_found(original, grafted, ["cos"], L, bound=1.0)
    assert cases == ["1", "7", "8", "8 (left pad 3)", EVERY, OUTSIDE]
    assert y.tolerance == pytest.approx(64.0, abs=0.01) and y.max_abs_err == 0.0
    # a lowered model (no cos to compare): its last run is that prefill too
    mine = onnx.ModelProto.FromString(grafted.model.SerializeToString())
    for node in mine.graph.node:
        node.input[:] = ["fused" if n == "cos" else n for n in node.input]
        node.output[:] = ["fused" if n == "cos" else n for n in node.output]
    cases, (y,) = prove.prove_found(original, SimpleNamespace(model=mine), ["cos"], L,
                                    bound=1.0)
    assert cases[-2:] == ["8 (left pad 3)", OUTSIDE]
    assert y.tolerance == pytest.approx(64.0, abs=0.01)


def test_prove_found_peak_of_a_replaced_tensor_counts_every_position():
    """Row 4 of the original's cos holds 1.5, reached only by the every-position run: the
    replaced tensor's tolerance is 4 ulp of 1.5."""
    rows = C.copy()
    rows[4, 0] = 1.5
    original = _hf()
    original.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(
        rows.astype(np.float32), "C"))
    _, (_, cos) = prove.prove_found(original, _found(original, rows), ["cos"], L, lengths=[2])
    assert (cos.max_abs_err, cos.tolerance) == (0.0, 4 * 2.0**-23)


def test_prove_found_names_the_model_whose_every_position_run_fails():
    """cos + a constant [1, 4, D]: the runs at length 1 broadcast, the cone run at max_len
    does not; the original's is bad input, the grafted's a failed proof."""
    def stuck(model):
        model = onnx.ModelProto.FromString(model.SerializeToString())
        for node in model.graph.node:
            node.output[:] = ["cos_raw" if n == "cos" else n for n in node.output]
        model.graph.node.append(helper.make_node("Add", ["cos_raw", "four"], ["cos"]))
        model.graph.initializer.append(onnx.numpy_helper.from_array(
            np.zeros((1, 4, D), np.float32), "four"))
        model.graph.output[0].type.tensor_type.ClearField("shape")
        return model

    original = _hf()
    grafted = _found(original)
    with pytest.raises(BadParameterError, match=r"^the original model does not run at sequence "
                                                r"length 8 \("):
        prove.prove_found(stuck(original), grafted, ["cos"], L, lengths=[1])
    with pytest.raises(ParityError, match=r"^the grafted model fails at sequence length 8 "
                                          r"\(positions 0\.\.7\): "):
        prove.prove_found(original, SimpleNamespace(model=stuck(grafted.model)), ["cos"], L,
                          lengths=[1])


def test_prove_found_a_replaced_constant_is_compared_through_the_outputs():
    """The original reads cos as a constant [L, D] (MPT's bias, Whisper's encoder table): the PE
    (no input) makes it; the original's initializer is made an output for the proof, so cos is
    compared too, whole at every run (issue 40); no cone makes a weight, so the every-position
    pass has nothing to add (issue 41's _cone_plan)."""
    from edgepe.graft.splice import splice_found

    nodes = [helper.make_node("Gather", ["cos", "position_ids"], ["rows"]),
             helper.make_node("Gather", ["E", "input_ids"], ["emb"]),
             helper.make_node("Mul", ["emb", "rows"], ["y"])]
    original = _model(nodes, [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                              _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                      [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                      [onnx.numpy_helper.from_array(C.astype(np.float32), "cos"),
                       onnx.numpy_helper.from_array(E, "E")])
    pe = _model([helper.make_node("Identity", ["t"], ["b_out"])], [],
                [_vi("b_out", TensorProto.FLOAT, [L, D])],
                [onnx.numpy_helper.from_array(C.astype(np.float32), "t")])
    grafted = splice_found(original, pe, {"b_out": "cos"}, "position_ids", {})
    cases, checks = prove.prove_found(original, grafted, ["cos"], L)
    assert cases == ["1", "7", "8", OUTSIDE]
    assert [(c.name, c.max_abs_err) for c in checks] == [("y", 0.0), ("cos", 0.0)]


def _diamond():
    """sin = S[p], cos = C[q] + C[p] (p, q: copies of position_ids): the walk from cos meets p
    again after sin's walk took it."""
    nodes = [helper.make_node("Identity", ["position_ids"], ["p"]),
             helper.make_node("Identity", ["position_ids"], ["q"]),
             helper.make_node("Gather", ["S", "p"], ["sin"]),
             helper.make_node("Gather", ["C", "q"], ["gq"]),
             helper.make_node("Gather", ["C", "p"], ["gp"]),
             helper.make_node("Add", ["gq", "gp"], ["cos"]),
             helper.make_node("Mul", ["cos", "sin"], ["y"])]
    return _model(nodes, [_vi("position_ids", TensorProto.INT64, ["b", "s"]),
                          _vi("input_ids", TensorProto.INT64, ["b", "s"])],
                  [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                  [onnx.numpy_helper.from_array(C.astype(np.float32), "C"),
                   onnx.numpy_helper.from_array(-C.astype(np.float32), "S")])


def test_cone_run_walks_every_branch():
    ids = np.array([[7, 0, 3]], np.int64)
    out = prove._cone_run(_diamond(), ["cos", "sin"], {"position_ids": ids}, 3, "original")
    assert list(out) == ["cos", "sin"]
    assert out["cos"].tolist() == (2 * C[ids]).astype(np.float32).tolist()
    assert out["sin"].tolist() == (-C[ids]).astype(np.float32).tolist()
    with pytest.raises(BadParameterError, match=r"^the original model does not run at sequence "
                                                r"length 3 \("):
        prove._cone_run(_diamond(), ["cos"], {"position_ids": ids.astype(np.int32)}, 3,
                        "original")


def test_cone_run_keeps_the_models_opsets_and_functions():
    """cos made by a model-local function (domain 'local'): the cone carries it and its domain."""
    twice = helper.make_function("local", "Twice", ["a"], ["b"],
                                 [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 18)])
    nodes = [helper.make_node("Gather", ["C", "position_ids"], ["g"]),
             helper.make_node("Twice", ["g"], ["cos"], domain="local"),
             helper.make_node("Identity", ["cos"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "m", [_vi("position_ids", TensorProto.INT64, ["b", "s"])],
                          [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                          [onnx.numpy_helper.from_array(C.astype(np.float32), "C")]),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[twice])
    model.ir_version = 8
    ids = np.array([[1, 6]], np.int64)
    out = prove._cone_run(model, ["cos"], {"position_ids": ids}, 2, "original")
    assert out["cos"].tolist() == (2 * C[ids]).astype(np.float32).tolist()


def _times_x():
    """``y = pe * x`` (x: a float input, standard normal in the proof): the gain is max|x| of
    the draw it is measured on."""
    nodes = [helper.make_node("Gather", ["old_table", "pos"], ["pe_old"]),
             helper.make_node("Mul", ["pe_old", "x"], ["y"])]
    return _model(nodes, [_vi("pos", TensorProto.INT64, ["B", "S"]),
                          _vi("x", TensorProto.FLOAT, ["B", "S", D])],
                  [_vi("y", TensorProto.FLOAT, ["B", "S", D])],
                  [onnx.numpy_helper.from_array(T.astype(np.float32), "old_table")])


def test_prove_measures_the_gain_on_the_first_draw_at_the_last_length():
    """A second draw changes the largest output (64 ulp of it), not the gain: that comes from the
    first draw at the last length, the same whatever follows it."""
    original = _times_x()
    grafted, pe = _graft(original)
    one = prove.prove(original, grafted, pe, _manifest(atol=1.0), lengths=[8], trials=1)[1][0]
    two = prove.prove(original, grafted, pe, _manifest(atol=1.0), lengths=[8], trials=2)[1][0]
    assert one.tolerance == pytest.approx(two.tolerance, abs=1e-4)
    assert one.tolerance > 2 * 1.0  # the gain, max|x| of 64 normal draws, is over 1
    # another seed draws other inputs: another gain
    other = prove.prove(original, grafted, pe, _manifest(atol=1.0), lengths=[8], trials=1,
                        seed=1)[1][0]
    assert abs(other.tolerance - one.tolerance) > 1e-3


def _embeds_times_cos():
    """``y = inputs_embeds * cos``: what the proof measures depends on the random embeddings."""
    nodes = [helper.make_node("Gather", ["C", "position_ids"], ["cos"]),
             helper.make_node("Mul", ["inputs_embeds", "cos"], ["y"])]
    return _model(nodes, [_vi("inputs_embeds", TensorProto.FLOAT, ["b", "s", D]),
                          _vi("position_ids", TensorProto.INT64, ["b", "s"])],
                  [_vi("y", TensorProto.FLOAT, ["b", "s", D])],
                  [onnx.numpy_helper.from_array(C.astype(np.float32), "C")])


def test_prove_found_and_its_gain_are_reproducible_from_the_seed():
    original = _embeds_times_cos()
    rows = C.copy()
    rows[0] += 0.25
    grafted = _found(original, rows)

    def run(seed):
        _, (y, cos) = prove.prove_found(original, grafted, ["cos"], L, bound=1.0, seed=seed)
        return y.max_abs_err, y.tolerance, cos.max_abs_err

    first = run(0)
    assert run(0) == first and first[2] == 0.25
    assert run(1)[0] != first[0] and run(1)[1] != first[1]  # the draws matter
    gain = prove._gain(original, ["cos"], [(8, 0, 0, 0)], L, ["y"], 0)
    assert prove._gain(original, ["cos"], [(8, 0, 0, 0)], L, ["y"], 0) == gain
    assert prove._gain(original, ["cos"], [(8, 0, 0, 0)], L, ["y"], 1) != gain


def test_prove_found_peak_and_error_of_the_padded_and_shifted_runs():
    """The weighted model: row 1's padded tokens (position 1, w 2, x16) give the largest output,
    0.75 * 2 * 16 = 24; a difference at row 7 reaches y only in the shifted run (positions
    6, 7), times w = 8."""
    original = _weighted()
    y, _ = prove.prove_found(original, _found(original), ["cos"], L)[1]
    assert (y.max_abs_err, y.tolerance) == (0.0, 64 * 2.0**-19)
    rows = C.copy()
    rows[L - 1, 0] += 0.25
    cases, (y, cos) = prove.prove_found(original, _found(original, rows), ["cos"], L,
                                        lengths=[2])
    assert cases == ["2", "2 (left pad 1)", "2 (positions 6..7)", EVERY, OUTSIDE]
    assert y.max_abs_err == 0.25 * 8 and cos.max_abs_err == 0.25


def test_prove_found_a_failing_run_is_named_by_its_case():
    """An original that gathers one row by ``1 - mask`` fails where the mask has a 0 (the
    left-padded run); one adding a [1, 4, D] constant fails at length 2 (the first run)."""
    padded = _hf()
    padded.graph.node.extend([
        helper.make_node("Sub", ["one", "attention_mask"], ["unmask"]),
        helper.make_node("Gather", ["row", "unmask"], ["g"]),
        helper.make_node("Identity", ["g"], ["g_out"])])
    padded.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.asarray(1, np.int64), "one"),
        onnx.numpy_helper.from_array(np.ones(1, np.float32), "row")])
    padded.graph.output.append(_vi("g_out", TensorProto.FLOAT, ["b", "t"]))
    grafted = _found(_hf())
    with pytest.raises(BadParameterError, match=r"^the original model does not run at sequence "
                                                r"length 2 \(past 0, left pad 1\) \("):
        prove.prove_found(padded, _found(padded), ["cos"], L, lengths=[2])
    with pytest.raises(ParityError, match=r"^the grafted model's outputs \(y\) are not the "
                                          r"original's \(y, g_out\); every output must be "):
        prove.prove_found(padded, grafted, ["cos"], L, lengths=[2])  # g_out lost
    fixed = _hf()
    fixed.graph.initializer.append(onnx.numpy_helper.from_array(
        np.zeros((1, 4, 1), np.float32), "four"))
    fixed.graph.node[-1].output[0] = "y4"
    fixed.graph.node.append(helper.make_node("Add", ["y4", "four"], ["y"]))
    fixed.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(BadParameterError, match=r"^the original model does not run at sequence "
                                                r"length 2 \(past 0\) \("):
        prove.prove_found(fixed, grafted, ["cos"], L, lengths=[2])
    with pytest.raises(ParityError, match=r"^the grafted model fails at sequence length 2 \(past "
                                          r"0\): "):
        prove.prove_found(_hf(), SimpleNamespace(model=fixed), ["cos"], L, lengths=[2])


# ---- issue 41: the proof covers what the original accepts --------------------------------------


def _worst_check(got, want, extra=0.0, ulps=64):
    worst = prove._Worst(ulps)
    worst.add(np.asarray(got, np.float32), np.asarray(want, np.float32))
    return worst.check("y", extra)


def test_one_element_at_finfo_min_does_not_loosen_the_others():
    """Per element: 64 ulp of max(|value|, the output's 90th percentile, 'lower' so that one
    element never moves it); the line shows the failing element with its own tolerance."""
    low = np.finfo(np.float32).min
    check = _worst_check([1.0 + 2.79, 2.0, low], [1.0, 2.0, low])
    assert not check.passed and check.max_abs_err == pytest.approx(2.79, rel=1e-6)
    assert check.tolerance == 64 * 2.0**-22  # 64 ulp of 2: the percentile, not of 3.4e38
    # no error: the element of the largest allowance (the old 64 ulp of the largest value)
    check = _worst_check([1.0, 2.0, 0.5], [1.0, 2.0, 0.5])
    assert (check.max_abs_err, check.tolerance, check.passed) == (0.0, 64 * 2.0**-22, True)
    # a passing error: shown at its element, with that element's tolerance plus the extra
    check = _worst_check([1.0, 2.0 + 2.0**-20, 8.0], [1.0, 2.0, 8.0], extra=0.5)
    assert check.max_abs_err == 2.0**-20 and check.tolerance == 0.5 + 64 * 2.0**-22
    # beyond the element's allowance but within the extra: passes
    assert _worst_check([1.5], [1.0], extra=0.5).passed
    assert not _worst_check([1.5], [1.0], extra=0.4999).passed


def test_the_scale_is_the_lower_90th_percentile():
    values = np.arange(1, 21, dtype=np.float32)  # 90th percentile, lower: 18 (index 17.1)
    check = _worst_check(values, values)
    assert check.tolerance == 64 * float(np.spacing(np.float32(20)))  # its own, larger
    small = _worst_check(np.r_[values[:-1], 0.0], np.r_[values[:-1], 0.0])
    assert small.tolerance == 64 * float(np.spacing(np.float32(19)))
    mixed = prove._Worst()
    mixed.add(np.r_[values[:-1], 1.0], np.r_[values[:-1], 0.0])  # 0 held to 64 ulp of 18
    assert mixed.check("y", 0.0).tolerance == 64 * float(np.spacing(np.float32(18)))


def test_nan_inf_and_shapes_element_by_element():
    inf, nan = np.inf, np.nan
    assert _worst_check([inf, nan, 1.0], [inf, nan, 1.0]).passed  # equal: no error
    assert _worst_check([nan], [1.0]).max_abs_err == inf
    assert not _worst_check([1.0], [nan]).passed
    assert not _worst_check([inf], [-inf]).passed
    assert not _worst_check([1.0], [inf]).passed  # an infinite reference allows nothing
    worst = prove._Worst()
    worst.add(np.zeros(3), np.zeros(4))
    assert worst.check("y", 1e30).max_abs_err == inf
    worst = prove._Worst()
    worst.add(np.zeros((0, 3)), np.zeros((0, 3)))
    assert worst.check("y", 0.25) == OutputCheck("y", 0.0, 0.25)
    assert not _worst_check([1.0], [1.0], extra=nan).passed


def test_blocks_compare_as_one_output(monkeypatch):
    """WORST_BLOCK 3 over 10 elements: the scale is the whole output's (a block of small values
    beside large ones keeps the large scale), the worst element and the largest error are the
    whole's, ties as one argmax over all (the first); integers scaled in float64."""
    values = np.arange(1, 11, dtype=np.float32) * 100
    values[:3] = 1.0  # the first block alone: scale 1
    got = values.copy()
    got[1] += 2.0**-9  # within 64 ulp of the whole's scale (900: 2^-8), beyond 64 ulp of 1
    got[7] += 2.0**-9
    lines = {}
    for block in (3, 1 << 20):
        monkeypatch.setattr(prove, "WORST_BLOCK", block)
        worst = prove._Worst()
        worst.add(got, values)
        lines[block] = (worst.over, worst.top, worst.check("y", 0.0))
    assert lines[3] == lines[1 << 20]
    assert lines[3][2].passed and lines[3][2].tolerance == 64 * float(np.spacing(np.float32(900)))
    # errors in several blocks: the largest, and beyond its allowance, is found in a later block
    monkeypatch.setattr(prove, "WORST_BLOCK", 3)
    got[8] += 1.0
    worst = prove._Worst()
    worst.add(got, values)
    check = worst.check("y", 0.0)
    assert not check.passed and check.max_abs_err == pytest.approx(1.0, abs=1e-4)
    ints = prove._Worst()
    ints.add(np.asarray([0, 5], np.int64), np.asarray([np.iinfo(np.int64).min, 5], np.int64))
    assert ints.check("y", 0.0).max_abs_err == float(2**63)


def test_runs_accumulate_the_worst_element():
    worst = prove._Worst(4)
    worst.add(np.float32([1.0, 3.0]), np.float32([1.0, 2.0]))  # err 1 at 2
    worst.add(np.float32([0.5]), np.float32([0.25]))  # err 0.25, smaller
    assert worst.check("y", 0.0) == OutputCheck("y", 1.0, 4 * 2.0**-22)
    assert worst.check("y", 2.0) == OutputCheck("y", 1.0, 2.0 + 4 * 2.0**-22)


def test_max_diff_nan_and_finite_only():
    assert prove._max_diff([np.nan, 1.0], [np.nan, 1.0]) == 0.0
    assert prove._max_diff([np.nan], [1.0]) == math.inf
    assert prove._max_diff([np.inf, 2.0], [1.0, 1.5]) == math.inf
    assert prove._max_diff([np.inf, 2.0], [1.0, 1.5], finite=True) == 0.5
    assert prove._max_diff([np.inf], [np.inf], finite=True) == 0.0


def test_int_high_is_the_rows_of_the_table_an_input_indexes():
    def model(*gathers, tables=((5, 3),)):
        inits = [onnx.numpy_helper.from_array(np.zeros(d, np.float32), f"t{i}")
                 for i, d in enumerate(tables)]
        nodes = [helper.make_node("Gather", [t, "k"], [f"o{i}"], axis=a)
                 for i, (t, a) in enumerate(gathers)]
        return _model(nodes, [_vi("k", TensorProto.INT64, [])], [], inits)

    assert prove._int_high(model(("t0", 0)), "k", 100) == 5
    assert prove._int_high(model(("t0", 1)), "k", 100) == 3
    assert prove._int_high(model(("t0", -1)), "k", 100) == 3
    assert prove._int_high(model(("t0", 2)), "k", 100) == 100  # no such axis: the default
    assert prove._int_high(model(("t0", 0), ("t1", 0), tables=((5, 3), (4, 1))), "k", 100) == 4
    assert prove._int_high(model(("t0", 0)), "k", 3) == 3  # never above the default
    assert prove._int_high(model(("t0", 0), tables=((1, 3),)), "k", 100) == 2  # at least 0, 1
    assert prove._int_high(model(("x", 0)), "k", 100) == 100  # not a constant table
    assert prove._int_high(model(("t0", 0)), "other", 100) == 100


def test_feeds_draw_integer_inputs_over_their_range():
    session = _session(("k", ["S"], "tensor(int64)"), ("b", ["S"], "tensor(uint8)"))
    feeds = prove._feeds(session, 2000, "S", _grafted(name="p"), 50, np.random.default_rng(0),
                         {"k": 37, "b": 1000})
    assert set(np.unique(feeds["k"])) == set(range(37))  # 0 .. 36, both ends
    assert feeds["k"][0] == 0 and feeds["k"][-1] == 36
    assert feeds["b"].max() == 255 and feeds["b"].dtype == np.uint8  # the type's own range
    plain = prove._feeds(session, 50, "S", _grafted(name="p"), 50, np.random.default_rng(0))
    assert set(np.unique(plain["k"])) == {0, 1}


def test_hf_feeds_token_ids_over_their_range():
    session = _session(("input_ids", ["b", "s"], "tensor(int64)"))
    feeds = prove.hf_feeds(session, 300, 0, 0, 64, np.random.default_rng(0),
                           highs={"input_ids": 50})
    assert feeds["input_ids"].min() == 0 and feeds["input_ids"].max() == 49
    assert feeds["input_ids"].flat[0] == 0 and feeds["input_ids"].flat[-1] == 49
    assert set(np.unique(prove.hf_feeds(session, 30, 0, 0, 64, np.random.default_rng(0))
                         ["input_ids"])) == {0, 1}


def test_prove_narrows_integer_inputs_until_the_original_runs():
    """An offset k read through a Cast (no table to bound it): drawn over 0 .. max_len - 1, the
    original fails past its rows, so the draw narrows by 8 until it runs (here to 0 .. 0)."""
    original = _squared()
    original.graph.input.append(_vi("k", TensorProto.INT64, []))
    original.graph.node.insert(0, helper.make_node("Identity", ["k"], ["k2"]))
    original.graph.node.append(helper.make_node("Gather", ["old_table", "k2"], ["row"]))
    original.graph.node.append(helper.make_node("Identity", ["row"], ["r_out"]))
    original.graph.output.append(_vi("r_out", TensorProto.FLOAT, [D]))
    grafted, pe = _graft(original)
    lengths, checks = prove.prove(original, grafted, pe, _manifest())
    assert all(c.passed for c in checks)


def _clamped():
    """``y = old_table[clip(pos, 0, L - 1)]``: the original clamps positions past its rows."""
    return _model([helper.make_node("Clip", ["pos", "lo", "hi"], ["p"]),
                   helper.make_node("Gather", ["old_table", "p"], ["pe_old"]),
                   helper.make_node("Identity", ["pe_old"], ["y"])],
                  [_vi("pos", TensorProto.INT64, ["B", "S"])],
                  [_vi("y", TensorProto.FLOAT, ["B", "S", D])],
                  [onnx.numpy_helper.from_array(T.astype(np.float32), "old_table"),
                   onnx.numpy_helper.from_array(np.int64(0), "lo"),
                   onnx.numpy_helper.from_array(np.int64(L - 1), "hi")])


def test_positions_outside_the_rows_as_the_original_takes_them():
    """Clamped by the original, refused by the grafted table (Gather past its rows): allowed,
    said; negative ones clamped to row 0 by the original and wrapped to rows from the end by the
    grafted table: a mismatch."""
    original = _clamped()
    grafted, pe = _graft(original)
    lengths, (check,) = prove.prove(original, grafted, pe, _manifest())
    assert lengths[-1] == ("positions 8, 9, 19 (the grafted model refuses them), "
                           "positions -1, -2, -8")
    assert not check.passed and check.max_abs_err == pytest.approx(float(np.abs(T[0] - T[-1])
                                                                         .max()), rel=1e-6)
    assert prove._outside_positions(5) == [5, 6, 13, -1, -2, -5]


def test_an_overridable_initializer_the_graft_removes_is_refused():
    original = _squared()
    original.graph.input.append(_vi("old_table", TensorProto.FLOAT, [L, D]))
    grafted, pe = _graft(original)
    with pytest.raises(BadParameterError) as info:
        prove.prove(original, grafted, pe, _manifest())
    assert str(info.value) == (
        "the model's input 'old_table' is also an initializer (a caller may override it) that "
        "the graft removes with the PE's subgraph: the grafted model would ignore the value "
        "given; refused (make it an initializer only)")
    kept = _squared()
    kept.graph.input.append(_vi("z", TensorProto.FLOAT, [2, 1, 1]))  # kept by the graft: fine
    prove.check_overridable(kept, _graft(kept)[0].model)


def test_the_every_position_pass_runs_in_chunks(monkeypatch):
    """CONE_CHUNK 3 over max_len 8: runs at 0..2, 3..5, 6..7; a row differing in the second
    chunk is still seen, and each chunk names its positions when it fails."""
    monkeypatch.setattr(prove, "CONE_CHUNK", 3)
    rows = C.copy()
    rows[4, 2] = 0.5
    original = _hf()
    cases, (_, cos) = prove.prove_found(original, _found(original, rows), ["cos"], L,
                                        lengths=[2])
    assert cases[-2:] == [EVERY, OUTSIDE] and cos.max_abs_err == 0.25
    calls = []
    real = prove._cone_feed

    def spy(session, names, feeds, label, which, deadline=None):
        calls.append((label, feeds["position_ids"].tolist()))
        return real(session, names, feeds, label, which, deadline)

    monkeypatch.setattr(prove, "_cone_feed", spy)
    prove.prove_found(original, _found(original), ["cos"], L, lengths=[2])
    assert [c[0] for c in calls[::2]] == ["3 (positions 0..2)", "3 (positions 3..5)",
                                          "2 (positions 6..7)"]
    assert calls[2][1] == [[3, 4, 5], [3, 4, 5]]


def test_a_run_past_the_deadline_is_stopped(monkeypatch):
    """_run sets RunOptions.terminate at the deadline: a run already past it stops at once."""
    session = _identity_session([2])
    feeds = {"x": np.zeros(2, np.float32)}
    assert prove._run(session, ["y"], feeds, 2, "original", time.monotonic() + 60)
    seen = []

    class Slow:
        def run(self, names, feeds, options):
            seen.append(options)
            time.sleep(0.3)
            if options.terminate:
                raise RuntimeError("Exiting due to terminate flag being set to true.")
            return []

    with pytest.raises(ParityError) as info:
        prove._run(Slow(), ["y"], feeds, 7, "grafted", time.monotonic() + 0.05)
    assert str(info.value) == (f"the grafted model did not finish a run at sequence length 7 "
                               f"within graft's proof limit of {prove.PROOF_SECONDS:g} s; "
                               "refused")
    assert prove._run(Slow(), ["y"], feeds, 7, "grafted", time.monotonic() + 5) == []
    assert not seen[-1].terminate  # the timer is cancelled with the run


def test_a_model_onnxruntime_cannot_load_is_one_line():
    """An op of an unknown domain: the original's is bad input, the grafted's a failed proof."""
    model = _squared()
    model.graph.node[-1].domain = "foo.bar"
    model.opset_import.append(helper.make_opsetid("foo.bar", 1))
    with pytest.raises(BadParameterError) as info:
        prove._session(model)
    assert str(info.value).startswith("onnxruntime cannot load the original model: ")
    assert "foo.bar:Mul" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ParityError, match="^onnxruntime cannot load the grafted model: "):
        prove._session(model, "grafted")


def test_the_proof_sessions_share_one_bounded_arena():
    """Every session of graft's proof allocates from the arena of PROOF_MEMORY_BYTES (4 GiB): a
    run needing more (an Expand to 40000 x 32000 float32) fails at once, one line, naming it."""
    assert prove.PROOF_MEMORY_BYTES == 4 << 30
    huge = onnx.numpy_helper.from_array(np.asarray([40000, 32000], np.int64), "huge")
    model = _model([helper.make_node("Expand", ["x", "huge"], ["wide"]),
                    helper.make_node("ReduceSum", ["wide"], ["y"], keepdims=0)],
                   [_vi("x", TensorProto.FLOAT, [1])], [_vi("y", TensorProto.FLOAT, [])], [huge])
    session = prove._session(model)
    assert prove._ARENA == [4 << 30]
    began = time.monotonic()
    with pytest.raises(BadParameterError) as info:
        prove._run(session, ["y"], {"x": np.ones(1, np.float32)}, 9, "original")
    assert time.monotonic() - began < 5
    assert str(info.value) == ("the original model needs more than graft's proof memory limit "
                               "of 4,294,967,296 B at sequence length 9; give shorter --lengths, "
                               "or --no-check")
    small = onnx.numpy_helper.from_array(np.asarray([4000, 3200], np.int64), "huge")
    model.graph.initializer[0].CopyFrom(small)  # 51 MB: runs
    assert prove._run(prove._session(model), ["y"], {"x": np.ones(1, np.float32)}, 9,
                      "grafted")[0] == 4000 * 3200


class _Fake:
    """A session whose run answers ``answer(position)`` or raises what ``fail(position)`` says."""

    def __init__(self, answer, fail=lambda p: None):
        self.answer, self.fail = answer, fail

    def get_inputs(self):
        return [SimpleNamespace(name="pos")]

    def run(self, names, feeds, options=None):
        p = int(feeds["pos"].reshape(-1)[0])
        if (exc := self.fail(p)) is not None:
            raise exc
        return [np.float32([self.answer(p)])]


def test_outside_runs_each_position_and_groups_the_outcomes():
    feeds = {"pos": np.arange(3)}
    worst = {"y": prove._Worst()}
    original = _Fake(lambda p: p, lambda p: RuntimeError("out of range") if p >= 5 else None)
    grafted = _Fake(lambda p: p, lambda p: RuntimeError("no") if p == -5 else None)
    label = prove._outside(original, grafted, ["y"], feeds, "pos", 5, worst, None)
    assert label == ("positions 5, 6, 13 (the original refuses them), positions -1, -2, "
                     "positions -5 (the grafted model refuses them)")
    assert worst["y"].check("y", 0.0).passed
    wrong = _Fake(lambda p: p + (p < 0))  # answers otherwise at negative positions
    prove._outside(original, wrong, ["y"], feeds, "pos", 5, worst, None)
    assert worst["y"].check("y", 0.0).max_abs_err == 1.0
    # a time or memory limit is no refusal of the positions: it stops the proof
    for says in ("did not finish a run", "needs more than graft's proof memory limit"):
        limited = _Fake(lambda p: p, lambda p, s=says: RuntimeError(s))

        def hit(session, names, feeds, length, which, deadline=None, says=says):
            error = BadParameterError if which == "original" else ParityError
            raise error(f"the {which} model {says}")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prove, "_run", hit)
            with pytest.raises(BadParameterError, match=says):
                prove._outside(limited, limited, ["y"], feeds, "pos", 5, worst, None)
        calls = []

        def grafted_hit(session, names, feeds, length, which, deadline=None, says=says,
                        calls=calls):
            calls.append(which)
            if which == "grafted":
                raise ParityError(f"the grafted model {says}")
            return [np.float32([0])]

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prove, "_run", grafted_hit)
            with pytest.raises(ParityError, match=says):
                prove._outside(limited, limited, ["y"], feeds, "pos", 5, worst, None)
        assert calls == ["original", "grafted"]


# ---- a model without position_ids: positions from the cache's length (issue 41) ---------------


def _by_cache_length(rows=C, read_cache=False, positioned=False):
    """``y = E[input_ids] * C[past + arange(seq)] + sum of the cache``, as transformers exports a
    model without position_ids (its positions ``Range(past, past + seq)`` from the shapes of
    the ids and the cache, which it also reads by value); ``cos`` is replaced, at the internal
    positions ``pos``. ``read_cache``: cos also adds 0 times the cache's sum (the cone then
    reads its values); ``positioned``: an unused position_ids input too."""
    nodes = [helper.make_node("Shape", ["input_ids"], ["seq"], start=1, end=2),
             helper.make_node("Shape", ["past_key_values.0.key"], ["past"], start=2, end=3),
             helper.make_node("Add", ["past", "seq"], ["end"]),
             helper.make_node("Squeeze", ["past", "zero"], ["s0"]),
             helper.make_node("Squeeze", ["end", "zero"], ["e0"]),
             helper.make_node("Range", ["s0", "e0", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "zero"], ["pos"]),
             helper.make_node("Gather", ["C", "pos"], ["cos" if not read_cache else "cos0"]),
             helper.make_node("Gather", ["E", "input_ids"], ["emb"]),
             helper.make_node("Mul", ["emb", "cos"], ["ec"]),
             helper.make_node("ReduceSum", ["past_key_values.0.key", "axes"], ["kv"],
                              keepdims=0),
             helper.make_node("Unsqueeze", ["kv", "one1"], ["kv1"]),
             helper.make_node("Add", ["ec", "kv1"], ["y"])]
    if read_cache:
        nodes.insert(8, helper.make_node("Mul", ["kv1", "nought"], ["kv0"]))
        nodes.insert(9, helper.make_node("Add", ["cos0", "kv0"], ["cos"]))
        nodes.sort(key=lambda n: n.output[0] in ("kv0", "cos", "emb", "ec", "y"))
    inputs = [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
              _vi("attention_mask", TensorProto.INT64, ["b", "t"]),
              *([_vi("position_ids", TensorProto.INT64, ["b", "s"])] if positioned else []),
              _vi("past_key_values.0.key", TensorProto.FLOAT, ["b", 1, "p", D])]
    inits = [onnx.numpy_helper.from_array(E, "E"),
             onnx.numpy_helper.from_array(rows.astype(np.float32), "C"),
             *(onnx.numpy_helper.from_array(np.asarray(v, dtype), n) for n, v, dtype in (
                 ("zero", [0], np.int64), ("one", 1, np.int64), ("one1", [1], np.int64),
                 ("axes", [1, 2], np.int64), ("nought", 0.0, np.float32)))]
    return _model(nodes, inputs, [_vi("y", TensorProto.FLOAT, ["b", "s", D])], inits)


def _found_at_pos(original, rows=C):
    from edgepe.graft.splice import splice_found

    return splice_found(original, prove.table_pe(rows, 18), {"pe": "cos"}, "pos",
                        {"scheme": "test"})


def test_proof_cases_a_cone_decode_step_keeps_the_whole_models_cache_short():
    """Without position_ids the whole model's last step is after DECODE_PAST tokens, unshifted
    (its positions come from the cache's length), when the cone takes the step at max_len - 1;
    with position_ids the flag changes nothing."""
    cached = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                      ("past_key_values.0.key", ["b", 2, "p", 4], "tensor(float)"))
    assert prove.proof_cases(cached, 1 << 20, cone_decode=True)[-2:] == [(3, 5, 0, 0),
                                                                         (1, 8, 0, 0)]
    assert prove.proof_cases(cached, 1 << 20)[-1] == (1, (1 << 20) - 1, 0, 0)
    assert prove.proof_cases(cached, 9, cone_decode=True)[-1] == (1, 8, 0, 0)
    assert prove.proof_cases(cached, 7, cone_decode=True)[-1] == (1, 6, 0, 0)
    positioned = _session(("input_ids", ["b", "s"], "tensor(int64)"),
                          ("position_ids", ["b", "s"], "tensor(int64)"),
                          ("past_key_values.0.key", ["b", 2, "p", 4], "tensor(float)"))
    assert prove.proof_cases(positioned, 64, cone_decode=True)[-1] == (1, 8, 0, 55)


def test_shape_read_inputs_are_those_the_cone_reads_by_shape_alone():
    model = _by_cache_length()
    assert prove._shape_read(model, ["cos"]) == {"input_ids", "past_key_values.0.key"}
    # the whole model reads the cache's values (ReduceSum) and the ids' (Gather)
    assert prove._shape_read(model, ["y"]) == set()
    assert prove._shape_read(_by_cache_length(read_cache=True), ["cos"]) == {"input_ids"}
    # an input of no declared shape (its rank unknown) is not rewritten
    bare = _by_cache_length()
    bare.graph.input[0].type.tensor_type.ClearField("shape")
    assert prove._shape_read(bare, ["cos"]) == {"past_key_values.0.key"}
    # below opset 10 (Slice without inputs), or a subgraph in the cone: none
    old = _by_cache_length()
    old.opset_import[0].version = 9
    assert prove._shape_read(old, ["cos"]) == set()
    old.opset_import[0].version = 10  # Slice takes its starts and ends as inputs from 10
    assert prove._shape_read(old, ["cos"]) == {"input_ids", "past_key_values.0.key"}
    branchy = _by_cache_length()
    branch = helper.make_graph([helper.make_node("Identity", ["C"], ["c2"])], "b", [],
                               [_vi("c2", TensorProto.FLOAT, [L, D])])
    branchy.graph.node.insert(7, helper.make_node("If", ["cond"], ["C2"], then_branch=branch,
                                                  else_branch=branch))
    branchy.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(True), "cond"))
    for node in branchy.graph.node:
        if node.op_type == "Gather" and node.input[0] == "C":
            node.input[0] = "C2"
    assert prove._shape_read(branchy, ["cos"]) == set()


def test_cone_plan_from_the_graphs():
    original = _by_cache_length()
    grafted = _found_at_pos(original).model
    assert prove._cone_plan(original, grafted, ["cos"]) == (
        ["cos"], frozenset({"input_ids", "past_key_values.0.key"}), True)
    # the cache read by value in a cone: no decode step there (the whole model's stays long)
    reading = _by_cache_length(read_cache=True)
    assert prove._cone_plan(reading, reading, ["cos"]) == (["cos"], frozenset({"input_ids"}),
                                                           False)
    # position_ids to shift: the whole model's step reaches max_len - 1 itself
    positioned = _by_cache_length(positioned=True)
    assert prove._cone_plan(positioned, positioned, ["cos"])[2] is False
    # no cache input: no decode step at all
    assert prove._cone_plan(_hf(), _hf(), ["cos"])[2] is False
    # a replaced tensor one model does not make (a weight): no cone, the whole model's step
    assert prove._cone_plan(original, grafted, ["C"]) == ([], frozenset(), False)
    assert prove._cone_plan(original, grafted, ["missing"]) == ([], frozenset(), False)
    # one replaced tensor compared in the cone, another through the outputs alone: the whole
    # model takes the step at the last position (the cone covers only the first)
    assert prove._cone_plan(original, grafted, ["cos", "C"]) == (
        ["cos"], frozenset({"input_ids", "past_key_values.0.key"}), False)
    assert prove._cone_plan(original, grafted, ["cos", "cos"])[2] is True


def test_a_shaped_cone_computes_what_the_tensor_would_give():
    """Shape with no bounds, a negative start, an end past the rank: each a Slice of the
    shape vector, equal to the Shape of a real tensor."""
    x = _vi("x", TensorProto.FLOAT, ["a", 3, "c", 2])
    nodes = [helper.make_node("Shape", ["x"], ["all"]),
             helper.make_node("Shape", ["x"], ["tail"], start=-2),
             helper.make_node("Shape", ["x"], ["mid"], start=1, end=9),
             helper.make_node("Concat", ["all", "tail", "mid"], ["dims"], axis=0),
             helper.make_node("Cast", ["dims"], ["out"], to=TensorProto.FLOAT)]
    model = _model(nodes, [x], [_vi("out", TensorProto.FLOAT, [None])])
    real = prove._cone_session(model, ["out"]).run(["out"], {
        "x": np.zeros((5, 3, 7, 2), np.float32)})[0]
    shaped = prove._cone_session(model, ["out"], shaped=frozenset({"x"}))
    assert [(i.name, i.type, i.shape) for i in shaped.get_inputs()] == [
        ("x", "tensor(int64)", [4])]
    got = shaped.run(["out"], {"x": np.asarray([5, 3, 7, 2], np.int64)})[0]
    assert real.tolist() == got.tolist() == [5, 3, 7, 2, 7, 2, 3, 7, 2]


def test_cone_feeds_give_shaped_inputs_as_their_shape():
    model = _by_cache_length()
    cone = prove._cone_session(model, ["cos"], shaped=frozenset({"past_key_values.0.key"}))
    given = prove._GraphInputs(model).get_inputs()
    feeds = prove._cone_feeds((cone,), given, frozenset({"past_key_values.0.key"}), 3, 1 << 20,
                              1 << 21, np.random.default_rng(0))
    assert set(feeds) == {"input_ids", "past_key_values.0.key"}
    assert feeds["past_key_values.0.key"].tolist() == [2, 1, 1 << 20, D]
    assert feeds["past_key_values.0.key"].dtype == np.int64 and feeds["input_ids"].shape == (2, 3)
    out = prove._cone_feed(cone, ["cos"], {**feeds, "past_key_values.0.key": np.asarray(
        [2, 1, 5, D], np.int64)}, 3, "original")
    assert out["cos"].tolist() == C[None, 5:8].astype(np.float32).tolist()


def test_prove_found_without_position_ids_takes_the_last_step_in_the_cone(monkeypatch):
    """DECODE_PAST 2 and CONE_CHUNK 3 over max_len 8: the whole model after 2 cached tokens; the
    cones at positions 0..2, 3..5, 6..7 (3 and 2 tokens after 0, 3 and 6 cached) and 1 token
    after 7, every cache fed as its shape; a last row that differs is seen there."""
    monkeypatch.setattr(prove, "DECODE_PAST", 2)
    monkeypatch.setattr(prove, "CONE_CHUNK", 3)
    original = _by_cache_length()
    calls = []
    real = prove._cone_feed

    def spy(session, names, feeds, label, which, deadline=None):
        calls.append((label, feeds["past_key_values.0.key"].tolist(),
                      feeds["input_ids"].tolist()))
        return real(session, names, feeds, label, which, deadline)

    monkeypatch.setattr(prove, "_cone_feed", spy)
    cases, checks = prove.prove_found(original, _found_at_pos(original), ["cos"], L)
    assert cases == ["1", "7", "8", "8 (left pad 3)", "3+5", "1+2", EVERY,
                     "1+7 (the replaced tensors)",
                     "1+8, 1+9, 1+19 (the replaced tensors: the original refuses them)"]
    assert [(c.name, c.max_abs_err) for c in checks] == [("y", 0.0), ("cos", 0.0)]
    # the ids and the cache both read by shape alone: each fed as its shape (then the original
    # refuses the caches past its 8 rows: nothing more compared)
    assert calls[:8:2] == [("3 (positions 0..2)", [2, 1, 0, D], [2, 3]),
                          ("3 (positions 3..5)", [2, 1, 3, D], [2, 3]),
                          ("2 (positions 6..7)", [2, 1, 6, D], [2, 2]),
                          ("1 (positions 7..7)", [2, 1, 7, D], [2, 1])]
    assert calls[1:8:2] == calls[:8:2]  # the same inputs to the grafted model's cone
    assert [c[:2] for c in calls[8:]] == [("1+8", [2, 1, 8, D]), ("1+9", [2, 1, 9, D]),
                                          ("1+19", [2, 1, 19, D])]
    rows = C.copy()
    rows[7, 1] = 0.25  # the table's last row differs: seen in the replaced tensor and y
    _, (y, cos) = prove.prove_found(original, _found_at_pos(original, rows), ["cos"], L)
    assert cos.max_abs_err == abs(0.25 - C[7, 1]) and y.max_abs_err > 0
    # where the cone reads the cache's values, the whole model takes the step after 7
    reading = _by_cache_length(read_cache=True)
    cases, _ = prove.prove_found(reading, _found_at_pos(reading), ["cos"], L)
    assert cases[-3:] == ["3+5", "1+7", EVERY]


def test_prove_found_without_position_ids_past_the_table():
    """Caches of 8, 9 and 19 tokens (past the grafted table's 8 rows) through the cones, as the
    original takes them: an original of 20 rows computes them, so a grafted table of 8 must
    refuse (it does: Gather out of range) and one of 20 whose row 9 differs is caught there."""
    long_rows = np.concatenate([C, C[::-1], C[:4]])  # 20 rows, the first 8 those of C
    original = _by_cache_length(long_rows)
    cases, (y, cos) = prove.prove_found(original, _found_at_pos(original), ["cos"], L)
    assert cases[-1] == "1+8, 1+9, 1+19 (the replaced tensors: the grafted model refuses them)"
    assert y.passed and cos.passed
    wrong = long_rows.copy()
    wrong[9, 0] += 0.5  # past max_len 8: no whole-model run and no every-position run sees it
    cases, (y, cos) = prove.prove_found(original, _found_at_pos(original, wrong), ["cos"], L)
    assert cases[-1] == "1+8, 1+9, 1+19 (the replaced tensors)"
    assert y.passed and not cos.passed and cos.max_abs_err == 0.5


class _Cone:
    """A cone session stand-in: no inputs; ``run`` returns zeros, or raises ``error``, or
    sleeps past any deadline (then fails as onnxruntime does once terminate is set)."""

    def __init__(self, error=None, slow=False):
        self.error, self.slow = error, slow

    def get_inputs(self):
        return []

    def run(self, names, feeds, options):
        if self.slow:
            time.sleep(0.3)
            if options.terminate:
                raise RuntimeError("Exiting due to terminate flag being set to true.")
        if self.error:
            raise RuntimeError(self.error)
        return [np.zeros(2, np.float32) for _ in names]


def test_outside_cone_outcomes_and_what_it_never_swallows():
    """Past the table: both compute (compared), the grafted fails (refuses), the original fails
    (nothing compared); a run past the deadline or over the memory limit is never read as a
    refusal, whichever model it is."""
    def outside(original, grafted, deadline=60.0):
        worst = {"cos": prove._Worst()}
        label = prove._outside_cone((original, grafted), ["cos"], [], frozenset(), 8,
                                    np.random.default_rng(0), {}, worst,
                                    time.monotonic() + deadline)
        return label, worst["cos"].check("cos", 0.0)

    label, check = outside(_Cone(), _Cone())
    assert label == "1+8, 1+9, 1+19 (the replaced tensors)"
    assert check.passed and check.max_abs_err == 0.0 and check.tolerance > 0  # compared
    assert outside(_Cone(), _Cone("out of range"))[0] == (
        "1+8, 1+9, 1+19 (the replaced tensors: the grafted model refuses them)")
    assert outside(_Cone("out of range"), _Cone(slow=True))[0] == (
        "1+8, 1+9, 1+19 (the replaced tensors: the original refuses them)")
    with pytest.raises(BadParameterError, match="^the original model did not finish"):
        outside(_Cone(slow=True), _Cone(), 0.05)
    with pytest.raises(ParityError, match="^the grafted model did not finish"):
        outside(_Cone(), _Cone(slow=True), 0.05)
    full = "Available memory of 4294967296 is smaller than requested bytes of 8589934592"
    with pytest.raises(BadParameterError, match="^the original model needs more than graft's"):
        outside(_Cone(full), _Cone())
    with pytest.raises(ParityError, match="^the grafted model needs more than graft's"):
        outside(_Cone(), _Cone(full))


# ---- a replaced tensor that is an initializer of the original (Whisper's encoder table) --------

def _added_whole(rows=C):
    """``y = (x + rows) * 3``, ``x [b, L, D]`` an input and ``rows`` the initializer ``T`` the
    model reads as is (``rows`` not ``C``: made by a Constant node instead, as a graft's PE)."""
    nodes = [helper.make_node("Add", ["x", "T"], ["h"]),
             helper.make_node("Mul", ["h", "three"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.asarray(3.0, np.float32), "three")]
    table = onnx.numpy_helper.from_array(np.asarray(rows, np.float32), "T")
    if rows is C:
        inits.append(table)
    else:
        nodes.insert(0, helper.make_node("Constant", [], ["T"], value=table))
    return _model(nodes, [_vi("x", TensorProto.FLOAT, ["b", L, D])],
                  [_vi("y", TensorProto.FLOAT, ["b", L, D])], inits)


def test_prove_found_compares_a_replaced_initializer_and_its_gain():
    """The original reads ``T`` as an initializer (no node makes it): it is made an output of
    both models and compared at every run, and its gain is measured by probing the initializer
    itself (``y`` moves three for one with ``T``)."""
    original = _added_whole()
    before = original.SerializeToString()
    _, checks = prove.prove_found(original, SimpleNamespace(model=_added_whole(C.copy())), ["T"],
                                  L)
    assert [(c.name, c.max_abs_err) for c in checks] == [("y", 0.0), ("T", 0.0)]
    rows = C.copy()
    rows[5, 1] = 0.5  # -0.25 in the original
    _, (y, t) = prove.prove_found(original, SimpleNamespace(model=_added_whole(rows)), ["T"], L)
    # (x + row rounds in float32: the output's difference is 2.25 within a few ulp of 3 x)
    assert y.max_abs_err == pytest.approx(2.25, abs=1e-5) and not y.passed
    assert t.max_abs_err == 0.75 and not t.passed
    gain = prove._gain(original, ["T"], [(1, 0, 0, 0)], L, ["y", "T"], 0)
    assert list(gain) == ["y"] and gain["y"] == pytest.approx(3.0, abs=3e-3)
    assert original.SerializeToString() == before


def test_prove_found_holds_each_replaced_tensor_to_its_own_bound():
    """Two PEs put in together (Whisper's decoder table, exact, and its encoder's sliced
    sinusoids): each replaced tensor gets its own bound from ``bounds``, the outputs the
    largest (``bound``) times their gain; a tensor ``bounds`` does not name gets ``bound``."""
    original = _hf()
    grafted = _found(original)
    y, cos = prove.prove_found(original, grafted, ["cos"], L, bound=0.01,
                               bounds={"cos": 0.001})[1]
    assert cos.tolerance == 0.001 + 4 * ULP_3_4
    assert (y.tolerance - 64 * ULP_3_4) / 0.02 == pytest.approx(1.0, abs=1e-3)
    y, cos = prove.prove_found(original, grafted, ["cos"], L, bound=0.01,
                               bounds={"other": 0.001})[1]
    assert cos.tolerance == 0.01 + 4 * ULP_3_4
