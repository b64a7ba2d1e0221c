"""Tests that kill survivors of the library mutation run (scripts/mutation.py, docs/mutation.md).

Each test names the behaviour it pins; the survivors they were written against are listed in
docs/mutation.md's history (git log of docs/mutation.json).
"""

from __future__ import annotations

import fcntl
import os

import pytest

from edgepe import errors


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


# ---- edgepe.manifest: every message, every flag, exact bytes -----------------------------------

from edgepe import manifest  # noqa: E402
from edgepe.errors import ArtifactError  # noqa: E402


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
