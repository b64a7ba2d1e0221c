"""rebuild's paths one at a time on small real artifacts (issue 33: survivors of the library
mutation run of edgepe/rebuild.py): a reproduced artifact, one byte or one field changed, another
edgepe version, every input the config is rebuilt from, every refusal's message."""

from __future__ import annotations

import copy
import hashlib
import io
import json

import onnx
import pytest

from edgepe import __version__, api, rebuild
from edgepe.contract import manifest as manifest_io
from edgepe.contract.errors import ArtifactError, CheckpointError
from edgepe.export import compare as compare_mod


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rebuild")
    onnx_path = api.export(api.make_config("binary", 16, d_model=8, out=folder / "c.onnx"),
                           verify=False)[0].path
    npy_path = api.export(api.make_config("sinusoidal", 16, d_model=8, mode="table",
                                          format="npy", quantize="int8", out=folder / "t.npy"),
                          verify=False)[0].path
    return {"onnx": onnx_path, "npy": npy_path}


def _copy(src, tmp_path, data=None, manifest=None):
    dst = tmp_path / src.name
    dst.write_bytes(src.read_bytes() if data is None else data)
    m = manifest_io.read(src) if manifest is None else manifest
    manifest_io.path_for(dst).write_bytes(manifest_io.dumps(m))
    return dst, m


@pytest.mark.parametrize("kind", ["onnx", "npy"])
def test_a_fresh_artifact_is_reproduced(made, kind):
    m = manifest_io.read(made[kind])
    got = rebuild.rebuild(made[kind], m)
    assert (got.reproduced, got.difference, got.same_version, got.ok) == (True, None, True, True)
    assert str(got) == "rebuilt byte-identical"
    assert got.manifest == m
    assert got.config.scheme.max_len == 16 and got.config.format == kind
    assert got.module is not None and got.note == ""


def test_one_byte_changed_in_an_onnx_graph_names_the_initializer(made, tmp_path):
    data = bytearray(made["onnx"].read_bytes())
    model = onnx.load_from_string(bytes(data))
    init = model.graph.initializer[0]
    raw = init.raw_data
    where = bytes(data).find(raw)
    assert where > 0
    data[where] ^= 1
    path, m = _copy(made["onnx"], tmp_path, bytes(data))
    got = rebuild.rebuild(path, m)
    assert not got.reproduced and not got.ok and got.same_version
    assert got.difference == (f"the file differs from the rebuild at byte {where} (initializer "
                              f"0 {init.name!r})")
    assert str(got) == f"rebuild FAILED: {got.difference}"


@pytest.mark.parametrize("part", ["input", "output", "node", "metadata"])
def test_onnx_difference_names_each_part(made, tmp_path, part):
    model = onnx.load(str(made["onnx"]))
    if part == "input":
        model.graph.input[0].name = "other"
        want = "input 0 'other'"
    elif part == "output":
        model.graph.output[0].name = "other"
        want = "output 0 'other'"
    elif part == "node":
        model.graph.node[-1].name = ""
        model.graph.node[-1].op_type = "Sub"
        want = f"node {len(model.graph.node) - 1} 'Sub'"
    else:
        model.metadata_props[0].value = model.metadata_props[0].value + " "
        want = "metadata_props (the embedded manifest)"
    path = tmp_path / "x.onnx"
    path.write_bytes(model.SerializeToString())
    m = manifest_io.read(made["onnx"])
    prepared = rebuild.config_from_manifest(m, None, 1 << 30)
    from edgepe.export import prepare

    assert compare_mod._onnx_difference(path, prepare(*prepared)) == want


def test_onnx_difference_of_a_shorter_graph_and_of_no_graph(made, tmp_path):
    from edgepe.export import prepare

    m = manifest_io.read(made["onnx"])
    prepared = prepare(*rebuild.config_from_manifest(m, None, 1 << 30))
    model = onnx.load(str(made["onnx"]))
    last = model.graph.node[-1]
    del model.graph.node[-1]
    path = tmp_path / "x.onnx"
    path.write_bytes(model.SerializeToString())
    name = last.name or last.op_type
    assert compare_mod._onnx_difference(path, prepared) == \
        f"node {len(model.graph.node)} {name!r}"
    path.write_bytes(b"not onnx at all")
    assert compare_mod._onnx_difference(path, prepared) is None
    path.write_bytes(made["onnx"].read_bytes())
    assert compare_mod._onnx_difference(path, prepared) is None


