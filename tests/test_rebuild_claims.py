"""rebuild's checks of what a manifest claims, called directly (issue 33: the mutmut survivors
of edgepe/rebuild.py): the claims a foreign build makes (``foreign_claims``, ``check_claims``), a
looser tolerance or bound (``looser``), the inputs taken back from an embedded manifest, and a
lone ONNX file read through its embedded copy, each refusal's whole line.
"""

from __future__ import annotations

import copy

import onnx
import pytest

from edgepe import api, rebuild
from edgepe.contract import manifest as manifest_io
from edgepe.contract.errors import ArtifactError, CheckpointError


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("claims")
    out = {}
    for name, kw in (("onnx", {"scheme": "binary", "d_model": 8}),
                     ("npy", {"scheme": "sinusoidal", "d_model": 8, "mode": "table",
                              "format": "npy", "quantize": "int8"}),
                     ("int8", {"scheme": "sinusoidal", "d_model": 8, "quantize": "int8"}),
                     ("rope", {"scheme": "rope", "d_model": 8})):
        scheme = kw.pop("scheme")
        ext = ".npy" if kw.get("format") == "npy" else ".onnx"
        path = api.export(api.make_config(scheme, 16, out=folder / f"{name}{ext}", **kw),
                          verify=False)[0].path
        out[name] = path
    return out


# ---- foreign_claims, looser ---------------------------------------------------------------------


def test_foreign_claims_names_each_differing_field_in_order():
    ours = {"a": 1, "b": {"c": 2}, "sha256": "x", "edgepe_version": "1", "d": 4}
    theirs = {"a": 1, "b": {"c": 3}, "sha256": "y", "edgepe_version": "2", "e": 5,
              "manifest_source": "embedded"}
    assert rebuild.foreign_claims(theirs, ours) == [
        "b.c: 3 != this edgepe's 2", "d (missing in the file's manifest)",
        "e (extra in the file's manifest)"]
    assert rebuild.foreign_claims(ours, ours) == []


def test_foreign_claims_stop_at_16():
    ours = {f"k{i:02d}": i for i in range(20)}
    theirs = {f"k{i:02d}": -i - 1 for i in range(20)}
    claims = rebuild.foreign_claims(theirs, ours)
    assert len(claims) == 16 and claims[-1] == "k15: -16 != this edgepe's 15"
    assert len(rebuild.foreign_claims({**theirs, "k00": 0}, ours)) == 16


def test_foreign_claims_ignore_the_checkpoint_path():
    ours = {"checkpoint": {"path": "/a.pt", "sha256": "s"}}
    assert rebuild.foreign_claims({"checkpoint": {"path": "/b.pt", "sha256": "s"}}, ours) == []


@pytest.mark.parametrize(("section", "key"), [("tolerance", "rtol"), ("tolerance", "atol"),
                                              ("quant", "bound"),
                                              ("quant", "bound_all_positions")])
def test_looser_names_each_term(section, key):
    ours = {"tolerance": {"rtol": 1e-6, "atol": 1e-6},
            "quant": {"bound": 0.5, "bound_all_positions": 0.75}}
    assert rebuild.looser(copy.deepcopy(ours), ours) is None
    theirs = copy.deepcopy(ours)
    theirs[section][key] *= 2
    assert rebuild.looser(theirs, ours) == (
        f"the manifest states {section}.{key} {theirs[section][key]}, looser than this edgepe's "
        f"{ours[section][key]}")
    theirs[section][key] = ours[section][key] / 2  # tighter is not looser
    assert rebuild.looser(theirs, ours) is None
    none = copy.deepcopy(ours)
    none[section][key] = None  # stated by neither... or only by the file
    assert rebuild.looser(none, ours) is None
    assert rebuild.looser(ours, none) == (
        f"the manifest states {section}.{key} {ours[section][key]}, looser than this edgepe's "
        "None")


def test_looser_without_sections():
    assert rebuild.looser({"quant": None}, {"quant": None}) is None
    assert rebuild.looser({"quant": {"bound": 1.0}}, {}) == (
        "the manifest states quant.bound 1.0, looser than this edgepe's None")


# ---- check_claims -------------------------------------------------------------------------------


