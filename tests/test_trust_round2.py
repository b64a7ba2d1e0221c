"""Hostile inputs, round 2 (issue 30), written as an attacker would: a table of cases, grouped.

- forged foreign build: an artifact marked as another edgepe version's (no byte-identical
  rebuild), whose manifest claims what its inputs do not give (an int8 scale that clips the
  reference to zero, a clamp where the scheme wraps, float16, a looser tolerance) or whose
  graph is wrong only past max_len;
- graft's proof: a PE artifact whose manifest raises its own tolerance;
- the output rule: --json/--out through a symlink, over an existing file, over the command's
  own inputs (--force or not);
- resources: a 3 KB graph whose Expand or Range makes GiBs, sizes from input values, graft's
  lengths;
- malformed manifests: params, scheme and inputs of every wrong JSON type, 4000-digit integers,
  overflowing numbers, in verify, inspect, run, load and graft.

Every case runs one command in ONE process (``tests/_trust_driver.py``, as tests/test_trust.py
does) and asserts its exit code, one stderr line matching what it must say, and that nothing in
its folder was written, removed or changed (names, sizes, mtimes and sha256 before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from _hostile import binary as _binary
from _hostile import check_outcome as _check_outcome
from _hostile import export_to as _export
from _hostile import manifest_of as _manifest
from _hostile import rerouted as _rerouted
from _hostile import run_plan as _run_plan
from _hostile import write_manifest as _write_manifest
from onnx import helper, numpy_helper

from edgepe.contract.manifest import path_for

BIG = int("7" * 4000)  # a 4000-digit integer (Python parses it; edgepe must refuse it)


@dataclass
class Case:
    id: str
    group: str
    make: Callable[[Path], list[str]]  # builds the hostile input in a folder -> the argv
    exit: int
    says: str  # a regular expression the one stderr line matches


# -- helpers -------------------------------------------------------------------------------------


def _foreign(path: Path, edit: Callable[[dict], None] | None = None) -> None:
    """What a forger does: re-sign, mark as another edgepe's build, edit the manifest."""
    manifest = _manifest(path)
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["edgepe_version"] = "0.0.0-other"
    if edit is not None:
        edit(manifest)
    _write_manifest(path, manifest)


def _verify(path: Path, *more: str) -> list[str]:
    return ["verify", str(path), *more]


def _command(path: Path, command: str, folder: Path) -> list[str]:
    return {"verify": ["verify", str(path), "--providers", "cpu"],
            "inspect": ["inspect", str(path)], "load": ["load", str(path)],
            "run": ["run", str(path), "--positions", "0:4"],
            "graft": ["graft", str(_binary(folder, name="model.onnx")), "--pe", str(path),
                      "--at", "pe", "--out", str(folder / "out.onnx")]}[command]


# -- forged foreign builds -----------------------------------------------------------------------

def _int8_zeros(folder: Path, scale: float | None, accept: bool) -> list[str]:
    """An int8 npy table of all zeros; the manifest's scale shrunk so that clipping the reference
    to [-128, 127] steps of it would make zeros right (or left honest)."""
    path = _export(folder, "s.npy", "sinusoidal", 16, d_model=8, format="npy", quantize="int8")
    table = np.load(path)
    np.save(path, np.zeros_like(table))

    def edit(m: dict) -> None:
        if scale is not None:
            m["quant"]["scale"] = [scale] * len(m["quant"]["scale"]) \
                if isinstance(m["quant"]["scale"], list) else scale
    _foreign(path, edit)
    return _verify(path, *(["--accept-foreign"] if accept else []))


def _int8_graph_zeros(folder: Path) -> list[str]:
    """An int8 ONNX table graph whose int8 table is all zeros, scale shrunk to 1e-30."""
    path = _export(folder, "q.onnx", "sinusoidal", 16, d_model=8, mode="table",
                   quantize="int8")
    model = onnx.load(path)
    for tensor in model.graph.initializer:
        if tensor.data_type == onnx.TensorProto.INT8:
            tensor.CopyFrom(numpy_helper.from_array(
                np.zeros_like(numpy_helper.to_array(tensor)), tensor.name))
    onnx.save(model, path)

    def edit(m: dict) -> None:
        q = m["quant"]
        q["scale"] = [1e-30] * len(q["scale"]) if isinstance(q["scale"], list) else 1e-30
    _foreign(path, edit)
    return _verify(path, "--providers", "cpu", "--accept-foreign")