def test_a_changed_manifest_field_is_named(made, tmp_path):
    m = manifest_io.read(made["npy"])
    forged = copy.deepcopy(m)
    forged["quant"]["bound"] = forged["quant"]["bound"] * 2
    path, _ = _copy(made["npy"], tmp_path, manifest=forged)
    got = rebuild.rebuild(path, forged)
    assert got.difference.startswith("the manifest differs from the rebuilt one at quant.bound:")
    assert got.manifest == m


def test_another_versions_label_alone_changes_nothing(made, tmp_path):
    # issue 41: foreign means foreign; a manifest naming another version whose bytes and
    # fields ARE this edgepe's rebuild is reproduced (the label is noted, not a claim)
    m = {**manifest_io.read(made["npy"]), "edgepe_version": "0.0.1"}
    path, _ = _copy(made["npy"], tmp_path, manifest=m)
    got = rebuild.rebuild(path, m)
    assert (got.reproduced, got.difference, got.same_version, got.ok, got.bytes_match) == (
        True, None, False, True, True)
    assert got.note == f"labelled edgepe '0.0.1', rebuilt byte-identical by {__version__}"
    assert str(got) == "rebuilt byte-identical"
    assert got.manifest == manifest_io.read(made["npy"])  # the rebuilt one: this version's
    assert got.config.scheme.scheme == "sinusoidal" and got.module is not None
    # a looser bound, accepted as foreign: still FAILS, named
    looser = copy.deepcopy(m)
    looser["quant"]["bound"] *= 2
    got = rebuild.rebuild(path, looser, accept_foreign=True)
    assert not got.ok and got.difference.startswith("the manifest states quant.bound")
    assert str(got) == f"rebuild FAILED: {got.difference}"
    assert not got.reproduced and not got.same_version and got.bytes_match


def test_just_built_trusts_the_bytes(made):
    m = manifest_io.read(made["npy"])
    got = rebuild.just_built(made["npy"], m)
    assert (got.reproduced, got.difference, got.manifest, got.same_version) == \
        (True, None, m, True)
    assert got.config.scheme.max_len == 16 and got.config.quantize == "int8"
    size = made["npy"].stat().st_size
    assert got.config.max_table_bytes == 4 * size + 65536
    assert got.module is not None


def test_config_from_manifest_restores_every_option(made):
    m = manifest_io.read(made["npy"])
    config, module = rebuild.config_from_manifest(m, None, 12345)
    inputs = m["inputs"]
    assert config.max_table_bytes == 12345
    keys = [k for k in ("mode", "format", "dtype", "quantize", "quant_granularity", "seed",
                        "int8_runtime", "c_prefix", "c_align", "lowering", "opset") if k in inputs]
    assert len(keys) >= 6
    for key in keys:
        if inputs[key] is not None:
            assert getattr(config, key) == inputs[key], key
    assert config.checkpoint is None and config.checkpoint_sha256 is None


def test_config_from_manifest_defaults_for_nulls(made):
    m = copy.deepcopy(manifest_io.read(made["onnx"]))
    for key in ("quant_granularity", "lowering", "opset", "c_prefix", "c_align",
                "int8_runtime"):
        m["inputs"][key] = None
    m["inputs"]["seed"] = 5
    config, _ = rebuild.config_from_manifest(m, None, 1 << 20)
    assert (config.quant_granularity, config.lowering, config.opset, config.c_prefix,
            config.c_align, config.int8_runtime, config.seed) == \
        ("channel", "bitwise", 18, "edgepe", 16, "fold", 5)


def test_config_from_manifest_refusals(made):
    base = manifest_io.read(made["onnx"])

    def refused(change, message):
        m = copy.deepcopy(base)
        change(m)
        with pytest.raises(ArtifactError) as info:
            rebuild.config_from_manifest(m, None, 1 << 20)
        assert str(info.value) == message

    refused(lambda m: m.pop("inputs"),
            "the manifest records no inputs: the artifact cannot be rebuilt")
    refused(lambda m: m.update(inputs=[1]),
            "the manifest records no inputs: the artifact cannot be rebuilt")
    refused(lambda m: [m["inputs"].pop(k) for k in ("scheme", "mode", "dtype")],
            "the manifest's inputs lack scheme, mode, dtype: the artifact cannot be rebuilt")
    refused(lambda m: m["inputs"].pop("quantize"),
            "the manifest's inputs lack quantize: the artifact cannot be rebuilt")
    for key in ("seed", "opset", "c_align"):
        for bad in (True, 1.0, "1"):
            refused(lambda m, k=key, b=bad: m["inputs"].update({k: b}),
                    f"the manifest's inputs.{key} must be an integer, got {bad!r}")
    refused(lambda m: m["inputs"].update(checkpoint_key=3),
            "the manifest's inputs.checkpoint_key must be a string, got 3")


