"""edgepe.graphs.int8 on tiny configurations (issue 33: the fast tests its mutants run).

Each of the four int8 constructions (table, projection, learned residual, quantised output) is
exported at ``max_len`` 8 with a few channels, run in onnxruntime at positions inside and outside
the table, and its manifest checked against numbers worked out here from the scheme's own
``encode`` (tests/_table_oracle.py) and the formulas of the module docstring: the scales
(``max|x| / 127`` rounded to float32, or up to float16), the int8 values (``round(x / s)``), the
error replayed as the graph computes it, and each bound. The helpers (``_int8_gathers``,
``_clamp_inputs``, ``max_popcount``, ``runtime_section``...) run on hand-made graphs and values.
Each test takes tens of milliseconds (the few larger replays, 4100 or 512 positions, a few hundred).
"""

from __future__ import annotations

import copy
import io
import json
from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from _table_oracle import clamped_reference, expected_table
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.export.options import make_config
from edgepe.graphs import int8 as i8
from edgepe.graphs.quant import OUTPUT_ROW, measure_table
from edgepe.graphs.table_values import table_rows
from edgepe.schemes import build, get_spec

U = 2.0**-24
L = 8
# in range, past the end, negative, and far out (2^40 + 5 wraps to 5 for n = 4 bits)
POSITIONS = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 13, 31, -1, -8, 2**40 + 5], dtype=np.int64)
INSIDE = slice(0, 8)


def _export(scheme, max_len=L, module=None, **kw):
    config = make_config(scheme, max_len, quantize="int8", format="onnx", **kw)
    module = build(config.scheme, seed=config.seed) if module is None else module
    prepared = prepare(config, module)
    out = io.BytesIO()
    prepared.write(out)
    return config, module, prepared.manifest, out.getvalue()


def _run(data: bytes, **feeds) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _inits(data: bytes) -> dict[str, np.ndarray]:
    model = onnx.load_from_string(data)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _nodes(data: bytes):
    return [(n.op_type, n.name, list(n.input), list(n.output),
             {a.name: helper.get_attribute_value(a) for a in n.attribute})
            for n in onnx.load_from_string(data).graph.node]


def _scales(peak) -> np.ndarray:
    """float32 ``max|x| / 127`` (1 for an all-zero channel): onnxruntime's symmetric rule."""
    peak = np.asarray(peak, dtype=np.float64)
    s = (peak / 127).astype(np.float32)
    assert (s[peak > 0] >= np.finfo(np.float32).tiny).all()  # normal: no rounding up needed
    return np.where(peak > 0, s, np.float32(1)).astype(np.float32)


def _half_up(peak) -> np.ndarray:
    """The smallest float16 at or above ``max|x| / 127``."""
    exact = np.asarray(peak, dtype=np.float64) / 127
    h = exact.astype(np.float16)
    return np.where(h.astype(np.float64) < exact, np.nextafter(h, np.float16(np.inf)), h)


def _q(x, s) -> np.ndarray:
    return np.clip(np.rint(np.asarray(x, np.float64) / np.asarray(s, np.float64)), -127,
                   127).astype(np.int8)


def _names_its_tensors(manifest, data) -> None:
    """The manifest's ``tensor`` and ``scale_tensor`` name initializers of the graph."""
    inits = _inits(data)
    quant = manifest["quant"]
    if quant["tensor"] in ("pe_int8", "bias_int8"):  # a quantised output: a node's output
        assert quant["tensor"] in [o for n in _nodes(data) for o in n[3]]
    else:
        assert inits[quant["tensor"]].dtype == np.int8
    assert inits[quant["scale_tensor"]].dtype in (np.float32, np.float16)


def _scale_list(quant) -> np.ndarray:
    return np.atleast_1d(np.asarray(quant["scale"], dtype=np.float64))


RAM_FOLD = ("fold: onnxruntime constant-folds Cast(int8) * scale at session load, so the "
            "session holds the float32 tensor (the file stays int8)")
RAM_LIVE = ("live: the session holds the int8 tensor and its scales; each call dequantises "
            "only the rows or the sum it uses")


# ---- small helpers ------------------------------------------------------------------------------


def test_max_popcount_is_the_most_ones_of_any_position():
    for max_len in [*range(1, 70), 127, 128, 129, 255, 256, 1000, 1024, 1025]:
        want = max(bin(p).count("1") for p in range(max_len))
        assert i8.max_popcount(max_len) == want, max_len


def test_runtime_section_says_what_the_session_holds():
    assert i8.runtime_section("fold", 400, 120) == {"runtime": "fold", "ram_bytes": 400,
                                                    "ram_why": RAM_FOLD}
    assert i8.runtime_section("live", 400, 120) == {"runtime": "live", "ram_bytes": 120,
                                                    "ram_why": RAM_LIVE}


def test_zero_points_are_int8_zeros_per_channel_or_one():
    z = i8._zero_points(np.ones(3, np.float32), True)
    assert z.dtype == np.int8 and z.shape == (3,) and not z.any()
    z = i8._zero_points(np.ones(3, np.float32), False)
    assert z.dtype == np.int8 and z.shape == () and z == 0


def test_attr_reads_an_attribute_or_the_default():
    node = helper.make_node("Gather", ["a", "b"], ["c"], axis=1)
    assert i8._attr(node, "axis", 0) == 1
    assert i8._attr(node, "batch_dims", 7) == 7
    assert i8._attr(helper.make_node("Gather", ["a", "b"], ["c"]), "axis", 0) == 0


def test_embedded_keeps_only_the_graphs_quant_fields():
    config, _, manifest, data = _export("integer", d_model=4)
    embedded = i8.embedded(manifest)
    assert set(embedded["quant"]) == set(i8.EMBEDDED_QUANT) & set(manifest["quant"])
    assert {k: manifest["quant"][k] for k in embedded["quant"]} == embedded["quant"]
    props = {p.key: p.value for p in onnx.load_from_string(data).metadata_props}
    stored = json.loads(next(v for v in props.values() if '"quant"' in v))
    assert stored["quant"] == json.loads(json.dumps(embedded["quant"]))