def _claim(folder: Path, field: str, value, accept: bool = False) -> list[str]:
    """An honest binary graph, foreign, with one manifest claim changed."""
    path = _binary(folder)

    def edit(m: dict) -> None:
        parent, _, key = field.rpartition(".")
        (m[parent] if parent else m)[key] = value
    _foreign(path, edit)
    return _verify(path, "--providers", "cpu", *(["--accept-foreign"] if accept else []))


def _wrong_at(folder: Path, max_len: int, at: int) -> list[str]:
    """binary's graph plus 0.5 where position == ``at`` (past max_len: the probe must see it),
    foreign."""
    path = _binary(folder, max_len)
    model = onnx.load(path)
    graph = model.graph
    out = graph.output[0].name
    for node in graph.node:
        node.output[:] = [f"{o}_raw" if o == out else o for o in node.output]
    graph.initializer.extend([numpy_helper.from_array(np.int64(at), "k_at"),
                              numpy_helper.from_array(np.asarray([-1, 1]), "col"),
                              numpy_helper.from_array(np.float32(0.5), "half"),
                              numpy_helper.from_array(np.float32(0.0), "zero")])
    graph.node.extend([helper.make_node("Equal", ["positions", "k_at"], ["hit"]),
                       helper.make_node("Reshape", ["hit", "col"], ["hit2"]),
                       helper.make_node("Where", ["hit2", "half", "zero"], ["patch"]),
                       helper.make_node("Add", [f"{out}_raw", "patch"], [out])])
    onnx.save(model, path)
    _foreign(path)
    # not the rebuild: without --accept-foreign it is never run (tests/test_hostile_round3.py)
    return _verify(path, "--providers", "cpu", "--accept-foreign")


def _float16_table(folder: Path) -> list[str]:
    """A float32 sinusoidal npy table stored as float16, its manifest still float32, foreign."""
    path = _export(folder, "s.npy", "sinusoidal", 16, d_model=8, format="npy")
    np.save(path, np.load(path).astype(np.float16))
    _foreign(path, lambda m: m.update(numpy_dtype="float16"))
    return _verify(path, "--accept-foreign")


def _load_edited(folder: Path, what: str) -> list[str]:
    """An artifact re-signed (same version) with one value-changing manifest field edited:
    ``edgepe.load`` and ``run`` must not give other values silently."""
    if what == "int8-scale":
        path = _export(folder, "s.npy", "sinusoidal", 16, d_model=8, format="npy",
                       quantize="int8")

        def edit(m: dict) -> None:
            q = m["quant"]
            q["scale"] = [2 * v for v in q["scale"]] if isinstance(q["scale"], list) \
                else 2 * q["scale"]
    elif what == "bitorder":
        path = _export(folder, "g.bin", "gray", 16, format="bin", mode="table", dtype="bit")

        def edit(m: dict) -> None:
            m["bitorder"] = "big" if m.get("bitorder") != "big" else "little"
    else:  # int8 graph scale
        path = _export(folder, "q.onnx", "sinusoidal", 16, d_model=8, mode="table",
                       quantize="int8")

        def edit(m: dict) -> None:
            q = m["quant"]
            q["scale"] = [2 * v for v in q["scale"]] if isinstance(q["scale"], list) \
                else 2 * q["scale"]
    manifest = _manifest(path)
    edit(manifest)
    _write_manifest(path, manifest)
    return ["load", str(path)]


# -- graft's proof -------------------------------------------------------------------------------

def _graft_loose(folder: Path) -> list[str]:
    """A PE whose first weight moved by 0.5 and whose manifest states atol 1e9: the proof holds
    the grafted model to the rebuilt tolerance, not the file's."""
    model = _binary(folder, name="model.onnx")
    path = _binary(folder, name="pe.onnx")
    pe = onnx.load(path)
    tensor = max(pe.graph.initializer, key=lambda t: numpy_helper.to_array(t).size)
    w = numpy_helper.to_array(tensor).copy()
    w.flat[:] += 0.5
    tensor.CopyFrom(numpy_helper.from_array(w, tensor.name))
    onnx.save(pe, path)
    manifest = _manifest(path)
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["tolerance"] = {"atol": 1e9, "rtol": 1e9}
    _write_manifest(path, manifest)
    return ["graft", str(model), "--pe", str(path), "--at", "pe", "--out",
            str(folder / "out.onnx")]


# -- the output rule -----------------------------------------------------------------------------

