"""``split_table``'s recognition of the streamed table layout, field by field and at its size
bound (edgepe/formats/onnx_table.py; issue 33: its mutation run runs these first). One tiny
table graph, exported once; each test changes one thing in a copy of it or its manifest.
"""

from __future__ import annotations

import json
import mmap
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from edgepe import api
from edgepe.formats import onnx_table
from edgepe.formats.onnx_table import split_table
from edgepe.graphs.table import TABLE, table_fragment_header

ROWS, COLS = 5, 2  # sinusoidal, max_len 5, d_model 2, float32


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("split") / "t.onnx"
    api.export(api.make_config("sinusoidal", ROWS, d_model=COLS, mode="table", out=out),
               verify=False)
    return out, json.loads(out.with_name(out.name + ".json").read_text())


@pytest.fixture
def copy(exported, tmp_path):
    source, manifest = exported
    path = tmp_path / "t.onnx"
    shutil.copyfile(source, path)
    return path, dict(manifest)


def _graph_bytes(path) -> int:
    return (path.stat().st_size - ROWS * COLS * 4
            - len(table_fragment_header(ROWS, COLS, "float32")))


def test_the_split_maps_the_tail_of_the_file_read_only(copy):
    path, manifest = copy
    split = split_table(path, manifest)
    data = path.read_bytes()
    expected = np.frombuffer(data[-ROWS * COLS * 4:], "<f4").reshape(ROWS, COLS)
    assert split.table.shape == (ROWS, COLS) and split.table.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(split.table, expected)
    assert not split.table.flags.writeable
    assert isinstance(split.mapping, mmap.mmap) and len(split.mapping) == len(data)
    assert split.model.SerializeToString() == data[:_graph_bytes(path)]
    assert TABLE not in {t.name for t in split.model.graph.initializer}


def test_checkable_adds_a_one_row_stand_in_of_the_tables_type(copy):
    split = split_table(*copy)
    model = split.checkable()
    (stand_in,) = [t for t in model.graph.initializer if t.name == TABLE]
    array = numpy_helper.to_array(stand_in)
    assert array.shape == (1, COLS) and array.dtype == np.float32 and not array.any()
    onnx.checker.check_model(model, full_check=True)
    assert TABLE not in {t.name for t in split.model.graph.initializer}  # a copy was changed


def test_runtime_model_takes_the_table_as_an_input_and_computes_the_file(copy):
    path, manifest = copy
    split = split_table(path, manifest)
    model = split.runtime_model()
    (table_input,) = [i for i in model.graph.input if i.name == TABLE]
    assert table_input.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in table_input.type.tensor_type.shape.dim] == [ROWS, COLS]
    assert len(split.model.graph.input) == len(model.graph.input) - 1  # a copy was changed
    feeds = {"positions": np.array([-3, 0, 2, 4, 9], np.int64)}
    assert split.feeds(feeds)["positions"] is feeds["positions"]
    assert split.feeds(feeds)[TABLE] is split.table
    cpu = ["CPUExecutionProvider"]
    got = ort.InferenceSession(model.SerializeToString(), providers=cpu).run(
        None, split.feeds(feeds))[0]
    want = ort.InferenceSession(str(path), providers=cpu).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    split.release()  # drops the touched pages; the mapping still reads the same values
    np.testing.assert_array_equal(split.table, np.asarray(split.table).copy())


@pytest.mark.parametrize(("field", "value"), [
    ("format", "npy"), ("mode", "compute"), ("quant", {"scheme": "int8"}), ("dtype", "int4"),
    ("scheme", "nope"), ("max_len", "five"), ("d_model", 3), ("max_len", ROWS - 1)])
def test_a_manifest_that_does_not_describe_the_layout_is_loaded_whole(copy, field, value):
    path, manifest = copy
    assert split_table(path, {**manifest, field: value}) is None


def test_a_manifest_without_a_scheme_is_loaded_whole(copy):
    path, manifest = copy
    del manifest["scheme"]
    assert split_table(path, manifest) is None


def test_graph_size_bound_at_and_one_below(copy, monkeypatch):
    path, manifest = copy
    size = _graph_bytes(path)
    monkeypatch.setattr(onnx_table, "MAX_GRAPH_BYTES", size)
    assert split_table(path, manifest) is not None
    monkeypatch.setattr(onnx_table, "MAX_GRAPH_BYTES", size - 1)
    assert split_table(path, manifest) is None
    assert onnx_table.MAX_GRAPH_BYTES == size - 1 and size < 16 * 2**20


def test_a_file_holding_no_graph_before_the_table_is_loaded_whole(copy):
    path, manifest = copy
    data = path.read_bytes()
    path.write_bytes(data[_graph_bytes(path):])  # the fragment alone: 0 graph bytes
    assert split_table(path, manifest) is None


def test_a_changed_fragment_header_is_loaded_whole(copy):
    path, manifest = copy
    data = bytearray(path.read_bytes())
    at = _graph_bytes(path)
    data[at] ^= 0xFF  # the header's first byte
    path.write_bytes(bytes(data))
    assert split_table(path, manifest) is None


def test_a_body_that_is_not_a_model_is_loaded_whole(copy):
    path, manifest = copy
    data = bytearray(path.read_bytes())
    data[:4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    assert split_table(path, manifest) is None


def test_a_body_that_already_holds_a_table_is_loaded_whole(copy):
    path, manifest = copy
    data = path.read_bytes()
    at = _graph_bytes(path)
    model = onnx.load_from_string(data[:at])
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 1), np.float32), TABLE))
    path.write_bytes(model.SerializeToString() + data[at:])
    assert split_table(path, manifest) is None


def _resident_kib(address: int) -> int | None:
    """``Rss`` of the mapping of this process that holds ``address`` (Linux /proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and all(c in "0123456789abcdef-" for c in first):
            low, high = (int(x, 16) for x in first.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("Rss:"):
            return int(line.split()[1])
    return None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_release_drops_the_touched_table_pages_from_the_resident_set(copy):
    """After a run reads the table, release() leaves none of the mapping's pages resident in
    this process (MADV_DONTNEED); reading again maps them back with the same values."""
    split = split_table(*copy)
    address = np.frombuffer(split.mapping, np.uint8).ctypes.data
    values = np.array(split.table)  # touches every page of the table
    assert _resident_kib(address) > 0
    split.release()
    assert _resident_kib(address) == 0
    np.testing.assert_array_equal(split.table, values)
    assert _resident_kib(address) > 0