def test_a_table_whose_manifest_was_edited_is_refused_by_its_first_claim(made):
    path = made["npy"]
    m = manifest_io.read(path)
    rebuild.check_claims(path, m)  # as exported: fine
    edited = copy.deepcopy(m)
    edited["quant"]["scale"][0] *= 2
    with pytest.raises(ArtifactError) as exc:
        rebuild.check_claims(path, edited)
    assert str(exc.value).startswith(f"{str(path)!r}: its manifest says what its recorded "
                                     "inputs do not give (quant.scale")
    assert str(exc.value).endswith("): it was edited after export; export it again")
    edited = {**m, "positions": {**m["positions"], "out_of_range": "wrap"}}
    with pytest.raises(ArtifactError, match=r"\(positions\.out_of_range: \"wrap\" != this "
                                            r"edgepe's \"clamp\"\)"):
        rebuild.check_claims(path, edited)


def test_an_int8_graphs_scale_is_a_claim_a_float_graphs_fields_are_not(made):
    m = manifest_io.read(made["int8"])
    rebuild.check_claims(made["int8"], m)
    edited = copy.deepcopy(m)
    edited["quant"]["scale"][0] *= 2
    with pytest.raises(ArtifactError, match="quant.scale"):
        rebuild.check_claims(made["int8"], edited)
    # a float pe graph's values come from its bytes: its manifest is not rebuilt here
    f = manifest_io.read(made["onnx"])
    rebuild.check_claims(made["onnx"], {**f, "positions": {**f["positions"], "limit": 3}})


def test_a_float_checkpoint_artifact_without_its_checkpoint_is_not_checked(made):
    m = manifest_io.read(made["npy"])
    float_ckpt = {**m, "quant": None, "inputs": {**m["inputs"], "checkpoint_sha256": "ab"},
                  "positions": {**m["positions"], "out_of_range": "wrap"}}
    rebuild.check_claims(made["npy"], float_ckpt)  # nothing to compare it with
    with pytest.raises(CheckpointError) as exc:  # int8: checked (its scales need the weights)
        rebuild.check_claims(made["npy"], {**float_ckpt, "quant": m["quant"]})
    assert str(exc.value) == ("this artifact was exported from a checkpoint with sha256 ab: pass "
                              "it with --checkpoint FILE (no path from a manifest is opened)")


def test_a_float_rope_graphs_layout_is_a_claim(made):
    """A float rope graph is checked (load rotates by the manifest's layout), unlike a float pe
    graph: an edited layout is refused."""
    m = manifest_io.read(made["rope"])
    assert m["kind"] == "rope" and m["quant"] is None and m["params"]["layout"] == "interleaved"
    rebuild.check_claims(made["rope"], m)
    edited = {**m, "params": {**m["params"], "layout": "half"}}
    with pytest.raises(ArtifactError, match=r"\(params\.layout: \"half\" != this edgepe's "
                                            r"\"interleaved\"\)"):
        rebuild.check_claims(made["rope"], edited)


@pytest.mark.parametrize("fmt", ["pte", "tflite"])
def test_a_float_executorch_programs_manifest_is_not_rebuilt(made, tmp_path, fmt):
    """A float .pte (or .tflite, hmut4) of a pe scheme gives its values from its bytes alone,
    like a float ONNX graph: check_claims returns before it even looks at the file (none lies
    at the path here: a .pte export takes seconds), whatever the manifest says beyond its
    inputs."""
    m = manifest_io.read(made["onnx"])
    program = {k: v for k, v in m.items() if k != "onnx"}
    program.update(format=fmt, inputs={**m["inputs"], "format": fmt},
                   positions={**m["positions"], "limit": 3})
    rebuild.check_claims(tmp_path / f"absent.{fmt}", program)
    with pytest.raises(FileNotFoundError):  # an int8 one is checked: the file is stat'ed
        rebuild.check_claims(tmp_path / f"absent.{fmt}", {**program, "quant": {"scale": 1.0}})


