"""``formats.onnx.check_file``: the reading side of an ONNX artifact (what ``verify``, ``load``
and ``inspect`` run first), each refusal in one line naming the file, on small graphs written
here (issue 33: the mutation run of edgepe/formats/onnx.py runs these first).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepe import api
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.formats.onnx import check_file, check_options

GOLDENS = Path(__file__).resolve().parent / "goldens"


def _graph(inputs=("positions",), outputs=("pe",), domain="", extra_init=False, opset=18):
    node = helper.make_node("Cast", [inputs[0]], [outputs[0]] if outputs else ["dead"],
                            domain=domain, to=TensorProto.INT64)
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N"]) for n in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N"]) for n in outputs]
    inits = [numpy_helper.from_array(np.zeros(1, np.int64), inputs[-1])] if extra_init else []
    opsets = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "g", ins, outs, inits),
                             opset_imports=opsets, ir_version=8)


def _write(tmp_path, model, name="a.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def test_a_graph_gives_its_inputs_and_its_non_standard_domains(tmp_path):
    assert check_file(_write(tmp_path, _graph()), {}) == (("positions",), set())
    # an input that is also an initializer (a default) is not an input to feed
    model = _graph(inputs=("positions", "scale"), extra_init=True)
    assert check_file(_write(tmp_path, model), {}) == (("positions",), set())


def test_a_com_microsoft_node_is_a_domain_to_check(tmp_path):
    model = onnx.load(GOLDENS / "rope-L8-d4-apply-4d-ort.onnx")
    path = _write(tmp_path, model)
    inputs, domains = check_file(path, {})
    assert domains == {"com.microsoft"} and "positions" in inputs


def test_bytes_that_are_not_onnx_are_one_line_naming_the_file(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xff\xff")
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    assert str(info.value).startswith(
        f"{str(path)!r} is not a valid ONNX model (truncated or another file?): ")
    assert "\n" not in str(info.value) and str(info.value).split(": ", 1)[1].strip()


def test_a_truncated_golden_is_refused(tmp_path):
    data = (GOLDENS / "binary-L8-d4-seed0.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="is not a valid ONNX model"):
        check_file(path, {})


def test_a_graph_the_checker_refuses_names_the_checkers_first_line(tmp_path):
    model = _graph()
    model.graph.node[0].input[0] = "nowhere"  # reads a tensor nothing makes
    path = _write(tmp_path, model)
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    message = str(info.value)
    assert message.startswith(f"{str(path)!r} is not a valid ONNX model (truncated or another "
                              "file?): ") and "nowhere" in message and "\n" not in message


def _external_table(location: str) -> onnx.ModelProto:
    """A graph whose initializer ``t`` names 8 bytes of external data at ``location``."""
    model = _graph(inputs=("positions", "t"), extra_init=True)
    (table,) = model.graph.initializer
    table.ClearField("int64_data")
    table.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("length", "8")):
        entry = table.external_data.add()
        entry.key, entry.value = key, value
    return model


def test_external_data_is_never_followed(tmp_path):
    path = _write(tmp_path, _external_table("../../../../etc/passwd"))
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    assert str(path) in str(info.value) and "external" in str(info.value).lower()


def test_external_data_beside_the_file_is_not_read_either(tmp_path):
    (tmp_path / "t.bin").write_bytes(np.zeros(1, np.int64).tobytes())  # readable, inside
    path = _write(tmp_path, _external_table("t.bin"))
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    assert str(info.value) == (f"{str(path)!r} keeps tensor 't' in external data: edgepe never "
                               "writes external data, and opens no path a graph names: refused")
    (tmp_path / "t.bin").unlink()
    (tmp_path / "t.bin").mkdir()  # a loader that followed the name would fail on a folder
    with pytest.raises(ArtifactError, match="keeps tensor 't' in external data"):
        check_file(path, {})


def test_a_table_over_its_cap_is_refused_and_a_compute_graph_is_not_sized():
    from edgepe.contract.errors import BadParameterError as Refused

    # make_config refuses it first; check_options holds for a config built otherwise (the API)
    for mode in ("table", "compute"):
        base = api.make_config("sinusoidal", 64, d_model=8, mode=mode)
        config = base.__class__(**{**base.__dict__, "max_table_bytes": 64})
        if mode == "table":
            with pytest.raises(Refused, match=r"over --max-table-bytes \(64\)"):
                check_options(config)
        else:
            check_options(config)


def test_an_op_edgepe_never_emits_is_refused_naming_the_file(tmp_path):
    model = _graph()
    model.graph.node[0].op_type = "Loop"
    path = _write(tmp_path, model)
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    assert str(path) in str(info.value) and "Loop" in str(info.value)


@pytest.mark.parametrize(("inputs", "outputs"), [(("x",), ("pe",)), (("positions",), ())])
def test_a_model_without_positions_or_outputs_is_not_an_edgepe_graph(tmp_path, inputs, outputs):
    path = _write(tmp_path, _graph(inputs=inputs, outputs=outputs))
    with pytest.raises(ArtifactError) as info:
        check_file(path, {})
    assert str(info.value) == (f"{str(path)!r} is an ONNX model but not an edgepe graph: it has "
                               "no 'positions' input")


def _streamed(tmp_path):
    out = tmp_path / "t.onnx"
    api.export(api.make_config("sinusoidal", 6, d_model=2, mode="table", out=out), verify=False)
    return out, json.loads(out.with_name(out.name + ".json").read_text())


def test_a_streamed_table_is_checked_without_loading_it(tmp_path):
    out, manifest = _streamed(tmp_path)
    assert check_file(out, manifest) == (("positions",), set())
    # the same file described as not streamed: loaded whole and checked the same
    assert check_file(out, {}) == (("positions",), set())


def test_a_streamed_graph_the_checker_refuses_is_refused(tmp_path, monkeypatch):
    from edgepe.formats import onnx_table

    out, manifest = _streamed(tmp_path)
    split = onnx_table.split_table(out, manifest)
    split.model.graph.node[0].input[0] = "nowhere"  # its checkable() copies this model
    monkeypatch.setattr(onnx_table, "split_table", lambda path, manifest: split)
    with pytest.raises(ArtifactError) as info:
        check_file(out, manifest)
    message = str(info.value)
    assert message.startswith(f"{str(out)!r} is not a valid ONNX model") and "nowhere" in message


def test_a_streamed_graph_without_positions_is_not_an_edgepe_graph(tmp_path, monkeypatch):
    from edgepe.formats import onnx_table

    out, manifest = _streamed(tmp_path)
    split = onnx_table.split_table(out, manifest)
    split.model.graph.input[0].name = "ids"
    for node in split.model.graph.node:
        node.input[:] = ["ids" if n == "positions" else n for n in node.input]
    monkeypatch.setattr(onnx_table, "split_table", lambda path, manifest: split)
    with pytest.raises(ArtifactError, match="has no 'positions' input"):
        check_file(out, manifest)


@pytest.mark.parametrize(("options", "message"), [
    ({"dtype": "bit"}, "--dtype bit packs tables: use --format npy, bin or c (ONNX outputs "
     "float32, float16 or uint8)"),
    ({"scheme": "sinusoidal", "dtype": "uint8"}, "--dtype uint8 needs outputs that are exactly "
     "0 or 1; scheme 'sinusoidal' has other values. uint8 schemes: binary-bits, gray, "
     "binary-multilevel, binary-2d, hierarchical"),
    ({"quantize": "int8", "dtype": "float16"}, "--quantize int8 graphs output float32 "
     "(dequantised), not float16"),
    ({"scheme": "rope", "mode": "sliced", "lowering": "arith"}, "--lowering arith does not "
     "apply to --mode sliced; it takes: bitwise, trunc, clip32 (trunc: float Mul, truncating "
     "Cast, int32)"),
    ({"lowering": "clip32"}, "--lowering clip32 slices positions for --mode sliced; the bit "
     "family's compute graphs take bitwise, arith, arith32, float or trunc"),
    ({"mode": "table", "lowering": "arith"}, "--lowering arith applies to compute graphs; a "
     "table graph has no bitwise ops"),
    ({"scheme": "sinusoidal", "lowering": "trunc"}, "--lowering trunc applies to the bit "
     "family (binary, binary-bits, binary-signed, binary-smooth, gray, binary-multilevel, "
     "hybrid-int-binary, binary-gated, fourier-binary, binary-2d, hierarchical); scheme "
     "'sinusoidal' has no bitwise ops to lower"),
])
def test_option_refusals(options, message):
    from edgepe.contract.config import ExportConfig  # noqa: F401 - the type the check takes
    from edgepe.schemes import resolve

    options = dict(options)  # the parameter itself stays as given (a rerun sees it whole)
    scheme = options.pop("scheme", "binary")
    base = api.make_config(scheme, 8, mode=options.get("mode"))
    config = base.__class__(**{**base.__dict__, **options,
                               "scheme": resolve(scheme, 8, base.scheme.d_model)})
    with pytest.raises(BadParameterError) as info:
        check_options(config)
    assert str(info.value).startswith(message)
