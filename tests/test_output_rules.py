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
    ("format", "zip", "--format", "onnx, npy, bin, c, pte, tflite"),
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


# ---- what a config records (the manifest's inputs and fields), names and formats ---------------


def test_inputs_record_each_option_only_where_it_applies():
    gray = _config()
    assert gray.inputs() == {
        "scheme": "gray", "max_len": 16, "d_model": 5, "heads": None, "params": {},
        "mode": "compute", "format": "onnx", "dtype": "float32", "quantize": "none",
        "quant_granularity": None, "lowering": "bitwise", "seed": 0, "checkpoint_sha256": None,
        "opset": 18, "c_prefix": None, "c_align": None}
    c = cfg.ExportConfig(scheme=resolve("binary", 16, d_model=8), mode="table", format="c",
                         quantize="int8", quant_granularity="tensor", checkpoint="c.pt",
                         checkpoint_sha256="ab", checkpoint_param="w", seed=3, c_prefix="pe",
                         c_align=64, lowering="arith", extra={"z": 1})
    assert c.inputs() == {
        "scheme": "binary", "max_len": 16, "d_model": 8, "heads": None,
        "params": {"dropout": 0.0}, "mode": "table", "format": "c", "dtype": "float32",
        "quantize": "int8", "quant_granularity": "tensor", "lowering": None, "seed": 3,
        "checkpoint_sha256": "ab", "opset": None, "c_prefix": "pe", "c_align": 64,
        "checkpoint_param": "w", "z": 1}
    key = cfg.ExportConfig(scheme=resolve("binary", 16, d_model=8), checkpoint="c.pt",
                           checkpoint_key="pos", quantize="int8", int8_runtime="live",
                           mode="sliced", lowering="float")
    inputs = key.inputs()
    assert (inputs["checkpoint_key"], inputs["int8_runtime"], inputs["lowering"],
            inputs["opset"]) == ("pos", "live", "float", 19)
    assert "int8_runtime" not in _config(quantize="int8", format="npy", mode="table").inputs()
    assert key.int8_graph and not _config(quantize="int8", format="npy").int8_graph
    assert not _config(format="onnx").int8_graph


def test_base_manifest_fields():
    gray = cfg.base_manifest(_config(), [None, 4], "float32")
    assert {k: v for k, v in gray.items() if k not in ("inputs", "edgepe_version")} == {
        "scheme": "gray", "params": {}, "max_len": 16, "d_model": 5, "heads": None,
        "kind": "pe", "format": "onnx", "mode": "compute", "dtype": "float32",
        "shape": [None, 4], "quant": None, "lowering": "bitwise", "seed": 0, "checkpoint": None,
        "positions": {"arity": None, "out_of_range": "wrap", "limit": None},
        "tolerance": {"rtol": 0.0, "atol": 0.0}}
    assert gray["inputs"] == _config().inputs()
    from edgepe import __version__

    assert gray["edgepe_version"] == __version__
    c = cfg.ExportConfig(scheme=resolve("binary", 16, d_model=8), mode="table", format="npy",
                         checkpoint="c.pt", checkpoint_sha256="ab", checkpoint_key="pos", seed=3)
    m = cfg.base_manifest(c, (16, 8), "int8")
    assert m["shape"] == [16, 8] and m["dtype"] == "int8" and m["lowering"] is None
    assert m["checkpoint"] == {"path": "c.pt", "sha256": "ab", "key": "pos"}
    assert m["positions"] == {"arity": None, "out_of_range": "clamp", "limit": None}
    assert m["tolerance"] == {"rtol": 1e-6, "atol": 1e-6} and m["seed"] == 3
    # the scheme's (rtol, atol), each in its place: sinusoidal's is (0, 1e-6)
    sinusoidal = cfg.ExportConfig(scheme=resolve("sinusoidal", 16, d_model=8))
    assert cfg.base_manifest(sinusoidal, [None, 8], "float32")["tolerance"] == {
        "rtol": 0.0, "atol": 1e-6}
    param = cfg.ExportConfig(scheme=resolve("learned", 16, d_model=8), checkpoint="c.pt",
                             checkpoint_sha256="ab", checkpoint_param="wpe")
    assert cfg.base_manifest(param, [None, 8], "float32")["checkpoint"] == {
        "path": "c.pt", "sha256": "ab", "param": "wpe"}


def test_position_limit_is_the_smaller_of_the_schemes_and_the_lowerings():
    assert cfg.position_limit(_config()) is None  # gray: no limit, bitwise: exact everywhere
    assert cfg.position_limit(_config(lowering="float")) == 2**24
    assert cfg.position_limit(_config(lowering="arith32")) == 2**31 - 1
    assert cfg.position_limit(_config(lowering="float", format="c")) is None  # not a graph
    assert cfg.position_limit(_config(lowering="float", mode="table")) is None
    sinusoidal = cfg.ExportConfig(scheme=resolve("sinusoidal", 16, d_model=8))
    assert cfg.position_limit(sinusoidal) == 2**24
    assert cfg.position_limit(cfg.ExportConfig(scheme=resolve("sinusoidal", 16, d_model=8),
                                               lowering="arith32")) == 2**24
    assert cfg.position_limit(_config(lowering="clip32", mode="sliced")) == 2**24


@pytest.mark.parametrize(("args", "want"), [
    (("binary", "compute", "onnx", "int8", "fold"), "channel"),
    (("binary", "table", "onnx", "int8", "live"), "tensor"),
    (("sinusoidal-learned", "compute", "onnx", "int8", "live"), "tensor"),
    (("binary", "compute", "onnx", "int8", "live"), "channel"),  # not a gathered table
    (("binary", "table", "npy", "int8", "live"), "channel"),  # not a graph
    (("binary", "table", "onnx", "none", "live"), "channel"),  # not int8
    (("binary", "table", "onnx", "int8", "fold"), "channel"),  # folded at load
])
def test_default_granularity(args, want):
    assert cfg.default_granularity(*args) == want


