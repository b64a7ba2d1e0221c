"""The export contract's checks called directly (edgepe.contract.config; issue 33: the mutmut
survivors of that module; tests/test_hostile_outputs.py drives the same rules through the CLI).
Every option's range at its edges (at, one below, one above), every output-path refusal's whole
line, the manifest slot, inputs never overwritten, and the atomic write of a non-artifact file.
"""

from __future__ import annotations

import os

import pytest

from edgepe.contract import config as cfg
from edgepe.contract.errors import BadParameterError, OutputPathError
from edgepe.schemes import resolve


def _config(**kw) -> cfg.ExportConfig:
    return cfg.ExportConfig(scheme=resolve("gray", 16), **{"mode": "compute", **kw})


def _refusal(call, error=BadParameterError) -> str:
    with pytest.raises(error) as exc:
        call()
    return str(exc.value)


# ---- option values ------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "option", "allowed"), [
    ("format", "zip", "--format", "onnx, npy, bin, c, pte"),
    ("dtype", "int4", "--dtype", "float32, float16, uint8, bit"),
    ("quantize", "int4", "--quantize", "none, int8"),
    ("lowering", "fast", "--lowering", "bitwise, arith, arith32, float, trunc, clip32"),
    ("int8_runtime", "jit", "--int8-runtime", "fold, live"),
    ("mode", "eager", "--mode", "compute, table, sliced"),
    ("quant_granularity", "row", "--quant-granularity", "channel, tensor"),
])
def test_each_choice_is_refused_outside_its_list(field, value, option, allowed):
    assert _refusal(lambda: cfg.validate_choices(_config(**{field: value}))) == (
        f"{option} {value!r} is not one of: {allowed}")


def test_a_mode_the_scheme_lacks_is_refused():
    config = cfg.ExportConfig(scheme=resolve("alibi", 16, heads=2), mode="compute")
    modes = ", ".join(config.scheme.spec.modes)
    config = cfg.ExportConfig(scheme=resolve("alibi", 16, heads=2), mode="sliced")
    assert _refusal(lambda: cfg.validate_choices(config)) == (
        f"scheme 'alibi' has no sliced mode; it has: {modes}")


def test_checkpoint_options_go_together():
    assert _refusal(lambda: cfg.validate_choices(_config(checkpoint_key="pos"))) == (
        "--checkpoint-key names a prefix inside --checkpoint FILE; give --checkpoint too")
    assert _refusal(lambda: cfg.validate_choices(_config(checkpoint_param="w"))) == (
        "--checkpoint-param names a tensor inside --checkpoint FILE; give --checkpoint too")
    binary = cfg.ExportConfig(scheme=resolve("binary", 16, d_model=8), checkpoint="c.pt",
                              checkpoint_param="w", checkpoint_key="pos")
    assert _refusal(lambda: cfg.validate_choices(binary)) == (
        "--checkpoint-param names one tensor by its full name; --checkpoint-key (a prefix) does "
        "not apply with it")
    assert _refusal(lambda: cfg.validate_choices(_config(checkpoint="c.pt"))) == (
        "scheme 'gray' has no learned weights: --checkpoint does not apply")
    cfg.validate_choices(cfg.ExportConfig(scheme=resolve("binary", 16, d_model=8),
                                          checkpoint="c.pt", checkpoint_key="pos"))


@pytest.mark.parametrize(("field", "ok", "bad", "message"), [
    ("seed", (0, 2**63 - 1), (-1, 2**63), "--seed must be between 0 and 9223372036854775807, got "),
    ("c_align", (1, 2, 8192), (0, 3, 16384, 8191),
     "--c-align must be a power of two from 1 to 8192 bytes, got "),
    ("opset", (1, 30), (0, 31), "--opset must be between 1 and 30, got "),
    ("max_table_bytes", (1,), (0, -5), "--max-table-bytes must be positive, got "),
])
def test_numeric_options_at_their_edges(field, ok, bad, message):
    for value in ok:
        cfg.validate_choices(_config(**{field: value}))
    for value in bad:
        assert _refusal(lambda v=value: cfg.validate_choices(_config(**{field: v}))) == (
            f"{message}{value}")


