"""Target profiles (issue 17): for every scheme x mode x target, ``export --target`` writes a graph
every node of which the profile accepts (and that computes the reference on onnxruntime CPU), or
refuses with exit 2 naming the blocking op, dtype or rule; ``inspect --target`` says the same
node by node. OpenVINO's real execution is in tests/test_openvino.py.
"""

from __future__ import annotations

import functools
import json
import re

import numpy as np
import onnx
import pytest
from _export_helpers import assert_parity, feeds_for, reference, run_ort
from typer.testing import CliRunner

from edgepe import api
from edgepe.cli import app
from edgepe.contract.config import LOWERING_LIMITS
from edgepe.contract.errors import BadParameterError
from edgepe.export import prepare
from edgepe.schemes import build, resolve, scheme_ids
from edgepe.targets import PROFILES, check_model, for_export, profile
from edgepe.targets.check import check

CASES = [(s, m) for s in scheme_ids() for m in resolve(s, 64).spec.modes]
runner = CliRunner()


def _bytes(config) -> bytes:
    import io

    buffer = io.BytesIO()
    prepare(config, build(config.scheme, seed=config.seed)).write(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("target", list(PROFILES))
@pytest.mark.parametrize("scheme,mode", CASES, ids=[f"{s}-{m}" for s, m in CASES])
def test_export_target_writes_what_the_profile_accepts_or_names_the_blocker(scheme, mode, target):
    config = api.make_config(scheme, 64, mode=mode)
    try:
        chosen, report = for_export(config, target, lowering_given=False)
    except BadParameterError as exc:
        message = str(exc)
        # The refusal names an ONNX op (or Gather's indices) with what the target lacks.
        named = re.findall(r"(\w+)(?: on \w+| indices \w+)?: (?:not in|\w+ runs|\w+ takes)",
                           message)
        assert named, message
        assert set(named) <= {s.name for s in onnx.defs.get_all_schemas()}, named
        return
    model = onnx.load_from_string(_checked_bytes(scheme, mode, chosen.lowering))
    assert check(model, PROFILES[target]), report  # every node of what would be written
    assert all(node.supported for node in report.nodes)


@functools.cache
def _checked_bytes(scheme: str, mode: str, lowering: str) -> bytes:
    """The graph ``export`` writes for this choice, after checking that it computes the
    reference on onnxruntime CPU (which runs every lowering) over the positions its lowering
    accepts; targets that pick the same lowering share it."""
    config = api.make_config(scheme, 64, mode=mode, lowering=lowering)
    data = _bytes(config)
    feeds = feeds_for(config)
    limit = LOWERING_LIMITS.get(lowering) if mode == "compute" else None
    if mode == "sliced":  # what its slices hold (graphs.sliced.position_limit)
        from edgepe.graphs.sliced import plan_of, position_limit

        limit = position_limit(plan_of(config), lowering)
    if limit is not None:
        pos = feeds["positions"]
        feeds["positions"] = pos[np.abs(pos).reshape(len(pos), -1).max(axis=1) <= limit]
    module = build(config.scheme, seed=config.seed)
    assert_parity(config, run_ort(data, feeds), reference(config, module, feeds))
    return data


@pytest.mark.parametrize("target,lowering", [("ort-cpu", "bitwise"), ("ort-cuda", "arith"),
                                             ("tensorrt", "arith"), ("qnn", "float"),
                                             ("directml", "bitwise"), ("openvino", "float")])
def test_each_target_gets_the_first_lowering_it_runs(target, lowering):
    chosen, _ = for_export(api.make_config("gray", 512), target, lowering_given=False)
    assert chosen.lowering == lowering


@pytest.mark.parametrize("target,lowering,blocker", [
    # NNAPI's builders take a float32 input 0 only and its partitions float32 graph inputs:
    # the int64 positions never enter it, whichever lowering.
    ("nnapi", None, "Cast on int64: nnapi runs Cast on float32, int32"),
    # DirectML registers Mod for 8/16/32-bit integers and floats, not int64.
    ("directml", "arith", "Mod on int64: directml runs Mod on"),
    # QNN registers Mod but computes it in float32 (inexact past 2^24): not listed.
    ("qnn", "arith32", "Mod: not in qnn's operator table"),
])
def test_cells_corrected_from_the_tables_block_what_they_should(target, lowering, blocker):
    config = api.make_config("gray", 512, **({"lowering": lowering} if lowering else {}))
    with pytest.raises(BadParameterError) as caught:
        for_export(config, target, lowering_given=lowering is not None)
    assert blocker in str(caught.value)


def test_a_given_lowering_is_checked_not_replaced():
    with pytest.raises(BadParameterError, match="BitShift: not in ort-cuda's operator table"):
        for_export(api.make_config("gray", 64, lowering="bitwise"), "ort-cuda",
                   lowering_given=True)


def test_refusal_names_the_blocking_op_and_what_would_work(tmp_path):
    out = tmp_path / "s.onnx"
    result = runner.invoke(app, ["export", "--scheme", "sinusoidal", "--max-len", "64",
                                 "--target", "nnapi", "--out", str(out)])
    assert result.exit_code == 2
    assert "Cos: not in nnapi's operator table" in result.output
    assert not out.exists() and not (tmp_path / "s.onnx.json").exists()
    result = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--mode",
                                 "table", "--target", "qnn", "--out", str(out)])
    assert result.exit_code == 2
    assert "Gather indices int64" in result.output and "--mode compute runs on it" in result.output