def _json_to(folder: Path, how: str) -> list[str]:
    path = _binary(folder)
    target = folder / "report.json"
    if how == "symlink":
        (folder / "victim.txt").write_text("keep me\n")
        os.symlink(folder / "victim.txt", target)
    elif how == "existing":
        target.write_text("{}\n")
    elif how == "dangling":
        os.symlink(folder / "nowhere.txt", target)
    argv = _verify(path, "--providers", "cpu", "--json")
    if how == "artifact":
        return [*argv, str(path), "--force"]
    if how == "manifest":
        return [*argv, str(path_for(path)), "--force"]
    if how == "symlink-to-artifact":
        os.symlink(path, target)
        return [*argv, str(target), "--force"]
    return [*argv, str(target)]


def _run_out(folder: Path, how: str) -> list[str]:
    path = _binary(folder)
    argv = ["run", str(path), "--positions", "0:4", "--out"]
    if how == "existing":
        (folder / "v.npy").write_bytes(b"mine")
        return [*argv, str(folder / "v.npy")]
    if how == "symlink":
        (folder / "victim.npy").write_bytes(b"mine")
        os.symlink(folder / "victim.npy", folder / "v.npy")
        return [*argv, str(folder / "v.npy")]
    if how == "manifest":  # ends in .json: refused as not .npy/.csv, and as the input anyway
        return [*argv, str(path_for(path)), "--force"]
    link = folder / "a.npy"
    os.symlink(path, link)  # a .npy name that IS the artifact
    return [*argv, str(link), "--force"]


def _graft_over(folder: Path, which: str) -> list[str]:
    model = _binary(folder, name="model.onnx")
    pe = _binary(folder, name="pe.onnx")
    out = {"model": model, "pe": pe, "manifest": path_for(pe)}[which]
    return ["graft", str(model), "--pe", str(pe), "--at", "pe", "--out", str(out), "--force"]


def _plot_over(folder: Path, which: str) -> list[str]:
    path = _binary(folder)
    if which == "existing":
        (folder / "p.png").write_bytes(b"mine")
        return ["plot", "--artifact", str(path), "--out", str(folder / "p.png")]
    link = folder / "p.png"
    os.symlink(path, link)
    return ["plot", "--artifact", str(path), "--out", str(link), "--force"]


# -- resources -----------------------------------------------------------------------------------


def _huge(folder: Path, how: str, command: str) -> list[str]:
    """binary's output plus 0 x (a huge tensor reduced away): an Expand to 32768 x 32768 from a
    constant shape, a Range(0, 2^31), or an Expand sized by the positions' values."""
    path, model, graph, out = _rerouted(folder)
    graph.initializer.append(numpy_helper.from_array(np.float32(0.0), "z"))
    if how == "expand":
        graph.initializer.append(numpy_helper.from_array(np.asarray([32768, 32768]), "big"))
        nodes = [helper.make_node("Expand", ["z", "big"], ["huge"])]
    elif how == "range":
        graph.initializer.extend([numpy_helper.from_array(np.int64(0), "r0"),
                                  numpy_helper.from_array(np.int64(2**31), "r1"),
                                  numpy_helper.from_array(np.int64(1), "r2")])
        nodes = [helper.make_node("Range", ["r0", "r1", "r2"], ["ints"]),
                 helper.make_node("Cast", ["ints"], ["huge"], to=onnx.TensorProto.FLOAT)]
    else:  # sized by input values: Expand to [positions[0] + 1, 1]
        graph.initializer.extend([numpy_helper.from_array(np.asarray([1]), "one"),
                                  numpy_helper.from_array(np.asarray([0]), "first")])
        nodes = [helper.make_node("Gather", ["positions", "first"], ["p0"]),
                 helper.make_node("Add", ["p0", "one"], ["rows"]),
                 helper.make_node("Concat", ["rows", "one"], ["dims"], axis=0),
                 helper.make_node("Expand", ["z", "dims"], ["huge"])]
    graph.initializer.append(numpy_helper.from_array(np.asarray([0]), "axis0"))
    nodes += [helper.make_node("Slice", ["huge", "axis0", "axis0"], ["none"]),
              helper.make_node("Shape", ["none"], ["zshape"]),
              helper.make_node("Add", [f"{out}_raw", "z"], [out])]
    graph.node.extend(nodes)
    onnx.save(model, path)
    manifest = _manifest(path)
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    _write_manifest(path, manifest)
    return _command(path, command, folder)