def test_the_default_opset_is_18_and_19_for_an_int8_graph():
    assert _config().opset == 18 == cfg.DEFAULT_OPSET
    assert _config(quantize="int8").opset == cfg.INT8_OPSET == 19
    assert _config(quantize="int8", format="npy", mode="table").opset == 18
    assert _config(quantize="int8", opset=19).opset == 19


# ---- output paths -------------------------------------------------------------------------------


def test_a_writable_path_passes_and_missing_folders_are_fine(tmp_path):
    cfg.check_writable(tmp_path / "a" / "b" / "pe.onnx")
    assert cfg._existing_ancestor(tmp_path / "a" / "b" / "pe.onnx") == tmp_path


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    out = tmp_path / os.fsdecode(b"pe-\xff.onnx")
    assert _refusal(lambda: cfg.check_writable(out, "--json"), OutputPathError) == (
        f"--json {str(out)!r}: the name is not valid UTF-8; choose a UTF-8 file name")


def test_a_path_under_a_file_or_at_a_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    out = tmp_path / "f" / "sub" / "pe.onnx"
    assert _refusal(lambda: cfg.check_writable(out), OutputPathError) == (
        f"cannot write {str(out)!r}: {str(tmp_path / 'f')!r} is a file, not a folder")
    (tmp_path / "d").mkdir()
    assert _refusal(lambda: cfg.check_writable(tmp_path / "d"), OutputPathError) == (
        f"cannot write {str(tmp_path / 'd')!r}: it is a folder")


def test_a_fifo_is_never_written(tmp_path):
    fifo = tmp_path / "p.onnx"
    os.mkfifo(fifo)
    message = (f"cannot write {str(fifo)!r}: it is not a regular file (a device, FIFO or "
               "socket); edgepe never writes into one")
    assert _refusal(lambda: cfg.check_writable(fifo), OutputPathError) == message
    link = tmp_path / "l.onnx"
    os.symlink(fifo, link)  # through a symlink too
    assert "it is not a regular file" in _refusal(lambda: cfg.check_writable(link),
                                                  OutputPathError)
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling.onnx")
    cfg.check_writable(tmp_path / "dangling.onnx")  # a rename replaces a dangling link


