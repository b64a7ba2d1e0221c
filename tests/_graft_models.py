"""The demo's binary PE in small, built by hand for graft's tests (tests/test_graft_entry.py,
tests/test_mut_graft.py): a constant bit table sliced to the sequence length, times a constant
weight, combined with the input; and an exported edgepe artifact of the same PE."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BITS5 = ((np.arange(5)[:, None] >> np.arange(3)) & 1).astype(np.float32)  # binary, L = 5


def demo(tmp_path: Path, copies: int = 1, weight: np.ndarray | None = None, op: str = "Add",
         name: str = "m.onnx") -> Path:
    """``y = x OP bits[:S] @ w0 OP ...``, ``copies`` PEs ``pe<i>`` (``w<i>`` = ``weight`` for the
    first, else all ``0.5 + i``); inputs ``x [1, S, 4]`` and an int64 ``pos [S]`` the model
    does not read (positions a graft may be told to take instead)."""
    nodes, inits = [helper.make_node("Shape", ["x"], ["shape"], start=1, end=2)], [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    total = "x"
    for i in range(copies):
        w = weight if i == 0 and weight is not None else np.full((3, 4), 0.5 + i, np.float32)
        inits += [numpy_helper.from_array(BITS5, f"table{i}"),
                  numpy_helper.from_array(w, f"w{i}")]
        nodes += [helper.make_node("Slice", [f"table{i}", "zero", "shape", "axis0"], [f"rows{i}"]),
                  helper.make_node("MatMul", [f"rows{i}", f"w{i}"], [f"pe{i}"]),
                  helper.make_node(op, [total, f"pe{i}"], [f"sum{i}"])]
        total = f"sum{i}"
    nodes.append(helper.make_node("Identity", [total], ["y"]))
    graph = helper.make_graph(
        nodes, "demo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 4]),
                        helper.make_tensor_value_info("pos", TensorProto.INT64, ["S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 4])], inits)
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def exported(out: Path) -> tuple[Path, np.ndarray]:
    """An exported binary artifact (L 5, d 4) at ``out`` and the weight it computes: its
    ``projection_scaled`` rows times their bit masks (W / 2^k, times 2^k: exact)."""
    from edgepe import api

    api.export(api.make_config("binary", 5, d_model=4, out=out), verify=False)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    return out, inits["projection_scaled"] * inits["bit_masks"].astype(np.float32)


def external(folder: Path, location: str = "model.onnx.data", copies: int = 1) -> Path:
    """``folder/model.onnx``: demo's model (``copies`` PEs, the first the artifact's weight, the
    artifact exported to ``folder/pe.onnx``) with every tensor in external data at ``location``,
    and a second output ``big``: a 2 KB constant the graft keeps (its OUT has external data too,
    as a pair)."""
    _, w = exported(folder / "pe.onnx")
    model = onnx.load(demo(folder, weight=w, name="model.onnx", copies=copies))
    model.graph.initializer.append(numpy_helper.from_array(
        np.arange(512, dtype=np.float32) + copies, "big_table"))
    model.graph.node.append(helper.make_node("Identity", ["big_table"], ["big"]))
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.FLOAT, [512]))
    onnx.save(model, folder / "model.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location=location, size_threshold=0)
    return folder / "model.onnx"
