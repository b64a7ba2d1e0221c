"""Hostile inputs, round 3 (issue 41), the cases outside graft: each runs one command in ONE
process (``tests/_trust_driver.py``, as tests/test_trust_round2.py does) and asserts its exit
code, one stderr line matching what it must say (for exit 0: the report's last stdout line),
and that nothing in its folder was written, removed or changed.

- foreign means foreign: an artifact labelled with another edgepe version is compared byte for
  byte with this edgepe's rebuild like any other; a trojan graph (``Equal(pos, 1000003) ->
  Where -> +1000``, its sha256 re-signed) fails without ``--accept-foreign`` and is never run;
  with it the report lists the bytes and the positions it did not compare, and is not a PASS;
- bad parameters that were internal errors (exit 3): yarn's ``mscale_all_dim``, dynamic NTK at
  head_dim 2, a factor of 1e300, opset 99, a learned table 4104 wide in int8, ``--max-len
  2^63``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from _hostile import binary as _binary
from _hostile import check_outcome as _check_outcome
from _hostile import manifest_of as _manifest
from _hostile import rerouted as _rerouted
from _hostile import run_plan as _run_plan
from _hostile import write_manifest as _write_manifest
from onnx import helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
TROJAN_AT = 1000003


@dataclass
class Case:
    id: str
    group: str
    make: Callable[[Path], list[str]]  # builds the hostile input in a folder -> the argv
    exit: int
    says: str  # a regular expression the one stderr line (exit 0: last stdout line) matches


def _foreign(path: Path, version: str = "0.0.0-other") -> None:
    """What a forger does: re-sign the file and label it another edgepe's build."""
    manifest = _manifest(path)
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["edgepe_version"] = version
    _write_manifest(path, manifest)


def _trojan(folder: Path, accept: bool) -> list[str]:
    """binary's graph, plus 1000 wherever position == 1000003 (no sweep visits it), foreign."""
    path, model, graph, out = _rerouted(folder)
    graph.initializer.extend([numpy_helper.from_array(np.int64(TROJAN_AT), "k_at"),
                              numpy_helper.from_array(np.asarray([-1, 1]), "col"),
                              numpy_helper.from_array(np.float32(1000.0), "big"),
                              numpy_helper.from_array(np.float32(0.0), "zero")])
    graph.node.extend([helper.make_node("Equal", ["positions", "k_at"], ["hit"]),
                       helper.make_node("Reshape", ["hit", "col"], ["hit2"]),
                       helper.make_node("Where", ["hit2", "big", "zero"], ["patch"]),
                       helper.make_node("Add", [f"{out}_raw", "patch"], [out])])
    onnx.save(model, path)
    _foreign(path)
    return ["verify", str(path), "--providers", "cpu", *(["--accept-foreign"] if accept else [])]


def _relabelled(folder: Path) -> list[str]:
    """An honest artifact whose manifest only names another version: its bytes ARE the rebuild."""
    path = _binary(folder)
    _foreign(path)
    return ["verify", str(path), "--providers", "cpu"]


def _export(folder: Path, *args: str) -> list[str]:
    return ["export", *args, "--out", str(folder / "x.onnx")]


def _hf_yarn(folder: Path) -> list[str]:
    """A yarn config whose mscale_all_dim makes 0.1 m ln(factor) + 1 zero (factor e)."""
    config = folder / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 1,
        "max_position_embeddings": 64, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.718281828459045, "mscale": 1.0,
                         "mscale_all_dim": -10.0, "original_max_position_embeddings": 32}}))
    return ["export", "--from-hf-config", str(config), "--out", str(folder / "x.onnx")]


def _opset_in_manifest(folder: Path) -> list[str]:
    path = _binary(folder)
    manifest = _manifest(path)
    manifest["inputs"]["opset"] = 99
    _write_manifest(path, manifest)
    return ["verify", str(path)]


