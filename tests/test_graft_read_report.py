"""graft's reading of untrusted models and artifacts (edgepe/graft/read.py) and its report's text
(edgepe/graft/report.py), each refusal and each boundary on tiny hand-built models (issue 33: the
mutation run of those modules runs these first; they take milliseconds).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import ArtifactError, BadParameterError, EdgepeError
from edgepe.graft import read
from edgepe.graft.report import GraftReport, OutputCheck


def _model(*, table=None, opset=18) -> onnx.ModelProto:
    table = np.arange(6, dtype=np.float32).reshape(3, 2) if table is None else table
    graph = helper.make_graph(
        [helper.make_node("Gather", ["t", "i"], ["y"])], "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(table, "t")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _external(model: onnx.ModelProto, **entries) -> onnx.ModelProto:
    """``model`` with its table ``t`` moved to external data described by ``entries``."""
    (table,) = model.graph.initializer
    table.ClearField("raw_data")
    table.ClearField("float_data")
    table.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        entry = table.external_data.add()
        entry.key, entry.value = key, str(value)
    return model


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


# -- read._bounded_bytes -----------------------------------------------------------------------

def test_bounded_bytes_reads_a_regular_file_whole(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"abc")
    assert read._bounded_bytes(path, "model") == b"abc"


@pytest.mark.parametrize(("what", "error"), [("model", BadParameterError),
                                             ("artifact", ArtifactError)])
def test_bounded_bytes_refusals_name_the_file_with_the_callers_error(tmp_path, what, error):
    missing = tmp_path / "nope.onnx"
    with pytest.raises(error) as info:
        read._bounded_bytes(missing, what)
    assert type(info.value) is error
    assert str(info.value) == f"{what} {str(missing)!r} does not exist"
    with pytest.raises(error) as info:
        read._bounded_bytes(tmp_path, what)
    assert str(info.value) == f"{what} {str(tmp_path)!r} is not a regular file"


def test_bounded_bytes_size_limit_at_and_above(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"x" * 10)
    monkeypatch.setattr(read, "MODEL_BYTES_LIMIT", 10)
    assert read._bounded_bytes(path, "model") == b"x" * 10  # at the limit: read
    monkeypatch.setattr(read, "MODEL_BYTES_LIMIT", 9)
    with pytest.raises(BadParameterError) as info:
        read._bounded_bytes(path, "model")
    assert str(info.value) == f"model {str(path)!r} is 10 B; ONNX files stop at 2 GiB (protobuf)"


def test_bounded_bytes_names_an_os_error(tmp_path, monkeypatch):
    # Fault injected (this machine runs as root, which reads a file without permissions).
    path = tmp_path / "locked.onnx"
    path.write_bytes(b"x")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(path), "open", refuse)
    with pytest.raises(EdgepeError) as info:
        read._bounded_bytes(path, "model")
    assert type(info.value) is EdgepeError
    assert str(info.value) == f"cannot read model {str(path)!r}: Permission denied"


# -- read.parse_model --------------------------------------------------------------------------

def test_parse_model_round_trips_a_model():
    model = _model()
    assert read.parse_model(model.SerializeToString(), "m") == model


@pytest.mark.parametrize("error", [BadParameterError, ArtifactError])
def test_parse_model_refuses_bytes_that_are_not_onnx_in_one_line(error):
    with pytest.raises(error) as info:
        read.parse_model(b"\xff\xff\xff", "model 'x'", error)
    assert type(info.value) is error
    assert str(info.value) == ("model 'x' is not an ONNX model: Error parsing message with type "
                               "'onnx.ModelProto': Wire format was corrupt")


def test_parse_model_refuses_a_model_without_graph_or_opset():
    no_opset = _model()
    del no_opset.opset_import[:]
    for model in (onnx.ModelProto(ir_version=8), no_opset):
        with pytest.raises(BadParameterError) as info:
            read.parse_model(model.SerializeToString(), "model 'x'")
        assert str(info.value) == "model 'x' is not an ONNX model: it has no graph or no opset"


def test_parse_model_refuses_external_data_without_a_folder():
    model = _external(_model(), location="t.bin", length=24)
    with pytest.raises(ArtifactError) as info:
        read.parse_model(model.SerializeToString(), "artifact 'a'", ArtifactError)
    assert str(info.value) == ("artifact 'a' keeps tensors in external files; graft reads "
                               "self-contained models only (onnx.save without "
                               "save_as_external_data)")


def test_external_data_is_read_from_the_models_folder_at_its_offset(tmp_path):
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    (tmp_path / "t.bin").write_bytes(b"pad!" + table.tobytes() + b"tail")
    model = _external(_model(table=table), location="t.bin", offset=4, length=24)
    got = read.parse_model(model.SerializeToString(), "m", folder=tmp_path)
    (tensor,) = got.graph.initializer
    assert tensor.data_location == TensorProto.DEFAULT and not tensor.external_data
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), table)


def test_external_data_ending_exactly_at_the_files_end_is_read(tmp_path):
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    (tmp_path / "t.bin").write_bytes(table.tobytes())
    model = _external(_model(table=table), location="t.bin", length=24)  # offset 0 by default
    (tensor,) = read.parse_model(model.SerializeToString(), "m", folder=tmp_path).graph.initializer
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), table)


def test_external_data_in_a_node_attribute_and_a_subgraph_is_found():
    inner = _model()
    constant = helper.make_node("Constant", [], ["c"], value=inner.graph.initializer[0])
    branch = helper.make_graph([helper.make_node("Identity", ["t"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 2])],
                               [numpy_helper.from_array(np.ones(2, np.float32), "s")])
    cond = helper.make_node("If", ["flag"], ["w"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph([constant, cond], "g", [], [], [])
    names = [t.name for t in read._all_initializers(graph)]
    assert names == ["t", "s", "s"]  # the Constant's value, then each branch's initializer


def _refusal(tmp_path, model, **kwargs) -> str:
    with pytest.raises(BadParameterError) as info:
        read.parse_model(model.SerializeToString(), "model 'm'", folder=tmp_path, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("entries", [{"location": "t.bin"},  # no length
                                     {"location": "t.bin", "length": "ten"},
                                     {"location": "t.bin", "length": 24, "offset": "x"}])
def test_external_data_without_a_valid_length_or_offset_is_refused(tmp_path, entries):
    (tmp_path / "t.bin").write_bytes(bytes(24))
    assert _refusal(tmp_path, _external(_model(), **entries)) == (
        "model 'm': tensor 't' names external data without a valid length")


def test_external_data_without_a_location_is_refused(tmp_path):
    (tmp_path / "XXXX").write_bytes(bytes(24))
    assert _refusal(tmp_path, _external(_model(), length=24)) == (
        "model 'm': tensor 't' names external data '' outside the model's folder; refused")


def test_an_absolute_location_is_refused_even_inside_the_folder(tmp_path):
    (tmp_path / "t.bin").write_bytes(bytes(24))
    location = str(tmp_path / "t.bin")
    assert _refusal(tmp_path, _external(_model(), location=location, length=24)) == (
        f"model 'm': tensor 't' names external data {location!r} outside the model's folder; "
        "refused")


def test_an_empty_tensor_reads_zero_bytes(tmp_path):
    (tmp_path / "t.bin").write_bytes(b"")
    model = _external(_model(table=np.zeros((0, 2), np.float32)), location="t.bin", length=0)
    (tensor,) = read.parse_model(model.SerializeToString(), "m", folder=tmp_path).graph.initializer
    assert numpy_helper.to_array(tensor).shape == (0, 2)


def test_the_external_limit_counts_every_tensor(tmp_path, monkeypatch):
    (tmp_path / "t.bin").write_bytes(bytes(48))
    model = _external(_model(), location="t.bin", length=24)
    second = onnx.TensorProto()
    second.CopyFrom(model.graph.initializer[0])
    second.name = "t2"
    entry = second.external_data.add()
    entry.key, entry.value = "offset", "24"
    model.graph.initializer.append(second)
    monkeypatch.setattr(read, "EXTERNAL_BYTES_LIMIT", 47)  # each is 24 B; the two, 48 B
    assert _refusal(tmp_path, model) == "model 'm': its external data exceed 47 B; refused"
    monkeypatch.setattr(read, "EXTERNAL_BYTES_LIMIT", 48)
    got = read.parse_model(model.SerializeToString(), "m", folder=tmp_path)
    assert [t.data_location for t in got.graph.initializer] == [TensorProto.DEFAULT] * 2


@pytest.mark.parametrize("location", ["", "/etc/passwd", "../t.bin", "sub/../../t.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "t.bin").write_bytes(bytes(24))
    assert _refusal(folder, _external(_model(), location=location, length=24)) == (
        f"model 'm': tensor 't' names external data {location!r} outside the model's folder; "
        "refused")


def test_external_data_that_is_a_folder_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    assert _refusal(tmp_path, _external(_model(), location="sub", length=24)) == (
        "model 'm': external data 'sub' of tensor 't' is not a regular file beside the model")


def test_missing_external_data_is_not_a_regular_file(tmp_path):
    """Only a regular file is stat'ed for its size: a missing one is refused as not a file,
    not as an OS error of the stat."""
    assert _refusal(tmp_path, _external(_model(), location="gone.bin", length=24)) == (
        "model 'm': external data 'gone.bin' of tensor 't' is not a regular file beside the "
        "model")


@pytest.mark.parametrize(("offset", "length"), [(1, 24), (0, 25), (-1, 24), (0, -1)])
def test_external_data_past_the_files_end_or_negative_is_refused(tmp_path, offset, length):
    (tmp_path / "t.bin").write_bytes(bytes(24))
    model = _external(_model(), location="t.bin", offset=offset, length=length)
    assert _refusal(tmp_path, model) == (
        f"model 'm': tensor 't' reads bytes {offset}..{offset + length} of 't.bin', which has "
        "24 B")


def test_external_data_total_limit_at_and_above(tmp_path, monkeypatch):
    (tmp_path / "t.bin").write_bytes(bytes(24))
    model = _external(_model(), location="t.bin", length=24)
    monkeypatch.setattr(read, "EXTERNAL_BYTES_LIMIT", 24)
    read.parse_model(model.SerializeToString(), "m", folder=tmp_path)  # at the limit: read
    monkeypatch.setattr(read, "EXTERNAL_BYTES_LIMIT", 23)
    assert _refusal(tmp_path, model) == "model 'm': its external data exceed 23 B; refused"


# -- read.load_model / load_pe -----------------------------------------------------------------

def test_load_model_returns_the_model_and_its_size(tmp_path):
    model = _model()
    path = _save(tmp_path, model)
    got, size = read.load_model(str(path))
    assert got == model and size == len(model.SerializeToString())


def test_load_model_refusals_name_the_model(tmp_path):
    missing = tmp_path / "nope.onnx"
    with pytest.raises(BadParameterError) as info:
        read.load_model(missing)
    assert str(info.value) == f"model {str(missing)!r} does not exist"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff")
    with pytest.raises(BadParameterError) as info:
        read.load_model(junk)
    assert str(info.value).startswith(f"model {str(junk)!r} is not an ONNX model: ")


def test_load_model_appends_the_external_files_it_read(tmp_path):
    (tmp_path / "t.bin").write_bytes(bytes(24))
    path = _save(tmp_path, _external(_model(), location="t.bin", length=24))
    files: list[Path] = []
    read.load_model(path, files=files)
    assert files == [(tmp_path / "t.bin").resolve()]


def test_load_model_size_counts_external_data(tmp_path):
    table = np.zeros((64, 2), np.float32)  # 512 B outside the file
    (tmp_path / "t.bin").write_bytes(table.tobytes())
    model = _external(_model(table=table), location="t.bin", length=512)
    path = _save(tmp_path, model)
    got, size = read.load_model(path)
    assert size == got.ByteSize() > len(path.read_bytes())


def _artifact(tmp_path, model, **manifest):
    path = _save(tmp_path, model, "pe.onnx")
    data = path.read_bytes()
    base = {"format": "onnx", "sha256": hashlib.sha256(data).hexdigest()}
    return path, {**base, **manifest}


def test_load_pe_reads_an_artifact_whose_bytes_match_its_manifest(tmp_path, monkeypatch):
    path, manifest = _artifact(tmp_path, _model())
    asked = []
    monkeypatch.setattr(read, "_read_artifact", lambda p: (asked.append(p), manifest)[1])
    model, got = read.load_pe(str(path))
    assert got is manifest and model == _model() and asked == [path]


def test_load_pe_refusals_are_artifact_errors_naming_the_artifact(tmp_path, monkeypatch):
    path, manifest = _artifact(tmp_path, _model())
    monkeypatch.setattr(read, "_read_artifact", lambda p: manifest)
    path.unlink()  # gone between the manifest check and the read
    with pytest.raises(ArtifactError) as info:
        read.load_pe(path)
    assert str(info.value) == f"artifact {str(path)!r} does not exist"
    path.write_bytes(b"\xff\xff\xff")
    manifest["sha256"] = hashlib.sha256(b"\xff\xff\xff").hexdigest()
    with pytest.raises(ArtifactError) as info:
        read.load_pe(path)
    assert str(info.value).startswith(f"artifact {str(path)!r} is not an ONNX model: ")


def test_load_pe_refuses_another_format(tmp_path, monkeypatch):
    path, manifest = _artifact(tmp_path, _model(), format="npy")
    monkeypatch.setattr(read, "_read_artifact", lambda p: manifest)
    with pytest.raises(ArtifactError) as info:
        read.load_pe(str(path))
    assert str(info.value) == (f"{str(path)!r} is a npy artifact; graft takes an ONNX one "
                               "(edgepe export --format onnx)")


def test_load_pe_refuses_bytes_changed_since_the_manifest(tmp_path, monkeypatch):
    path, manifest = _artifact(tmp_path, _model())
    monkeypatch.setattr(read, "_read_artifact", lambda p: dict(manifest, sha256="0" * 64))
    with pytest.raises(ArtifactError) as info:
        read.load_pe(path)
    assert str(info.value) == f"{str(path)!r} does not match its manifest (sha256 differs)"


def test_load_pe_refuses_an_op_edgepe_never_emits(tmp_path, monkeypatch):
    model = _model()
    model.graph.node[0].op_type = "Loop"
    path, manifest = _artifact(tmp_path, model)
    monkeypatch.setattr(read, "_read_artifact", lambda p: manifest)
    with pytest.raises(ArtifactError) as info:
        read.load_pe(path)
    assert "Loop" in str(info.value) and str(path) in str(info.value)


def test_read_artifact_is_the_checked_manifest_reader(tmp_path):
    # The real reader refuses a file without its manifest beside it: one line, ArtifactError.
    path = _save(tmp_path, _model(), "pe.onnx")
    with pytest.raises(ArtifactError):
        read._read_artifact(path)
    (tmp_path / "pe.onnx.json").write_text(json.dumps({"format": "onnx"}))
    with pytest.raises(ArtifactError):
        read._read_artifact(path)


# -- report ------------------------------------------------------------------------------------

def test_output_check_passes_at_its_tolerance_and_fails_above():
    assert OutputCheck("y", 1e-6, 1e-6).passed
    assert not OutputCheck("y", 1.5e-6, 1e-6).passed
    assert OutputCheck("y", 0.0, 0.0).passed
    assert str(OutputCheck("logits", 1.25e-7, 3.5e-6)) == (
        "logits: max abs err 1.25e-07 (tolerance 3.5e-06) ok")
    assert str(OutputCheck("logits", 0.5, 0.25)) == (
        "logits: max abs err 0.5 (tolerance 0.25) MISMATCH")


def _report(**changes) -> GraftReport:
    fields = dict(artifact="binary-compute-L64-d8.onnx", at="/embed/Add", positions="arange",
                  prefix="edgepe.graft.", removed_nodes=3, removed_bytes=2048, pe_bytes=500,
                  bytes_before=10000, bytes_after=8000, metadata_bytes=700)
    return GraftReport(**{**fields, **changes})


def test_report_text_line_by_line():
    # saved = 2,000 B of 10,000: -20.0%; the PE's 500 B are 6.2% of the 8,000 B after
    # (6.25% rounds half to even).
    report = _report(lengths=[1, 64], checks=[OutputCheck("logits", 0.0, 1e-6)],
                     out=Path("out.onnx"), found="found binary at x")
    assert report.saved == 2000
    assert report.lines() == [
        "found binary at x",
        "grafted binary-compute-L64-d8.onnx at '/embed/Add' (positions arange, names prefixed "
        "edgepe.graft.)",
        "removed 3 nodes and their initializers (2,048 B); the PE adds 500 B and its manifest "
        "700 B (metadata_props)",
        "bytes: 10,000 -> 8,000 (-2,000 B, -20.0%); the PE is 6.2% of the grafted model",
        "equivalence on onnxruntime CPU at sequence lengths 1, 64:",
        "  logits: max abs err 0 (tolerance 1e-06) ok",
        "wrote out.onnx",
    ]
    assert str(report) == "\n".join(report.lines())
    assert bool(report)


def test_report_of_a_grown_model_unchecked_and_converted():
    report = _report(bytes_after=12500, converted="opset 17 -> 18")
    assert report.saved == -2500
    assert report.lines()[2:] == [
        "bytes: 10,000 -> 12,500 (+2,500 B, +25.0%); the PE is 4.0% of the grafted model",
        "the model was converted opset 17 -> 18 by onnx's version converter (the PE's ops do "
        "not exist at the model's opset)",
        "equivalence not checked (--no-check)",
    ]
    assert bool(report)  # nothing checked: nothing failed


def test_report_of_empty_sizes_does_not_divide_by_zero():
    report = _report(bytes_before=0, bytes_after=0, pe_bytes=0)
    assert report.lines()[2] == ("bytes: 0 -> 0 (+0 B, +0.0%); the PE is 0.0% of the grafted "
                                 "model")


def test_report_is_false_when_any_output_mismatches():
    ok, bad = OutputCheck("a", 0.0, 1e-6), OutputCheck("b", 1.0, 1e-6)
    assert bool(_report(checks=[ok, ok]))
    assert not _report(checks=[ok, bad])
    assert not _report(checks=[bad])
    assert bool(_report(checks=[]))


def test_report_share_of_a_one_byte_model_is_not_halved():
    report = _report(bytes_before=1, bytes_after=3, pe_bytes=3)
    assert report.lines()[2] == ("bytes: 1 -> 3 (+2 B, +200.0%); the PE is 100.0% of the "
                                 "grafted model")


# -- issue 41: everything checked before the first byte is read ----------------------------------


def _tensors(tmp_path, specs, data: bytes) -> onnx.ModelProto:
    """A model of float32 initializers in external data: ``specs`` of (name, dims, entries)."""
    (tmp_path / "t.bin").write_bytes(data)
    model = _model()
    del model.graph.initializer[:]
    for name, dims, entries in specs:
        tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims,
                                  data_location=TensorProto.EXTERNAL)
        for key, value in entries.items():
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        model.graph.initializer.append(tensor)
    return model


def _at(offset, length, location="t.bin"):
    return {"location": location, "offset": offset, "length": length}


def test_neighbouring_ranges_are_read_and_overlapping_ones_refused(tmp_path):
    data = np.arange(12, dtype=np.float32).tobytes()
    files = []
    got = read.parse_model(_tensors(tmp_path, [("b", [2], _at(16, 8)), ("a", [4], _at(0, 16)),
                                               ("e", [0], _at(8, 0))], data)
                           .SerializeToString(), "m", folder=tmp_path, files=files)
    values = {t.name: numpy_helper.to_array(t).tolist() for t in got.graph.initializer}
    assert values == {"b": [4.0, 5.0], "a": [0.0, 1.0, 2.0, 3.0], "e": []}  # empty: anywhere
    assert files == [(tmp_path / "t.bin").resolve()]  # each file once
    # one byte shared: refused, naming the two neighbours once sorted by offset
    assert _refusal(tmp_path, _tensors(tmp_path, [("c", [2], _at(24, 8)), ("a", [4], _at(0, 16)),
                                                  ("b", [3], _at(12, 12))], data)) == (
        "model 'm': tensors 'a' and 'b' read overlapping bytes of external data 't.bin' (no "
        "writer shares bytes between tensors; each would be materialised again); refused")
    # a range inside a longer one that is not its neighbour
    assert "tensors 'a' and 'b' read overlapping" in _refusal(
        tmp_path, _tensors(tmp_path, [("a", [10], _at(0, 40)), ("b", [1], _at(4, 4)),
                                      ("c", [1], _at(32, 4))], data))


def test_each_file_is_opened_once_for_all_its_tensors(tmp_path, monkeypatch):
    data = np.arange(12, dtype=np.float32).tobytes()
    model = _tensors(tmp_path, [(f"t{i}", [1], _at(4 * i, 4)) for i in range(12)], data)
    opened = []
    real = Path.open

    def counting(self, *args, **kwargs):
        opened.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting)
    got = read.parse_model(model.SerializeToString(), "m", folder=tmp_path)
    assert opened == ["t.bin"]
    assert [numpy_helper.to_array(t).tolist() for t in got.graph.initializer] == [
        [float(i)] for i in range(12)]


@pytest.mark.parametrize(("dims", "length"), [([4, 4], 60), ([4, 4], 68), ([2], 0)])
def test_external_length_must_be_what_the_dims_declare(tmp_path, dims, length):
    model = _tensors(tmp_path, [("t", dims, _at(0, length))], bytes(80))
    want = 4 * int(np.prod(dims))
    assert _refusal(tmp_path, model) == (
        f"model 'm': tensor 't' declares {dims} FLOAT ({want:,} B) but names {length:,} B of "
        "external data in 't.bin'; refused")


@pytest.mark.parametrize(("location", "size", "nul"), [
    ("a" * 4097, 4097, False), ("t.bin\0", 6, True), ("b" * 256, 256, False),
    ("d/" + "c" * 256, 258, False)])
def test_external_locations_past_the_limits_are_one_line(tmp_path, location, size, nul):
    message = _refusal(tmp_path, _tensors(tmp_path, [("t", [1], _at(0, 4, location))], bytes(4)))
    assert message == (
        f"model 'm': tensor 't' names an external data location of {size} B"
        f"{' with a NUL byte' if nul else ''}, not a file name (at most 4096 B, 255 B a part); "
        "refused")


def test_external_locations_at_the_limits_are_looked_up(tmp_path):
    """4,096 bytes in all and 255 a part pass the length check (then: no such file)."""
    long = "/".join(["e" * 255] * 15 + ["e" * 128, "e" * 127])
    assert len(long.encode()) == 4096
    for location in (long, "f" * 255):
        message = _refusal(tmp_path, _tensors(tmp_path, [("t", [1], _at(0, 4, location))],
                                              bytes(4)))
        assert "not a file name" not in message and "\n" not in message


def test_a_location_the_system_cannot_resolve_is_one_line(tmp_path, monkeypatch):
    real = Path.resolve

    def broken(self, *args, **kwargs):
        if self.name == "t.bin":
            raise OSError(36, "File name too long")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "resolve", broken)
    assert _refusal(tmp_path, _tensors(tmp_path, [("t", [1], _at(0, 4))], bytes(4))) == (
        "model 'm': external data 't.bin' of tensor 't' cannot be read: File name too long")


def test_a_long_location_that_cannot_resolve_is_cut_to_80_characters(tmp_path, monkeypatch):
    """An error without ``strerror`` (a ValueError) is named by its text."""
    location = "x" * 100
    real = Path.resolve

    def broken(self, *args, **kwargs):
        if self.name == location:
            raise ValueError("no path here")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "resolve", broken)
    model = _tensors(tmp_path, [("t", [1], _at(0, 4, location))], bytes(4))
    assert _refusal(tmp_path, model) == (
        f"model 'm': external data {'x' * 80!r} of tensor 't' cannot be read: no path here")


def test_tensors_in_two_files_are_each_read_from_their_own(tmp_path):
    (tmp_path / "u.bin").write_bytes(np.arange(4, 8, dtype=np.float32).tobytes())
    model = _tensors(tmp_path, [("a", [2], _at(0, 8)), ("b", [2], _at(4, 8, "u.bin")),
                                ("c", [2], _at(8, 8))], np.arange(4, dtype=np.float32).tobytes())
    files: list[Path] = []
    got = read.parse_model(model.SerializeToString(), "m", folder=tmp_path, files=files)
    assert {t.name: numpy_helper.to_array(t).tolist() for t in got.graph.initializer} == {
        "a": [0.0, 1.0], "b": [5.0, 6.0], "c": [2.0, 3.0]}
    assert all(t.data_location == TensorProto.DEFAULT and not t.external_data
               for t in got.graph.initializer)
    assert files == [(tmp_path / "t.bin").resolve(), (tmp_path / "u.bin").resolve()]


def test_a_file_cut_short_after_its_checks_is_refused_in_one_line(tmp_path, monkeypatch):
    """Sizes are checked before the first byte is read; a file another process cuts short in
    between ends the read early: refused, never a short tensor."""
    model = _tensors(tmp_path, [("t", [2], _at(0, 8))], bytes(8))
    real = Path.open

    def cutting(self, *args, **kwargs):
        if self.name == "t.bin":
            os.truncate(self, 4)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", cutting)
    assert _refusal(tmp_path, model) == "model 'm': 't.bin' ended early (tensor 't')"


@pytest.mark.parametrize(("elem", "dims", "want"), [
    (TensorProto.FLOAT, [2, 3], 24), (TensorProto.INT64, [5], 40), (TensorProto.INT4, [3], 2),
    (TensorProto.UINT2, [5], 2), (TensorProto.FLOAT6E2M3, [4], 3), (TensorProto.STRING, [4], 0),
    (TensorProto.COMPLEX64, [2], 16), (TensorProto.FLOAT, [], 4), (TensorProto.FLOAT, [0, 9], 0),
    (TensorProto.FLOAT, [1 << 20, 1 << 20], 4 << 40),
    (TensorProto.UNDEFINED, [4], 0), (99, [4], 0)])  # an unknown type declares no size
def test_declared_bytes(elem, dims, want):
    assert read.declared_bytes(onnx.TensorProto(data_type=elem, dims=dims)) == want


def _raw(elem, dims, raw: bytes) -> onnx.TensorProto:
    return onnx.TensorProto(name="t", data_type=elem, dims=dims, raw_data=raw)


def test_tensor_data_must_hold_what_its_dims_declare():
    check = read.check_tensor_data
    check(_raw(TensorProto.FLOAT, [2], bytes(8)), "m")
    check(numpy_helper.from_array(np.zeros((2, 3), np.float32)), "m")
    check(helper.make_tensor("t", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]), "m")
    check(helper.make_tensor("t", TensorProto.COMPLEX64, [1], [1 + 2j]), "m")  # 2 floats
    check(onnx.TensorProto(name="t", data_type=TensorProto.INT4, dims=[3], int32_data=[1, 2]),
          "m")  # packed: two a value
    check(onnx.TensorProto(name="t", data_type=TensorProto.INT4, dims=[3],
                           int32_data=[1, 2, 3]), "m")  # or one a value
    check(onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[0]), "m")
    for tensor, says in [
        (_raw(TensorProto.FLOAT, [2], bytes(7)), "declares [2] FLOAT (8 B of raw data) but "
         "holds 7; refused"),
        (_raw(TensorProto.FLOAT, [2], bytes(9)), "(8 B of raw data) but holds 9"),
        (onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20]),
         "declares [1048576, 1048576] FLOAT (1099511627776 values) but holds 0; refused"),
        (onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[3], float_data=[1, 2]),
         "(3 values) but holds 2"),
        (onnx.TensorProto(name="t", data_type=TensorProto.COMPLEX64, dims=[2],
                          float_data=[1, 2, 3]), "COMPLEX64 (4 values) but holds 3"),
        (onnx.TensorProto(name="t", data_type=TensorProto.INT4, dims=[3], int32_data=[1]),
         "INT4 (3 values) but holds 1"),
        (onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[-1]),
         "has negative dims [-1]"),
        (onnx.TensorProto(name="t", data_type=0, dims=[1]), "has unknown data type 0"),
        (onnx.TensorProto(name="t", data_type=99, dims=[1]), "has unknown data type 99")]:
        with pytest.raises(BadParameterError) as info:
            check(tensor, "model 'm'", BadParameterError)
        assert str(info.value).startswith("model 'm': tensor 't' ") and says in str(info.value)
    with pytest.raises(ArtifactError):
        check(_raw(TensorProto.FLOAT, [2], b""), "a", ArtifactError)
    # an external tensor's length is checked where it is read
    check(onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[4],
                           data_location=TensorProto.EXTERNAL), "m")


def test_packed_sub_byte_values_round_up_to_whole_bytes():
    """INT4 packed in int32_data: ceil(bits / 8) values, one a byte; else one a value."""
    check = read.check_tensor_data
    for dims, values in (([2], 1), ([16], 8), ([16], 16), ([15], 8)):
        check(onnx.TensorProto(name="t", data_type=TensorProto.INT4, dims=dims,
                               int32_data=[1] * values), "m")
    with pytest.raises(BadParameterError) as info:
        check(onnx.TensorProto(name="t", data_type=TensorProto.INT4, dims=[16],
                               int32_data=[1] * 7), "model 'm'")
    assert str(info.value) == ("model 'm': tensor 't' declares [16] INT4 (16 values) but holds "
                               "7; refused")


def test_parse_model_names_opset_and_tensor_refusals_with_the_callers_error():
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(ArtifactError) as info:
        read.parse_model(_model(opset=newest + 1).SerializeToString(), "artifact 'a'",
                         ArtifactError)
    assert str(info.value) == (f"artifact 'a' imports ONNX opset {newest + 1}; this onnx "
                               f"{onnx.__version__} knows opsets 1 to {newest}")
    model = _model()
    model.graph.initializer[0].raw_data = bytes(20)
    with pytest.raises(ArtifactError) as info:
        read.parse_model(model.SerializeToString(), "artifact 'a'", ArtifactError)
    assert str(info.value) == ("artifact 'a': tensor 't' declares [3, 2] FLOAT (24 B of raw "
                               "data) but holds 20; refused")


@pytest.mark.parametrize(("field", "data_type", "says"), [
    (b"location", TensorProto.FLOAT, "names external data that is not UTF-8 text"),
    (b"length", TensorProto.FLOAT, "names external data that is not UTF-8 text"),
    (None, 99, "has unknown data type 99"),
    (None, TensorProto.UNDEFINED, "has unknown data type 0")])
def test_external_entries_not_utf8_or_of_an_unknown_type_are_one_line(tmp_path, field,
                                                                       data_type, says):
    """Protobuf hands back a string field that is not UTF-8 as bytes, and an unknown type has
    no name: each was an internal error before the first check."""
    model = _tensors(tmp_path, [("t", [6], _at(0, 24))], bytes(24))
    model.graph.initializer[0].data_type = data_type
    data = model.SerializeToString()
    if field == b"location":  # b"t.bin" -> b"t\xffbin": not UTF-8
        data = data.replace(b"t.bin", b"t\xffbin")
    elif field == b"length":  # the entry's value (field 2, 2 bytes) "24" -> b"2\xff"
        assert data.count(b"\x12\x0224") == 1
        data = data.replace(b"\x12\x0224", b"\x12\x022\xff")
    with pytest.raises(BadParameterError) as info:
        read.parse_model(data, "model 'm'", folder=tmp_path)
    assert str(info.value) == f"model 'm': tensor 't' {says}" + (
        "; refused" if field else "")


def test_every_tensor_is_checked_subgraphs_and_attribute_lists_too():
    model = _model()
    empty = onnx.TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[2])
    node = helper.make_node("Constant", [], ["c"])
    node.attribute.append(helper.make_attribute("value_floats", [1.0]))
    node.attribute[-1].tensors.append(empty)
    model.graph.node.append(node)
    with pytest.raises(BadParameterError, match=r"tensor 't' declares \[2\] FLOAT"):
        read.parse_model(model.SerializeToString(), "m")


@pytest.mark.parametrize(("domain", "version", "ok"), [
    ("", 1, True), ("", onnx.defs.onnx_opset_version(), True), ("ai.onnx", 0, False),
    ("", onnx.defs.onnx_opset_version() + 1, False), ("", 99, False),
    ("com.microsoft", 99, True)])
def test_only_opsets_this_onnx_knows(domain, version, ok):
    model = _model()
    model.opset_import.append(helper.make_opsetid(domain, version))
    if ok:
        read.check_opset(model, "m")
        return
    with pytest.raises(BadParameterError) as info:
        read.check_opset(model, "model 'm'")
    assert str(info.value) == (f"model 'm' imports ONNX opset {version}; this onnx "
                               f"{onnx.__version__} knows opsets 1 to "
                               f"{onnx.defs.onnx_opset_version()}")


def test_report_says_where_max_len_came_from_after_the_bytes():
    """Issue 40: with no --max-len, the line after the byte counts names the source; with one
    given (``max_len_from`` None) no line is added."""
    report = _report(converted="opset 17 -> 18", max_len_from="the rows of the model's table "
                     "'wpe' (256)")
    assert report.lines()[3:5] == [
        "positions covered: the rows of the model's table 'wpe' (256)",
        "the model was converted opset 17 -> 18 by onnx's version converter (the PE's ops do "
        "not exist at the model's opset)"]
    assert not any(line.startswith("positions covered") for line in _report().lines())
