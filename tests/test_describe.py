"""``edgepe.audit.describe`` (what ``edgepe inspect`` shows) called directly (issue 33: the mutmut
survivors of audit.py): an ONNX artifact's embedded copy and its sidecar's account of the graph
must BOTH agree for ``embedded_ok``; a .pte is described from its program's bytes.
"""

from __future__ import annotations

import hashlib

import pytest

from edgepe import api
from edgepe.audit import describe
from edgepe.contract import manifest as manifest_io


@pytest.fixture(scope="module")
def onnx_artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("describe") / "g.onnx"
    return api.export(api.make_config("gray", 16, out=out), verify=False)[0].path


def test_embedded_ok_needs_the_copy_and_the_graph_header_to_agree(onnx_artifact, tmp_path):
    assert describe(onnx_artifact)["embedded_ok"] is True
    path = tmp_path / "g.onnx"
    path.write_bytes(onnx_artifact.read_bytes())
    manifest = manifest_io.read(onnx_artifact)
    # the sidecar's account of the graph's header changed, the embedded copy untouched
    manifest["onnx"] = {**manifest["onnx"], "ir_version": manifest["onnx"]["ir_version"] + 1}
    manifest_io.path_for(path).write_bytes(manifest_io.dumps(manifest))
    info = describe(path)
    assert info["embedded_ok"] is False and info["sha256_ok"] is True
    # and the embedded copy no longer the sidecar's (another seed), the header account intact
    manifest = {**manifest_io.read(onnx_artifact), "seed": 5}
    manifest_io.path_for(path).write_bytes(manifest_io.dumps(manifest))
    assert describe(path)["embedded_ok"] is False


def test_a_pte_is_described_from_its_program(tmp_path):
    pytest.importorskip("executorch", reason="the executorch extra is not installed")
    path = api.export(api.make_config("gray", 16, format="pte", out=tmp_path / "g.pte"),
                      verify=False)[0].path
    info = describe(path)
    assert set(info) == {"path", "bytes", "manifest", "sha256", "sha256_ok", "program"}
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and info["sha256_ok"]
    program = info["program"]
    assert set(program) >= {"constant_bytes", "methods"}
    (method,) = program["methods"]
    assert method["name"] == "forward" and method["instructions"] > 0 and method["operators"]


def test_a_tflite_is_described_from_its_model(tmp_path):
    """A .tflite is described from the model's own bytes (``describe_model``: ops, tensors,
    constant bytes, TFLM's arena or why not), under the ``tflite`` key (hmut4)."""
    pytest.importorskip("tflite", reason="the [tflite] extra is not installed")
    from edgepe.formats.tflite import describe_model

    path = api.export(api.make_config("gray", 16, format="tflite", out=tmp_path / "g.tflite"),
                      verify=False)[0].path
    info = describe(path)
    assert set(info) == {"path", "bytes", "manifest", "sha256", "sha256_ok", "tflite"}
    assert info["tflite"] == describe_model(path.read_bytes())
    assert info["tflite"]["inputs"] == [{"name": "positions", "shape": [16], "dtype": "int32"}]
    assert info["tflite"]["outputs"] == [{"name": "pe", "shape": [16, 5], "dtype": "float32"}]
