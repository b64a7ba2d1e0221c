"""User-reachable paths no test reached before (issue 33): Ctrl-C mid-export, the untrusted-graph
audit of attribute subgraphs and op domains, graft of a model at another opset/IR version.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.external_data_helper
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.audit import check_untrusted
from edgepe.contract.config import TMP_MARK
from edgepe.contract.errors import ArtifactError

# ---- Ctrl-C: exit 130, one line, nothing half-written ------------------------------------------


def _export(out: Path, max_len: int, d_model: int) -> list[str]:
    return [str(Path(sys.executable).with_name("edgepe")), "export", "--scheme", "sinusoidal",
            "--max-len", str(max_len), "--d-model", str(d_model), "--mode", "table",
            "--format", "npy", "--out", str(out), "--force", "--no-verify"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process group is POSIX-only")
def test_ctrl_c_mid_export_exits_130_and_leaves_nothing_half_written(tmp_path):
    """SIGINT (a terminal's Ctrl-C) while the table is being written: exit 130, one line, and
    the folder as it was (no artifact, no manifest, no temporary file). test_kill.py covers the
    old artifact surviving a SIGKILL; this is the one process (a torch import) a run costs."""
    out = tmp_path / "table.npy"
    # 65536 x 512 float32 = 128 MiB, written in chunks: caught midway
    # SIGINT back to its default in the child: a shell's background job (or a runner started
    # from one) ignores it, the child inherits that, and Python then installs no handler.
    big = subprocess.Popen(_export(out, 65536, 512), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            partial = [p for p in tmp_path.iterdir() if TMP_MARK in p.name]
            if partial and partial[0].stat().st_size > 4 * 2**20:
                break
            if big.poll() is not None:
                pytest.fail("the large export finished before it could be interrupted")
            time.sleep(0.01)
        else:
            pytest.fail("the large export never started writing")
        # Frozen first, so a loaded machine cannot let it finish between the look and the
        # signal: the temporary file still there means the commit has not happened, and the
        # SIGINT is handled (exit 130) before it when the process runs on.
        os.kill(big.pid, signal.SIGSTOP)
        still_writing = any(TMP_MARK in p.name for p in tmp_path.iterdir())
        os.kill(big.pid, signal.SIGINT)
        os.kill(big.pid, signal.SIGCONT)
        stdout, stderr = big.communicate(timeout=60)
        if not still_writing:
            pytest.skip("the export committed before it could be stopped (a machine too slow "
                        "to poll it); nothing to interrupt")
    finally:
        if big.poll() is None:
            big.kill()
    assert big.returncode == 130, (stdout, stderr)
    assert stderr.strip().splitlines() == ["error: interrupted"]  # one line, no traceback
    assert list(tmp_path.iterdir()) == []


# ---- check_untrusted: subgraphs in attributes, op domains --------------------------------------


def _model(node: onnx.NodeProto, opset: int = 18) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _subgraph() -> onnx.GraphProto:
    out = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])
    return helper.make_graph([helper.make_node("Constant", [], ["z"], value_float=1.0)], "sub",
                             [], [out])


def test_an_emitted_op_is_accepted():
    check_untrusted(_model(helper.make_node("Abs", ["x"], ["y"])), "m.onnx")


def test_a_subgraph_in_an_attribute_of_an_emitted_op_is_refused():
    node = helper.make_node("Abs", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("body", _subgraph()))
    with pytest.raises(ArtifactError, match=r"uses op Abs, which edgepe's builders never emit"):
        check_untrusted(_model(node), "m.onnx")


def test_a_list_of_subgraphs_in_an_attribute_is_refused():
    node = helper.make_node("Abs", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("bodies", [_subgraph(), _subgraph()]))
    with pytest.raises(ArtifactError, match=r"uses op Abs"):
        check_untrusted(_model(node), "m.onnx")


def test_a_plain_attribute_is_not_a_subgraph():
    node = helper.make_node("Abs", ["x"], ["y"])
    node.attribute.append(helper.make_attribute("note", 3))
    check_untrusted(_model(node), "m.onnx")


@pytest.mark.parametrize(("domain", "op", "ok"), [
    ("", "Sin", True), ("", "RotaryEmbedding", True),
    ("com.microsoft", "RotaryEmbedding", True),
    ("com.microsoft", "Sin", False),  # an op of the default domain, under another domain
    ("evil.example", "Abs", False), ("evil.example", "RotaryEmbedding", False),
    ("", "Loop", False), ("", "If", False), ("", "Scan", False),
])
def test_the_op_allow_list_is_per_domain(domain, op, ok):
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    model = _model(node)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    if ok:
        check_untrusted(model, "m.onnx")
    else:
        with pytest.raises(ArtifactError, match=rf"uses op {domain + '.' if domain else ''}{op},"):
            check_untrusted(model, "m.onnx")


def test_external_data_sparse_initializers_and_functions_are_refused():
    base = _model(helper.make_node("Abs", ["x"], ["y"]))
    ext = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    ext.data_location = TensorProto.EXTERNAL
    onnx.external_data_helper.set_external_data(ext, location="/etc/hostname")
    external = onnx.ModelProto()
    external.CopyFrom(base)
    external.graph.initializer.append(ext)
    with pytest.raises(ArtifactError, match=r"keeps tensor 'w' in external data"):
        check_untrusted(external, "m.onnx")
    in_attr = onnx.ModelProto()
    in_attr.CopyFrom(base)
    const = helper.make_node("Constant", [], ["c"], value=ext)
    in_attr.graph.node.append(const)
    with pytest.raises(ArtifactError, match=r"in external data"):
        check_untrusted(in_attr, "m.onnx")
    sparse = onnx.ModelProto()
    sparse.CopyFrom(base)
    values = numpy_helper.from_array(np.ones(1, np.float32), "s")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "s_i")
    sparse.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [2]))
    with pytest.raises(ArtifactError, match=r"sparse initializers or model functions"):
        check_untrusted(sparse, "m.onnx")
    funcs = onnx.ModelProto()
    funcs.CopyFrom(base)
    funcs.functions.append(helper.make_function("d", "f", ["a"], ["b"],
                                                [helper.make_node("Abs", ["a"], ["b"])],
                                                [helper.make_opsetid("", 18)]))
    with pytest.raises(ArtifactError, match=r"sparse initializers or model functions"):
        check_untrusted(funcs, "m.onnx")


# ---- graft: models at other opsets / IR versions, the proof's tolerance, removed bytes --------

GL, GD = 16, 8  # the PE artifacts' max_len and d_model


@pytest.fixture(scope="module")
def pes(tmp_path_factory):
    """A binary compute PE (BitShift/BitwiseAnd: opset 18 ops) and a table PE (Gather only)."""
    from edgepe import api

    folder = tmp_path_factory.mktemp("pe")
    compute = api.export(api.make_config("binary", GL, d_model=GD, out=folder / "c.onnx"),
                         verify=False)[0].path
    table = api.export(api.make_config("binary", GL, d_model=GD, mode="table",
                                       out=folder / "t.onnx"), verify=False)[0].path
    return {"compute": compute, "table": table}


def _user_model(path: Path, opset: int, ir_version: int, tail: str = "Identity") -> Path:
    """``y = tail(Relu(x))`` with ``position_ids [B, S]``, at ``opset`` / ``ir_version``."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node(tail, ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", GD]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", GD])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                ir_version=ir_version), path)
    return path