@pytest.mark.parametrize(("kw", "name"), [
    ({}, "gray-compute-L16-d5.onnx"),
    ({"format": "npy", "mode": "table"}, "gray-table-L16-d5.npy"),
    ({"format": "c", "mode": "table", "dtype": "bit"}, "gray-table-L16-d5-bit.h"),
    ({"lowering": "arith"}, "gray-compute-L16-d5-arith.onnx"),
    ({"lowering": "arith", "mode": "table", "format": "bin"}, "gray-table-L16-d5.bin"),
    ({"quantize": "int8"}, "gray-compute-L16-d5-int8.onnx"),
    ({"quantize": "int8", "int8_runtime": "live"}, "gray-compute-L16-d5-int8-live.onnx"),
    ({"quantize": "int8", "int8_runtime": "live", "format": "pte"},
     "gray-compute-L16-d5-int8.pte"),
    ({"extra": {"b": "8,7", "a": "x"}}, "gray-compute-L16-d5-x-8-7.onnx"),
])
def test_default_out_names(kw, name):
    assert cfg.default_out(_config(**kw)) == cfg.Path("models") / name
    assert cfg.default_out(_config(**kw), root=cfg.Path("/o")) == cfg.Path("/o") / name


def test_default_out_of_a_bias_names_its_heads():
    alibi = cfg.ExportConfig(scheme=resolve("alibi", 8, heads=4), mode="table")
    assert cfg.default_out(alibi).name == "alibi-table-L8-h4.onnx"


def test_infer_format():
    P = cfg.Path
    assert cfg.infer_format(None, None) == "onnx" and cfg.infer_format(None, "c") == "c"
    assert cfg.infer_format(P("t.NPY"), None) == "npy"  # the extension in any case
    assert cfg.infer_format(P("a/t.h"), "c") == "c"
    assert cfg.infer_format(P("t.pte"), "pte") == "pte"
    known = ".onnx (onnx), .npy (npy), .bin (bin), .h (c), .pte (pte), .tflite (tflite)"
    assert _refusal(lambda: cfg.infer_format(P("pe.npz"), None)) == (
        f"--out 'pe.npz' ends in '.npz', which names no format edgepe writes; use one of {known}, "
        "or --out FOLDER/ for the default name")
    assert _refusal(lambda: cfg.infer_format(P("pe"), "onnx")) == (
        f"--out 'pe' has no extension, which names no format edgepe writes; use one of {known}, "
        "or --out FOLDER/ for the default name")
    assert _refusal(lambda: cfg.infer_format(P("pe.c"), "c")) == (
        f"--out 'pe.c' ends in '.c', which names no format edgepe writes (--format c writes a "
        f"header: name it .h); use one of {known}, or --out FOLDER/ for the default name")
    assert _refusal(lambda: cfg.infer_format(P("g.onnx"), "c")) == (
        "--format c writes .h files, but --out 'g.onnx' ends in .onnx (--format onnx); drop "
        "--format or rename the output")
    assert cfg.infer_format(P("g.onnx"), "zip") == "zip"  # an unknown one is refused later


def test_with_out_and_sha256_bytes(tmp_path):
    import hashlib

    config = _config()
    moved = config.with_out(str(tmp_path / "x.onnx"))
    assert moved.out == tmp_path / "x.onnx" and isinstance(moved.out, cfg.Path)
    assert moved.scheme == config.scheme and config.out is None
    assert cfg.sha256_bytes(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_a_filesystems_own_name_max_is_honoured(tmp_path, monkeypatch):
    """eCryptfs allows 143-byte names: the limit is the folder's PC_NAME_MAX, not 255."""
    real = os.pathconf

    def pathconf(path, name):
        return 143 if name == "PC_NAME_MAX" else real(path, name)

    monkeypatch.setattr(os, "pathconf", pathconf)
    assert cfg._name_max(tmp_path) == 143
    long = tmp_path / ("n" * 139 + ".onnx")
    assert _refusal(lambda: cfg.check_writable(long), OutputPathError) == (
        f"cannot write {str(long)!r}: the file name is longer than 143 bytes")


def test_a_folder_that_is_not_writable_is_refused(tmp_path, monkeypatch):
    """(Checked with os.access; faked here, since root may write anywhere.)"""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if p == tmp_path else real(p, mode))
    out = tmp_path / "sub" / "pe.onnx"
    assert _refusal(lambda: cfg.check_writable(out), OutputPathError) == (
        f"cannot write {str(out)!r}: {str(tmp_path)!r} is not writable")


def test_the_option_named_in_each_refusal(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_text("m")
    bad = tmp_path / os.fsdecode(b"\xff.json")
    for call, option in (
            (lambda: cfg.check_writable(bad), "--out"),
            (lambda: cfg.check_output(bad, [], False, "--json"), "--json"),
            (lambda: cfg.write_output(bad, b"", [], False, "--plot"), "--plot"),
            (lambda: cfg.write_output(bad, b"", [], False), "--out"),
            (lambda: cfg.check_not_input(model, [model]), "--out"),
            (lambda: cfg.check_output(model, [model], True, "--json"), "--json"),
            (lambda: cfg.write_output(model, b"", [model], True, "--plot"), "--plot"),
            (lambda: cfg.check_output(model, [], False, "--json"), "--json"),
            (lambda: cfg.write_output(model, b"", [], False, "--plot"), "--plot"),
            (lambda: cfg.write_output(model, b"", [], False), "--out")):
        assert _refusal(call, OutputPathError).startswith(f"{option} '"), option
    assert model.read_text() == "m"
