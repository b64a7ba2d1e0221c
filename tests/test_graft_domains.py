"""graft reads an op by what it is, ``(domain, op_type)``, not by its name alone (hgr).

com.microsoft has ops named like ONNX's with semantics of their own (its ``Range``, ``GatherND``,
``Gelu``...), and a hostile model can declare any domain, even give it a model-local function
that onnxruntime runs under ONNX's name (``evil.Cos``). Every op_type match of graft's goes
through ``find.op``, which names such a node ``domain.op_type`` (no match equals it); so:

- a PE built of such nodes is not found, and the "no PE found" line names them
  (``find.foreign_ops``): exit 2 at the CLI, one stderr line, nothing written;
- where onnxruntime runs such a node inside the positions' subgraph (com.microsoft's ``Range``),
  the PE is found by its values (``discover``) and proven equal, never read by the node's name;
- graft's proof reads ONNX's ``Shape``/``Gather`` only (``prove._shape_read``, ``_int_high``).

Also here: the refusal names every family graft finds, from one list (``find_hf.LOOKED_FOR``).
(Whisper's encoder table gathered by an unfolded ``Range``: tests/test_graft_whole.py.)

Hand-built models and Optimum's committed Llama export (tests/data/optimum); no torch export.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.contract.errors import BadParameterError
from edgepe.graft import graft_found
from edgepe.graft.find_hf import LOOKED_FOR, Found, looked_for

prove = importlib.import_module("edgepe.graft.prove")

REPO = Path(__file__).resolve().parents[1]
GRAFT = REPO / "edgepe" / "graft"
LLAMA = REPO / "tests" / "data" / "optimum" / "llama" / "model.onnx"
MS = "com.microsoft"


def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _refused_at_cli(model: Path, says: str) -> str:
    """``edgepe graft MODEL --out OUT``: exit 2, one stderr line containing ``says``, nothing in
    the model's folder written or changed; the line."""
    before = _files(model.parent)
    result = CliRunner().invoke(app, ["graft", str(model), "--out",
                                      str(model.with_name("out.onnx"))])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: no PE found in "), lines
    assert says in lines[0], lines[0]
    assert _files(model.parent) == before
    return lines[0]


def _save(model, folder: Path, name: str = "model.onnx") -> Path:
    onnx.checker.check_model(model, full_check=True)
    path = folder / name
    onnx.save(model, str(path))
    return path


def _run(model, feeds):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else \
        Path(model).read_bytes()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


# --- every op_type match goes through find.op ---------------------------------------------------


def test_every_op_type_read_in_graft_goes_through_find_op():
    """The audit, kept: in edgepe/graft/*.py a node's ``op_type`` is read only by ``find.op`` (and
    ``find.foreign_ops``, which words what ``op`` does not read), so no match can take another
    domain's op for ONNX's (lower's own rotations are ``lower.ROTATIONS``, both domains)."""
    readers = set()
    for path in sorted(GRAFT.glob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and node.attr == "op_type":
                    readers.add((path.name, function.name))
        assert not [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)
                    and any(isinstance(a, ast.Attribute) and a.attr == "op_type"
                            for a in ast.walk(n))], path  # (nor at module level)
    assert readers == {("find.py", "op"), ("find.py", "foreign_ops")}, readers


# --- Optimum's Llama with its Cos in another domain -------------------------------------------


def _llama_cos_in(domain: str, folder: Path) -> Path:
    """Optimum's Llama export (one ``Cos`` of the rotary angle) with that ``Cos`` put in
    ``domain``; ``evil``: with a model-local function ``evil.Cos`` that is ONNX's ``Cos``, so
    onnxruntime runs the model exactly as before (read as ONNX's, it grafted and proved before
    hgr: a function can be any computation)."""
    model = onnx.load(str(LLAMA))
    (cos,) = [n for n in model.graph.node if n.op_type == "Cos"]
    cos.domain = domain
    model.opset_import.append(helper.make_opsetid(domain, 1))
    if domain == "evil":
        model.functions.append(helper.make_function(
            "evil", "Cos", ["x"], ["y"], [helper.make_node("Cos", ["x"], ["y"])],
            [helper.make_opsetid("", 18)]))
    return _save(model, folder)