def _default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _check_output(out: Path, pe: Path):
    import onnxruntime as ort

    import edgepe

    ids = np.random.default_rng(3).integers(0, GL, (2, 5)).astype(np.int64)
    x = np.random.default_rng(4).standard_normal((2, 5, GD)).astype(np.float32)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(["y"], {"x": x, "position_ids": ids})[0]
    want = np.maximum(x, 0) + edgepe.load(pe).encode(ids.reshape(-1)).reshape(2, 5, GD)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_graft_into_an_opset_17_model_converts_the_model_up_when_the_pe_needs_18(pes, tmp_path):
    """The compute PE's BitwiseAnd does not exist at 17: the model is converted up (reported)."""
    import edgepe

    model = _user_model(tmp_path / "m17.onnx", 17, 8)
    out = tmp_path / "out.onnx"
    report = edgepe.graft(model, pe=pes["compute"], at="h", add=True, out=out)
    assert report, str(report)
    assert report.converted == "opset 17 -> 18"
    grafted = onnx.load(str(out))
    assert _default_opset(grafted) == 18 and grafted.ir_version >= 8
    _check_output(out, pes["compute"])


def test_graft_into_an_opset_17_model_converts_the_pe_down_when_it_can(pes, tmp_path):
    """The table PE (Gather, Cast...) exists at 17: the PE is converted, the model left alone."""
    import edgepe

    model = _user_model(tmp_path / "m17.onnx", 17, 8)
    out = tmp_path / "out.onnx"
    report = edgepe.graft(model, pe=pes["table"], at="h", add=True, out=out)
    assert report, str(report)
    assert report.converted is None
    grafted = onnx.load(str(out))
    assert _default_opset(grafted) == 17 and grafted.ir_version == 8
    _check_output(out, pes["table"])