def test_export_target_checks_what_it_wrote_and_inspect_agrees(tmp_path):
    out = tmp_path / "g.onnx"
    result = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "512", "--target",
                                 "tensorrt", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "target tensorrt: all 7 nodes supported" in result.output
    assert json.loads((tmp_path / "g.onnx.json").read_text())["lowering"] == "arith"
    ok = runner.invoke(app, ["inspect", str(out), "--target", "tensorrt"])
    assert ok.exit_code == 0 and "all 7 nodes supported" in ok.output
    bad = runner.invoke(app, ["inspect", str(out), "--target", "nnapi"])
    assert bad.exit_code == 1
    assert "NOT supported" in bad.output and "Mod: not in nnapi's operator table" in bad.output


def test_unknown_target_and_non_onnx_formats_are_refused(tmp_path):
    result = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--target",
                                 "tpu", "--out", str(tmp_path / "x.onnx")])
    assert result.exit_code == 2 and "known: ort-cpu, ort-cuda" in result.output
    result = runner.invoke(app, ["export", "--scheme", "gray", "--max-len", "64", "--format",
                                 "npy", "--target", "qnn", "--out", str(tmp_path / "x.npy")])
    assert result.exit_code == 2 and "checks ONNX graphs" in result.output


def test_rules_uint64_initializers_opset_and_negative_gather_indices():
    """Each rule fails a graph that breaks it, and only that graph."""
    bitwise = onnx.load_from_string(_bytes(api.make_config("gray", 64)))
    trt = check(bitwise, PROFILES["tensorrt"])
    assert not trt and any("uint64 initializers" in p for p in trt.problems)
    assert not check_model(bitwise, "ort-cpu").problems
    old = onnx.load_from_string(_bytes(api.make_config("gray", 64, lowering="float")))
    old.opset_import[0].version = 22
    assert any("opset 22" in p for p in check(old, PROFILES["qnn"]).problems)
    # binary-2d's float graph gathers with constant int32 indices >= 0: accepted; negative
    # ones (the same coordinates counted from the end) are refused by QNN's rule.
    two_d = onnx.load_from_string(_bytes(api.make_config("binary-2d", 64, lowering="float")))
    assert check(two_d, PROFILES["qnn"])
    init = next(t for t in two_d.graph.initializer if t.name == "coordinate")
    values = onnx.numpy_helper.to_array(init) - 2
    init.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.int32), "coordinate"))
    refused = check(two_d, PROFILES["qnn"])
    assert not refused and "negative constant indices" in "; ".join(refused.blocking)


def test_the_documented_support_table_is_the_profiles():
    """docs/readme/targets.md's op x target table is rendered from the profiles, not kept apart."""
    from pathlib import Path

    from edgepe.targets import support_markdown

    doc = (Path(__file__).resolve().parent.parent / "docs/readme/targets.md").read_text()
    table = doc.split("<!-- support-table -->\n")[1].split("\n<!-- /support-table -->")[0]
    assert table == support_markdown()


def test_profiles_cite_their_source_and_name_a_known_target():
    for name, p in PROFILES.items():
        assert p.name == name and p.source and p.ops and p.opsets[0] <= p.opsets[1]
    assert profile("QNN") is PROFILES["qnn"]
    with pytest.raises(BadParameterError, match="known"):
        profile("edge-tpu")


def test_refusal_as_a_real_process_is_one_error_line_exit_2_nothing_written(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "a.onnx"
    done = subprocess.run([sys.executable, "-m", "edgepe", "export", "--scheme", "alibi",
                           "--max-len", "64", "--target", "qnn", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: target qnn"), done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


_UNARY = ("Abs", "Neg", "Floor", "Sin", "Cos", "Identity", "BitwiseNot")
_BINARY = ("Add", "Sub", "Mul", "Div", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
           "Max", "Equal", "Less", "Greater")


def test_ort_cpu_cells_have_a_kernel_in_the_installed_onnxruntime():
    """The ort-cpu column comes from OperatorKernels.md at the cited commit; every elementwise
    cell it lists must also get a CPU kernel from the onnxruntime installed here (a one-node
    session per op x dtype). float16 is left out: for an op without a float16 kernel onnxruntime
    inserts Casts to float32 instead of failing, so a session proves nothing there. Comparisons
    list bool for their output only."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    options = ort.SessionOptions()
    options.log_severity_level = 4
    missing = []
    for op in _UNARY + _BINARY:
        arity = 1 if op in _UNARY else 2
        compare = op in ("Equal", "Less", "Greater")
        for dtype in sorted(PROFILES["ort-cpu"].ops[op] - {"float16"} - ({"bool"} if compare
                                                                         and op != "Equal"
                                                                         else set())):
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            node = helper.make_node(op, [f"x{i}" for i in range(arity)], ["y"],
                                    **({"direction": "LEFT"} if op == "BitShift" else {}),
                                    **({"fmod": 1} if op == "Mod" and "float" in dtype else {}))
            graph = helper.make_graph(
                [node], "one", [helper.make_tensor_value_info(f"x{i}", elem, [2])
                                for i in range(arity)],
                [helper.make_tensor_value_info("y", TensorProto.BOOL if compare else elem, [2])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            try:
                ort.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])
            except Exception as exc:  # noqa: BLE001 - any refusal is the finding
                missing.append(f"{op} {dtype}: {str(exc).splitlines()[0][:80]}")
    assert not missing, missing
