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
from edgepe.errors import ArtifactError
from edgepe.export.artifact import TMP_MARK

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
    big = subprocess.Popen(_export(out, 65536, 512), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
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
        os.kill(big.pid, signal.SIGINT)
        stdout, stderr = big.communicate(timeout=60)
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