@pytest.mark.parametrize(("mine", "pe_op", "expect_model", "expect_pe", "converted"), [
    (18, "Abs", 18, 18, False),  # the same opset: nothing converted
    (17, "Abs", 17, 17, False),  # the PE goes down
    (21, "Abs", 21, 21, False),  # the PE goes up
    (17, "BitwiseAnd", 18, 18, True),  # the PE cannot go down: the model goes up
])
def test_reconcile_branches(mine, pe_op, expect_model, expect_pe, converted):
    from edgepe.graft import reconcile

    def tiny(opset, op):
        inputs = ["a", "a"] if op == "BitwiseAnd" else ["a"]
        elem = TensorProto.INT64 if op == "BitwiseAnd" else TensorProto.FLOAT
        graph = helper.make_graph([helper.make_node(op, inputs, ["b"])], "g",
                                  [helper.make_tensor_value_info("a", elem, [2])],
                                  [helper.make_tensor_value_info("b", elem, [2])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                 ir_version=8)

    model, pe = tiny(mine, "Abs"), tiny(18, pe_op)
    got_model, got_pe, was_converted = reconcile(model, pe)
    assert (_default_opset(got_model), _default_opset(got_pe), was_converted) == \
        (expect_model, expect_pe, converted)
    if not converted:
        assert got_model is model  # the user's graph is left alone whenever it can be


def test_reconcile_refuses_what_it_cannot_convert():
    """A model above the PE whose op the converter cannot take up to it: one clear error."""
    from edgepe.contract.errors import BadParameterError
    from edgepe.graft import reconcile

    graph = helper.make_graph([helper.make_node("Abs", ["a"], ["b"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)], ir_version=8)
    pe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(BadParameterError, match="cannot take the PE \\(opset 18\\) to the model's "
                       "opset 99"):
        reconcile(model, pe)


def test_the_proof_tolerance_is_twice_gain_times_eps_plus_64_ulp(pes, tmp_path):
    """y = Relu(x) + PE: the output moves one for one with the PE (gain 1), so each output's
    tolerance is 2 (atol + rtol max|PE|) + 64 ulp of its largest value."""
    import edgepe
    from edgepe.contract import manifest as manifest_io

    model = _user_model(tmp_path / "m.onnx", 18, 8)
    report = edgepe.graft(model, pe=pes["compute"], at="h", add=True)
    assert report
    (check,) = report.checks
    tol = manifest_io.read(pes["compute"])["tolerance"]
    peak_pe = float(np.abs(edgepe.load(pes["compute"]).encode(np.arange(GL))).max())
    eps = tol["atol"] + tol["rtol"] * peak_pe
    # the rest is 64 ulp of a float32 (a power of two times 64) of an output's size (a few units)
    ulps = check.tolerance - 2 * eps
    k = round(float(np.log2(ulps / 64)))
    assert ulps == pytest.approx(64 * 2.0**k, abs=1e-9), (ulps, eps)  # gain is 1 to ~1e-4
    assert -23 <= k <= -17  # spacing of float32 values from 1 to 64
    assert 2 * eps > 1e-9 * 1000  # eps is visible next to the 1e-9 slack


def test_pe_tolerance_adds_the_int8_bound_only_when_quantised():
    from edgepe.graft import pe_tolerance

    values = np.array([[-2.0, 1.0]])
    manifest = {"tolerance": {"atol": 1e-6, "rtol": 1e-3}, "quant": {"bound": 0.25}}
    assert pe_tolerance(manifest, values, quantised=False) == pytest.approx(1e-6 + 2e-3,
                                                                            rel=1e-15)
    assert pe_tolerance(manifest, values, quantised=True) == pytest.approx(1e-6 + 2e-3 + 0.25,
                                                                           rel=1e-15)
    assert pe_tolerance({"tolerance": None}, values, quantised=True) == 0.0


def test_removed_bytes_count_nodes_and_initializers(pes, tmp_path):
    """Replacing a learned table read (Gather of an initializer by position_ids): the report's
    removed bytes are the Gather node's AND the table initializer's serialized sizes."""
    import edgepe

    table = numpy_helper.from_array(np.ones((GL, GD), np.float32), "old_table")
    gather = helper.make_node("Gather", ["old_table", "position_ids"], ["pe_old"], name="g0")
    graph = helper.make_graph(
        [gather, helper.make_node("Relu", ["x"], ["h"]),
         helper.make_node("Add", ["h", "pe_old"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", GD]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", GD])], [table])
    path = tmp_path / "learned.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), path)
    report = edgepe.graft(path, pe=pes["table"], at="pe_old", check=False)
    assert report.removed_nodes == 1
    # the Gather as it stands in the graft's copy of the graph (names it rewrote there: a few
    # bytes more than ours) plus the whole table initializer
    node_bytes = report.removed_bytes - table.ByteSize()
    assert gather.ByteSize() <= node_bytes <= gather.ByteSize() + 64
    assert table.ByteSize() > 4 * GL * GD  # the initializer dominates: omitting it is visible