@pytest.mark.parametrize("domain", ["evil", MS])
def test_a_cos_of_another_domain_is_no_rope_and_is_named(tmp_path, domain):
    path = _llama_cos_in(domain, tmp_path)
    if domain == "evil":  # onnxruntime runs it: the model is valid, its Cos is not ONNX's
        ids = np.array([[5, 7, 9]], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "position_ids": np.arange(3)[None]}
        session = ort.InferenceSession(str(LLAMA), providers=["CPUExecutionProvider"])
        feeds.update({i.name: np.zeros([1, 2, 0, 8], np.float32) for i in session.get_inputs()
                      if i.name.startswith("past")})
        assert np.array_equal(_run(path, feeds)[0], session.run(None, feeds)[0])
    _refused_at_cli(path, f"; saw {domain}.Cos at '/model/rotary_emb/Cos_output_0' (domain "
                          f"'{domain}', another op than ONNX's Cos, not read as it); pass --pe")


# --- hand-built: a learned table gathered by positions from input_ids' length ------------------


def _gpt2_like(range_domain: str = "", gather: str = "Gather") -> onnx.ModelProto:
    """``logits = MatMul(E[input_ids] + P[positions], W)``, ``positions = Range(0, S, 1)`` of
    ``input_ids``' length (GPT-2 exported with input_ids alone), the Range of
    ``range_domain``; ``gather``: ``Gather``, or ``GatherND`` of com.microsoft (onnxruntime's
    contrib op) reading ``P`` by ``positions[:, None]``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "E"),
             numpy_helper.from_array(rng.standard_normal((24, 8)).astype(np.float32), "P"),
             numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
             numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray(1, np.int64), "one"),
             numpy_helper.from_array(np.asarray([0], np.int64), "axis0"),
             numpy_helper.from_array(np.asarray([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["tok"]),
             helper.make_node("Shape", ["input_ids"], ["seq1"], start=1, end=2),
             helper.make_node("Squeeze", ["seq1", "axis0"], ["seq"]),
             helper.make_node("Range", ["zero", "seq", "one"], ["positions"],
                              domain=range_domain),
             helper.make_node("Gather", ["P", "positions"], ["pos"]) if gather == "Gather" else
             helper.make_node("GatherND", ["P", "column"], ["pos"], domain=MS),
             helper.make_node("Add", ["tok", "pos"], ["h"]),
             helper.make_node("MatMul", ["h", "W"], ["logits"])]
    if gather != "Gather":
        nodes.insert(4, helper.make_node("Unsqueeze", ["positions", "axis1"], ["column"]))
    graph = helper.make_graph(
        nodes, "gpt2_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 4])],
        inits)
    domains = {range_domain, "" if gather == "Gather" else MS} - {""}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)] + [
        helper.make_opsetid(d, 1) for d in sorted(domains)])
    model.ir_version = 8
    return model


def test_positions_made_by_com_microsoft_range_are_found_by_their_values(tmp_path):
    """onnxruntime runs com.microsoft's Range; graft does not read it as ONNX's (find_pe's rule
    sees no Range), finds the table by the values its index takes (discover) and proves the
    graft equal: the same rows at every position, logits bit for bit."""
    path = _save(_gpt2_like(MS), tmp_path)
    out = tmp_path / "out.onnx"
    report = graft_found(path, out)
    assert report.found == ("found learned (table 'P' [24, 8]) at Gather 'pos', positions "
                            "'positions' (from 'input_ids')"), report.found
    assert report.lengths[-1] == "every position 0..23 (the replaced tensors)", report.lengths
    assert [(c.name, c.max_abs_err) for c in report.checks] == [("logits", 0.0), ("pos", 0.0)]
    for seq in (1, 5, 24):
        ids = np.random.default_rng(seq).integers(0, 16, (2, seq))
        assert np.array_equal(_run(out, {"input_ids": ids})[0],
                              _run(path, {"input_ids": ids})[0])


def test_a_table_read_by_com_microsoft_gathernd_is_not_read_as_onnxs(tmp_path):
    """com.microsoft's GatherND (onnxruntime runs it) is not ONNX's: the table it reads is no
    candidate, and the refusal says what was seen."""
    path = _save(_gpt2_like(gather="GatherND"), tmp_path)
    _run(path, {"input_ids": np.zeros((1, 3), np.int64)})  # a model onnxruntime runs
    _refused_at_cli(path, f"; saw {MS}.GatherND at 'pos' (domain '{MS}', another op than "
                          "ONNX's GatherND, not read as it); pass --pe")


# --- graft's proof reads ONNX's Shape and Gather only ------------------------------------------


def _reader_model(op_type: str, domain: str) -> onnx.ModelProto:
    """``x [B, S]`` (int64) read by one ``op_type`` node of ``domain`` (a model-local function
    that is ONNX's op for a domain other than ONNX's), then ``Cast`` to float: ``y``."""
    inputs = ["x"] if op_type == "Shape" else ["T", "x"]
    nodes = [helper.make_node(op_type, inputs, ["r"], domain=domain),
             helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    inits = [] if op_type == "Shape" else [
        numpy_helper.from_array(np.zeros((5, 3), np.float32), "T")]
    graph = helper.make_graph(
        nodes, "reader", [helper.make_tensor_value_info("x", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)] + (
        [helper.make_opsetid(domain, 1)] if domain else []))
    if domain:
        model.functions.append(helper.make_function(
            domain, op_type, inputs, ["r"], [helper.make_node(op_type, inputs, ["r"])],
            [helper.make_opsetid("", 18)]))
    return model


@pytest.mark.parametrize("domain", ["", "ai.onnx", "evil"])
def test_the_proof_feeds_shapes_only_where_onnxs_shape_reads_the_input(domain):
    """``prove._shape_read``: an input read by ONNX's Shape alone is fed as its shape; read by a
    node that only calls itself Shape, it is fed values."""
    model = _reader_model("Shape", domain)
    assert prove._shape_read(model, ["y"]) == (set() if domain == "evil" else {"x"})


@pytest.mark.parametrize("domain", ["", "evil"])
def test_the_proof_bounds_an_index_by_onnxs_gather_only(domain):
    """``prove._int_high``: an integer input gathered by ONNX's Gather takes the table's rows;
    one an ``evil.Gather`` reads takes the default range."""
    assert prove._int_high(_reader_model("Gather", domain), "x", 100) == (
        100 if domain == "evil" else 5)


# --- the refusal names every family graft finds ------------------------------------------------


def test_the_no_pe_refusal_names_every_family_graft_finds(tmp_path):
    """One list, ``find_hf.LOOKED_FOR``: the line names each family in it, and a ``Found`` of
    any other family cannot be made (so a family graft learns to find is named there too)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "plain", [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])], [w]),
        opset_imports=[helper.make_opsetid("", 18)])
    line = _refused_at_cli(_save(model, tmp_path), f"looked for {looked_for()}; pass --pe ")
    assert set(LOOKED_FOR) == {"rope", "mrope", "learned", "sinusoidal", "alibi", "t5-bias"}
    for family, words in LOOKED_FOR.items():
        assert words in line, family
    for words in ("RoPE (Cos/Sin", "multimodal RoPE", "a position table", "Whisper's encoder",
                  "ALiBi (slopes", "T5's relative position bias"):
        assert words in line, words
    assert looked_for().count(", ") >= len(LOOKED_FOR) - 2 and \
        looked_for().endswith(" and " + LOOKED_FOR["t5-bias"])
    with pytest.raises(AssertionError, match="family 'gaussian' not in LOOKED_FOR"):
        Found("gaussian", ["t"], "p", "(somewhere)")


