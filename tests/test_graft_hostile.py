"""Hostile inputs to graft, round 3 (issue 41), written as an attacker would: a table of cases.

- graft's proof: a model that reads an integer input as an offset (fed only 0 and 1 before: a
  difference of 1.96 passed), clamps its positions before the PE (positions past max_len were
  never compared: 3.97), overrides a weight by a graph input (frozen silently: 4.86), or puts one
  output element at finfo.min (the tolerance became 2e33: a seen mismatch of 2.79 was "ok");
- graft's files: ``--out`` over the model's own external data, ``--force`` or not;
- resources: 2,400 initializers on one 1 MiB of external data (6.7 GB before), a length that is
  not the tensor's, a declared [2^20, 2^20] tensor without data, a location with a NUL byte or
  5,000 characters, opset 99, ``--max-len 2^63`` (ran forever), an op onnxruntime lacks, the
  model's own Expand to 5 GB, Tile to 6 GB, Expand sized from its input's length (each refused
  before any session runs: ``prove.check_run_bound``, the sum of every tensor shape inference
  bounds at the proof's input shapes, under ``prove.PROOF_MEMORY_BYTES``).

Every case runs one command in ONE process (``tests/_trust_driver.py``, as
tests/test_trust_round2.py does) and asserts its exit code, one stderr line matching what it must
say, and that nothing in its folder was written, removed or changed. The proof's time limit is
tested in process below the table; the output commit (Ctrl-C at each step, a concurrent graft,
an unrelated ``OUT.onnx.data``) in tests/test_mut_graft.py, which mutation runs of
edgepe/graft/__init__.py use.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from _graft_models import BITS5, demo, exported, external
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError, ParityError
from edgepe.graft import graft

prove = importlib.import_module("edgepe.graft.prove")
REPO = Path(__file__).resolve().parents[1]
DIFFER = r"^error: the grafted model's outputs differ from the original's beyond tolerance"
IS_INPUT = r"is the input .*write somewhere else"


@dataclass
class Case:
    id: str
    group: str
    make: Callable[[Path], list[str]]  # builds the hostile input in a folder -> the argv
    exit: int
    says: str  # a regular expression the one stderr line matches


# -- models built by hand: y = x + PE(rows) @ w, the PE's rows chosen as the attack needs --------


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _save(folder: Path, nodes, inputs, outputs, inits, name="model.onnx", **save) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "attack", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = folder / name
    onnx.save(model, path, **save)
    return path


def _pe(folder: Path):
    """The binary artifact (L 5, d 4) and the weight it computes (tests/_graft_models.py)."""
    return exported(folder / "pe.onnx")


def _graft_argv(model: Path, pe: Path, positions: str, *more: str) -> list[str]:
    return ["graft", str(model), "--pe", str(pe), "--at", "pe0", "--positions", positions,
            "--out", str(model.parent / "out.onnx"), *more]


def _offset(folder: Path) -> list[str]:
    """rows = table[max(k - 1, 0) + 0 .. S - 1]: an integer input ``k`` read as an offset. At k
    0 and 1 (all the proof fed before) it is the artifact's arange; at k = 3 rows 2.. differ."""
    pe, w = _pe(folder)
    table = ((np.arange(8)[:, None] >> np.arange(3)) & 1).astype(np.float32)
    consts = {"table": table, "w": w, "one": np.int64(1), "zero": np.int64(0),
              "axes": np.asarray([0], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
             helper.make_node("Squeeze", ["s1", "axes"], ["s"]),
             helper.make_node("Sub", ["k", "one"], ["km"]),
             helper.make_node("Max", ["km", "zero"], ["start"]),
             helper.make_node("Add", ["start", "s"], ["end"]),
             helper.make_node("Range", ["start", "end", "one"], ["r"]),
             helper.make_node("Gather", ["table", "r"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["pe0"]),
             helper.make_node("Add", ["x", "pe0"], ["y"])]
    model = _save(folder, nodes, [_vi("x", TensorProto.FLOAT, [1, "S", 4]),
                                  _vi("k", TensorProto.INT64, [])],
                  [_vi("y", TensorProto.FLOAT, [1, "S", 4])],
                  [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return _graft_argv(model, pe, "arange:x")


def _clamped(folder: Path) -> list[str]:
    """rows = table[clip(pos, 0, 4)]: the original clamps positions past its 5 rows (and
    negative ones to 0); the binary artifact computes other bits there."""
    pe, w = _pe(folder)
    consts = {"table": BITS5, "w": w, "lo": np.int64(0), "hi": np.int64(4)}
    nodes = [helper.make_node("Clip", ["pos", "lo", "hi"], ["p"]),
             helper.make_node("Gather", ["table", "p"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["pe0"]),
             helper.make_node("Add", ["x", "pe0"], ["y"])]
    model = _save(folder, nodes, [_vi("x", TensorProto.FLOAT, [1, "S", 4]),
                                  _vi("pos", TensorProto.INT64, ["S"])],
                  [_vi("y", TensorProto.FLOAT, [1, "S", 4])],
                  [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    return _graft_argv(model, pe, "pos")


def _finfo_min(folder: Path) -> list[str]:
    """The original's weight differs from the artifact's by 2.79 in one entry, and its output
    carries one element at float32's lowest value (64 ulp of it: 1.3e33)."""
    pe, w = _pe(folder)
    bad = w.copy()
    bad[0, 0] += 2.79
    model = onnx.load(demo(folder, weight=bad, name="model.onnx"))
    graph = model.graph
    graph.node[-1].output[0] = "y_raw"
    graph.initializer.extend([
        numpy_helper.from_array(np.asarray([np.finfo(np.float32).min], np.float32), "lowest"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "flat")])
    graph.node.extend([helper.make_node("Reshape", ["y_raw", "flat"], ["y_flat"]),
                       helper.make_node("Concat", ["y_flat", "lowest"], ["y"], axis=0)])
    del graph.output[:]
    graph.output.append(_vi("y", TensorProto.FLOAT, ["N"]))
    path = folder / "model.onnx"
    onnx.save(model, path)
    return _graft_argv(path, pe, "arange:x")


def _overridable(folder: Path) -> list[str]:
    """The PE's weight is also a graph input: a caller may give another; graft removes it."""
    pe, w = _pe(folder)
    model = onnx.load(demo(folder, weight=w, name="model.onnx"))
    model.graph.input.append(_vi("w0", TensorProto.FLOAT, [3, 4]))
    onnx.save(model, folder / "model.onnx")
    return _graft_argv(folder / "model.onnx", pe, "arange:x")


# -- graft's files -------------------------------------------------------------------------------


def _external_model(folder: Path, location: str = "model.onnx.data") -> Path:
    return external(folder, location)


def _over_data(folder: Path, location: str, force: bool) -> list[str]:
    model = _external_model(folder, location)
    argv = _graft_argv(model, folder / "pe.onnx", "arange:x", *(["--force"] if force else []))
    argv[argv.index("--out") + 1] = str(folder / location)
    return argv


def _over_other_input(folder: Path, which: str) -> list[str]:
    """``--out`` over graft's other inputs: the checkpoint of an int8 --pe, the config.json of
    --from-hf-config (--force given)."""
    model = demo(folder, name="model.onnx")
    given = folder / ("ck.pt" if which == "checkpoint" else "config.json")
    given.write_text("{}")
    if which == "checkpoint":
        pe, _ = _pe(folder)
        return [*_graft_argv(model, pe, "arange:x", "--force")[:-3], "--checkpoint", str(given),
                "--out", str(given), "--force"]
    return ["graft", str(model), "--from-hf-config", str(given), "--out", str(given),
            "--force"]


# -- resources and malformed tensors -------------------------------------------------------------


def _external(folder: Path, tensors: list[tuple[str, list[int], dict]], data: bytes) -> list[str]:
    """A model adding float32 initializers kept in external data ``entries`` (each tensor's
    ``location``/``offset``/``length``), ``data`` written to ``t.bin``."""
    (folder / "t.bin").write_bytes(data)
    inits = []
    for name, dims, entries in tensors:
        tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims,
                                  data_location=TensorProto.EXTERNAL)
        for key, value in entries.items():
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        inits.append(tensor)
    nodes = [helper.make_node("Identity", [tensors[0][0]], ["y"])]
    model = _save(folder, nodes, [], [_vi("y", TensorProto.FLOAT, None)], inits)
    return ["graft", str(model), "--out", str(folder / "out.onnx")]


def _aliased(folder: Path) -> list[str]:
    """2,400 initializers of 1 MiB, every one on the same 1 MiB of t.bin (6.7 GB before)."""
    side = 512  # 512 x 512 float32 = 1 MiB
    return _external(folder, [(f"t{i}", [side, side],
                               {"location": "t.bin", "offset": 0, "length": 4 * side * side})
                              for i in range(2400)], bytes(4 * side * side))


def _length_mismatch(folder: Path) -> list[str]:
    """A [4, 4] float32 tensor (64 B) naming 60 B."""
    return _external(folder, [("t", [4, 4], {"location": "t.bin", "length": 60})], bytes(64))


def _location(folder: Path, location: str) -> list[str]:
    return _external(folder, [("t", [4], {"location": location, "length": 16})], bytes(16))


def _declared_without_data(folder: Path) -> list[str]:
    """A float32 initializer declared [2^20, 2^20] (4 TiB) holding no data."""
    big = onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20])
    model = _save(folder, [helper.make_node("Identity", ["t"], ["y"])], [],
                  [_vi("y", TensorProto.FLOAT, None)], [big])
    return ["graft", str(model), "--out", str(folder / "out.onnx")]


def _opset(folder: Path, version: int) -> list[str]:
    model = onnx.load(demo(folder, name="model.onnx"))
    model.opset_import[0].version = version
    onnx.save(model, folder / "model.onnx")
    return ["graft", str(folder / "model.onnx"), "--out", str(folder / "out.onnx")]


def _unknown_op(folder: Path) -> list[str]:
    """The model ends in an op of a domain onnxruntime does not know (was exit 3)."""
    pe, w = _pe(folder)
    model = onnx.load(demo(folder, weight=w, name="model.onnx"))
    model.graph.node[-1].output[0] = "y_raw"
    model.graph.node.append(helper.make_node("Bar", ["y_raw"], ["y"], domain="foo.bar"))
    model.opset_import.append(helper.make_opsetid("foo.bar", 1))
    onnx.save(model, folder / "model.onnx")
    return _graft_argv(folder / "model.onnx", pe, "arange:x")


def _expand(folder: Path) -> list[str]:
    """The user's model (not the PE) expands a constant to 40000 x 32000 float32: 5.1 GB."""
    return _summed(folder, {"huge": np.asarray([40000, 32000], np.int64),
                            "one_f": np.ones(1, np.float32)},
                   [helper.make_node("Expand", ["one_f", "huge"], ["wide"])])


def _summed(folder: Path, constants: dict[str, np.ndarray], nodes: list) -> list[str]:
    """graft's argv for the demo model plus ``nodes`` (over ``constants`` and its input ``x``),
    their last output summed into a new graph output ``total``: the user's own ops, not the
    PE's."""
    pe, w = _pe(folder)
    model = onnx.load(demo(folder, weight=w, name="model.onnx"))
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    model.graph.node.extend([*nodes, helper.make_node("ReduceSum", [nodes[-1].output[0]],
                                                      ["total"], keepdims=0)])
    model.graph.output.append(_vi("total", TensorProto.FLOAT, []))
    onnx.save(model, folder / "model.onnx")
    return _graft_argv(folder / "model.onnx", pe, "arange:x")


def _tile(folder: Path) -> list[str]:
    """The user's model tiles a [1, S, 4] float tensor 15000 x 5000 times: 6 GB at S = 5, known
    from shape inference alone (constant repeats), refused before any session runs."""
    return _summed(folder, {"reps": np.asarray([1, 15000, 5000], np.int64)},
                   [helper.make_node("Tile", ["x", "reps"], ["tiled"])])


def _expand_by_length(folder: Path) -> list[str]:
    """The user's model expands to [1, S * 2^26, 4] float32, its shape computed from x's own
    (Shape, Mul, Concat): 5.4 GB at S = 5, known from shape inference's data propagation."""
    return _summed(folder, {"stretch": np.asarray([1, 1 << 26, 1], np.int64),
                            "one_f": np.ones(1, np.float32)},
                   [helper.make_node("Shape", ["x"], ["x_shape"]),
                    helper.make_node("Mul", ["x_shape", "stretch"], ["big_shape"]),
                    helper.make_node("Expand", ["one_f", "big_shape"], ["wide"])])


def _max_len(folder: Path, value: int) -> list[str]:
    model = demo(folder, name="model.onnx")
    return ["graft", str(model), "--max-len", str(value), "--out", str(folder / "out.onnx")]


CASES = [
    # graft's proof: each grafted model differs from its original where the old proof never
    # looked; refused (exit 1), nothing written
    Case("integer-input-as-offset", "proof", _offset, 1, DIFFER),
    Case("positions-clamped-before-the-pe", "proof", _clamped, 1, DIFFER),
    Case("one-element-at-finfo-min", "proof", _finfo_min, 1, DIFFER),
    Case("overridable-initializer", "proof", _overridable, 2,
         r"input 'w0' is also an initializer \(a caller may override it\).*refused"),
    # graft's files: never one of its inputs, the model's external data included
    *[Case(f"out-over-the-models-data-{loc}-{'force' if force else 'plain'}", "files",
           lambda f, loc=loc, force=force: _over_data(f, loc, force), 2,
           IS_INPUT if force or loc == "model.onnx.data" else r"exists; pass --force")
      for loc in ("model.onnx.data", "weights.bin") for force in (False, True)],
    *[Case(f"out-over-the-{which}-force", "files",
           lambda f, which=which: _over_other_input(f, which), 2, IS_INPUT)
      for which in ("checkpoint", "hf-config")],
    # resources and malformed tensors: one line, exit 2, before reading
    Case("2400-initializers-on-one-mib", "resources", _aliased, 2,
         r"tensors 't0' and 't1' read overlapping bytes of external data 't\.bin'"),
    Case("external-length-mismatch", "resources", _length_mismatch, 2,
         r"tensor 't' declares \[4, 4\] FLOAT \(64 B\) but names 60 B of external data"),
    Case("declared-2^20-squared-without-data", "resources", _declared_without_data, 2,
         r"tensor 't' declares \[1048576, 1048576\] FLOAT \(1099511627776 values\) but holds 0"),
    Case("location-with-a-nul-byte", "resources", lambda f: _location(f, "t.bin\0x"), 2,
         r"external data location of 7 B with a NUL byte, not a file name"),
    Case("location-of-5000-characters", "resources", lambda f: _location(f, "a" * 5000), 2,
         r"external data location of 5000 B, not a file name \(at most 4096 B"),
    Case("location-part-of-300-characters", "resources",
         lambda f: _location(f, "b" * 300), 2, r"location of 300 B, not a file name"),
    Case("opset-99", "resources", lambda f: _opset(f, 99), 2,
         r"imports ONNX opset 99; this onnx [0-9.]+ knows opsets 1 to \d+"),
    Case("an-op-onnxruntime-lacks", "resources", _unknown_op, 2,
         r"onnxruntime cannot load the original model: .*foo\.bar:Bar"),
    Case("the-models-own-expand-to-5-gb", "resources", _expand, 2,
         r"the original model's tensors would hold 5,120,000,292 B in all at sequence length 5 "
         r"\(the largest, 'wide', 5,120,000,000 B\), over graft's proof memory limit of "
         r"4,294,967,296 B; refused before running it"),
    Case("the-models-own-tile-to-6-gb", "resources", _tile, 2,
         r"the original model's tensors would hold 6,000,000,\d+ B in all at sequence length 5 "
         r"\(the largest, 'tiled', 6,000,000,000 B\).* refused before running it"),
    Case("the-models-own-expand-by-its-length", "resources", _expand_by_length, 2,
         r"the original model's tensors would hold 5,368,709,\d+ B in all at sequence length 5 "
         r"\(the largest, 'wide', 5,368,709,120 B\).* refused before running it"),
    Case("max-len-2^63", "resources", lambda f: _max_len(f, 2**63), 2,
         r"--max-len must be 1 \.\. 16,777,216 .* got 9223372036854775808"),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    base = tmp_path_factory.mktemp("graft_hostile")
    plan = []
    for case in CASES:
        folder = base / case.id
        folder.mkdir()
        plan.append({"id": case.id, "folder": str(folder), "argv": case.make(folder)})
    (base / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "MPLCONFIGDIR": str(base / "mpl"), "HOME": str(base / "home"),
           "TMPDIR": str(base / "tmp")}
    for name in ("mpl", "home", "tmp"):
        (base / name).mkdir()
    subprocess.run([sys.executable, str(REPO / "tests" / "_trust_driver.py"),
                    str(base / "plan.json"), str(base / "results.json")],
                   check=True, timeout=600, env=env, cwd=base)
    return json.loads((base / "results.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[f"{c.group}: {c.id}" for c in CASES])
def test_hostile_graft(outcomes, case):
    import re

    got = outcomes[case.id]
    assert got["exit"] == case.exit, (got["stdout"], got["stderr"])
    lines = got["stderr"].strip().splitlines()
    assert len(lines) == 1, got["stderr"]  # one line, no traceback, no onnxruntime log
    assert lines[0].startswith("error: "), lines
    assert re.search(case.says, lines[0]), lines[0]
    assert got["seconds"] < 30, got["seconds"]
    assert got["after"] == got["before"]  # nothing written, removed or changed


def test_the_proof_cases_name_what_they_compared(outcomes):
    """The clamped model's report says positions past max_len were run; the offset model's
    mismatch is in y."""
    clamped = outcomes["positions-clamped-before-the-pe"]["stdout"]
    assert "positions 5, 6, 13" in clamped and "y: max abs err" in clamped
    assert "MISMATCH" in outcomes["integer-input-as-offset"]["stdout"]
    assert "MISMATCH" in outcomes["one-element-at-finfo-min"]["stdout"]


# -- the proof's time limit, in process ----------------------------------------------------------


def test_a_model_that_loops_for_ever_is_stopped_at_the_proofs_limit(tmp_path, monkeypatch):
    """A Loop of 10^12 iterations in the user's model (not the PE): the original's run is
    stopped at PROOF_SECONDS (here 1 s), one line, exit 2, nothing written."""
    import time

    pe, w = _pe(tmp_path)
    model = onnx.load(demo(tmp_path, weight=w, name="model.onnx"))
    body = helper.make_graph(
        [helper.make_node("Add", ["c_in", "c_one"], ["c_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("c_in", TensorProto.FLOAT, [])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("c_out", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.float32(1), "c_one")])
    model.graph.initializer.extend([numpy_helper.from_array(np.int64(10**12), "trips"),
                                    numpy_helper.from_array(np.bool_(True), "go"),
                                    numpy_helper.from_array(np.float32(0), "start")])
    model.graph.node.append(helper.make_node("Loop", ["trips", "go", "start"], ["spin"],
                                             body=body))
    model.graph.output.append(_vi("spin", TensorProto.FLOAT, []))
    onnx.save(model, tmp_path / "model.onnx")
    monkeypatch.setattr(prove, "PROOF_SECONDS", 1.0)
    began = time.monotonic()
    with pytest.raises(BadParameterError) as info:
        graft(tmp_path / "model.onnx", pe=pe, at="pe0", positions="arange:x",
              out=tmp_path / "out.onnx")
    assert time.monotonic() - began < 20
    assert str(info.value) == ("the original model did not finish a run at sequence length 2 "
                               "within graft's proof limit of 1 s; refused")
    assert not (tmp_path / "out.onnx").exists()


def test_a_grafted_model_that_lost_an_output_is_refused(tmp_path):
    """Every output of the original is compared: one the grafted model lacks is a failed proof
    (``prove.check_outputs``), and so is one it names twice."""
    original = onnx.load(demo(tmp_path))
    lost = onnx.ModelProto.FromString(original.SerializeToString())
    lost.graph.output.append(_vi("x", TensorProto.FLOAT, None))
    with pytest.raises(ParityError) as info:
        prove.check_outputs(lost, original)
    assert str(info.value) == ("the grafted model's outputs (y) are not the original's (y, x); "
                               "every output must be compared")
    twice = onnx.ModelProto.FromString(original.SerializeToString())
    twice.graph.output.append(original.graph.output[0])
    with pytest.raises(ParityError, match=r"outputs \(y, y\) are not the original's \(y\)"):
        prove.check_outputs(original, twice)
    prove.check_outputs(original, original)


@pytest.mark.parametrize(("scaling", "says"), [
    ({"rope_type": "yarn", "factor": 2.718281828459045, "mscale": 1.0, "mscale_all_dim": -10.0,
      "original_max_position_embeddings": 64},
     "HF config: yarn mscale_all_dim -10.0 with factor 2.718281828459045 makes the attention "
     "factor's divisor 0.0; it must be positive"),
    ({"rope_type": "yarn", "factor": 2.718281828459045, "mscale": 1.0, "mscale_all_dim": -20.0,
      "original_max_position_embeddings": 64}, "makes the attention factor's divisor -1.0"),
])
def test_graft_from_hf_config_refuses_a_yarn_divisor_of_zero(scaling, says):
    """graft --from-hf-config reads the config before edgepe's rope validation: yarn's
    mscale_all_dim that zeroes get_mscale was a ZeroDivisionError there (issue 41)."""
    from edgepe.schemes.hf_config import from_hf_config

    config = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
              "max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": scaling}
    with pytest.raises(BadParameterError) as info:
        from_hf_config(config)
    assert says in str(info.value)
    fine = {**scaling, "mscale_all_dim": 1.0}
    assert from_hf_config({**config, "rope_scaling": fine}).params["attention_factor"] == 1.0


# -- the static bound of the user model's own tensors (prove.check_run_bound), in process -------


def _two_adds(elem=TensorProto.FLOAT, inputs=("a",)):
    """``b = a + a``, ``c = b + b`` over ``a [S, 4]`` of ``elem``, an initializer ``w [1000]``."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["b"]), helper.make_node("Add", ["b", "b"], ["c"])],
        "adds", [_vi(n, elem, ["S", 4]) for n in inputs], [_vi("c", elem, ["S", 4])],
        [numpy_helper.from_array(np.zeros(1000, np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 18)])
    model.graph.input.append(_vi("w", TensorProto.FLOAT, [1000]))  # an overridable weight
    return model


def test_the_run_bound_sums_input_and_every_node_output_not_initializers():
    """a, b, c: 3 tensors of S x 4 float32 = 48 * S bytes in all (w's 4000 B not counted): at the
    budget it runs, one byte under it refuses, naming the largest and the total."""
    model = _two_adds()
    prove.check_run_bound(model, {"a": [10, 4], "w": [1000]}, "original", 10, budget=480)
    with pytest.raises(BadParameterError) as info:
        prove.check_run_bound(model, {"a": [10, 4], "w": [1000]}, "original", 10, budget=479)
    assert str(info.value) == (
        "the original model's tensors would hold 480 B in all at sequence length 10 (the "
        "largest, 'a', 160 B), over graft's proof memory limit of 479 B; refused before "
        "running it")


def test_the_run_bound_counts_each_type_by_its_element_size_and_a_grafted_failure_is_parity():
    """float16 is 2 bytes an element, int64 8; the grafted model's refusal is a failed proof."""
    prove.check_run_bound(_two_adds(TensorProto.FLOAT16), {"a": [10, 4]}, "grafted", 10,
                          budget=240)
    with pytest.raises(ParityError, match=r"grafted model's tensors would hold 240 B"):
        prove.check_run_bound(_two_adds(TensorProto.FLOAT16), {"a": [10, 4]}, "grafted", 10,
                              budget=239)
    with pytest.raises(ParityError, match=r"hold 960 B .*'a', 320 B"):
        prove.check_run_bound(_two_adds(TensorProto.INT64), {"a": [10, 4]}, "grafted", 10,
                              budget=959)


def test_the_run_bound_skips_what_shape_inference_cannot_bound():
    """A size from an input's values (Expand to a shape fed at run time) is not counted: the
    arena and deadline stay the backstop; the rest still is."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Expand", ["one", "shape"], ["wide"])], "open",
        [_vi("one", TensorProto.FLOAT, [1]), _vi("shape", TensorProto.INT64, [2])],
        [_vi("wide", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 18)])
    prove.check_run_bound(model, {"one": [1], "shape": [2]}, "original", 1, budget=20)
    with pytest.raises(BadParameterError, match=r"hold 20 B in all .*'shape', 16 B"):
        prove.check_run_bound(model, {"one": [1], "shape": [2]}, "original", 1, budget=19)


def test_the_proof_shapes_are_read_from_the_graph_before_a_session():
    """A transformers export's inputs, as ``hf_feeds`` sizes them: ids [2, seq], the mask
    [2, past + seq], a cache [2, heads, past, d]; a fixed dimension kept."""
    model = helper.make_model(helper.make_graph(
        [], "io", [_vi("input_ids", TensorProto.INT64, ["b", "s"]),
                   _vi("attention_mask", TensorProto.INT64, ["b", "t"]),
                   _vi("past_key_values.0.key", TensorProto.FLOAT, ["b", 2, "p", 8])],
        [_vi("input_ids", TensorProto.INT64, ["b", "s"])]))
    given = prove._GraphInputs(model).get_inputs()
    assert [(v.name, v.shape) for v in given] == [
        ("input_ids", ["b", "s"]), ("attention_mask", ["b", "t"]),
        ("past_key_values.0.key", ["b", 2, "p", 8])]
    assert prove._case_shapes(given, 3, 5) == {
        "input_ids": [2, 3], "attention_mask": [2, 8], "past_key_values.0.key": [2, 2, 5, 8]}


def test_the_run_bound_sizes_a_constant_range_without_making_it():
    """Range(0, 2^31) of int64 (16 GiB): shape inference sizes it from its constant inputs, so
    it is refused in a fraction of a second (measured: 0.25 s, 51 MB peak RSS in a fresh
    process), never made."""
    import time

    inits = [numpy_helper.from_array(np.asarray(v, np.int64), n)
             for n, v in (("s", 0), ("l", 1 << 31), ("d", 1))]
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Range", ["s", "l", "d"], ["r"]),
         helper.make_node("Shape", ["r"], ["rs"]), helper.make_node("Add", ["x", "x"], ["y"])],
        "range", [_vi("x", TensorProto.FLOAT, ["S"])],
        [_vi("y", TensorProto.FLOAT, ["S"]), _vi("rs", TensorProto.INT64, None)], inits),
        opset_imports=[helper.make_opsetid("", 18)])
    began = time.monotonic()
    with pytest.raises(BadParameterError, match=r"hold 17,179,869,224 B in all at sequence "
                       r"length 4 \(the largest, 'r', 17,179,869,184 B\)"):
        prove.check_run_bound(model, {"x": [4]}, "original", 4)
    assert time.monotonic() - began < 5


def test_the_run_bound_copies_large_float_weights_without_their_data():
    """Shape inference gets the model without float weights over 1024 elements (name, type and
    dims kept: a weight read as a size keeps its values); the bound is the same either way."""
    weights = {"w1024": np.ones(1024, np.float32), "w1025": np.ones(1025, np.float32),
               "h1025": np.ones(1025, np.float16), "i2048": np.arange(2048, dtype=np.int64)}
    model = _two_adds()
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    copy = prove._weightless(model)
    kept = {t.name: t for t in copy.graph.initializer}
    assert [t.name for t in copy.graph.initializer] == [t.name for t in model.graph.initializer]
    for name in ("w", "w1024", "i2048"):
        np.testing.assert_array_equal(numpy_helper.to_array(kept[name]),
                                      numpy_helper.to_array(next(
                                          t for t in model.graph.initializer if t.name == name)))
    for name in ("w1025", "h1025"):
        assert list(kept[name].dims) == [1025] and not kept[name].raw_data
        assert kept[name].data_type == next(t.data_type for t in model.graph.initializer
                                            if t.name == name)
    assert copy.graph.node == model.graph.node and copy.graph.input == model.graph.input
    assert copy.opset_import == model.opset_import and copy.ir_version == model.ir_version
    assert len(model.graph.initializer[-2].raw_data) == 1025 * 2  # the caller's model untouched