def test_a_checkpoint_section_without_a_recorded_sha256_is_a_claim_not_an_input(made):
    """The recorded checkpoint path goes back into the config only for an artifact whose inputs
    record the checkpoint's sha256; a manifest that adds a checkpoint section is refused."""
    m = manifest_io.read(made["npy"])
    edited = {**m, "checkpoint": {"path": "/elsewhere/w.pt", "sha256": "ab" * 32}}
    config, _ = rebuild.config_from_manifest(edited, None, 1 << 30)
    assert config.checkpoint is None and config.checkpoint_sha256 is None
    with pytest.raises(ArtifactError, match=r"\(checkpoint: \{.* != this edgepe's null\)"):
        rebuild.check_claims(made["npy"], edited)


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """An int8 npy table of scheme learned (L=16, d=8) from one named tensor of a checkpoint
    (``--checkpoint-param wpe.weight``): seed-5 weights, not the seed-0 ones a rebuild without
    the checkpoint would make."""
    import torch

    from edgepe.schemes import build, resolve

    folder = tmp_path_factory.mktemp("learned")
    (weight,) = build(resolve("learned", 16, d_model=8), seed=5).state_dict().values()
    ckpt = folder / "model.pt"
    torch.save({"wpe.weight": weight, "other.bias": torch.zeros(3)}, ckpt)
    config = api.make_config("learned", 16, d_model=8, mode="table", format="npy",
                             quantize="int8", checkpoint=ckpt, checkpoint_param="wpe.weight",
                             out=folder / "t.npy")
    return api.export(config, verify=False)[0].path, ckpt


def test_a_checkpoint_param_artifact_is_rebuilt_and_checked_from_the_users_copy(learned,
                                                                              tmp_path):
    """The checkpoint moved (nothing at the recorded path): rebuild and check_claims build the
    reference from the user's copy, loading the one named tensor, never the recorded path."""
    path, ckpt = learned
    m = manifest_io.read(path)
    assert m["inputs"]["checkpoint_param"] == "wpe.weight"
    assert m["checkpoint"]["param"] == "wpe.weight"
    moved = tmp_path / "copy.pt"
    moved.write_bytes(ckpt.read_bytes())
    ckpt.rename(ckpt.with_name("gone.pt"))
    try:
        got = rebuild.rebuild(path, m, checkpoint=moved)
        assert got.reproduced, str(got)
        assert got.config.checkpoint_param == "wpe.weight"
        assert got.config.checkpoint == str(ckpt)  # the recorded path, back into the bytes
        rebuild.check_claims(path, m, checkpoint=moved)
        edited = {**m, "quant": {**m["quant"], "scale": [2 * v for v in m["quant"]["scale"]]}}
        with pytest.raises(ArtifactError, match=r"\(quant\.scale"):
            rebuild.check_claims(path, edited, checkpoint=moved)
    finally:
        ckpt.with_name("gone.pt").rename(ckpt)


# ---- inputs from an embedded manifest, lone ONNX files -----------------------------------------


def test_embedded_inputs():
    m = {"scheme": "binary", "max_len": 16, "d_model": 8, "heads": None, "params": {"a": 1},
         "mode": "compute", "format": "onnx", "dtype": "float32", "lowering": "arith",
         "seed": 3, "quant": None}
    assert rebuild._embedded_inputs(m, 18) == {
        "scheme": "binary", "max_len": 16, "d_model": 8, "heads": None, "params": {"a": 1},
        "mode": "compute", "format": "onnx", "dtype": "float32", "quantize": "none",
        "quant_granularity": None, "lowering": "arith", "seed": 3, "checkpoint_sha256": None,
        "opset": 18, "c_prefix": None, "c_align": None}
    q = {**m, "mode": "table", "quant": {"granularity": "tensor", "runtime": "live"}}
    got = rebuild._embedded_inputs(q, 19)
    assert (got["quantize"], got["quant_granularity"], got["lowering"], got["int8_runtime"],
            got["opset"]) == ("int8", "tensor", None, "live", 19)
    assert rebuild._embedded_inputs({**m, "mode": "sliced"}, 18)["lowering"] == "arith"
    assert "int8_runtime" not in rebuild._embedded_inputs({**m, "quant": "x"}, 18)


def _lone(tmp_path, source, edit=None, name="lone.onnx"):
    """``source`` moved without its .json, its embedded manifest edited by ``edit(dict)``."""
    import json

    model = onnx.load(str(source))
    if edit is not None:
        prop = next(p for p in model.metadata_props if p.key == manifest_io.EMBEDDED_KEY)
        embedded = json.loads(prop.value)
        edit(embedded)
        prop.value = json.dumps(embedded)
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def test_a_lone_onnx_whose_embedded_manifest_cannot_be_trusted_is_refused(made, tmp_path):
    def refused(edit):
        path = _lone(tmp_path, made["onnx"], edit)
        with pytest.raises(ArtifactError) as exc:
            rebuild.read_manifest(path)
        lone = f"{str(path)!r} has no manifest beside it ({str(path) + '.json'!r})"
        assert str(exc.value).startswith(lone), str(exc.value)
        return str(exc.value)[len(lone):]

    assert refused(lambda m: m.pop("scheme")) == " and its embedded manifest names no scheme"
    assert refused(lambda m: m.update(scheme=7)) == " and its embedded manifest names no scheme"
    assert refused(lambda m: m.update(checkpoint={"path": "c.pt"})) == (
        "; it was exported from a checkpoint, which its embedded manifest cannot rebuild it "
        "from: keep its .json with it")
    assert refused(lambda m: m.update(seed=5)).startswith(
        ", and the artifact its embedded manifest describes differs from it at byte ")
    assert refused(lambda m: m.update(seed="s")) == (
        ", and its embedded manifest does not say how to rebuild it (the manifest's inputs.seed "
        "must be an integer, got 's'): keep its .json with it")


