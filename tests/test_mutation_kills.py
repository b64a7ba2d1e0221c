"""Tests that kill survivors of the library mutation run (scripts/mutation.py, docs/mutation.md).

Each test names the behaviour it pins; the survivors they were written against are listed in
docs/mutation.md's history (git log of docs/mutation.json).
"""

from __future__ import annotations

import fcntl
import os
import re

import numpy as np
import onnx
import pytest

from edgepe.contract import errors


def test_exit_codes_of_each_error_class():
    assert errors.EdgepeError.exit_code == 2
    for cls in (errors.UnknownSchemeError, errors.BadParameterError, errors.CheckpointError,
                errors.ArtifactError, errors.OutputPathError, errors.PositionError):
        assert issubclass(cls, errors.EdgepeError) and cls.exit_code == 2
    assert errors.ParityError.exit_code == 1


@pytest.mark.parametrize(("value", "allowed", "hint"), [
    ("binray", ["binary", "gray"], " Did you mean 'binary'?"),
    ("gary", ["binary", "gray"], " Did you mean 'gray'?"),
    ("zzzzzz", ["binary", "gray"], ""),
    ("x", [], ""),
    # the cutoff is 0.6: 'abcd' vs 'abxy' has ratio 0.5 (no hint), 'abcd' vs 'abcx' 0.75
    ("abcd", ["abxy"], ""),
    ("abcd", ["abcx"], " Did you mean 'abcx'?"),
    # one suggestion, the closest
    ("alibi", ("alibis", "alibi-x", "alibi"), " Did you mean 'alibi'?"),
])
def test_did_you_mean(value, allowed, hint):
    assert errors.did_you_mean(value, allowed) == hint


# ---- edgepe.contract.manifest: every message, every flag, exact bytes ------------------------

from edgepe.contract import manifest  # noqa: E402
from edgepe.contract.errors import ArtifactError  # noqa: E402


def _valid() -> dict:
    return {"scheme": "binary", "max_len": 512, "d_model": 64, "kind": "pe", "format": "onnx",
            "mode": "compute", "dtype": "float32", "shape": ["N", 64], "sha256": "0" * 64,
            "positions": {}}


@pytest.mark.parametrize(("field", "want"), [
    (manifest.Field("a", "str"), "a string"),
    (manifest.Field("a", "int"), "an integer"),
    (manifest.Field("a", "number"), "a finite number"),
    (manifest.Field("a", "object"), "an object"),
    (manifest.Field("a", "list"), "a list"),
    (manifest.Field("a", "numbers"), "a number or a list of numbers"),
    (manifest.Field("a", "ints"), "an integer or a list of integers"),
    (manifest.Field("a", "str", choices=("x", "y", 3)), "x or y or 3"),
    (manifest.Field("a", "int", low=1, high=64), "an integer from 1 to 64"),
    (manifest.Field("a", "int", high=64), "an integer"),
    (manifest.Field("a", "number", low=0), "a finite number >= 0"),
    (manifest.Field("a", "int", null=True, low=1.5), "null or an integer >= 1.5"),
    (manifest.Field("a", "str", null=True), "null or a string"),
])
def test_field_want_text(field, want):
    assert field.want() == want


def test_open_regular_messages(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(missing, "artifact")
    assert str(info.value) == f"{str(missing)!r} does not exist"
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(tmp_path, "artifact")
    assert str(info.value) == (f"artifact {str(tmp_path)!r} is not a file (it is a folder): "
                               "edgepe reads regular files only")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(fifo, "manifest")
    assert str(info.value) == (f"manifest {str(fifo)!r} is not a file (it is a FIFO): edgepe "
                               "reads regular files only")
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular("/dev/null", "checkpoint")
    assert str(info.value) == ("checkpoint '/dev/null' is not a file (it is a device or "
                               "socket): edgepe reads regular files only")
    big = tmp_path / "big"
    big.write_bytes(b"12345")
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(big, "table", 4)
    assert str(info.value) == (f"table {str(big)!r} is 5 bytes; edgepe reads at most 4 (a "
                               "manifest is a few KiB): refused")
    fd = manifest.open_regular(big, "table", 5)
    try:
        assert os.read(fd, 10) == b"12345"
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK  # a FIFO swapped in never blocks
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_open_regular_checks_the_descriptor_again(tmp_path, monkeypatch):
    """The path may change between stat and open: the open descriptor is checked again (here
    fstat reports what a file grown in between would), and the descriptor is closed."""
    path = tmp_path / "f"
    path.write_bytes(b"1234")
    real_fstat = os.fstat
    opened = []

    def grown(fd):
        opened.append(fd)
        info = real_fstat(fd)
        return os.stat_result((info.st_mode, *info[1:6], 99, *info[7:]))

    monkeypatch.setattr(os, "fstat", grown)
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(path, "table", 10)
    assert str(info.value) == (f"table {str(path)!r} is 99 bytes; edgepe reads at most 10 (a "
                               "manifest is a few KiB): refused")
    monkeypatch.setattr(os, "fstat", real_fstat)
    with pytest.raises(OSError):
        os.fstat(opened[0])  # closed


def test_read_bytes_of_a_file_grown_after_the_check(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 20)
    real_fstat, real_stat = os.fstat, os.stat

    def small(info):
        return os.stat_result((info.st_mode, *info[1:6], 5, *info[7:]))

    monkeypatch.setattr(os, "fstat", lambda fd: small(real_fstat(fd)))
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: small(real_stat(p, *a, **k)))
    with pytest.raises(ArtifactError) as info:
        manifest.read_bytes(path, "manifest", 10)
    assert str(info.value) == f"manifest {str(path)!r} is over 10 bytes: refused"