def _graft_lengths(folder: Path, lengths: str) -> list[str]:
    model = _binary(folder, name="model.onnx")
    pe = _binary(folder, name="pe.onnx")
    return ["graft", str(model), "--pe", str(pe), "--at", "pe", "--out",
            str(folder / "out.onnx"), "--lengths", lengths]


# -- malformed manifests -------------------------------------------------------------------------

def _malformed(folder: Path, field: str, value, command: str) -> list[str]:
    path = _binary(folder, name="pe.onnx")
    text = path_for(path).read_text()
    manifest = json.loads(text)
    parent, _, key = field.rpartition(".")
    obj = manifest
    for part in parent.split(".") if parent else []:
        obj = obj[part]
    obj[key] = value
    raw = json.dumps(manifest)
    if isinstance(value, float) and value == float("inf"):
        raw = raw.replace("Infinity", "1e400")  # JSON that parses to inf in Python
    path_for(path).write_text(raw)
    return _command(path, command, folder)


MALFORMED = [
    ("params-list", "params", [1, 2]), ("params-string", "params", "dropout=0"),
    ("params-bool", "params", True), ("params-number", "params", 3),
    ("inputs-params-list", "inputs.params", [1, 2]),
    ("inputs-params-string", "inputs.params", "dropout=0"),
    ("inputs-params-bool", "inputs.params", False), ("inputs-params-number", "inputs.params", 0),
    ("inputs-scheme-list", "inputs.scheme", ["binary"]),
    ("inputs-scheme-dict", "inputs.scheme", {"id": "binary"}),
    ("scheme-list", "scheme", ["binary"]), ("scheme-dict", "scheme", {"id": "binary"}),
    ("max-len-4000-digits", "max_len", BIG), ("inputs-max-len-4000-digits", "inputs.max_len", BIG),
    ("d-model-4000-digits", "d_model", BIG), ("inputs-seed-4000-digits", "inputs.seed", BIG),
    ("limit-4000-digits", "positions.limit", BIG),
    ("inputs-dropout-4000-digits", "inputs.params.dropout", BIG),
    ("atol-1e400", "tolerance.atol", float("inf")),
    ("inputs-max-len-string", "inputs.max_len", "37"),
    ("inputs-max-len-bool", "inputs.max_len", True),
]
MALFORMED_COMMANDS = ("verify", "inspect", "run", "load")
# graft reads the same manifests: a few of each kind
MALFORMED_GRAFT = ("params-list", "inputs-params-string", "inputs-scheme-dict",
                   "max-len-4000-digits", "inputs-seed-4000-digits", "atol-1e400")