ROPE = ["--scheme", "rope", "--max-len", "64"]
CASES = [
    Case("trojan-foreign", "foreign means foreign", lambda f: _trojan(f, False), 1,
         r"rebuild FAILED: written by edgepe '0\.0\.0-other' .* not byte-identical to this "
         r"edgepe's rebuild: the file differs .*--accept-foreign.*cpu FAILED: not run"),
    Case("trojan-foreign-accepted", "foreign means foreign", lambda f: _trojan(f, True), 0,
         r"^parity ACCEPTED, NOT PROVEN \(--accept-foreign\) .*accepted unchecked: the bytes: "
         r"the file differs .*initializer 2 'k_at'.*; positions: only 145 probe positions of "
         r"those outside 0 \.\. 36 \(int64\) compared\); cpu ok"),
    Case("relabelled-honest", "foreign means foreign", _relabelled, 0,
         r"^parity PASSED .*rebuilt byte-identical; cpu ok"),
    # internal errors (exit 3) before: one line, exit 2
    Case("yarn-mscale-all-dim-zero", "internal error", _hf_yarn, 2,
         r"yarn mscale_all_dim -10\.0 with factor 2\.718281828459045 makes the attention "
         r"factor's divisor 0\.0; it must be positive"),
    Case("dynamic-factor-1e300", "internal error",
         lambda f: _export(f, *ROPE, "--param", "rope_type=dynamic", "--param", "factor=1e300",
                           "--param", "original_max_position_embeddings=32"), 2,
         r"rope_type dynamic with these parameters has no finite frequencies \(float64 "
         r"overflows\)"),
    Case("dynamic-head-dim-2", "internal error",
         lambda f: _export(f, "--scheme", "rope", "--max-len", "64", "--d-model", "2", "--param",
                           "rope_type=dynamic", "--param", "factor=2"), 2,
         r"rope_type dynamic needs rotary_dim > 2"),
    Case("yarn-attention-1e300", "internal error",
         lambda f: _export(f, *ROPE, "--param", "rope_type=yarn", "--param", "factor=4",
                           "--param", "attention_factor=1e300"), 2,
         r"an attention factor of 1e\+300: it must be a positive float32 number"),
    Case("opset-99", "internal error", lambda f: _export(f, "--scheme", "binary", "--max-len",
                                                         "8", "--opset", "99"), 2,
         r"--opset must be between 1 and 30, got 99"),
    Case("opset-99-in-a-manifest", "internal error", _opset_in_manifest, 2,
         r"inputs\.opset must be null or an integer from 1 to 30, got 99"),
    Case("max-len-2-63", "internal error",
         lambda f: _export(f, "--scheme", "binary", "--max-len", str(2**63)), 2,
         r"max_len must be between 1 and \d+, got 9223372036854775808"),
    # resources: refused before anything is built
    Case("plot-d-model-65536", "resources",
         lambda f: ["plot", "--scheme", "sinusoidal", "--max-len", "4096", "--d-model", "65536",
                    "--out", str(f / "p.png")], 2,
         r"a plot draws at most 4096 columns \(one per dimension\), got d_model 65536"),
    Case("graft-max-len-2-63", "resources",
         lambda f: ["graft", str(REPO / "tests" / "data" / "optimum" / "llama" / "model.onnx"),
                    "--max-len", str(2**63), "--no-check", "--out", str(f / "g.onnx")], 2,
         r"--max-len must be 1 \.\. 16,777,216 \(2\^24: .*got 9223372036854775808"),
    Case("load-123", "internal error", lambda f: ["load", 123], 2,
         r"the artifact path must be a str or os\.PathLike, got int 123"),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    base = tmp_path_factory.mktemp("trust3")
    return base, _run_plan(base, CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.group}: {c.id}" for c in CASES])
def test_hostile_input_round_3(outcomes, case):
    _, results = outcomes
    _check_outcome(results[case.id], case)


def _gather_far(folder: Path, version: str | None = None) -> Path:
    """binary's rows gathered at positions + 1000: fails inside onnxruntime at run time, where
    onnxruntime's own logger printed a coloured line of its own before edgepe's."""
    path, model, graph, out = _rerouted(folder)
    graph.initializer.append(numpy_helper.from_array(np.int64(1000), "far"))
    graph.node.extend([helper.make_node("Add", ["positions", "far"], ["rows"]),
                       helper.make_node("Gather", [f"{out}_raw", "rows"], [out], axis=0)])
    onnx.save(model, path)
    manifest = _manifest(path)
    manifest["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    if version is not None:
        manifest["edgepe_version"] = version
    _write_manifest(path, manifest)
    return path


def test_onnxruntime_adds_no_stderr_line_of_its_own(tmp_path):
    # real processes: onnxruntime's logger writes to fd 2, which CliRunner does not see
    edgepe = [sys.executable, "-m", "edgepe"]
    path = _gather_far(tmp_path / "run")
    done = subprocess.run([*edgepe, "run", str(path), "--positions", "0:4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "[E:onnxruntime" not in done.stderr, done.stderr
    assert re.fullmatch(r"error: '.*' failed inside onnxruntime: .*Gather.*\n", done.stderr)
    path = _gather_far(tmp_path / "verify", version="0.0.0-other")
    done = subprocess.run([*edgepe, "verify", str(path), "--providers", "cpu",
                           "--accept-foreign"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "[E:onnxruntime" not in done.stderr, done.stderr
    assert "cpu FAILED: run failed: " in done.stderr


def test_the_api_names_a_wrong_argument_type(tmp_path):
    import edgepe
    from edgepe.contract.errors import BadParameterError
    from edgepe.verify import verify_artifact

    for value in (123, None, b"x.onnx", ["x.onnx"]):
        with pytest.raises(BadParameterError, match="the artifact path must be a str"):
            edgepe.load(value)
        with pytest.raises(BadParameterError, match="the artifact path must be a str"):
            verify_artifact(value)
    with pytest.raises(BadParameterError, match="providers must be a str or a list of names, "
                                                "got int"):
        edgepe.load(_binary(tmp_path), providers=5)
    with pytest.raises(BadParameterError, match="providers must be a str or a list of runtime "
                                                "names, got int"):
        verify_artifact(_binary(tmp_path, name="c.onnx"), providers=5)
    with pytest.raises(BadParameterError, match="json_path must be a str or os.PathLike"):
        verify_artifact(_binary(tmp_path, name="d.onnx"), json_path=5)


def test_a_plot_is_at_most_4096_columns_wide():
    from edgepe.contract.errors import BadParameterError
    from edgepe.plot import MAX_WIDTH, check_width
    from edgepe.schemes import resolve

    assert MAX_WIDTH == 4096
    check_width(resolve("sinusoidal", 8, d_model=4096))
    check_width(resolve("alibi", 8, heads=1024))  # heads: at most 1024 anyway
    check_width(resolve("binary", 8))  # a derived width
    with pytest.raises(BadParameterError, match="got d_model 4098"):
        check_width(resolve("sinusoidal", 8, d_model=4098))