def test_read_messages(tmp_path):
    art = tmp_path / "pe.onnx"
    art.write_bytes(b"x")
    with pytest.raises(ArtifactError) as info:
        manifest.read(art)
    assert str(info.value) == (f"{str(art)!r} is not an edgepe artifact: no readable manifest at "
                               f"{str(art)!r}.json (artifacts come from 'edgepe export')"
                               .replace("'.json", ".json'"))
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    with pytest.raises(ArtifactError, match=r"^artifact '.*folder\.onnx' is not a file"):
        manifest.read(folder)
    mpath = manifest.path_for(art)
    mpath.mkdir()
    with pytest.raises(ArtifactError, match=r"^manifest '.*pe\.onnx\.json' is not a file"):
        manifest.read(art)
    mpath.rmdir()
    mpath.write_bytes(manifest.dumps({**_valid(), "max_len": 0}))
    with pytest.raises(ArtifactError) as info:
        manifest.read(art)
    assert str(info.value) == (f"manifest {str(mpath)!r}: max_len must be an integer from 1 to "
                               "1.09951e+12, got 0")
    mpath.write_bytes(b"[1]")
    with pytest.raises(ArtifactError) as info:
        manifest.read(art)
    assert str(info.value) == f"manifest {str(mpath)!r} is not a JSON object"
    mpath.write_bytes(manifest.dumps({**_valid(), "d_model": None}))
    with pytest.raises(ArtifactError) as info:
        manifest.read(art)
    assert str(info.value) == f"manifest {str(mpath)!r}: a 'pe' artifact needs d_model"
    mpath.write_bytes(manifest.dumps(_valid()))
    assert manifest.read(art) == _valid()


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff{}", "manifest 'm' is not UTF-8 text"),
    (b'{"a": 1, "b": 2, "b": 3}', "manifest 'm' is not valid JSON (duplicate key 'b')"),
    (b'{"a": 1, "b": 2, "a": 3}', "manifest 'm' is not valid JSON (duplicate key 'a')"),
    (b'{"a": NaN}', "manifest 'm' is not valid JSON (NaN is not a number JSON allows)"),
    (b'{"a": -Infinity}',
     "manifest 'm' is not valid JSON (-Infinity is not a number JSON allows)"),
    (b"", "manifest 'm' is not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    (b'{"a": \xc3\xa9}',  # non-ASCII outside a string: counted as '?', then refused by json
     "manifest 'm' is not valid JSON (Expecting value: line 1 column 7 (char 6))"),
    (b'"x"', "manifest 'm' is not a JSON object"),
])
def test_loads_messages(data, message):
    with pytest.raises(ArtifactError) as info:
        manifest.loads(data, "m")
    assert str(info.value) == message


def test_nesting_depth_of_non_ascii_text():
    assert manifest.nesting_depth('[{"é": "[["}, é]') == 2


def test_validate_messages():
    with pytest.raises(ArtifactError) as info:
        manifest.validate({**_valid(), "dtype": "float64"}, "m")
    assert str(info.value) == ("manifest 'm': dtype must be float32 or float16 or uint8 or int8 "
                               "or bit, got 'float64'")
    with pytest.raises(ArtifactError) as info:
        manifest.validate({**_valid(), "shape": "x" * 100}, "m")
    assert str(info.value) == f"manifest 'm': shape must be a list, got '{'x' * 76}..."
    with pytest.raises(ArtifactError) as info:
        manifest.validate({k: v for k, v in _valid().items() if k != "scheme"}, "m")
    assert str(info.value) == "manifest 'm' is not an edgepe manifest: it lacks scheme"
    with pytest.raises(ArtifactError) as info:
        manifest.validate({**_valid(), "sha256": "0"}, "m")
    assert str(info.value) == "manifest 'm': sha256 must be 64 lowercase hex digits"


def test_short_cuts_at_80():
    assert manifest._short("a" * 78) == repr("a" * 78)  # 80 characters with the quotes
    assert manifest._short("a" * 79) == repr("a" * 79)[:77] + "..."
    assert len(manifest._short("a" * 79)) == 80


def test_lists_of_numbers_fit():
    manifest.validate({**_valid(), "quant": {"scale": [0.5, 0.25], "zero_point": [0, 0]}}, "m")
    manifest.validate({**_valid(), "quant": {"scale": 0.5, "zero_point": 0}}, "m")


def test_table_shape_rule_applies_to_table_modes_only():
    """An ONNX table graph keeps its [N, d] output shape; a stored table file's shape is
    checked; a compute graph's is not."""
    manifest.validate({**_valid(), "mode": "table", "format": "onnx"}, "m")
    manifest.validate({**_valid(), "format": "c"}, "m")
    with pytest.raises(ArtifactError) as info:
        manifest.validate({**_valid(), "mode": "table", "format": "c"}, "m")
    assert str(info.value) == ("manifest 'm': a table's shape must be two positive integers "
                               "[rows, cols], got ['N', 64]")


def test_checkpoint_sha_rule():
    good = {"path": "/x", "sha256": "a" * 64}
    manifest.validate({**_valid(), "checkpoint": good}, "m")
    with pytest.raises(ArtifactError) as info:
        manifest.validate({**_valid(), "checkpoint": {**good, "sha256": "A" * 64}}, "m")
    assert str(info.value) == "manifest 'm': checkpoint.sha256 must be 64 lowercase hex digits"


def test_dumps_is_canonical_bytes():
    assert manifest.dumps({"b": [1], "a": {"d": 1, "c": None}}) == (
        b'{\n  "a": {\n    "c": null,\n    "d": 1\n  },\n  "b": [\n    1\n  ]\n}\n')


def test_write_puts_the_canonical_text_next_to_the_artifact(tmp_path):
    art = tmp_path / "pe.onnx"
    manifest.write(art, {"z": 1, "a": 2})
    assert (tmp_path / "pe.onnx.json").read_bytes() == b'{\n  "a": 2,\n  "z": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.onnx.json"]


# ---- edgepe.targets.check: each node verdict, its reason and the report's text --------------

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgepe.targets import PROFILES  # noqa: E402
from edgepe.targets.check import check  # noqa: E402


