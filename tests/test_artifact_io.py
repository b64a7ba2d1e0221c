"""Safe writing of artifacts: atomic replace, manifest last, --force, stale temporary files."""

from __future__ import annotations

import hashlib
import json

import onnx
import pytest

from edgepe.contract.commit import atomic_write, temp_prefix
from edgepe.contract.config import (
    TMP_MARK,
    ExportConfig,
    check_writable,
    manifest_path,
    write_artifact,
)
from edgepe.contract.errors import OutputPathError
from edgepe.export.compare import check_replace
from edgepe.schemes import resolve


def _config(**kw) -> ExportConfig:
    return ExportConfig(scheme=resolve("gray", 16), mode="compute", **kw)


def test_atomic_write_leaves_old_file_when_the_writer_fails(tmp_path):
    out = tmp_path / "a.bin"
    out.write_bytes(b"old")

    def broken(f):
        f.write(b"new and half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(out, broken)
    assert out.read_bytes() == b"old"
    assert not [p for p in tmp_path.iterdir() if TMP_MARK in p.name]


def test_write_artifact_puts_the_file_hash_in_the_manifest(tmp_path):
    import hashlib

    out = tmp_path / "x.onnx"
    manifest = write_artifact(out, lambda f: f.write(b"payload"), {"scheme": "gray"})
    assert manifest["sha256"] == hashlib.sha256(b"payload").hexdigest()
    assert json.loads(manifest_path(out).read_text()) == manifest


def test_stale_temporaries_of_the_target_are_cleaned(tmp_path):
    out = tmp_path / "t.npy"
    stale = tmp_path / f"{temp_prefix(out)}abc123"
    other = tmp_path / f"{temp_prefix(tmp_path / 'other.npy')}abc123"
    stale.write_bytes(b"half")
    other.write_bytes(b"someone else's")
    write_artifact(out, lambda f: f.write(b"table"), {"scheme": "gray"})
    assert not stale.exists()
    assert other.exists()
    assert TMP_MARK in stale.name and len(stale.name) < 64  # short whatever the target's name


def test_identical_reexport_is_a_noop_and_other_inputs_need_force(tmp_path):
    from edgepe.export import prepare

    out = tmp_path / "g.onnx"
    config = _config(out=out)
    prepared = prepare(config)
    write_artifact(out, prepared.write, prepared.manifest)
    assert check_replace(out, prepare(config), force=False) is True

    other = prepare(ExportConfig(scheme=resolve("gray", 32), mode="compute", out=out))
    with pytest.raises(OutputPathError, match="--force"):
        check_replace(out, other, force=False)
    assert check_replace(out, other, force=True) is False

    # A tampered artifact is not "identical" even with the same inputs.
    good = out.read_bytes()
    out.write_bytes(b"tampered")
    with pytest.raises(OutputPathError):
        check_replace(out, prepared, force=False)

    # Nor is one whose manifest was edited back to the command's inputs and re-signed (issue
    # 23): the file AND the manifest must equal the rebuild.
    model = onnx.load_from_string(good)
    model.graph.initializer[0].raw_data = bytes(len(model.graph.initializer[0].raw_data))
    tampered = model.SerializeToString()
    out.write_bytes(tampered)
    manifest = json.loads(manifest_path(out).read_text())
    manifest["sha256"] = hashlib.sha256(tampered).hexdigest()
    manifest_path(out).write_text(json.dumps(manifest))
    with pytest.raises(OutputPathError, match="--force"):
        check_replace(out, prepared, force=False)
    # And a file left right but with an edited manifest.
    out.write_bytes(good)
    manifest["sha256"] = hashlib.sha256(good).hexdigest()
    manifest_path(out).write_text(json.dumps({**manifest, "tolerance": {"atol": 1, "rtol": 1}}))
    with pytest.raises(OutputPathError, match="--force"):
        check_replace(out, prepared, force=False)


def test_a_foreign_file_is_not_replaced_without_force(tmp_path):
    from edgepe.export import prepare

    out = tmp_path / "notes.onnx"
    out.write_text("mine")
    with pytest.raises(OutputPathError, match="did not write"):
        check_replace(out, prepare(_config(out=out)), force=False)
    assert out.read_text() == "mine"


def test_output_under_a_regular_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputPathError, match="is a file"):
        check_writable(blocker / "sub" / "out.onnx")
    with pytest.raises(OutputPathError, match="folder"):
        check_writable(tmp_path)


def test_check_replace_messages_and_what_it_opens(tmp_path):
    """Each refusal's whole line (issue 33: mutmut survivors of export/compare.check_replace);
    a folder at PATH is not edgepe's; the artifact's descriptor is closed after the comparison."""
    import os
    import shutil

    from edgepe.export import prepare

    out = tmp_path / "g.onnx"
    prepared = prepare(_config(out=out))
    write_artifact(out, prepared.write, prepared.manifest)
    fds = len(os.listdir("/proc/self/fd"))
    assert check_replace(out, prepare(_config(out=out)), force=False) is True
    assert len(os.listdir("/proc/self/fd")) == fds  # no descriptor left open
    other = prepare(ExportConfig(scheme=resolve("gray", 32), mode="compute", out=out))
    with pytest.raises(OutputPathError) as exc:
        check_replace(out, other, force=False)
    assert str(exc.value) == (f"{str(out)!r} exists and is an artifact made from other inputs; "
                              "pass --force to replace it")
    # a folder where the artifact was (its manifest beside it, or not): not edgepe's
    out.unlink()
    out.mkdir()
    for _ in range(2):
        with pytest.raises(OutputPathError) as exc:
            check_replace(out, prepared, force=False)
        assert str(exc.value) == (f"{str(out)!r} exists and is a file edgepe did not write; "
                                  "pass --force to replace it")
        manifest_path(out).unlink(missing_ok=True)
    shutil.rmtree(out)
    assert check_replace(out, prepared, force=False) is False  # nothing there: write it
