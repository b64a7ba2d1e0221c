"""The hooks that wire ``--format tflite`` into the shared modules (issue 43), each pinned by a
fast test: the contract's format lists and manifest field, the verifier's runtime names, default
runtimes and file check, the sweep's position limit for bias models, rebuild's claims check,
``audit.describe`` and the target registry. (The format itself: tests/test_tflite.py.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="the [tflite] extra is not installed")
pytest.importorskip("tflite_micro", reason="the [tflite] extra is not installed")

import edgepe  # noqa: E402
from edgepe.api import make_config  # noqa: E402
from edgepe.audit import describe  # noqa: E402
from edgepe.contract import config as cfg  # noqa: E402
from edgepe.contract import manifest as mf  # noqa: E402
from edgepe.contract.errors import ArtifactError, BadParameterError  # noqa: E402
from edgepe.export import export  # noqa: E402
from edgepe.formats.tflite import BIAS_LIMIT, FLOAT_LIMIT, Program  # noqa: E402
from edgepe.schemes import build  # noqa: E402
from edgepe.targets import profile  # noqa: E402
from edgepe.verify import runtimes as rt  # noqa: E402
from edgepe.verify import verify_artifact  # noqa: E402
from edgepe.verify.sweep import onnx_chunks  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hooks")
    out = {}
    for name, scheme, kw in (("bitwise", "binary-bits", {}),
                             ("float", "binary-bits", {"lowering": "float"}),
                             ("alibi", "alibi", {"mode": "table"}),
                             ("int8", "sinusoidal", {"mode": "table", "quantize": "int8"})):
        out[name] = folder / f"{name}.tflite"
        export(make_config(scheme, 37, format="tflite", out=out[name], **kw))
    return out


def _manifest(path) -> dict:
    return json.loads(path.with_name(path.name + ".json").read_text())


def test_the_contract_lists_the_format() -> None:
    assert cfg.FORMATS[-1] == "tflite" and cfg.EXTENSIONS["tflite"] == ".tflite"
    assert "tflite" in mf.FORMATS


def test_the_manifest_field_is_an_object(made) -> None:
    manifest = _manifest(made["float"])
    assert manifest["tflite"]["feed"] == "saturate" and manifest["tflite"]["rows"] == 16
    assert _manifest(made["bitwise"])["tflite"]["feed"] == "wrap"
    path = made["float"].with_name("edited.tflite")
    path.write_bytes(made["float"].read_bytes())
    manifest["tflite"] = "not an object"
    path.with_name(path.name + ".json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="tflite"):
        mf.read(path)


def test_runtime_names_and_defaults(made) -> None:
    assert rt.available("tflite") == ["litert", "tflm"]
    assert rt.resolve_runtimes(["LiteRT", "tflm"], "tflite") == ["litert", "tflm"]
    with pytest.raises(BadParameterError, match="available: litert, tflm"):
        rt.resolve_runtimes(["cpu"], "tflite")
    program = rt.open_positions_runtime("tflm", made["float"], _manifest(made["float"]))
    assert isinstance(program, Program) and program.name == "tflm"
    # default runtimes: TFLM where its resolver runs the model, not for RIGHT_SHIFT models
    assert [r.runtime for r in verify_artifact(made["float"]).results] == ["litert", "tflm"]
    assert [r.runtime for r in verify_artifact(made["bitwise"]).results] == ["litert"]


def test_the_sweep_probes_a_bias_model_within_its_limit(made) -> None:
    manifest = _manifest(made["alibi"])
    limit = manifest["positions"]["limit"]  # alibi's own 2^24, within the int32 models' 2^30
    assert limit <= BIAS_LIMIT
    assert _manifest(made["float"])["positions"]["limit"] == FLOAT_LIMIT
    config = make_config("alibi", 37, mode="table", format="tflite").scheme
    module = build(config)

    def widest(m) -> int:
        return max(int(np.abs(c.feeds[k]).max()) for c in onnx_chunks(config, module, m, False)
                   for k in ("positions", "key_positions"))
    assert widest(manifest) == limit
    assert widest({**manifest, "format": "onnx"}) > BIAS_LIMIT  # ONNX tables take any int64


def _copy(path, folder):
    """A copy of ``path`` and its manifest in ``folder`` (the module's files stay as exported)."""
    copy = folder / path.name
    copy.write_bytes(path.read_bytes())
    return copy


def test_load_checks_an_int8_models_claims(made, tmp_path) -> None:
    """A float .tflite's values come from its bytes; an int8 one's quant fields must be what its
    inputs give (rebuild.check_claims), as for ONNX and pte."""
    path = _copy(made["int8"], tmp_path)
    manifest = _manifest(made["int8"])
    manifest["quant"]["bound"] *= 2
    path.with_name(path.name + ".json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="edited after export"):
        edgepe.load(path)
    float_one = _copy(made["float"], tmp_path)
    edited = _manifest(made["float"])
    edited["tolerance"] = {"rtol": 0.5, "atol": 0.5}
    float_one.with_name(float_one.name + ".json").write_text(json.dumps(edited))
    edgepe.load(float_one)  # not rebuilt: its bytes (sha256) give its values


def test_describe_reads_the_model(made) -> None:
    info = describe(made["alibi"])
    ops = [op["op"] for op in info["tflite"]["operators"]]
    assert ops[-1] == "TRANSPOSE" and "GATHER" in ops
    assert info["tflite"]["arena_bytes"] > 0 and info["sha256_ok"]


def test_targets_are_registered() -> None:
    assert profile("TFLM").name == "tflm" and profile(" litert ").name == "litert"
    with pytest.raises(BadParameterError, match="known: .*litert, tflm"):
        profile("tflite")
    assert "RIGHT_SHIFT" in profile("litert").ops and "RIGHT_SHIFT" not in profile("tflm").ops