def _graph(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_node_not_in_the_operator_table():
    model = _graph([helper.make_node("Sin", ["x"], ["y"], name="s0")],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
    report = check(model, PROFILES["xnnpack"])
    (node,) = report.nodes
    assert (node.name, node.op, node.supported) == ("s0", "Sin", False)
    assert node.reason == "Sin: not in xnnpack's operator table"
    assert str(report) == ("target xnnpack: NOT supported, 1 of 1 nodes unsupported by "
                           "onnxruntime XnnpackExecutionProvider: Sin: not in xnnpack's "
                           "operator table")


def test_node_name_falls_back_to_its_first_output():
    model = _graph([helper.make_node("Abs", ["x"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
    (node,) = check(model, PROFILES["ort-cpu"]).nodes
    assert (node.name, node.op, node.supported, node.reason) == \
        ("y", "Abs", True, "onnxruntime CPUExecutionProvider")


def test_node_on_a_type_the_target_does_not_run():
    model = _graph([helper.make_node("Abs", ["x"], ["y"], name="a")],
                   [_vi("x", TensorProto.DOUBLE, [2])], [_vi("y", TensorProto.DOUBLE, [2])])
    (node,) = check(model, PROFILES["nnapi"]).nodes
    assert not node.supported
    assert node.reason == "Abs on float64: nnapi runs Abs on float32"
    (node,) = check(model, PROFILES["ort-cpu"]).nodes
    assert node.supported


def test_an_output_type_is_judged_too():
    model = _graph([helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.DOUBLE)],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.DOUBLE, [2])])
    (node,) = check(model, PROFILES["nnapi"]).nodes
    assert not node.supported and node.reason.startswith("Cast on float64")


def test_shape_operands_are_not_judged_but_data_is():
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    model = _graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="u")],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [1, 2])],
                   [axes])
    (node,) = check(model, PROFILES["nnapi"]).nodes
    assert node.supported, node.reason


def _gather(indices_elem, profile, const=None, producer=None):
    nodes, inits, inputs = [], [numpy_helper.from_array(np.ones((4, 2), np.float32), "t")], []
    if const is not None:
        inits.append(numpy_helper.from_array(np.array(const, dtype=np.int32), "i"))
    elif producer is not None:
        inputs.append(_vi("p", indices_elem, [3]))
        lo = numpy_helper.from_array(np.array(0, np.int32), "lo")
        hi = numpy_helper.from_array(np.array(3, np.int32), "hi")
        inits += [lo, hi]
        nodes.append(helper.make_node(producer, ["p", "lo", "hi"] if producer == "Clip"
                                      else ["p", "lo"], ["i"], name="clamp"))
    else:
        inputs.append(_vi("i", indices_elem, [3]))
    nodes.append(helper.make_node("Gather", ["t", "i"], ["y"], name="g"))
    model = _graph(nodes, inputs, [_vi("y", TensorProto.FLOAT, [3, 2])], inits)
    return check(model, PROFILES[profile])


def test_gather_index_type():
    report = _gather(TensorProto.INT64, "qnn")
    gather = report.nodes[-1]
    assert not gather.supported
    assert gather.reason == "Gather indices int64: qnn takes int32 indices only"
    assert _gather(TensorProto.INT64, "ort-cpu").nodes[-1].supported


def test_gather_nonnegative_rule():
    assert _gather(None, "qnn", const=[0, 1, 3]).nodes[-1].supported
    neg = _gather(None, "qnn", const=[0, -1, 3]).nodes[-1]
    assert not neg.supported and neg.reason == (
        "Gather with negative constant indices: Gather indices must be >= 0 (constant, or "
        "clamped)")
    free = _gather(TensorProto.INT32, "qnn").nodes[-1]
    assert not free.supported and free.reason == (
        "Gather indices not clamped (cannot show >= 0): Gather indices must be >= 0 (constant, "
        "or clamped)")
    assert _gather(TensorProto.INT32, "qnn", producer="Max").nodes[-1].supported
    assert _gather(TensorProto.INT32, "qnn", producer="Clip").nodes[-1].supported
    assert not _gather(TensorProto.INT32, "qnn", producer="Add").nodes[-1].supported
    assert _gather(TensorProto.INT32, "coreml").nodes[-1].supported  # no such rule there


def test_a_gather_missing_its_indices_is_judged_by_its_data_alone():
    # check() is public API and takes a model onnx.checker never saw: a Gather with one input
    # (no indices) is judged by the types it has, not indexed past its inputs.
    table = numpy_helper.from_array(np.ones((4, 2), np.float32), "t")
    model = _graph([helper.make_node("Gather", ["t"], ["y"], name="g")], [],
                   [_vi("y", TensorProto.FLOAT, [4, 2])], [table])
    (node,) = check(model, PROFILES["qnn"]).nodes
    assert (node.op, node.supported) == ("Gather", True), node.reason

def test_domain_keys():
    node = helper.make_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], name="r",
                            domain="com.microsoft")
    model = _graph([node], [_vi("x", TensorProto.FLOAT, [1, 2, 4]),
                            _vi("p", TensorProto.INT64, [1, 2]),
                            _vi("c", TensorProto.FLOAT, [2, 2]),
                            _vi("s", TensorProto.FLOAT, [2, 2])],
                   [_vi("y", TensorProto.FLOAT, [1, 2, 4])])
    (checked,) = check(model, PROFILES["ort-cpu"]).nodes
    assert checked.op == "com.microsoft.RotaryEmbedding"
    ai = helper.make_node("Abs", ["x"], ["y"], name="a", domain="ai.onnx")
    model = _graph([ai], [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])])
    assert check(model, PROFILES["ort-cpu"]).nodes[0].op == "Abs"