def test_a_lone_onnx_is_rebuilt_and_marked(made, tmp_path):
    path = _lone(tmp_path, made["onnx"])
    m = rebuild.read_manifest(path)
    assert m["manifest_source"] == "embedded"
    assert {k: v for k, v in m.items() if k != "manifest_source"} == manifest_io.read(
        made["onnx"])
    # with a sidecar, the sidecar is read (no rebuild, no mark)
    assert "manifest_source" not in rebuild.read_manifest(made["onnx"])


def test_just_built_trusts_the_bytes_and_builds_the_reference(made):
    m = manifest_io.read(made["npy"])
    got = rebuild.just_built(made["npy"], m)
    assert (got.reproduced, got.difference, got.same_version, got.bytes_match) == (
        True, None, True, True)
    assert got.manifest is m and got.config.format == "npy" and got.module is not None


def test_first_line():
    assert rebuild._first_line(ValueError("one\ntwo")) == "one"
    assert rebuild._first_line(ValueError("  ")) == "ValueError"
    assert rebuild._first_line(ValueError("x" * 200)) == "x" * 160


# ---- a foreign build's claims in rebuild() ------------------------------------------------------


def _foreign(made, tmp_path, **changes):
    m = {**manifest_io.read(made["npy"]), "edgepe_version": "0.0.1", **changes}
    path = tmp_path / "t.npy"
    path.write_bytes(made["npy"].read_bytes())
    manifest_io.path_for(path).write_bytes(manifest_io.dumps(m))
    return path, m


def _is_rebuilt_from_the_inputs(got, m, path):
    """A foreign build's ``Rebuilt``: reproduced and same_version are False, not merely falsy
    (verify's JSON report writes both: null there is no answer), and its config and module are
    the ones the recorded inputs give (the numeric check's reference: this edgepe's, hmut4)."""
    assert got.reproduced is False and got.same_version is False
    config, module = rebuild.config_from_manifest(m, None, rebuild._cap(m, path.stat().st_size))
    assert got.config == config
    assert type(got.module) is type(module)
    assert got.module.state_dict().keys() == module.state_dict().keys()


