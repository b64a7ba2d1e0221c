"""The example (``scripts/example_transformer.py``): a tiny transformer layer whose PE is an
integer-only ONNX subgraph, merged with the torch-exported layer, matches PyTorch in
onnxruntime."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import onnx
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "example_transformer.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("example_transformer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_merged_graph_matches_pytorch_across_the_wrap(example, tmp_path):
    # Positions 506 .. 517 cross max_len = 512, where the binary bits wrap in both models.
    result = example.main(tmp_path, offset=506, steps=12, batch=2)
    assert result["shape"] == (2, 12, example.D_MODEL)
    assert sorted(result["inputs"]) == ["positions", "x"]
    assert result["max_abs_err"] <= example.ATOL

    # The PE part is integer ops up to exactly one Cast to float: no trig, no table lookup.
    assert set(result["pe_ops"]) <= example.INTEGER_OPS
    assert "BitwiseAnd" in result["pe_ops"]
    assert result["float_casts"] == 1
    merged = onnx.load(result["path"])
    pe_nodes = [n.op_type for n in merged.graph.node if n.name.startswith("edgepe_pe0/")]
    assert "BitwiseAnd" in pe_nodes and not {"Sin", "Cos", "Gather"} & set(pe_nodes)
    assert result["graft"], str(result["graft"])  # edgepe.graft's own equivalence check


def test_integer_prefix_sees_a_float_path(example):
    """The checker itself can fail: a graph that turns positions into floats at once has no
    integer ops before its cast."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["positions"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Sin", ["f"], ["pe"])],
        "g", [helper.make_tensor_value_info("positions", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("pe", TensorProto.FLOAT, ["N"])],
    )
    ops, casts = example.integer_prefix(helper.make_model(graph))
    assert ops == ["Cast"] and casts == 1
    assert not {"BitShift", "BitwiseAnd"} <= set(ops)