def test_report_text_with_notes_and_counts():
    model = _graph([helper.make_node("Abs", ["x"], ["y"], name="a")],
                   [_vi("x", TensorProto.FLOAT, ["N"])], [_vi("y", TensorProto.FLOAT, ["N"])])
    report = check(model, PROFILES["nnapi"])
    assert report.notes[0] == (
        "inputs x have dynamic dims: graph inputs need fixed shapes (a note: fix N before "
        "deploying, e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed)")
    assert str(report) == ("target nnapi: all 1 nodes supported by onnxruntime "
                           "NnapiExecutionProvider (Android NNAPI) (note: "
                           f"{'; '.join(report.notes)})")
    plain = check(model, PROFILES["ort-cpu"])
    assert str(plain) == "target ort-cpu: all 1 nodes supported by onnxruntime " \
        "CPUExecutionProvider"
    two = _graph([helper.make_node("Sin", ["x"], ["h"], name="s"),
                  helper.make_node("Cos", ["h"], ["y"], name="c")],
                 [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])],
                 opset=26)
    report = check(two, PROFILES["xnnpack"])
    assert report.blocking == ["opset 26: xnnpack loads opsets 7 to 21",
                               "Sin: not in xnnpack's operator table",
                               "Cos: not in xnnpack's operator table"]
    assert str(report) == ("target xnnpack: NOT supported, 2 of 2 nodes unsupported by "
                           "onnxruntime XnnpackExecutionProvider: " + "; ".join(report.blocking))


def test_uint64_message_lists_each_initializer():
    wide = [numpy_helper.from_array(np.array([1], np.uint64), n) for n in ("a", "b")]
    model = _graph([helper.make_node("Abs", ["x"], ["y"], name="n")],
                   [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])], wide)
    report = check(model, PROFILES["tensorrt"])
    assert report.problems == ["uint64 initializers (a, b): uint64 initializers are rejected"]


# ---- edgepe.audit: each verdict of audit() on hand-built graphs, graph_summary's fields --------

from edgepe.audit import audit, graph_summary  # noqa: E402


def _pos_graph(nodes, outputs, inits=()):
    inputs = [_vi("positions", TensorProto.INT64, ["N"])]
    return _graph(nodes, inputs, outputs, inits)


def test_audit_of_an_integer_graph_with_a_cast_boundary():
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    table = numpy_helper.from_array(np.ones((4, 2), np.float32), "table")
    nodes = [helper.make_node("BitShift", ["positions", "one"], ["s"], direction="RIGHT"),
             helper.make_node("BitwiseAnd", ["s", "one"], ["b"]),
             helper.make_node("Cast", ["b"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "f"], ["y"])]
    a = audit(_pos_graph(nodes, [_vi("y", TensorProto.FLOAT, ["N"])], [one, table]))
    assert a.integer_only and a.violations == []
    assert a.integer_ops == ["BitShift", "BitwiseAnd"]
    assert a.float_boundaries == ["Cast"]
    assert a.tables == []
    assert a.bitwise and a.trig_free and a.transcendental == []


def test_audit_violations_each_named():
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    nodes = [helper.make_node("Cast", ["positions"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "half"], ["g"]),
             helper.make_node("Sin", ["g"], ["h"]),
             helper.make_node("Cos", ["g"], ["c"]),
             helper.make_node("Cast", ["h"], ["back"], to=TensorProto.INT64),
             helper.make_node("Cast", ["back"], ["y0"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["y0", "c"], ["y"])]
    a = audit(_pos_graph(nodes, [_vi("y", TensorProto.FLOAT, ["N"])], [half]))
    assert not a.integer_only
    assert a.violations == ["Cast turns floats back into integers"]
    assert a.transcendental == ["Cos", "Sin"] and not a.trig_free and not a.bitwise
    nodes = [helper.make_node("Sqrt", ["positions"], ["y"])]  # an int64 op outside the list
    a = audit(_pos_graph(nodes, [_vi("y", TensorProto.INT64, ["N"])]))
    assert a.violations == ["Sqrt is not an integer op"] and a.integer_ops == ["Sqrt"]
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    nodes = [helper.make_node("Gather", ["scale_t", "positions"], ["f"])]
    a = audit(_pos_graph(nodes, [_vi("f", TensorProto.FLOAT, ["N"])],
                         [numpy_helper.from_array(np.ones(4, np.float32), "scale_t"), scale]))
    assert a.violations == ["Gather makes floats from position-derived integers"]
    assert a.tables == [("scale_t", [4])]


def test_audit_ignores_nodes_not_reached_from_the_positions():
    c = numpy_helper.from_array(np.array([1.0], np.float32), "c")
    nodes = [helper.make_node("Sin", ["c"], ["s"]),
             helper.make_node("Cast", ["positions"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "s"], ["y"])]
    a = audit(_pos_graph(nodes, [_vi("y", TensorProto.FLOAT, ["N"])], [c]))
    assert a.integer_only and a.integer_ops == [] and a.float_boundaries == ["Cast"]
    assert a.transcendental == ["Sin"]  # trig anywhere counts


def test_graph_summary_fields():
    table = numpy_helper.from_array(np.ones((4, 2), np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "positions"], ["y"])]
    model = _pos_graph(nodes, [_vi("y", TensorProto.FLOAT, ["N", 2])], [table])
    model.producer_name, model.producer_version = "edgepe", "0.1.0"
    summary = graph_summary(model)
    assert summary == {
        "ops": {"Gather": 1}, "nodes": 1,
        "initializers": [("table", [4, 2], "float32")], "initializer_bytes": 32,
        "inputs": [("positions", "int64", ["N"])], "outputs": [("y", "float32", ["N", 2])],
        "opsets": {"ai.onnx": 18, "com.microsoft": 1}, "ir_version": 8,
        "producer": "edgepe 0.1.0",
    }
    int_table = helper.make_tensor("t2", TensorProto.INT32, [3], [1, 2, 3])  # no raw_data
    model.graph.initializer.append(int_table)
    assert graph_summary(model)["initializer_bytes"] == 32 + 12