def test_config_from_manifest_passes_unknown_inputs_on_as_extra(made):
    m = copy.deepcopy(manifest_io.read(made["onnx"]))
    m["inputs"]["future_option"] = 7
    config, _ = rebuild.config_from_manifest(m, None, 1 << 20)
    assert config.extra == {"future_option": 7}


def test_check_checkpoint_messages(tmp_path):
    ckpt = tmp_path / "w.pt"
    ckpt.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    rebuild.check_checkpoint(None, None)
    rebuild.check_checkpoint(sha, ckpt)
    cases = [
        ((None, ckpt), "this artifact was not exported from a checkpoint: drop --checkpoint"),
        ((sha, None), f"this artifact was exported from a checkpoint with sha256 {sha}: pass it "
                      "with --checkpoint FILE (no path from a manifest is opened)"),
        ((sha, tmp_path / "nope"), f"checkpoint {str(tmp_path / 'nope')!r} does not exist or is "
                                   "not a file"),
        ((sha, tmp_path), f"checkpoint {str(tmp_path)!r} does not exist or is not a file"),
        (("0" * 64, ckpt), f"checkpoint {str(ckpt)!r} is not the one this artifact was "
                           f"exported from (sha256 {'0' * 64})"),
    ]
    for args, message in cases:
        with pytest.raises(CheckpointError) as info:
            rebuild.check_checkpoint(*args)
        assert str(info.value) == message


def test_short_cuts_at_60():
    assert compare_mod._short("a" * 58) == json.dumps("a" * 58)  # 60 characters with the quotes
    assert compare_mod._short("a" * 59) == json.dumps("a" * 59)[:57] + "..."


def test_compare_writer_longer_by_two(made):
    sink = compare_mod._CompareWriter(io.BytesIO(b"abcde"))
    sink.write(b"abc")
    assert sink.finish() == 3


# ---- a checkpoint-based artifact (whole-model state dict with a key), a bias scheme ----------


@pytest.fixture(scope="module")
def from_checkpoint(tmp_path_factory):
    """binary at L=16, d=8 from a whole model's state dict (prefix ``enc.pos.``), seed 3
    weights: the artifact records the checkpoint's sha256, key and the path it lay at."""
    import torch

    from edgepe.schemes import build, resolve

    folder = tmp_path_factory.mktemp("ckpt")
    state = build(resolve("binary", 16, d_model=8), seed=3).state_dict()
    ckpt = folder / "whole.pt"
    torch.save({f"enc.pos.{k}": v for k, v in state.items()}, ckpt)
    config = api.make_config("binary", 16, d_model=8, checkpoint=ckpt, checkpoint_key="enc.pos.",
                             out=folder / "p.onnx")
    path = api.export(config, verify=False)[0].path
    return path, ckpt


def test_a_checkpoint_artifact_is_rebuilt_from_the_users_copy(from_checkpoint, tmp_path):
    """The checkpoint moved (the recorded path is gone): rebuilt from the user's copy, the
    recorded path kept in the bytes, checkpoint.path the only field ignored."""
    path, ckpt = from_checkpoint
    moved = tmp_path / "moved.pt"
    moved.write_bytes(ckpt.read_bytes())
    art, m = _copy(path, tmp_path)
    recorded_path = m["checkpoint"]["path"]
    ckpt.rename(ckpt.with_name("gone.pt"))
    try:
        got = rebuild.rebuild(art, m, checkpoint=moved)
        assert got.reproduced, str(got)
        assert got.config.checkpoint == recorded_path
        assert got.config.checkpoint_sha256 == m["checkpoint"]["sha256"]
        assert got.config.checkpoint_key == "enc.pos."
        built = rebuild.just_built(art, m, checkpoint=moved)
        assert built.config.checkpoint_key == "enc.pos." and built.module is not None
        with pytest.raises(CheckpointError, match="pass it with --checkpoint FILE"):
            rebuild.just_built(art, m)
        with pytest.raises(CheckpointError, match="pass it with --checkpoint FILE"):
            rebuild.rebuild(art, m)
    finally:
        ckpt.with_name("gone.pt").rename(ckpt)