NOT_FOREIGN = r"not byte-identical to this edgepe's rebuild"  # issue 41: foreign is foreign
OUTPUT_EXISTS = r"(exists|is a symlink); pass --force to replace it"
IS_INPUT = r"is the input .*write somewhere else"
CASES = [
    # forged foreign builds (class 1)
    Case("int8-npy-zeros-scale-shrunk", "forged foreign", lambda f: _int8_zeros(f, 1e-30, False),
         1, NOT_FOREIGN + r": the file differs .*file FAILED"),
    Case("int8-npy-zeros-scale-shrunk-accepted", "forged foreign",
         lambda f: _int8_zeros(f, 1e-30, True), 1, r"claim\(s\) accepted unchecked.*file FAILED"),
    Case("int8-npy-zeros-honest-manifest", "forged foreign",
         lambda f: _int8_zeros(f, None, False), 1, NOT_FOREIGN + r".*file FAILED"),
    Case("int8-onnx-zeros-scale-shrunk-accepted", "forged foreign", _int8_graph_zeros, 1,
         r"accepted unchecked.*cpu FAILED"),
    Case("claims-clamp-where-it-computes", "forged foreign",
         lambda f: _claim(f, "positions.out_of_range", "clamp"), 1,
         NOT_FOREIGN + r".*positions\.out_of_range"),
    Case("claims-float16", "forged foreign", lambda f: _claim(f, "dtype", "float16"), 1,
         NOT_FOREIGN + r".*dtype"),
    Case("claims-other-layout", "forged foreign",
         lambda f: _claim(f, "layout", {"columns": "swapped"}), 1, NOT_FOREIGN + r".*layout"),
    Case("claims-shape", "forged foreign", lambda f: _claim(f, "shape", ["N", 8, 1]), 1,
         r"FAILED"),
    Case("claims-limit", "forged foreign", lambda f: _claim(f, "positions.limit", 40), 1,
         NOT_FOREIGN + r".*positions\.limit"),
    Case("claims-tolerance-looser", "forged foreign",
         lambda f: _claim(f, "tolerance", {"atol": 1.0, "rtol": 0.0}), 1, r"looser"),
    Case("claims-extra-field", "forged foreign", lambda f: _claim(f, "trust_me", True), 1,
         NOT_FOREIGN + r".*trust_me"),
    Case("wrong-just-past-max-len", "forged foreign", lambda f: _wrong_at(f, 37, 37), 1,
         r"accepted unchecked: the bytes.*cpu FAILED: .*position 37 "),
    Case("wrong-at-2-max-len", "forged foreign", lambda f: _wrong_at(f, 37, 74), 1,
         r"accepted unchecked: the bytes.*cpu FAILED: .*position 74 "),
    Case("float16-stored-float32-claimed", "forged foreign", _float16_table, 2,
         r"npy header|float16"),
    # edgepe.load and value-changing manifest fields (class 3)
    *[Case(f"load-edited-{what}", "forged foreign", lambda f, what=what: _load_edited(f, what),
           2, r"its manifest says what its recorded inputs do not give")
      for what in ("int8-scale", "bitorder", "int8-graph-scale")],
    # graft's proof (class 2)
    Case("graft-pe-tolerance-1e9", "graft proof", _graft_loose, 1,
         r"differ from the original's beyond tolerance"),
    # the output rule (class 4)
    *[Case(f"verify-json-{how}", "output rule", lambda f, how=how: _json_to(f, how), 2, says)
      for how, says in (("symlink", OUTPUT_EXISTS), ("existing", OUTPUT_EXISTS),
                        ("dangling", OUTPUT_EXISTS), ("artifact", IS_INPUT),
                        ("manifest", IS_INPUT), ("symlink-to-artifact", IS_INPUT))],
    *[Case(f"run-out-{how}", "output rule", lambda f, how=how: _run_out(f, how), 2, says)
      for how, says in (("existing", OUTPUT_EXISTS), ("symlink", OUTPUT_EXISTS),
                        ("manifest", r"must end in \.npy or \.csv"),
                        ("symlink-to-artifact", IS_INPUT))],
    *[Case(f"graft-force-over-its-{which}", "output rule",
           lambda f, which=which: _graft_over(f, which), 2, IS_INPUT)
      for which in ("model", "pe", "manifest")],
    Case("plot-over-existing", "output rule", lambda f: _plot_over(f, "existing"), 2,
         OUTPUT_EXISTS),
    Case("plot-force-over-the-artifact", "output rule", lambda f: _plot_over(f, "artifact"), 2,
         IS_INPUT),
    # resources (class 5)
    *[Case(f"{how}-{command}", "resources", lambda f, how=how, c=command: _huge(f, how, c), 2,
           r"over the budget|cannot bound")
      for how in ("expand", "range", "expand-by-values")
      for command in ("verify", "run", "load", "inspect", "graft")],
    Case("graft-lengths-2-40", "resources", lambda f: _graft_lengths(f, str(2**40)), 2,
         r"--lengths 1099511627776: each length must be 1 \.\. 37"),
    Case("graft-lengths-past-max-len", "resources", lambda f: _graft_lengths(f, "38"), 2,
         r"each length must be 1 \.\. 37"),
    # malformed manifests (class 6)
    *[Case(f"{name}-{command}", "malformed manifest",
           lambda f, field=field, value=value, c=command: _malformed(f, field, value, c), 2,
           r"manifest|inputs")
      for name, field, value in MALFORMED for command in MALFORMED_COMMANDS],
    *[Case(f"{name}-graft", "malformed manifest",
           lambda f, field=field, value=value: _malformed(f, field, value, "graft"), 2,
           r"manifest|inputs")
      for name, field, value in MALFORMED if name in MALFORMED_GRAFT],
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust2")
    return base, _run_plan(base, CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.group}: {c.id}" for c in CASES])
def test_hostile_input_round_2(outcomes, case):
    _, results = outcomes
    _check_outcome(results[case.id], case)


def test_the_table_covers_every_class_of_the_issue():
    groups = {c.group for c in CASES}
    assert groups == {"forged foreign", "graft proof", "output rule", "resources",
                      "malformed manifest"}
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