# ---- edgepe.graphs.quant: refusals, passes, the manifest section and its one-line description ---

from edgepe import api  # noqa: E402
from edgepe.contract.errors import BadParameterError  # noqa: E402
from edgepe.graphs import quant as int8  # noqa: E402


def test_check_quantizable_messages():
    cases = [
        (api.make_config("gray", 16, mode="table", format="npy"),
         "scheme 'gray' is exact (every value is a bit): --quantize int8 would only add error; "
         "export it lossless with --dtype uint8 (1 byte a value) or --dtype bit"),
        (api.make_config("sinusoidal", 16, mode="table", format="npy", dtype="float16"),
         "--quantize int8 dequantises to float32: --dtype must be float32, got 'float16'"),
    ]
    for config, message in cases:
        with pytest.raises(BadParameterError) as info:
            int8.check_quantizable(config)
        assert str(info.value) == message
    config = api.make_config("sinusoidal", 16, mode="table", format="npy")
    int8.check_quantizable(config)
    from dataclasses import replace

    with pytest.raises(BadParameterError) as info:
        int8.check_quantizable(replace(config, quant_granularity="row"))
    assert str(info.value) == "--quant-granularity 'row' is not one of: channel, tensor"
    with pytest.raises(BadParameterError) as info:
        int8.measure_table("row", lambda: iter([np.ones((1, 1), np.float32)]))
    assert str(info.value) == "--quant-granularity 'row' is not one of: channel, tensor"


def test_absmax_over_chunks_and_granularity():
    chunks = [np.array([[1.0, -5.0], [2.0, 0.5]]), np.array([[-3.0, 4.0]])]
    assert int8.absmax(iter(chunks)).tolist() == [3.0, 5.0]
    assert int8.absmax(iter(chunks), "tensor").tolist() == [5.0]
    assert int8.absmax(iter([np.zeros((0, 3))])).tolist() == [0.0, 0.0, 0.0]
    for bad, message in (([np.array([[np.inf]])], "the values include inf or nan"),
                         ([np.array([[np.nan]])], "the values include inf or nan"),
                         ([], "there are no values")):
        with pytest.raises(BadParameterError) as info:
            int8.absmax(iter(bad))
        assert str(info.value) == f"cannot quantise to int8: {message}"


def test_quantize_rounds_half_to_even_and_clips():
    q = int8.quantize(np.array([0.5, 1.5, -0.5, 2.5, 200.0, -200.0]), np.array(1.0))
    assert q.dtype == np.int8 and q.tolist() == [0, 2, 0, 2, 127, -127]
    d = int8.dequantize(np.array([3, -127], np.int8), np.array([0.1], np.float32))
    assert d.dtype == np.float32 and d.tolist() == [float(np.float32(3) * np.float32(0.1)),
                                                    float(np.float32(-127) * np.float32(0.1))]


def test_table_quant_and_its_manifest_section():
    chunk = np.array([[127.0, 0.0], [0.5, 0.0], [-63.5, 0.0]], np.float32)
    tq = int8.measure_table("channel", lambda: iter([chunk]))
    assert (tq.rows, tq.cols, tq.granularity) == (3, 2, "channel")
    assert tq.scale.tolist() == [1.0, 1.0] and tq.peak.tolist() == [127.0, 0.0]
    assert tq.bound_per_channel.tolist() == [0.5 + 127 * 2.0**-24, 0.0]
    assert [c.tolist() for c in tq.chunks(iter([chunk]))] == [[[127, 0], [0, 0], [-64, 0]]]
    section = tq.manifest(tensor="t_int8")
    assert section == {
        "method": "int8 symmetric", "granularity": "channel", "dtype": "int8",
        "qmin": -127, "qmax": 127, "scale": [1.0, 1.0], "zero_point": 0, "axis": 1,
        "max_abs_err": 0.5, "bound": 0.5 + 127 * 2.0**-24,
        "bound_per_channel": [0.5 + 127 * 2.0**-24, 0.0],
        "bound_why": "half a step per channel: |x - s round(x/s)| <= s/2, no clipping since "
                     "s = max|x|/127, plus one float32 rounding of s*q (<= 127 s 2^-24)",
        "measured_over": "every row of the [3, 2] table",
        "bytes": {"float32": 24, "int8": 6 + 8}, "bytes_of": "table (entries + scales)",
        "tensor": "t_int8",
    }
    assert "tensor" not in tq.manifest()
    per_tensor = int8.measure_table("tensor", lambda: iter([chunk])).manifest()
    assert per_tensor["scale"] == 1.0 and per_tensor["axis"] is None
    assert per_tensor["bound_per_channel"] is None
    with pytest.raises(AssertionError, match="exceeds the proven bound"):
        int8.quant_section("channel", np.ones(1), axis=1, max_abs_err=1.0, bound=np.array([0.5]),
                           bound_why="", measured_over="", float32_bytes=4, int8_bytes=1)


def test_describe_lines():
    base = {"scale": [0.5, 0.25], "axis": 1, "qmin": -127, "qmax": 127, "zero_point": 0,
            "max_abs_err": 0.001234, "bound": 0.002, "bytes": {"float32": 400, "int8": 108}}
    head = ("quant: int8 symmetric [-127, 127] per channel (axis 1, 2 scales), zero point 0; "
            "max abs err 0.00123 <= bound 0.002")
    assert int8.describe(base) == head + "; table: 400 B float32 -> 108 B int8 (saves 292 B, 73%)"
    assert int8.describe({**base, "bytes_of": "weights", "runtime": "fold", "ram_bytes": 400}) == (
        head + "; weights: 400 B float32 -> 108 B int8 (saves 292 B, 73%); runtime fold: "
        "onnxruntime folds it to float32 at session load, 400 B in RAM (float32 speed)")
    assert int8.describe({**base, "runtime": "live", "ram_bytes": 108}) == (
        head + "; table: 400 B float32 -> 108 B int8 (saves 292 B, 73%); runtime live: kept "
        "int8 in RAM, 108 B, dequantised per call")
    row = {**base, "scale": 0.5, "bytes_of": int8.OUTPUT_ROW, "bytes": {"float32": 8, "int8": 2}}
    assert int8.describe(row) == (
        "quant: int8 symmetric [-127, 127] per tensor, zero point 0; max abs err 0.00123 <= "
        "bound 0.002; int8 output only: a row is 2 B int8 instead of 8 B at the device "
        "boundary, the graph stores no weights")
    assert int8.describe({**base, "bytes": {}}) == head