def test_compare_ignores_checkpoint_path_only_when_asked(from_checkpoint):
    from edgepe.export import prepare

    path, ckpt = from_checkpoint
    m = manifest_io.read(path)
    config, module = rebuild.config_from_manifest(m, ckpt, 1 << 30)
    prepared = prepare(config, module)
    data = path.read_bytes()
    moved = copy.deepcopy(m)
    moved["checkpoint"]["path"] = "/elsewhere/whole.pt"
    with open(path, "rb") as f:
        assert compare_mod.compare(f, path, moved, prepared, ignore_paths=True)[0] is None
    assert compare_mod.compare(io.BytesIO(data), path, moved, prepared)[0] == (
        f"the manifest differs from the rebuilt one at checkpoint.path: \"/elsewhere/whole.pt\" "
        f"!= rebuilt {json.dumps(m['checkpoint']['path'])}")


def test_the_weights_come_from_the_checkpoint_not_the_seed(from_checkpoint):
    import numpy as np

    from edgepe.schemes import build, resolve

    path, ckpt = from_checkpoint
    m = manifest_io.read(path)
    _, module = rebuild.config_from_manifest(m, ckpt, 1 << 30)
    loaded = module.projection.weight.detach().numpy()
    assert np.array_equal(loaded, build(resolve("binary", 16, d_model=8), seed=3)
                          .projection.weight.detach().numpy())
    assert not np.array_equal(loaded, build(resolve("binary", 16, d_model=8), seed=0)
                              .projection.weight.detach().numpy())


def test_a_bias_scheme_with_params_is_rebuilt(tmp_path):
    config = api.make_config("gaussian", 16, heads=3, params={"sigma": 2.0}, mode="table",
                             format="npy", out=tmp_path / "g.npy")
    path = api.export(config, verify=False)[0].path
    m = manifest_io.read(path)
    got = rebuild.rebuild(path, m)
    assert got.reproduced, str(got)
    assert got.config.scheme.heads == 3 and got.config.scheme.params["sigma"] == 2.0
    other = copy.deepcopy(m)
    other["inputs"]["params"] = None
    cfg, _ = rebuild.config_from_manifest(other, None, 1 << 20)
    assert cfg.scheme.params["sigma"] == 8.0  # the default, from a null params


def test_rebuild_names_the_artifact_and_closes_it(made, tmp_path):
    import os

    folder = tmp_path / "d.onnx"
    folder.mkdir()
    with pytest.raises(ArtifactError, match=r"^artifact '.*d\.onnx' is not a file"):
        rebuild.rebuild(folder, manifest_io.read(made["onnx"]))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        rebuild.rebuild(made["onnx"], manifest_io.read(made["onnx"]))
    assert len(os.listdir("/proc/self/fd")) == before


def test_onnx_difference_of_a_longer_graph(made, tmp_path):
    from edgepe.export import prepare

    m = manifest_io.read(made["onnx"])
    prepared = prepare(*rebuild.config_from_manifest(m, None, 1 << 30))
    model = onnx.load(str(made["onnx"]))
    extra = onnx.helper.make_node("Identity", ["pe"], ["pe_copy"], name="")
    model.graph.node.append(extra)
    path = tmp_path / "x.onnx"
    path.write_bytes(model.SerializeToString())
    assert compare_mod._onnx_difference(path, prepared) == \
        f"node {len(model.graph.node) - 1} 'Identity'"


def test_a_seeded_artifact_is_rebuilt_with_its_seed(tmp_path):
    path = api.export(api.make_config("binary", 16, d_model=8, seed=5, out=tmp_path / "s.onnx"),
                      verify=False)[0].path
    got = rebuild.rebuild(path, manifest_io.read(path))
    assert got.reproduced and got.config.seed == 5, str(got)


def test_a_lone_onnx_read_through_its_embedded_manifest_is_reproduced(made, tmp_path):
    """Moved without its .json, the artifact's manifest is the copy embedded in the graph, marked
    ``manifest_source: "embedded"`` (a field export never writes): the rebuild ignores that
    mark, and still names any other field that differs."""
    lone = tmp_path / "lone.onnx"
    lone.write_bytes(made["onnx"].read_bytes())
    m = rebuild.read_manifest(lone)
    assert m["manifest_source"] == "embedded"
    got = rebuild.rebuild(lone, m)
    assert (got.reproduced, got.difference, got.ok) == (True, None, True)
    got = rebuild.rebuild(lone, {**m, "seed": 7})
    assert got.difference == "the manifest differs from the rebuilt one at seed: 7 != rebuilt 0"