def test_check_measurable_at_its_edge():
    config = make_config("integer", L, d_model=4, quantize="int8",
                         max_table_bytes=4 * L * 4)
    i8.check_measurable(config)
    with pytest.raises(BadParameterError) as exc:
        i8.check_measurable(replace(config, max_table_bytes=4 * L * 4 - 1))
    assert str(exc.value) == (
        "--quantize int8 measures the error over all 8 x 4 in-range values (128 bytes of "
        "float32, past --max-table-bytes 127): raise --max-table-bytes or lower --max-len")
    with pytest.raises(BadParameterError) as exc:  # build_int8 checks it before any work
        _export("integer", d_model=4, max_table_bytes=127)
    assert "past --max-table-bytes 127" in str(exc.value)


def test_dequantize_is_a_cast_and_one_product():
    nodes = i8._dequantize("q", "s", "out")
    assert [(n.op_type, n.name, list(n.input), list(n.output)) for n in nodes] == [
        ("Cast", "out_cast", ["q"], ["out_float"]), ("Mul", "out_scale", ["out_float", "s"],
                                                     ["out"])]
    assert i8._attr(nodes[0], "to", None) == TensorProto.FLOAT
    q = np.array([[-127, 3], [5, 127]], np.int8)
    s = np.array([0.1, 3.0], np.float32)
    graph = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(q, "q"), numpy_helper.from_array(s, "s")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)],
                             ir_version=9).SerializeToString()
    assert np.array_equal(_run(data), q.astype(np.float32) * s)


# ---- refusals -----------------------------------------------------------------------------------


def test_build_int8_refusals():
    with pytest.raises(BadParameterError) as exc:
        _export("integer", d_model=4, opset=18)
    assert "--quantize int8 (DequantizeLinear per channel, which onnx's reference evaluator " \
           "implements from opset 19)" in str(exc.value)
    with pytest.raises(BadParameterError) as exc:
        _export("rope", d_model=4, extra={"rope_graph": "apply"})
    assert str(exc.value) == (
        "--quantize int8 applies to rope's encode graph (cos/sin) and tables; the apply graph's "
        "output depends on x, which no static int8 scale covers")
    with pytest.raises(BadParameterError) as exc:
        _export("binary", d_model=4, mode="sliced")
    assert str(exc.value) == (
        "--mode sliced --quantize int8 for 'binary' is a C header (--format c: int16 sums of the "
        "int8 projection); its int8 ONNX graph is --mode compute")
    with pytest.raises(BadParameterError):  # exact schemes are not quantised
        _export("gray", d_model=4)


# ---- 1. tables ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("runtime", "granularity"), [
    ("fold", "channel"), ("fold", "tensor"), ("live", "channel"), ("live", "tensor")])
def test_table_graph(runtime, granularity):
    config, module, manifest, data = _export("sinusoidal", d_model=4, mode="table",
                                             int8_runtime=runtime, quant_granularity=granularity)
    ref = expected_table(config.scheme, module)  # [8, 4] float32
    peak = np.abs(ref).max(axis=0) if granularity == "channel" else np.array([np.abs(ref).max()])
    s = _scales(peak)
    inits = _inits(data)
    q = inits["table_int8"]
    assert q.dtype == np.int8 and np.array_equal(q, _q(ref, s))
    assert "table" not in inits  # the float32 table is gone
    assert np.array_equal(inits["table_scale"], s if granularity == "channel" else s[0])
    assert ("table_zero_point" in inits) is (runtime == "live" and granularity == "tensor")
    deq = q.astype(np.float32) * s
    got = _run(data, positions=POSITIONS)
    assert np.array_equal(got, deq[np.clip(POSITIONS, 0, L - 1)])  # DequantizeLinear's value

    quant = manifest["quant"]
    _names_its_tensors(manifest, data)
    assert np.array_equal(_scale_list(quant), s)
    assert quant["max_abs_err"] == float(np.abs(deq.astype(np.float64) - ref).max())
    assert quant["bound"] == pytest.approx(float((s * (0.5 + 127 * U)).max()), rel=1e-13, abs=0)
    assert (quant["tensor"], quant["scale_tensor"]) == ("table_int8", "table_scale")
    assert quant["runtime"] == runtime
    assert quant["ram_bytes"] == (4 * L * 4 if runtime == "fold" else L * 4 + 4 * s.size)
    assert quant["ram_why"] == (RAM_FOLD if runtime == "fold" else RAM_LIVE)

    nodes = _nodes(data)
    outputs = [o for n in nodes for o in n[3]]
    if runtime == "fold":  # dequantised in front, the float graph unchanged after it
        assert nodes[:2] == [("Cast", "table_cast", ["table_int8"], ["table_float"], {"to": 1}),
                             ("Mul", "table_scale", ["table_float", "table_scale"], ["table"], {})]
        assert nodes[-1][0] == "Gather" and nodes[-1][2][0] == "table"
    else:  # the Gather reads int8 rows; nothing makes the whole float table
        assert "table" not in outputs and "table_float" not in outputs
        gather = next(n for n in nodes if n[0] == "Gather")
        assert gather[2][0] == "table_int8" and gather[3] == ["pe_int8"]
        assert gather[4] == {"axis": 0}
        tail = [n for n in nodes if n[2] and n[2][0] in ("pe_int8", "pe_float")]
        if granularity == "tensor":
            assert tail == [("DequantizeLinear", f"{gather[1]}_dq",
                             ["pe_int8", "table_scale", "table_zero_point"], ["pe"], {})]
        else:
            assert tail == [("Cast", "pe_cast", ["pe_int8"], ["pe_float"], {"to": 1}),
                            ("Mul", "pe_scale", ["pe_float", "table_scale"], ["pe"], {})]
    model = onnx.load_from_string(data)
    assert model.graph.name.endswith("_int8")
    assert [(o.domain, o.version) for o in model.opset_import] == [("", config.opset)]


def _table_graph(*nodes, outputs, extra_init=()):
    table = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 4
    graph = helper.make_graph(
        list(nodes), "g",
        [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(table, "T"), *extra_init])
    return graph, table