def test_export_note_only_for_output_quantisation():
    assert int8.export_note({"scheme": "rope", "quant": {"bytes_of": int8.OUTPUT_ROW}}) == (
        "note: rope's compute graph stores no weights, so int8 quantises its output (error "
        "bounded, Q/DQ nodes added: the file grows); for a small int8 artifact use --mode "
        "table --quantize int8")
    assert int8.export_note({"scheme": "rope", "quant": {"bytes_of": "table"}}) is None
    assert int8.export_note({"scheme": "rope", "quant": None}) is None


def test_open_regular_refuses_an_oversized_file_before_opening_it(tmp_path, monkeypatch):
    big = tmp_path / "big"
    big.write_bytes(b"12345")
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    with pytest.raises(ArtifactError, match="is 5 bytes; edgepe reads at most 4"):
        manifest.open_regular(big, "table", 4)
    assert opened == []


def test_open_regular_names_other_os_errors(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    inside = plain / "child"  # a path through a file: NotADirectoryError, not FileNotFoundError
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(inside, "manifest")
    assert str(info.value) == f"cannot read manifest {str(inside)!r}: Not a directory"

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(ArtifactError) as info:
        manifest.open_regular(plain, "artifact")
    assert str(info.value) == f"cannot read artifact {str(plain)!r}: Permission denied"


def test_refused_nodes_keep_their_name_op_and_a_false_verdict():
    cases = [
        (_gather(TensorProto.INT64, "qnn"), "Gather indices int64"),
        (_gather(None, "qnn", const=[0, -1]), "Gather with negative constant indices"),
        (_gather(TensorProto.INT32, "qnn"), "Gather indices not clamped"),
    ]
    model = _graph([helper.make_node("Abs", ["x"], ["y"], name="a")],
                   [_vi("x", TensorProto.DOUBLE, [2])], [_vi("y", TensorProto.DOUBLE, [2])])
    cases.append((check(model, PROFILES["tensorrt"]), "Abs on float64"))
    for report, reason in cases:
        node = report.nodes[-1]
        assert node.name in ("g", "a") and node.op in ("Gather", "Abs")
        assert node.supported is False and node.reason.startswith(reason)
    assert cases[-1][0].nodes[0].reason == ("Abs on float64: tensorrt runs Abs on float16, "
                                            "float32, int32, int64")


def test_index_type_message_lists_every_allowed_type():
    gather = _gather(TensorProto.INT16, "ort-cpu").nodes[-1]
    assert gather.reason == "Gather indices int16: ort-cpu takes int32, int64 indices only"


def test_opset_of_the_default_domain_by_either_name():
    graph = helper.make_graph([helper.make_node("Abs", ["x"], ["y"], name="a")], "g",
                              [_vi("x", TensorProto.FLOAT, [2])],
                              [_vi("y", TensorProto.FLOAT, [2])])
    named = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 26)],
                              ir_version=8)
    assert check(named, PROFILES["ort-cpu"]).problems == [
        "opset 26: ort-cpu loads opsets 7 to 25"]
    none = helper.make_model(graph, opset_imports=[helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)
    assert check(none, PROFILES["ort-cpu"]).problems == []  # no default-domain opset: no range


def test_dynamic_dims_note_names_each_input():
    x = _vi("x", TensorProto.FLOAT, ["N"])
    z = onnx.helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])
    z.type.tensor_type.shape.dim[0].Clear()  # neither a value nor a name: unknown
    w = _vi("w", TensorProto.FLOAT, [2])  # static
    model = _graph([helper.make_node("Add", ["x", "z"], ["s"], name="a"),
                    helper.make_node("Add", ["s", "w"], ["y"], name="b")],
                   [x, z, w], [_vi("y", TensorProto.FLOAT, [2])])
    report = check(model, PROFILES["nnapi"])
    assert report.notes[0].startswith("inputs x, z have dynamic dims: ")
    static = _graph([helper.make_node("Abs", ["w"], ["y"], name="a")], [w],
                    [_vi("y", TensorProto.FLOAT, [2])])
    assert not any("dynamic" in n for n in check(static, PROFILES["nnapi"]).notes)


# ---- edgepe.audit: load_onnx's refusals, describe, external data in each form ----------------

from edgepe.audit import check_untrusted, describe, load_onnx  # noqa: E402


def _abs_model(opset=18):
    return _graph([helper.make_node("Abs", ["x"], ["y"], name="a")],
                  [_vi("x", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, [2])],
                  opset=opset)


