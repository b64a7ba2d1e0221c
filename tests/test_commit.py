"""The commit protocol's pieces called directly (edgepe.contract.commit; issue 33: the mutmut
survivors of that module; tests/test_hostile_outputs.py kills exports between the renames in
subprocesses, which mutmut does not observe). Names derived from the target's hash, the lock
(held, re-entrant, removed), the roll-forward of a journal each way, the temporary files'
mode and cleanup, and each one-line error.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from edgepe.contract import commit
from edgepe.contract.errors import OutputPathError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- names --------------------------------------------------------------------------------------


def test_names_derive_from_the_sha256_of_the_targets_file_name(tmp_path):
    out = tmp_path / "pe.onnx"
    h = _sha(b"pe.onnx")[:16]
    assert commit.temp_prefix(out) == f".edgepe-tmp-{h}-"
    assert commit.journal_path(out) == tmp_path / f".edgepe-tmp-{h}-commit"
    assert commit.lock_path(out) == tmp_path / f".edgepe-lock-{h}"
    assert commit.manifest_of(out) == tmp_path / "pe.onnx.json"
    assert commit.temp_prefix(tmp_path / "other" / "pe.onnx") == commit.temp_prefix(out)


def test_a_non_utf8_name_hashes_its_own_bytes(tmp_path):
    raw = b"pe-\xff.onnx"
    name = os.fsdecode(raw)  # surrogate-escaped by Python
    assert commit.temp_prefix(tmp_path / name) == f".edgepe-tmp-{_sha(raw)[:16]}-"


# ---- the lock -----------------------------------------------------------------------------------


def test_the_lock_file_exists_while_held_and_is_removed_after(tmp_path):
    out = tmp_path / "new" / "pe.onnx"  # the folder is made
    lock = commit.lock_path(out)
    with commit.target_lock(out):
        assert lock.is_file() and lock in commit._HELD
        with commit.target_lock(out):  # re-entrant within the process
            assert lock.is_file()
        assert lock.is_file()  # the inner exit neither releases nor removes it
    assert not lock.exists() and lock not in commit._HELD
    assert stat.S_IMODE(os.stat(out.parent).st_mode) & 0o700 == 0o700


def test_a_lock_held_elsewhere_is_refused_in_one_line(tmp_path):
    out = tmp_path / "pe.onnx"
    fd = os.open(commit.lock_path(out), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: another holder
        with pytest.raises(OutputPathError) as exc, commit.target_lock(out):
            pass
        assert str(exc.value) == (f"another export is writing {str(out)!r}; try again when it "
                                  "has finished")
        with pytest.raises(OutputPathError) as exc, commit.target_lock(out, who="graft"):
            pass
        assert str(exc.value).startswith(f"another graft is writing {str(out)!r}; ")
        assert commit.lock_path(out).exists()  # the holder's file is left alone
    finally:
        os.close(fd)
    with commit.target_lock(out):  # free again once its holder is gone
        pass


def test_a_lock_where_no_folder_can_be_made_is_cannot_write(tmp_path):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "pe.onnx"
    with pytest.raises(OutputPathError) as exc, commit.target_lock(out):
        pass
    assert str(exc.value) == f"cannot write {str(out)!r}: File exists"


def test_the_lock_is_not_followed_through_a_symlink(tmp_path):
    out = tmp_path / "pe.onnx"
    target = tmp_path / "elsewhere"
    os.symlink(target, commit.lock_path(out))
    with pytest.raises(OutputPathError, match="cannot write .*Too many levels of symbolic links"):
        with commit.target_lock(out):
            pass
    assert not target.exists()


# ---- the journal: roll forward, roll back -------------------------------------------------------


def _pair(tmp_path, artifact: bytes, manifest: dict):
    out = tmp_path / "pe.bin"
    out.write_bytes(artifact)
    commit.manifest_of(out).write_text(json.dumps(manifest))
    return out


def test_a_journal_recording_the_artifacts_sha_rolls_forward(tmp_path):
    out = _pair(tmp_path, b"new", {"sha256": _sha(b"old")})
    journal = commit.journal_path(out)
    journal.write_text(json.dumps({"sha256": _sha(b"new"), "v": 2}))
    commit.recover(out)
    assert json.loads(commit.manifest_of(out).read_text()) == {"sha256": _sha(b"new"), "v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.bin", "pe.bin.json"]


@pytest.mark.parametrize("journal", [
    json.dumps({"sha256": _sha(b"new")}),  # the artifact rename did not happen
    "{not json", json.dumps(["a list"]), json.dumps({"sha256": 7}), json.dumps({}), ""])
def test_a_journal_not_matching_the_artifact_is_dropped(tmp_path, journal):
    out = _pair(tmp_path, b"old", {"sha256": _sha(b"old")})
    commit.journal_path(out).write_text(journal)
    commit.recover(out)
    assert json.loads(commit.manifest_of(out).read_text()) == {"sha256": _sha(b"old")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.bin", "pe.bin.json"]


def test_a_journal_is_dropped_when_the_artifact_is_missing_or_not_a_file(tmp_path):
    out = tmp_path / "pe.bin"
    journal = commit.journal_path(out)
    journal.write_text(json.dumps({"sha256": _sha(b"")}))
    commit.recover(out)  # no artifact: nothing to roll forward to
    assert list(tmp_path.iterdir()) == []
    out.mkdir()
    journal.write_text(json.dumps({"sha256": _sha(b"")}))
    commit.recover(out)  # a folder at PATH is not the artifact
    assert [p.name for p in tmp_path.iterdir()] == ["pe.bin"]


def test_the_journal_is_read_up_to_its_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "JOURNAL_READ_CAP", 90)
    text = json.dumps({"sha256": _sha(b"new")})  # 78 bytes
    for pad, forward in ((90 - len(text), True), (91 - len(text), False)):
        out = _pair(tmp_path, b"new", {"sha256": _sha(b"old")})
        # the closing brace at byte 90 is read; at byte 91 it is cut off (unreadable: dropped)
        commit.journal_path(out).write_text(text[:-1] + " " * pad + "}")
        commit.recover(out)
        assert (json.loads(commit.manifest_of(out).read_text())["sha256"] == _sha(b"new")) is (
            forward)
        assert not commit.journal_path(out).exists()
    # the cap counts bytes, not characters: 90 characters, 96 bytes (three 3-byte ones)
    wide = text[:-1] + ', "n": "\u20ac\u20ac\u20ac"}'
    assert len(wide) <= 90 < len(wide.encode())
    out = _pair(tmp_path, b"new", {"sha256": _sha(b"old")})
    commit.journal_path(out).write_bytes(wide.encode())
    commit.recover(out)
    assert json.loads(commit.manifest_of(out).read_text())["sha256"] == _sha(b"old")


def test_settling_removes_only_this_targets_temporary_files(tmp_path):
    out = tmp_path / "pe.bin"
    mine = tmp_path / (commit.temp_prefix(out) + "abc")
    theirs = tmp_path / (commit.temp_prefix(tmp_path / "other.bin") + "abc")
    for p in (mine, theirs):
        p.write_text("x")
    with commit.target_lock(out):
        pass
    assert not mine.exists() and theirs.exists()


def test_recover_without_a_journal_takes_no_lock(tmp_path):
    out = tmp_path / "pe.bin"
    fd = os.open(commit.lock_path(out), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        commit.recover(out)  # nothing to settle: a held lock does not matter
        commit.journal_path(out).write_text("{}")
        with pytest.raises(OutputPathError, match="another export is writing"):
            commit.recover(out)  # mid-commit elsewhere: refused
    finally:
        os.close(fd)


def test_a_large_artifact_is_hashed_whole(tmp_path):
    data = os.urandom(3 << 20)  # three blocks of 1 MiB
    (tmp_path / "a").write_bytes(data)
    assert commit._file_sha(tmp_path / "a") == _sha(data)
    assert commit._file_sha(tmp_path / "missing") is None


# ---- writing ------------------------------------------------------------------------------------


def test_write_pair_commits_the_artifact_and_its_manifest(tmp_path):
    out = tmp_path / "pe.bin"
    with commit.target_lock(out):
        commit.write_pair(out, commit.hashed(lambda f: f.write(b"data")),
                          lambda sha: json.dumps({"sha256": sha}).encode())
    assert out.read_bytes() == b"data"
    assert json.loads(commit.manifest_of(out).read_text()) == {"sha256": _sha(b"data")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.bin", "pe.bin.json"]


def test_write_pair_leaves_nothing_when_the_manifest_fails(tmp_path):
    out = tmp_path / "pe.bin"

    def bad(sha):
        raise ValueError("no manifest")

    with commit.target_lock(out), pytest.raises(ValueError, match="no manifest"):
        commit.write_pair(out, commit.hashed(lambda f: f.write(b"data")), bad)
    assert list(tmp_path.iterdir()) == []


def test_write_pair_over_a_folder_settles_back_and_says_cannot_write(tmp_path):
    out = tmp_path / "pe.bin"
    out.mkdir()
    (out / "keep").write_text("x")  # a non-empty folder: the artifact rename fails
    with commit.target_lock(out), pytest.raises(OutputPathError) as exc:
        commit.write_pair(out, commit.hashed(lambda f: f.write(b"data")),
                          lambda sha: b"{}")
    assert str(exc.value) == f"cannot write {str(out)!r}: Is a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pe.bin"]  # no journal, no temps


def test_write_temp_makes_a_file_of_the_usual_mode_beside_the_target(tmp_path):
    out = tmp_path / "pe.bin"
    for umask, mode in ((0o027, 0o640), (0o002, 0o664)):
        old = os.umask(umask)
        try:
            tmp, result = commit.write_temp(out, lambda f: f.write(b"abc"))
            assert commit._umask() == umask  # reading the umask leaves it as it was
        finally:
            os.umask(old)
        assert result == 3 and Path(tmp).read_bytes() == b"abc"
        assert Path(tmp).parent == tmp_path and Path(tmp).name.startswith(
            commit.temp_prefix(out))
        assert stat.S_IMODE(os.stat(tmp).st_mode) == mode  # 0o666 less the umask, not 0o600


def test_write_temp_removes_its_file_when_write_fails(tmp_path):
    out = tmp_path / "pe.bin"

    def oserror(f):
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputPathError) as exc:
        commit.write_temp(out, oserror)
    assert str(exc.value) == f"cannot write {str(out)!r}: No space left on device"
    with pytest.raises(KeyError):
        commit.write_temp(out, lambda f: {}["x"])
    assert list(tmp_path.iterdir()) == []


def test_write_temp_in_a_missing_folder_is_cannot_write(tmp_path):
    out = tmp_path / "missing" / "pe.bin"
    with pytest.raises(OutputPathError) as exc:
        commit.write_temp(out, lambda f: None)
    assert str(exc.value) == f"cannot write {str(out)!r}: No such file or directory"


def test_cannot_write_falls_back_to_the_exception_text():
    assert str(commit.cannot_write(Path("a"), OSError("odd"))) == "cannot write 'a': odd"


def test_atomic_write_returns_the_sha256_and_makes_the_folder(tmp_path):
    import numpy as np

    out = tmp_path / "new" / "deeper" / "t.bin"
    values = np.arange(5, dtype=np.int16)  # not bytes: written through a byte view
    assert commit.atomic_write(out, lambda f: f.write(values)) == _sha(values.tobytes())
    assert out.read_bytes() == values.tobytes()
    assert [p.name for p in out.parent.iterdir()] == ["t.bin"]


def test_atomic_write_over_a_folder_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "t.bin"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(OutputPathError) as exc:
        commit.atomic_write(out, lambda f: f.write(b"x"))
    assert str(exc.value) == f"cannot write {str(out)!r}: Is a directory"
    assert [p.name for p in tmp_path.iterdir()] == ["t.bin"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError) as exc:
        commit.atomic_write(tmp_path / "file" / "t.bin", lambda f: None)
    assert str(exc.value) == f"cannot write {str(tmp_path / 'file' / 't.bin')!r}: File exists"


def test_the_hashing_writer_returns_what_the_file_wrote(tmp_path):
    with open(tmp_path / "f", "wb") as raw:
        w = commit._HashingWriter(raw)
        assert w.write(b"ab") == 2 and w.write(bytearray(b"cde")) == 3
    assert w.hexdigest() == _sha(b"abcde")
    assert (tmp_path / "f").read_bytes() == b"abcde"