def _gathers_model(graph, table, runtime, granularity="channel"):
    tq = measure_table(granularity, lambda: iter([table]))
    nodes, inits, names = i8._int8_gathers(graph, table.shape, tq, runtime)
    assert names == ("T_int8", "T_scale")
    model = helper.make_model(helper.make_graph(nodes, "g", graph.input, graph.output, inits),
                              opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    s = tq.scale
    return model, nodes, _q(table, s).astype(np.float32) * s


def test_int8_gathers_keeps_a_gather_along_another_axis_whole():
    pos = np.array([2, 0, 2], np.int64)
    # axis 0 Gather read as int8 rows; a Gather along axis 1 needs the whole table
    graph, table = _table_graph(helper.make_node("Gather", ["T", "positions"], ["rows"], axis=0),
                                helper.make_node("Gather", ["T", "positions"], ["cols"], axis=1),
                                outputs=["rows", "cols"])
    model, nodes, deq = _gathers_model(graph, table, "live")
    assert [n.op_type for n in nodes] == ["Cast", "Mul", "Gather", "Cast", "Mul", "Gather"]
    assert list(nodes[2].input) == ["T_int8", "positions"] and nodes[5].input[0] == "T"
    rows, cols = ort.InferenceSession(model.SerializeToString(),
                                      providers=["CPUExecutionProvider"]).run(
        None, {"positions": pos})
    assert np.array_equal(rows, deq[pos]) and np.array_equal(cols, deq[:, pos])
    # only axis-0 Gathers (the default axis too): no whole table in front
    graph, table = _table_graph(helper.make_node("Gather", ["T", "positions"], ["rows"]),
                                outputs=["rows"])
    model, nodes, deq = _gathers_model(graph, table, "live")
    assert [n.op_type for n in nodes] == ["Gather", "Cast", "Mul"]
    assert np.array_equal(_run(model.SerializeToString(), positions=pos), deq[pos])
    # fold: always the whole table in front, the Gather unchanged
    model, nodes, deq = _gathers_model(graph, table, "fold")
    assert [n.op_type for n in nodes] == ["Cast", "Mul", "Gather"]
    assert np.array_equal(_run(model.SerializeToString(), positions=pos), deq[pos])


def test_int8_gathers_finds_exactly_one_float32_table():
    gather = helper.make_node("Gather", ["T", "positions"], ["rows"])
    ints = numpy_helper.from_array(np.zeros((4, 3), np.int64), "I")  # same shape, not float32
    graph, table = _table_graph(gather, outputs=["rows"], extra_init=[ints])
    _, nodes, _ = _gathers_model(graph, table, "live")
    assert [n.op_type for n in nodes] == ["Gather", "Cast", "Mul"]
    twin = numpy_helper.from_array(np.zeros((4, 3), np.float32), "T2")
    graph, table = _table_graph(gather, outputs=["rows"], extra_init=[twin])
    tq = measure_table("channel", lambda: iter([table]))
    with pytest.raises(RuntimeError) as exc:
        i8._int8_gathers(graph, table.shape, tq, "live")
    assert str(exc.value) == "graph g: expected one float32 [4, 3] initializer, found 2"
    with pytest.raises(RuntimeError) as exc:
        i8._int8_gathers(graph, (3, 4), tq, "live")
    assert str(exc.value) == "graph g: expected one float32 [3, 4] initializer, found 0"


# ---- position clamping --------------------------------------------------------------------------


def test_clamp_inputs_clamps_int64_inputs_only():
    config = make_config("integer", 5, d_model=4, quantize="int8")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["positions"], ["p"], name="pass_p"),
         helper.make_node("Identity", ["x"], ["y"], name="pass_x")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"]),  # skipped, then clamped
         helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("p", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    pos = np.array([-2**62, -3, 0, 2, 4, 5, 2**31, 2**62], np.int64)
    x = np.arange(8, dtype=np.float32)
    for kw, low, high in (({}, 0, 4), ({"low": -3, "high": 2**31 - 1}, -3, 2**31 - 1)):
        nodes, bounds = i8._clamp_inputs(config, graph, **kw)
        assert [(b.name, int(numpy_helper.to_array(b))) for b in bounds] == [
            ("clamp_low", low), ("clamp_high", high)]
        assert all(numpy_helper.to_array(b).dtype == np.int64 for b in bounds)
        assert [n.op_type for n in nodes] == ["Less", "Where", "Greater", "Where", "Identity",
                                              "Identity"]
        assert [n.name for n in nodes[:4]] == ["positions_below", "positions_raise",
                                               "positions_above", "positions_lower"]
        assert list(nodes[4].input) == ["positions_clamped"] and list(nodes[5].input) == ["x"]
        assert list(graph.node[0].input) == ["positions"]  # the graph itself is not changed
        model = helper.make_model(helper.make_graph(nodes, "g", graph.input, graph.output,
                                                    bounds),
                                  opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
        p, y = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(
            None, {"positions": pos, "x": x})
        assert np.array_equal(p, np.clip(pos, low, high)) and np.array_equal(y, x)


# ---- 2. projections -----------------------------------------------------------------------------


def _weight(scheme, module):
    if scheme == "binary":
        return module.projection.weight.detach().numpy().T.astype(np.float32)
    return module.basis.detach().numpy().astype(np.float32)


def _per_bit_term(n, sums):
    gamma = n * U / (1 - n * U)
    return 0.5 + 127 * U + sums * 127 * (1 + U) * gamma


def _bits(pos, n):
    return ((np.asarray(pos, np.int64)[:, None] >> np.arange(n)) & 1)


PROJECTION_WHY = ("sum over the active bits of {step} (1/2 + 127u + 2 x 127(1+u) gamma_n) a bit: "
                  "half a step and the float32 dequantise, the graph's float32 sum of the "
                  "dequantised weights and the float32 reference's own dot product (u = 2^-24): "
                  "at most n = 4 active bits at any position (they wrap mod 2^n), at most 3 at "
                  "positions 0..7 (bound_in_range)")


@pytest.mark.parametrize(("scheme", "d", "runtime", "granularity"), [
    ("binary", 4, "fold", "channel"), ("binary", 32, "fold", "channel"),
    ("binary", 4, "fold", "tensor"), ("binary", 4, "live", "channel"),
    ("binary", 4, "live", "tensor"), ("fourier-binary", 6, "fold", "channel"),
    ("fourier-binary", 6, "live", "channel")])
def test_projection_graph(scheme, d, runtime, granularity):
    config, module, manifest, data = _export(scheme, d_model=d, int8_runtime=runtime,
                                             quant_granularity=granularity)
    n = config.scheme.n_bits
    assert n == 4  # ceil(log2(L + 1))
    w = _weight(scheme, module)  # [n, d]
    ref = expected_table(config.scheme, module)
    rows = runtime == "live"
    if granularity == "tensor":
        peak = np.array([np.abs(w).max()])
    else:
        peak = np.abs(w).max(axis=1 if rows else 0)
    half = not rows and granularity == "channel" and 2 * d > 56
    s = _half_up(peak).astype(np.float32) if half else _scales(peak)
    inits = _inits(data)
    q = inits["weight_int8"]
    s_b = s[:, None] if rows and s.size > 1 else s
    assert q.dtype == np.int8 and np.array_equal(q, _q(w, s_b))
    quant = manifest["quant"]
    _names_its_tensors(manifest, data)
    assert onnx.load_from_string(data).graph.name == f"{scheme.replace('-', '_')}_int8"
    assert np.array_equal(_scale_list(quant), s)
    assert quant["axis"] == ((0 if rows else 1) if granularity == "channel" else None)
    if rows:  # s_k 2^-k per row in one DequantizeLinear
        s_n = np.broadcast_to(s, (n,))
        assert np.array_equal(inits["weight_scale_masked"], s_n * 2.0 ** -np.arange(n))
        assert inits["zero_point"].dtype == np.int8 and inits["zero_point"].shape == (n,)
        assert quant["scale_tensor"] == "weight_scale_masked"
        dq = [n for n in _nodes(data) if n[0] == "DequantizeLinear"]
        assert [(n[2], n[4]) for n in dq] == [
            (["weight_int8", "weight_scale_masked", "zero_point"], {"axis": 0})]
        deq = q.astype(np.float32) * s_n.astype(np.float32)[:, None]
    else:
        stored = inits["weight_scale"]
        assert stored.dtype == (np.float16 if half else np.float32)
        assert np.array_equal(stored.astype(np.float32), s if granularity == "channel" else s[0])
        assert np.array_equal(inits["mask_inverse"].reshape(-1), 2.0 ** -np.arange(n))
        assert quant["scale_tensor"] == "weight_scale"
        deq = q.astype(np.float32) * s
    # the replayed error: the float32 sum of the dequantised weights over positions 0..7
    out = _bits(np.arange(L), n).astype(np.float32) @ deq
    assert quant["max_abs_err"] == float(np.abs(out.astype(np.float64) - ref).max())
    term = s.astype(np.float64) * _per_bit_term(n, 2) * (peak > 0)
    if rows:
        ranked = np.sort(np.broadcast_to(term, (n,)))[::-1]
        bound, in_range = np.full(d, ranked.sum()), ranked[:3].sum()
    else:
        bound, in_range = np.broadcast_to(n * term, (d,)), 3 * term.max()
    assert quant["bound"] == pytest.approx(float(bound.max()), rel=1e-13, abs=0)
    if granularity == "channel":
        assert quant["bound_per_channel"] == pytest.approx(bound.tolist(), rel=1e-13, abs=0)
    assert quant["bound_in_range"] == pytest.approx(float(in_range), rel=1e-13, abs=0)
    assert quant["max_popcount"] == 3
    assert quant["bound_why"] == PROJECTION_WHY.format(step="s_k" if rows else "s_j")
    assert quant["measured_over"] == ("every position 0..7, replaying the float32 sum of the "
                                      "dequantised weights")
    assert (quant["tensor"], quant["bytes_of"]) == ("weight_int8", "projection weights")
    assert quant["bytes"] == {"float32": 4 * n * d, "int8": n * d + (2 if half else 4) * s.size}
    assert quant["scale_storage"] == ("float16" if half else "float32")
    assert quant["runtime"] == runtime
    assert quant["ram_bytes"] == (n * d + 4 * n if rows else 4 * n * d)
    # onnxruntime: every int64 position wraps to pos mod 2^n; within the bound everywhere and
    # within bound_in_range at 0..7
    got = _run(data, positions=POSITIONS)
    with torch.no_grad():
        want = module.encode(torch.from_numpy(POSITIONS)).numpy().astype(np.float64)
    err = np.abs(got - want)
    assert (err <= bound * (1 + 1e-9)).all()
    assert err[INSIDE].max() <= in_range * (1 + 1e-9)
    # the wrap: 2^40 + 5 reads as 5, -1 as 31 (both 15 mod 16), -8 as 8
    assert np.array_equal(got[13], got[5]) and np.array_equal(got[11], got[10])
    assert np.array_equal(got[12], got[8])


def test_projection_quant_with_an_exact_integer_sum():
    config = make_config("binary", L, d_model=4, quantize="int8")
    module = build(config.scheme, seed=config.seed)
    q, scale, half, quant = i8.projection_quant(config, module, "int32")
    w = _weight("binary", module)
    s = _scales(np.abs(w).max(axis=0))
    assert half is None and np.array_equal(scale, s) and np.array_equal(q, _q(w, s))
    ref = expected_table(config.scheme, module)
    out = (_bits(np.arange(L), 4).astype(np.int32) @ q.astype(np.int32)).astype(np.float32) * s
    assert quant["max_abs_err"] == float(np.abs(out.astype(np.float64) - ref).max())
    term = s.astype(np.float64) * _per_bit_term(4, 1)
    assert quant["bound_per_channel"] == pytest.approx((4 * term).tolist(), rel=1e-13, abs=0)
    assert quant["bound_in_range"] == pytest.approx(float(3 * term.max()), rel=1e-13, abs=0)
    assert quant["bound_why"] == (
        "sum over the active bits of half a step, s_j (1/2 + 127u + 127(1+u) gamma_n) a bit with "
        "the float32 dequantise and the float32 reference's own dot product (u = 2^-24): at most "
        "n = 4 active bits at any position (they wrap mod 2^n), at most 3 at positions 0..7 "
        "(bound_in_range)")
    assert quant["measured_over"] == "every position 0..7, replaying the integer arithmetic"
    assert quant["axis"] == 1  # column scales by default (s_j factors out of a column's sum)


def test_the_int32_and_float32_sums_are_replayed_each_as_computed():
    config = make_config("binary", 512, d_model=16, quantize="int8")
    module = build(config.scheme, seed=config.seed)
    ref = expected_table(config.scheme, module)
    bits = _bits(np.arange(512), config.scheme.n_bits)
    errors = {}
    for summation in ("int32", "float32"):
        q, scale, half, quant = i8.projection_quant(config, module, summation)
        s = scale.astype(np.float32)
        if summation == "int32":
            out = (bits.astype(np.int32) @ q.astype(np.int32)).astype(np.float32) * s
        else:
            out = bits.astype(np.float32) @ (q.astype(np.float32) * s)
        errors[summation] = float(np.abs(out.astype(np.float64) - ref).max())
        assert quant["max_abs_err"] == errors[summation]
    assert errors["int32"] != errors["float32"]


@pytest.mark.parametrize(("d", "stored"), [(28, np.float32), (29, np.float16)])
def test_float16_column_scales_pay_from_29_channels_on(d, stored):
    """A Cast node costs 56 bytes; float16 scales save 2 bytes each: from 29 channels on."""
    config = make_config("binary", L, d_model=d, quantize="int8")
    module = build(config.scheme, seed=config.seed)
    q, scale, half, quant = i8.projection_quant(config, module, "float32")
    peak = np.abs(_weight("binary", module)).max(axis=0)
    assert scale.dtype == np.float32
    if stored is np.float16:
        assert half.dtype == np.float16 and np.array_equal(half, _half_up(peak))
        assert np.array_equal(scale, half.astype(np.float32))
    else:
        assert half is None and np.array_equal(scale, _scales(peak))
    assert quant["scale_storage"] == np.dtype(stored).name


def test_row_scales_of_two_bits():
    """max_len 3: n = 2 bits, one scale per row (bit), the live graph's."""
    config = make_config("binary", 3, d_model=4, quantize="int8", int8_runtime="live")
    module = build(config.scheme, seed=config.seed)
    assert config.scheme.n_bits == 2
    q, scale, half, quant = i8.projection_quant(config, module, "float32", axis=0)
    w = _weight("binary", module)
    s = _scales(np.abs(w).max(axis=1))
    assert half is None and np.array_equal(scale, s) and np.array_equal(q, _q(w, s[:, None]))
    out = _bits(np.arange(3), 2).astype(np.float32) @ (q.astype(np.float32) * s[:, None])
    ref = expected_table(config.scheme, module)
    assert quant["max_abs_err"] == float(np.abs(out.astype(np.float64) - ref).max())


def test_replay_projection_goes_chunk_by_chunk_from_position_0():
    """8196 positions: three iter_table chunks (4096 + 4096 + 4), each starting where the last
    ended (with two, the second's start 4096 is also len(ref), and -4096 has 4096's 13 bits)."""
    config = make_config("binary", 8196, d_model=4, quantize="int8")
    module = build(config.scheme, seed=config.seed)
    n = config.scheme.n_bits
    w = _weight("binary", module)
    s = _scales(np.abs(w).max(axis=0))
    q = _q(w, s)
    deq = q.astype(np.float32) * s
    ref = expected_table(config.scheme, module)
    bits = _bits(np.arange(8196), n)
    want = float(np.abs((bits.astype(np.float32) @ deq).astype(np.float64) - ref).max())
    assert i8._replay_projection(config, module, q, s, deq, False) == want
    out = (bits.astype(np.int32) @ q.astype(np.int32)).astype(np.float32) * s
    want = float(np.abs(out.astype(np.float64) - ref).max())
    assert i8._replay_projection(config, module, q, s, deq, True) == want


def test_projection_with_an_all_zero_column_and_subnormal_row_scales():
    """A zero column is exact (bound 0 there). Row scales s_k = 1.5e-38 (normal) whose
    s_k 2^-k is subnormal (inexact) but every q s_k 2^-k normal (exact): the mask form stays,
    s_k is stored unmasked and a Mul by 2^-k follows the DequantizeLinear. Weights of 1e-36
    (inexact times 2^-k): the shift form, no mask_inverse at all."""
    config = make_config("binary", L, d_model=4, quantize="int8", int8_runtime="live")
    module = build(config.scheme, seed=config.seed)
    w = _weight("binary", module)
    c = np.float32(127 * 1.5e-38)
    for weights, inverse in ((np.where(w >= 0, c, -c), True),
                             (w * 1e-36 / np.abs(w).max(), False)):
        with torch.no_grad():
            module.projection.weight.copy_(torch.from_numpy(weights.astype(np.float32).T.copy()))
        _, _, manifest, data = _export("binary", d_model=4, module=module, int8_runtime="live")
        inits = _inits(data)
        assert "weight_scale_masked" not in inits
        assert manifest["quant"]["scale_tensor"] == "weight_scale"
        assert ("mask_inverse" in inits) is inverse
        if inverse:
            assert np.array_equal(inits["mask_inverse"].reshape(-1), 2.0 ** -np.arange(4))
        _names_its_tensors(manifest, data)
        ops = [n[0] for n in _nodes(data)]
        assert ops.count("DequantizeLinear") == 1 and ("Mul" in ops) is inverse
        dq = next(n for n in _nodes(data) if n[0] == "DequantizeLinear")
        assert (dq[2], dq[4]) == (["weight_int8", "weight_scale", "zero_point"], {"axis": 0})
        # the session holds q, the n row scales (and the n mask_inverse values)
        assert manifest["quant"]["ram_bytes"] == 16 + 4 * 4 * (2 if inverse else 1)
        got = _run(data, positions=POSITIONS[INSIDE])
        assert (np.abs(got - expected_table(config.scheme, module)) <=
                manifest["quant"]["bound_in_range"]).all()

    # fold with the same tiny weights: the dequantised weights' 2^-k scaling is inexact, so
    # the graph takes the shift form (BitShift, no mask_inverse)
    _, _, manifest, data = _export("binary", d_model=4, module=module)
    assert "mask_inverse" not in _inits(data) and "BitShift" in [n[0] for n in _nodes(data)]
    got = _run(data, positions=POSITIONS)
    with torch.no_grad():
        want = module.encode(torch.from_numpy(POSITIONS)).numpy()
    assert (np.abs(got - want) <= manifest["quant"]["bound"]).all()

    # fold, one column all zeros: its scale is 1, its bound 0, its output exactly 0
    module = build(config.scheme, seed=config.seed)
    w = _weight("binary", module)
    w[:, 2] = 0
    with torch.no_grad():
        module.projection.weight.copy_(torch.from_numpy(w.T.copy()))
    _, _, manifest, data = _export("binary", d_model=4, module=module)
    quant = manifest["quant"]
    assert quant["scale"][2] == 1.0 and quant["bound_per_channel"][2] == 0.0
    assert quant["bound_per_channel"][0] > 0
    assert not _run(data, positions=POSITIONS)[:, 2].any()


def test_projection_with_the_shift_lowering_keeps_row_scales_unmasked():
    config, module, manifest, data = _export("binary", d_model=4, int8_runtime="live",
                                             lowering="arith")
    inits = _inits(data)
    assert manifest["quant"]["scale_tensor"] == "weight_scale" and "mask_inverse" not in inits
    assert manifest["quant"]["ram_bytes"] == 16 + 4 * 4
    got = _run(data, positions=POSITIONS[INSIDE])
    assert (np.abs(got - expected_table(config.scheme, module)) <=
            manifest["quant"]["bound_in_range"]).all()


# ---- 3. the learned residual --------------------------------------------------------------------


RESIDUAL_WHY = ("half a step of the int8 residual table (s/2 + 127 u s), plus the float graph's "
                "tolerance for the sinusoid, plus the rounding of the final float32 addition on "
                "both sides (2 u (1 + max|r|)); u = 2^-24; positions outside the table use no "
                "residual, so the float graph's own tolerance applies there")


@pytest.mark.parametrize(("runtime", "granularity"), [
    ("fold", "channel"), ("live", "channel"), ("fold", "tensor")])
def test_residual_graph(runtime, granularity):
    plain = make_config("sinusoidal-learned", L, d_model=4, quantize="int8")
    module = build(plain.scheme, seed=plain.seed)
    with torch.no_grad():
        module.residual[:, 1] = 0  # an all-zero channel: scale 1, no half step
    config, module, manifest, data = _export("sinusoidal-learned", d_model=4, module=module,
                                             int8_runtime=runtime, quant_granularity=granularity)
    rows = module.residual.detach().numpy().astype(np.float32)
    assert np.abs(rows).max() > 0 and not rows[:, 1].any()
    m = np.abs(rows.astype(np.float64))
    m = m.max(axis=0) if granularity == "channel" else np.array([m.max()])
    s = _scales(m)
    inits = _inits(data)
    q = inits["residual_int8"]
    assert np.array_equal(q, _q(rows, s))
    fixed_module = copy.deepcopy(module)
    with torch.no_grad():
        fixed_module.residual.zero_()
        pos = torch.arange(L)
        fixed, ref = fixed_module.encode(pos).numpy(), module.encode(pos).numpy()
    out = fixed + q.astype(np.float32) * s  # the graph's one float32 addition
    quant = manifest["quant"]
    assert quant["max_abs_err"] == float(np.abs(out.astype(np.float64) - ref).max())
    rtol, atol = get_spec("sinusoidal-learned").tolerance
    assert rtol == 0  # (so the rtol terms of the bound are not observable here)
    s64 = s.astype(np.float64)
    bound = atol + rtol * (1 + m) + s64 * (0.5 + 127 * U) * (m > 0) + 2 * U * (1 + m + s64)
    assert quant["bound"] == pytest.approx(float(bound.max()), rel=1e-13, abs=0)
    if granularity == "channel":
        assert quant["bound_per_channel"] == pytest.approx(bound.tolist(), rel=1e-13, abs=0)
    assert np.array_equal(_scale_list(quant), s) and quant["axis"] == (
        1 if granularity == "channel" else None)
    assert quant["bound_why"] == RESIDUAL_WHY
    _names_its_tensors(manifest, data)
    nodes = _nodes(data)
    gather = next(n for n in nodes if n[0] == "Gather")
    outputs = [o for n in nodes for o in n[3]]
    if runtime == "live":  # int8 rows gathered, dequantised after; no whole float table
        assert gather[2][0] == "residual_int8" and "residual" not in outputs
    else:
        assert gather[2][0] == "residual" and nodes[1][3] == ["residual"]
    assert quant["measured_over"] == "every position 0..7, replaying the graph's addition"
    assert quant["bytes"] == {"float32": 4 * L * 4, "int8": L * 4 + 4 * s.size}
    assert (quant["tensor"], quant["scale_tensor"]) == ("residual_int8", "residual_scale")
    assert quant["bytes_of"] == "learned residual table"
    assert quant["runtime"] == runtime and quant["ram_why"] == (
        RAM_FOLD if runtime == "fold" else RAM_LIVE)
    assert quant["ram_bytes"] == (4 * L * 4 if runtime == "fold" else L * 4 + 4 * s.size)
    got = _run(data, positions=POSITIONS[:-1])  # sinusoids: |positions| <= 2^24
    assert (np.abs(got[INSIDE] - ref) <= bound).all()
    with torch.no_grad():  # outside the table: no residual, the float graph's sinusoid
        outside = fixed_module.encode(torch.from_numpy(POSITIONS[L:-1])).numpy()
    assert (np.abs(got[L:] - outside) <= atol).all()


# ---- 4. quantised outputs -----------------------------------------------------------------------


def _peak(config, module, granularity):
    """The range the output scale must cover, from encode: every position's values."""
    s = config.scheme
    with torch.no_grad():
        if s.scheme in ("sinusoidal", "rope"):  # +-1 at every position
            p = np.maximum(np.abs(expected_table(s, module)).max(axis=0), 1.0)
        elif s.spec.oob == "wrap":  # all 2^n bit patterns
            p = np.abs(module.encode(torch.arange(2**s.n_bits)).numpy()).max(axis=0)
        else:  # clamped to the table
            p = np.abs(expected_table(s, module)).max(axis=0)
    p = p.astype(np.float64)
    return p if granularity == "channel" else np.array([p.max()])


WHERE = {"clamp": "every position (the graph clamps positions to the table, as tables do)",
         "wrap": "every position (the scale covers all 2^n bit patterns)",
         "unit": "every position (the scale covers +-1, the range of sin/cos)"}


@pytest.mark.parametrize(("scheme", "kw", "policy"), [
    ("integer", {"d_model": 4}, "clamp"),
    ("integer", {"d_model": 4, "quant_granularity": "tensor"}, "clamp"),
    ("sinusoidal", {"d_model": 4}, "unit"),
    ("sinusoidal", {"d_model": 4, "quant_granularity": "tensor"}, "unit"),
    ("binary-smooth", {}, "wrap"),
    ("hybrid-int-binary", {}, "clamp"),
    ("integer-learnable", {"d_model": 4}, "clamp"),  # rtol > 0: the bound's rtol |x| term
])
def test_quantised_output_graph(scheme, kw, policy):
    config, module, manifest, data = _export(scheme, **kw)
    granularity = config.quant_granularity
    per_channel = granularity == "channel"
    peak = _peak(config, module, granularity)
    s = _scales(peak)
    quant = manifest["quant"]
    assert np.array_equal(_scale_list(quant), s)
    ref = expected_table(config.scheme, module)
    cols = ref.shape[1]
    err = np.abs((_q(ref, s).astype(np.float32) * s).astype(np.float64) - ref).max()
    assert quant["max_abs_err"] == float(err)
    rtol, atol = config.scheme.spec.tolerance
    s64 = s.astype(np.float64)
    bound = np.where(peak > 0, s64 * (0.5 + 383 * U), 0.0) + atol + rtol * peak
    assert quant["bound"] == pytest.approx(float(bound.max()), rel=1e-13, abs=0)
    if per_channel:
        assert quant["bound_per_channel"] == pytest.approx(bound.tolist(), rel=1e-13, abs=0)
    assert quant["axis"] == (1 if per_channel else None)
    assert quant["bound_why"] == (
        "half a step of the output's static scale, plus the float graph's tolerance atol + rtol "
        "|x| (spec.tolerance; --mode sliced: its bound against the float64 definition, "
        "graphs.sliced.tolerance), plus the float32 roundings of QuantizeLinear and "
        f"DequantizeLinear (<= 383 u s, u = 2^-24); holds for {WHERE[policy]}")
    assert quant["measured_over"] == (f"every row of the in-range [{L}, {cols}] table, quantising "
                                      "the reference values as the graph's Q/DQ does")
    assert quant["bytes"] == {"float32": 4 * cols, "int8": cols}
    assert (quant["tensor"], quant["scale_tensor"]) == ("pe_int8", "out_scale")
    assert quant["bytes_of"] == OUTPUT_ROW
    positions = manifest["positions"]
    if policy == "clamp":
        assert positions["out_of_range"] == "clamp" and positions["limit"] is None
    else:
        plain = make_config(scheme, L, format="onnx", **{k: v for k, v in kw.items()
                                                          if k != "quant_granularity"})
        assert positions == prepare(plain, module).manifest["positions"]
    inits = _inits(data)
    assert np.array_equal(inits["out_scale"], s if per_channel else s[0])
    zero = inits["out_zero_point"]
    assert zero.dtype == np.int8 and zero.shape == ((cols,) if per_channel else ()) and \
        not zero.any()
    if policy == "clamp":
        assert (int(inits["clamp_low"]), int(inits["clamp_high"])) == (0, L - 1)
    nodes = _nodes(data)
    assert nodes[-3 if per_channel else -2] == (
        "QuantizeLinear", "quantize_out", ["pe_float32", "out_scale", "out_zero_point"],
        ["pe_int8"], {"axis": 1} if per_channel else {})
    if per_channel:  # [D] scales on the last axis: Cast and a broadcast Mul
        assert nodes[-2:] == [("Cast", "pe_cast", ["pe_int8"], ["pe_float"], {"to": 1}),
                              ("Mul", "pe_scale", ["pe_float", "out_scale"], ["pe"], {})]
    else:
        assert nodes[-1] == ("DequantizeLinear", "dequantize_out",
                             ["pe_int8", "out_scale", "out_zero_point"], ["pe"], {})
    pos = POSITIONS[:-1] if policy == "unit" else POSITIONS  # sinusoids: |positions| <= 2^24
    got = _run(data, positions=pos)
    if policy == "clamp":
        want = clamped_reference(config.scheme, module, pos).numpy()
    else:
        with torch.no_grad():
            want = module.encode(torch.from_numpy(pos)).numpy()
    assert (np.abs(got - want.astype(np.float64)) <= bound * (1 + 1e-9)).all()


@pytest.mark.parametrize(("scheme", "granularity"), [("alibi", "channel"), ("alibi", "tensor"),
                                                     ("gaussian", "channel")])
def test_quantised_bias_graph_clamps_the_distance(scheme, granularity):
    config, module, manifest, data = _export(scheme, heads=2, quant_granularity=granularity)
    per_channel = granularity == "channel"
    ref = expected_table(config.scheme, module)  # [2L - 1, H]: every distance
    peak = np.abs(ref.astype(np.float64))
    peak = peak.max(axis=0) if per_channel else np.array([peak.max()])
    s = _scales(peak)
    quant = manifest["quant"]
    assert np.array_equal(_scale_list(quant), s)
    assert quant["axis"] == (0 if per_channel else None)
    assert quant["tensor"] == "bias_int8" and quant["bytes"] == {"float32": 8, "int8": 2}
    rtol, atol = config.scheme.spec.tolerance
    bound = np.where(peak > 0, s.astype(np.float64) * (0.5 + 383 * U), 0.0) + atol + rtol * peak
    assert quant["bound"] == pytest.approx(float(bound.max()), rel=1e-13, abs=0)
    err = np.abs((_q(ref, s).astype(np.float32) * s).astype(np.float64) - ref).max()
    assert quant["max_abs_err"] == float(err)
    assert manifest["positions"]["out_of_range"] == "clamp"
    assert manifest["positions"]["limit"] is None
    inits = _inits(data)
    assert (int(inits["clamp_low"]), int(inits["clamp_high"])) == (-2**61, 2**61)
    assert np.array_equal(inits["bias_floor"], ref[0].reshape(-1, 1, 1))  # distance -(L - 1)
    nodes = _nodes(data)
    attrs = {"axis": 0} if per_channel else {}
    assert nodes[-3:] == [
        ("Max", "clamp_distance", ["bias_unclamped", "bias_floor"], ["bias_float32"], {}),
        ("QuantizeLinear", "quantize_out", ["bias_float32", "out_scale", "out_zero_point"],
         ["bias_int8"], attrs),
        ("DequantizeLinear", "dequantize_out", ["bias_int8", "out_scale", "out_zero_point"],
         ["bias"], attrs)]
    t = np.array([0, 3, 7, 20, -5, 2**62], np.int64)
    u = np.array([0, 7, -2**62, 2**62, 5], np.int64)
    got = _run(data, positions=t, key_positions=u)  # [H, N, M]
    want = clamped_reference(config.scheme, module, t, u).numpy().astype(np.float64)
    h = (-1, 1, 1)
    assert got.shape == want.shape == (2, 6, 5)
    assert (np.abs(got - want) <= bound.reshape(h) * (1 + 1e-9)).all()


@pytest.mark.parametrize("granularity", ["channel", "tensor"])
def test_quantised_t5_bias_covers_every_row_of_its_embedding(granularity):
    """t5-bias (issue 40): with L = 8 its table holds distances -7 .. 7 only, while a far key
    reads the last buckets; the scale covers every row of the embedding (set here so that the
    largest values sit in rows no in-range distance reads), no distance is clamped, and far
    pairs are within the bound of the reference."""
    config = make_config("t5-bias", L, heads=2, quantize="int8", format="onnx")
    module = build(config.scheme)
    with torch.no_grad():
        weight = module.relative_attention_bias.weight
        weight.copy_(torch.linspace(-1, 1, weight.numel()).reshape(weight.shape))
        weight[-1] = torch.tensor([40.0, -3.0])  # the farthest later bucket
        weight[15] = torch.tensor([-2.0, 50.0])  # the farthest earlier bucket
    config, module, manifest, data = _export("t5-bias", heads=2, module=module,
                                             quant_granularity=granularity)
    peak = np.array([40.0, 50.0]) if granularity == "channel" else np.array([50.0])
    s = _scales(peak)
    quant = manifest["quant"]
    assert np.array_equal(_scale_list(quant), s)
    assert quant["bound_why"].endswith("holds for every position (the scale covers every row "
                                       "of the embedding)")
    assert manifest["positions"]["out_of_range"] == "extrapolate"
    assert "bias_floor" not in _inits(data)
    t = np.array([0, 3, 7, 500, -5, 2**24], np.int64)
    u = np.array([0, 7, 600, 2**24, -2**24], np.int64)
    got = _run(data, positions=t, key_positions=u)
    with torch.no_grad():
        want = module.encode(torch.from_numpy(t), torch.from_numpy(u)).numpy()
    assert np.abs(want).max() == 50.0  # the far pairs read the large rows
    bound = s.astype(np.float64) * (0.5 + 383 * U)
    assert (np.abs(got - want) <= bound.reshape(-1, 1, 1) * (1 + 1e-9)).all()


def test_quantised_mrope_keeps_its_extrapolation_within_the_unit_scale():
    """mrope (issue 40): cos/sin within +-1 at every position, so its scale is 1/127 per column
    and no position is clamped; three different streams far out are within the bound."""
    config, module, manifest, data = _export("mrope", params={"mrope_section": "1,2,1"})
    s = _scales(np.ones(8))
    assert np.array_equal(_scale_list(manifest["quant"]), s)
    assert manifest["quant"]["bound_why"].endswith(WHERE["unit"])
    assert manifest["positions"]["out_of_range"] == "extrapolate"
    p = np.array([[0, 1, 2], [9, -4, 2**24], [70000, 5, -300], [3, 3, 3]], np.int64)
    got = _run(data, positions=p)
    with torch.no_grad():
        want = module.encode(torch.from_numpy(p)).numpy().astype(np.float64)
    bound = s.astype(np.float64) * (0.5 + 383 * U) + 1e-6
    assert (np.abs(got - want) <= bound * (1 + 1e-9)).all()


def test_quantised_output_of_a_sliced_graph_uses_its_own_bound():
    """Measured against the float64 definition (the sliced graph's reference): at 64 x 16 its
    values differ from the float32 module's, and so does the measured error."""
    config, module, manifest, data = _export("sinusoidal", 64, d_model=16, mode="sliced")
    plain = prepare(make_config("sinusoidal", 64, d_model=16, mode="sliced", format="onnx"),
                    module).manifest
    assert manifest["sliced"] == plain["sliced"] and manifest["positions"] == plain["positions"]
    from edgepe.schemes.definition import Definition

    source = Definition(module)
    x = table_rows(config.scheme, source, 0, 64)  # the float64 definition, rounded to float32
    tq = measure_table("channel", lambda: iter([x]), np.ones(16))
    quant = manifest["quant"]
    s = _scales(np.ones(16))
    assert np.array_equal(_scale_list(quant), s) and quant["max_abs_err"] == tq.max_abs_err
    own = table_rows(config.scheme, module, 0, 64)
    assert measure_table("channel", lambda: iter([own]), np.ones(16)).max_abs_err != \
        tq.max_abs_err
    atol = plain["tolerance"]["atol"]
    assert atol != get_spec("sinusoidal").tolerance[1]
    want = s.astype(np.float64) * (0.5 + 383 * U) + atol
    assert quant["bound_per_channel"] == pytest.approx(want.tolist(), rel=1e-13, abs=0)
    got = _run(data, positions=np.arange(64))
    with torch.no_grad():
        ref = module.encode(torch.arange(64)).numpy()
    assert (np.abs(got - ref) <= quant["bound"] + 1e-6).all()