def test_load_onnx_refusals(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\xff\xfe not a protobuf")
    with pytest.raises(ArtifactError, match=rf"^{re.escape(repr(str(path)))} is not an ONNX "
                       r"model edgepe can read \(.+\)$"):
        load_onnx(path)
    empty = onnx.ModelProto()
    empty.opset_import.append(helper.make_opsetid("", 18))
    path.write_bytes(empty.SerializeToString())
    with pytest.raises(ArtifactError) as info:
        load_onnx(path)
    assert str(info.value) == f"{str(path)!r} is not an ONNX model edgepe can read (no graph)"
    no_opset = _abs_model()
    del no_opset.opset_import[:]
    path.write_bytes(no_opset.SerializeToString())
    with pytest.raises(ArtifactError, match=r"\(no graph\)$"):
        load_onnx(path)
    bad = _abs_model()
    bad.graph.node[0].input[0] = "nowhere"  # the checker refuses an input nothing produces
    path.write_bytes(bad.SerializeToString())
    with pytest.raises(ArtifactError) as info:
        load_onnx(path)
    message = str(info.value)
    assert message.startswith(f"{str(path)!r} is not an ONNX model edgepe can read (")
    assert "nowhere" in message and "\n" not in message
    loop = _abs_model()
    loop.graph.node[0].op_type = "Loop"
    path.write_bytes(loop.SerializeToString())
    with pytest.raises(ArtifactError) as info:
        load_onnx(path)
    assert str(info.value) == (f"{str(path)!r} uses op Loop, which edgepe's builders never "
                               "emit (no control flow or subgraphs): refused")
    path.write_bytes(_abs_model().SerializeToString())
    assert load_onnx(path).graph.node[0].op_type == "Abs"


def test_external_data_in_each_form_and_messages():
    def with_init(mark):
        model = _abs_model()
        t = numpy_helper.from_array(np.zeros(2, np.float32), "w")
        mark(t)
        model.graph.initializer.append(t)
        return model

    def location_only(t):
        t.data_location = TensorProto.EXTERNAL

    def entries_only(t):
        onnx.external_data_helper.set_external_data(t, location="x.bin")
        t.data_location = TensorProto.DEFAULT

    for mark in (location_only, entries_only):
        with pytest.raises(ArtifactError) as info:
            check_untrusted(with_init(mark), "m.onnx")
        assert str(info.value) == ("'m.onnx' keeps tensor 'w' in external data: edgepe never "
                                   "writes external data, and opens no path a graph names: "
                                   "refused")
    check_untrusted(with_init(lambda t: None), "m.onnx")  # inline data is fine
    # a Constant whose tensor is inline: refused for its op, not for external data
    model = _abs_model()
    model.graph.node.append(helper.make_node("Constant", [], ["c"], name="k",
                                             value=numpy_helper.from_array(np.ones(1, np.float32))))
    with pytest.raises(ArtifactError) as info:
        check_untrusted(model, "m.onnx")
    assert str(info.value).startswith("'m.onnx' uses op Constant,")
    sparse = _abs_model()
    values = numpy_helper.from_array(np.ones(1, np.float32), "s")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "s_i")
    sparse.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [2]))
    with pytest.raises(ArtifactError) as info:
        check_untrusted(sparse, "m.onnx")
    assert str(info.value) == ("'m.onnx' has sparse initializers or model functions: edgepe "
                               "never writes them: refused")


def test_describe_an_onnx_artifact(tmp_path):
    import hashlib

    path = api.export(api.make_config("binary", 16, d_model=8, out=tmp_path / "p.onnx"),
                      verify=False)[0].path
    info = describe(path)
    assert info["path"] == str(path) and info["bytes"] == path.stat().st_size
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["sha256_ok"] is True and info["embedded_ok"] is True
    assert info["manifest"] == manifest.read(path)
    assert info["graph"]["nodes"] == len(onnx.load(str(path)).graph.node)
    assert info["audit"].integer_only and info["audit"].bitwise
    changed = tmp_path / "q.onnx"
    data = bytearray(path.read_bytes())
    raw = onnx.load(str(path)).graph.initializer[0].raw_data
    data[bytes(data).find(raw)] ^= 1  # a weight's byte: still a valid graph
    changed.write_bytes(bytes(data))
    manifest.path_for(changed).write_bytes(manifest.path_for(path).read_bytes())
    assert describe(changed)["sha256_ok"] is False


def test_describe_an_int8_graph_and_a_table(tmp_path):
    q = api.export(api.make_config("sinusoidal", 16, d_model=8, quantize="int8",
                                   out=tmp_path / "q.onnx"), verify=False)[0].path
    info = describe(q)
    assert info["embedded_ok"] is True and info["manifest"]["quant"]
    t = api.export(api.make_config("sinusoidal", 16, d_model=8, mode="table", format="npy",
                                   out=tmp_path / "t.npy"), verify=False)[0].path
    info = describe(t)
    assert "graph" not in info and "audit" not in info and "program" not in info
    assert info["sha256_ok"] is True


# --- manifest.path_arg: the API's wrong argument types (issue 41) ---------------------------------

def test_path_arg_takes_str_and_pathlike_and_names_anything_else():
    from pathlib import Path

    from edgepe.contract.errors import BadParameterError

    assert manifest.path_arg("a.onnx", "x") == Path("a.onnx")
    assert manifest.path_arg(Path("b"), "x") == Path("b")
    for value, shown in ((123, "int 123"), (None, "NoneType None"), (b"a", "bytes b'a'"),
                         (True, "bool True"), (["a"], "list ['a']"), (1.5, "float 1.5")):
        with pytest.raises(BadParameterError) as raised:
            manifest.path_arg(value, "the thing")
        assert str(raised.value) == f"the thing must be a str or os.PathLike, got {shown}"

    class BytesPath:
        def __fspath__(self):
            return b"x"

        def __repr__(self):
            return "BytesPath(b'x')"

    with pytest.raises(BadParameterError) as raised:
        manifest.path_arg(BytesPath(), "the thing")
    assert str(raised.value) == ("the thing must be a str or os.PathLike of str, got "
                                 "BytesPath(b'x')")
    with pytest.raises(BadParameterError, match="^the artifact path must be"):
        manifest.artifact_for(123)


# --- manifest.artifact_for / has_sidecar: a manifest's path names its artifact ------------------