def test_a_foreign_build_not_byte_identical_fails_or_lists_its_claims_when_accepted(
        made, tmp_path):
    from edgepe import __version__

    ours = manifest_io.read(made["npy"])
    one = {"positions": {**ours["positions"], "out_of_range": "wrap"}}
    path, m = _foreign(made, tmp_path, **one)
    got = rebuild.rebuild(path, m)
    claim = "positions.out_of_range: \"wrap\" != this edgepe's \"clamp\""
    assert got.difference == (
        f"written by edgepe '0.0.1' (this is {__version__}) and not byte-identical to this "
        "edgepe's rebuild: the manifest differs from the rebuilt one at positions.out_of_range: "
        "\"wrap\" != rebuilt \"clamp\"; pass --accept-foreign to verify it numerically with "
        "this edgepe's values")
    assert got.unchecked == () and not got.ok and not got.reproduced and not got.same_version
    assert got.bytes_match  # only the manifest differs: the sweep may still show what it does
    assert got.manifest["positions"]["out_of_range"] == "clamp"  # this edgepe's
    _is_rebuilt_from_the_inputs(got, m, path)
    accepted = rebuild.rebuild(path, m, accept_foreign=True)
    assert accepted.ok and accepted.unchecked == (claim,) and not accepted.reproduced
    assert accepted.bytes_match and not accepted.same_version
    assert accepted.manifest["positions"]["out_of_range"] == "clamp"  # this edgepe's
    _is_rebuilt_from_the_inputs(accepted, m, path)
    assert accepted.note == (f"written by edgepe '0.0.1', this is {__version__}: verified "
                             f"numerically only; 1 claim(s) accepted unchecked: {claim}")
    assert str(accepted) == f"not reproduced ({accepted.note})"
    # two claims: both listed
    path, m = _foreign(made, tmp_path, **one, seed=9)
    accepted = rebuild.rebuild(path, m, accept_foreign=True)
    assert len(accepted.unchecked) == 2
    assert accepted.note.endswith("2 claim(s) accepted unchecked: " + "; ".join(
        accepted.unchecked))
    # other bytes (the trojan's case): the bytes are the first claim left unchecked
    path, m = _foreign(made, tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    got = rebuild.rebuild(path, m)
    assert not got.ok and not got.bytes_match
    assert "not byte-identical to this edgepe's rebuild: the file differs from the rebuild at " \
        f"byte {len(data) - 1}" in got.difference
    accepted = rebuild.rebuild(path, m, accept_foreign=True)
    assert accepted.ok and not accepted.bytes_match
    assert accepted.unchecked == (f"the bytes: the file differs from the rebuild at byte "
                                  f"{len(data) - 1}",)


def test_bytes_match_says_whether_only_the_manifest_differs(made, tmp_path):
    m = manifest_io.read(made["npy"])
    path = tmp_path / "t.npy"
    path.write_bytes(made["npy"].read_bytes())
    got = rebuild.rebuild(path, {**m, "seed": m["seed"]})
    assert got.bytes_match is True and got.reproduced
    edited = {**m, "tolerance": {"rtol": 1.0, "atol": 1.0}}
    got = rebuild.rebuild(path, edited)
    assert got.difference.startswith("the manifest differs") and got.bytes_match is True
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    got = rebuild.rebuild(path, m)
    assert got.difference.startswith("the file differs") and got.bytes_match is False
    assert rebuild.just_built(path, m).bytes_match is True


def test_config_from_manifest_refuses_unusable_inputs(made):
    m = manifest_io.read(made["npy"])
    with pytest.raises(ArtifactError) as exc:
        rebuild.config_from_manifest({**m, "inputs": {**m["inputs"], "checkpoint_param": 5}},
                                     None, 1 << 30)
    assert str(exc.value) == "the manifest's inputs.checkpoint_param must be a string, got 5"
    with pytest.raises(ArtifactError) as exc:
        rebuild.config_from_manifest({**m, "inputs": {**m["inputs"], "params": "x"}}, None,
                                     1 << 30)
    assert str(exc.value) == (
        "the manifest's inputs.params cannot be resolved for scheme 'sinusoidal': dictionary "
        "update sequence element #0 has length 1; 2 is required")


def test_read_manifest_refusals_and_opset(made, tmp_path):
    import os

    folder = tmp_path / "d.onnx"
    folder.mkdir()
    with pytest.raises(ArtifactError) as exc:
        rebuild.read_manifest(folder)
    assert str(exc.value) == (f"artifact {str(folder)!r} is not a file (it is a folder): edgepe "
                              "reads regular files only")
    lone_npy = tmp_path / "t.npy"
    lone_npy.write_bytes(made["npy"].read_bytes())
    with pytest.raises(ArtifactError) as exc:
        rebuild.read_manifest(lone_npy)
    assert str(exc.value).startswith(f"{str(lone_npy)!r} is not an edgepe artifact: no readable "
                                     "manifest at ")
    # the embedded copy's opset is the graph's: an opset-20 export is rebuilt at 20
    old = api.export(api.make_config("binary", 16, d_model=8, opset=20,
                                     out=tmp_path / "o20.onnx"), verify=False)[0].path
    lone = _lone(tmp_path, old, name="l20.onnx")
    fds = len(os.listdir("/proc/self/fd"))
    m = rebuild.read_manifest(lone)
    assert len(os.listdir("/proc/self/fd")) == fds  # no descriptor left open
    assert m["inputs"]["opset"] == 20 and m["manifest_source"] == "embedded"
    assert rebuild._embedded_inputs({"heads": 4, "mode": "table"}, 18)["heads"] == 4


def test_check_checkpoint_names_a_checkpoint_of_the_wrong_type():
    from edgepe.contract.errors import BadParameterError

    with pytest.raises(BadParameterError, match="^checkpoint must be a str or os.PathLike, got "
                                                "int 5$"):
        rebuild.check_checkpoint("ab" * 32, 5)