def test_every_family_graft_constructs_is_in_the_list():
    """The literal families of every ``Found(...)`` in edgepe/graft/*.py, and the list holds
    nothing graft never makes (``learned`` and ``sinusoidal`` are also picked by a variable)."""
    made = set()
    for path in GRAFT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Found" and \
                    node.args and isinstance(node.args[0], ast.Constant):
                made.add(node.args[0].value)
    assert made <= set(LOOKED_FOR) <= made | {"learned"}, made


def test_foreign_ops_are_worded_once_per_kind_with_their_count(tmp_path):
    """``find.foreign_ops``: each kind of node named like an ONNX op in another domain, its
    count and first output; a name ONNX has no op of (``Foo``) is not said."""
    model = _gpt2_like(gather="GatherND")
    model.graph.node.append(helper.make_node("Gelu", ["h"], ["g"], domain=MS))
    model.graph.node.append(helper.make_node("Gelu", ["g"], ["g2"], domain=MS))
    model.graph.node.append(helper.make_node("Foo", ["g2"], ["g3"], domain=MS))
    from edgepe.graft.find import foreign_ops

    assert foreign_ops(model.graph) == [
        f"{MS}.GatherND at 'pos' (domain '{MS}', another op than ONNX's GatherND, not read as "
        "it)", f"{MS}.Gelu x2 at 'g' (domain '{MS}', another op than ONNX's Gelu, not read as it)"]
    with pytest.raises(BadParameterError, match=re.escape(f"saw {MS}.GatherND at 'pos'")):
        graft_found(_save(_gpt2_like(gather="GatherND"), tmp_path), tmp_path / "never.onnx")
    assert not (tmp_path / "never.onnx").exists()