def test_artifact_for_a_manifest_path_is_the_artifact_beside_it(tmp_path):
    art = tmp_path / "pe.onnx"
    art.write_bytes(b"x")
    assert manifest.artifact_for(tmp_path / "pe.onnx.json") == art
    assert manifest.artifact_for(str(art)) == art  # not a manifest's name: the path itself
    assert manifest.artifact_for(tmp_path / "pe.onnx.JSON") == tmp_path / "pe.onnx.JSON"
    # a name that is exactly ".json" has no artifact name before it: the path itself
    assert manifest.artifact_for(tmp_path / ".json") == tmp_path / ".json"
    with pytest.raises(ArtifactError) as info:
        manifest.artifact_for(tmp_path / "gone.npy.json")
    assert str(info.value) == (f"{str(tmp_path / 'gone.npy.json')!r} is a manifest; the artifact "
                               f"it describes, {str(tmp_path / 'gone.npy')!r}, does not exist")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling.bin")  # lexists: the link is there
    assert manifest.artifact_for(tmp_path / "dangling.bin.json") == tmp_path / "dangling.bin"


def test_has_sidecar_is_whether_path_json_exists(tmp_path):
    art = tmp_path / "pe.onnx"
    art.write_bytes(b"x")
    assert manifest.has_sidecar(art) is False
    (tmp_path / "pe.onnx.json").write_bytes(b"not even JSON")  # readable or not
    assert manifest.has_sidecar(art) is True
    assert manifest.has_sidecar(str(art)) is True


# --- manifest.loads: the integer and float bounds, exactly at and past each --------------------

def test_loads_integer_digits_bound():
    twenty = "9" * manifest.MAX_INT_DIGITS
    assert manifest.loads(f'{{"a": {twenty}, "b": -{twenty}}}'.encode(), "m") == {
        "a": int(twenty), "b": -int(twenty)}
    with pytest.raises(ArtifactError) as info:
        manifest.loads(f'{{"a": -{twenty}1}}'.encode(), "m")
    assert str(info.value) == ("manifest 'm' is not valid JSON (an integer of 21 digits (at most "
                               "20))")


def test_loads_float_bounds_and_the_shortened_number_in_the_message():
    forty = "0." + "1" * (manifest.MAX_FLOAT_CHARS - 2)
    assert manifest.loads(f'{{"a": {forty}}}'.encode(), "m") == {"a": float(forty)}
    cases = (
        ("1e999", "1e999"),  # short but not finite
        (forty + "1", forty[:24] + "..."),  # finite but 41 characters
        ("1" * 20 + "e999", "1" * 20 + "e999"),  # 24 characters: shown whole
        ("1" * 21 + "e999", "1" * 21 + "e99..."),  # 25: cut to 24 and marked
    )
    for number, shown in cases:
        with pytest.raises(ArtifactError) as info:
            manifest.loads(f'{{"a": {number}}}'.encode(), "m")
        assert str(info.value) == (f"manifest 'm' is not valid JSON (the number {shown} (at most "
                                   "40 characters, finite))"), number


# --- manifest.read_embedded: the copy an ONNX graph carries in its metadata_props --------------

def _onnx_with(path, props=(), opsets=(("", 17),)):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                              ir_version=8)
    for key, value in props:
        model.metadata_props.add(key=key, value=value)
    path.write_bytes(model.SerializeToString())
    return path


def test_read_embedded_returns_the_manifest_and_the_default_domain_opset(tmp_path):
    text = manifest.dumps(_valid()).decode()
    art = _onnx_with(tmp_path / "pe.onnx", [("other", "{}"), (manifest.EMBEDDED_KEY, text)],
                     opsets=(("com.microsoft", 1), ("", 17)))
    assert manifest.read_embedded(art) == (_valid(), 17)
    upper = _onnx_with(tmp_path / "PE.ONNX", [(manifest.EMBEDDED_KEY, text)],
                       opsets=(("ai.onnx", 13),))  # the default domain's other name
    assert manifest.read_embedded(upper) == (_valid(), 13)


def test_read_embedded_is_none_for_anything_but_an_onnx_graph_holding_one(tmp_path):
    assert manifest.read_embedded(tmp_path / "absent.npy") is None  # not even opened
    assert manifest.read_embedded(_onnx_with(tmp_path / "bare.onnx", [("other", "{}")])) is None
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 8)
    assert manifest.read_embedded(junk) is None
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ArtifactError) as info:
        manifest.read_embedded(tmp_path / "dir.onnx")
    assert str(info.value).startswith(f"artifact {str(tmp_path / 'dir.onnx')!r} is not a file")


def test_read_embedded_refusals_name_the_embedded_copy(tmp_path):
    art = _onnx_with(tmp_path / "pe.onnx", [(manifest.EMBEDDED_KEY, '{"a": 1, "a": 2}')])
    where = f"{art}'s embedded manifest"
    with pytest.raises(ArtifactError) as info:
        manifest.read_embedded(art)
    assert str(info.value) == f"manifest {where!r} is not valid JSON (duplicate key 'a')"
    _onnx_with(art, [(manifest.EMBEDDED_KEY, "[1]")])
    with pytest.raises(ArtifactError) as info:
        manifest.read_embedded(art)
    assert str(info.value) == f"manifest {where!r} is not a JSON object"
    # the text bound is MAX_BYTES characters: exactly that is read, one more refused
    pad = manifest.MAX_BYTES - len('{"a": ""}')
    _onnx_with(art, [(manifest.EMBEDDED_KEY, '{"a": "' + "x" * pad + '"}')])
    assert manifest.read_embedded(art) == ({"a": "x" * pad}, 17)
    _onnx_with(art, [(manifest.EMBEDDED_KEY, '{"a": "' + "x" * (pad + 1) + '"}')])
    with pytest.raises(ArtifactError) as info:
        manifest.read_embedded(art)
    assert str(info.value) == (f"{where} is {manifest.MAX_BYTES + 1} bytes; edgepe reads at most "
                               f"{manifest.MAX_BYTES}: refused")