def test_the_name_may_have_name_max_bytes_and_its_manifest_needs_five_more(tmp_path):
    room = os.pathconf(tmp_path, "PC_NAME_MAX")
    assert cfg._name_max(tmp_path) == room == 255
    cfg.check_writable(tmp_path / ("n" * (room - 5) + ".onnx"))  # room bytes: fits
    long = tmp_path / ("n" * (room - 4) + ".onnx")
    # real bug found here (issue 33): a name over NAME_MAX made check_writable's stat fail with
    # ENAMETOOLONG, an internal error (exit 3) instead of this line (exit 2)
    assert _refusal(lambda: cfg.check_writable(long), OutputPathError) == (
        f"cannot write {str(long)!r}: the file name is longer than {room} bytes")
    # the manifest adds '.json': room - 5 bytes at most
    cfg.check_manifest_slot(tmp_path / ("n" * (room - 10) + ".onnx"), force=False)
    over = tmp_path / ("n" * (room - 9) + ".onnx")
    assert _refusal(lambda: cfg.check_manifest_slot(over, force=False), OutputPathError) == (
        f"cannot write {str(over)!r}: the file name is longer than {room - 5} bytes (its "
        "manifest adds '.json')")
    # bytes, not characters: a 2-byte character counts twice
    wide = tmp_path / ("\u00e9" * ((room - 5) // 2) + "x.onnx")
    assert len(os.fsencode(wide.name)) == room + 1 and len(wide.name) < room
    assert "longer than" in _refusal(lambda: cfg.check_writable(wide), OutputPathError)


def test_name_max_falls_back_to_255(tmp_path):
    assert cfg._name_max(tmp_path / "missing") == 255


def test_the_manifest_slot(tmp_path):
    out = tmp_path / "pe.onnx"
    json_path = tmp_path / "pe.onnx.json"
    cfg.check_manifest_slot(out, force=False)  # nothing there
    json_path.mkdir()
    assert _refusal(lambda: cfg.check_manifest_slot(out, force=True), OutputPathError) == (
        f"cannot write {str(json_path)!r}, the manifest of {str(out)!r}: it is a folder")
    json_path.rmdir()
    os.mkfifo(json_path)
    assert "it is not a regular file" in _refusal(
        lambda: cfg.check_manifest_slot(out, force=True), OutputPathError)
    json_path.unlink()
    json_path.write_text("{}")  # a manifest of nothing
    assert _refusal(lambda: cfg.check_manifest_slot(out, force=False), OutputPathError) == (
        f"{str(json_path)!r} exists and is not the manifest of an artifact at {str(out)!r}; pass "
        "--force to replace it")
    cfg.check_manifest_slot(out, force=True)
    out.write_text("x")  # beside an artifact: judged with it, not here
    cfg.check_manifest_slot(out, force=False)


def test_an_output_is_never_an_input_or_an_inputs_manifest(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_text("m")
    (tmp_path / "m.onnx.json").write_text("{}")
    for out, source in ((model, model), (tmp_path / "m.onnx.json", tmp_path / "m.onnx.json")):
        assert _refusal(lambda o=out: cfg.check_not_input(o, [model], "--json"),
                        OutputPathError) == (
            f"--json {str(out)!r} is the input {str(source)!r}; write somewhere else")
    link = tmp_path / "link.onnx"
    os.symlink(model, link)
    assert "is the input" in _refusal(lambda: cfg.check_not_input(link, [model]),
                                      OutputPathError)
    # a path that does not exist yet is compared by its absolute name
    fresh = tmp_path / "new.onnx"
    assert "is the input" in _refusal(
        lambda: cfg.check_not_input(fresh, [tmp_path / "x" / ".." / "new.onnx"]),
        OutputPathError)
    cfg.check_not_input(tmp_path / "other.onnx", [model])
    assert cfg._same_file(fresh, tmp_path / "." / "new.onnx") is True
    assert cfg._same_file(fresh, tmp_path / "other.onnx") is False


def test_an_existing_output_needs_force(tmp_path):
    out = tmp_path / "r.json"
    cfg.check_output(out, [], force=False)
    out.write_text("old")
    assert _refusal(lambda: cfg.check_output(out, [], force=False, option="--json"),
                    OutputPathError) == f"--json {str(out)!r} exists; pass --force to replace it"
    cfg.check_output(out, [], force=True)
    link = tmp_path / "l.json"
    os.symlink(tmp_path / "nowhere", link)
    assert _refusal(lambda: cfg.check_output(link, [], force=False), OutputPathError) == (
        f"--out {str(link)!r} is a symlink; pass --force to replace it")


def test_write_output_writes_bytes_or_a_writer_atomically(tmp_path):
    import hashlib

    out = tmp_path / "sub" / "r.json"
    assert cfg.write_output(out, b"{}", [], force=False) == hashlib.sha256(b"{}").hexdigest()
    assert out.read_bytes() == b"{}"
    assert _refusal(lambda: cfg.write_output(out, b"x", [], force=False), OutputPathError)
    digest = cfg.write_output(out, lambda f: f.write(b"new"), [], force=True)
    assert out.read_bytes() == b"new" and digest == hashlib.sha256(b"new").hexdigest()
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "l.json"
    os.symlink(target, link)
    cfg.write_output(link, b"over", [], force=True)  # replaces the link, not what it points to
    assert target.read_text() == "keep" and not link.is_symlink() and link.read_text() == "over"
