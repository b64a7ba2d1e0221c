"""graft's proof in bounded memory (issue 41 point 4): the decode step at the table's last
position keeps a short KV cache (``DECODE_PAST`` tokens, ``position_ids`` shifted to
``max_len - 1``) instead of one of ``max_len - 1`` tokens, which peaked at 4.8 GB RSS at
``--max-len 2^20`` on a tiny Llama export. A model without ``position_ids`` (its positions from
the cache's length) takes that step in the PE's cone alone, the cache fed as its shape, and the
whole model's after ``DECODE_PAST`` tokens (4.7 GB before at 2^20)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import edgepe
from edgepe.graft.prove import DECODE_PAST, hf_feeds, proof_cases

prove = importlib.import_module("edgepe.graft.prove")  # edgepe.graft.prove is also a function

LLAMA = Path(__file__).resolve().parent / "data" / "optimum" / "llama" / "model.onnx"


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(str(LLAMA), providers=["CPUExecutionProvider"])


def test_decode_step_keeps_a_short_cache_shifted_to_the_last_position(session):
    assert DECODE_PAST == 8
    cases = proof_cases(session, 1 << 20)
    assert cases[-1] == (1, 8, 0, (1 << 20) - 9)  # 8 cached tokens, the new one at 2^20 - 1
    assert (3, 5, 0, 0) in cases  # the earlier decode step after 5 cached tokens is unchanged
    feeds = hf_feeds(session, *cases[-1][:3], 1 << 20, np.random.default_rng(0), cases[-1][3])
    assert feeds["position_ids"].tolist() == [[(1 << 20) - 1]] * 2
    assert feeds["attention_mask"].shape == (2, 9)
    past = [v for k, v in feeds.items() if "past" in k]
    assert past and all(v.shape[2] == 8 for v in past)


def test_decode_step_cache_is_cut_to_the_table_when_it_is_short(session):
    # max_len 6: a cache of at most max_len - 1 = 5 tokens, no shift; the 3+5 step no longer fits
    assert proof_cases(session, 6)[-2:] == [(3, 3, 0, 0), (1, 5, 0, 0)]
    assert proof_cases(session, 10)[-1] == (1, 8, 0, 1)  # 8 + 1 positions, the last at 9
    assert proof_cases(session, 9)[-1] == (1, 8, 0, 0)


def _without_position_ids(path: Path) -> Path:
    """The optimum Llama with its ``position_ids`` input made inside, as transformers does for a
    model called without them (``cache_position``): ``Range(past, past + seq)`` from the shapes
    of the cache and the ids, ``[1, seq]``. Written to ``path``; its rotary cone reads both
    inputs by shape alone."""
    model = onnx.load(LLAMA)
    graph = model.graph
    kept = [v for v in graph.input if v.name != "position_ids"]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v, np.int64), f"nopos/{n}")
                             for n, v in (("zero", [0]), ("one", 1)))
    made = [helper.make_node("Shape", ["input_ids"], ["nopos/seq"], start=1, end=2),
            helper.make_node("Shape", ["past_key_values.0.key"], ["nopos/past"], start=2, end=3),
            helper.make_node("Add", ["nopos/past", "nopos/seq"], ["nopos/end"]),
            helper.make_node("Squeeze", ["nopos/past", "nopos/zero"], ["nopos/start0"]),
            helper.make_node("Squeeze", ["nopos/end", "nopos/zero"], ["nopos/end0"]),
            helper.make_node("Range", ["nopos/start0", "nopos/end0", "nopos/one"],
                             ["nopos/range"]),
            helper.make_node("Unsqueeze", ["nopos/range", "nopos/zero"], ["position_ids"])]
    for node in reversed(made):
        graph.node.insert(0, node)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_without_position_ids_the_last_step_is_the_cones_and_the_cache_stays_short(tmp_path):
    """A Llama without position_ids grafted at --max-len 4096: the whole model's decode step
    after 8 cached tokens, the rotary cone's at 1 token after 4095 and at every position, the
    ids and the cache fed to the cones as their shapes; a cache of 4095 tokens nowhere."""
    path = _without_position_ids(tmp_path / "nopos.onnx")
    original = onnx.load(path)
    given = prove._GraphInputs(original)
    assert "position_ids" not in {v.name for v in given.get_inputs()}
    cases = proof_cases(given, 4096, cone_decode=True)
    assert cases[-1] == (1, DECODE_PAST, 0, 0)
    assert max(seq + past for seq, past, _, _ in cases) == 16  # tokens in any whole-model run
    report = edgepe.graft(path, out=tmp_path / "out.onnx", max_len=4096)
    assert report and all(c.passed for c in report.checks), str(report)
    assert "(from 'input_ids', 'past_key_values.0.key' by Range)" in report.found
    assert report.lengths[-5:] == [
        "3+5", "1+8", "every position 0..4095 (the replaced tensors)",
        "1+4095 (the replaced tensors)",  # and caches past the table: its Gather refuses them
        "1+4096, 1+4097, 1+8195 (the replaced tensors: the grafted model refuses them)"]
    grafted = onnx.load(tmp_path / "out.onnx")
    replaced = json.loads(next(p.value for p in grafted.metadata_props
                               if p.key == "edgepe.graft.0"))["replaces"]
    assert prove._cone_plan(original, grafted, replaced) == (
        replaced, frozenset({"input_ids", "past_key_values.0.key"}), True)


# The child's own peak: VmHWM of its address space, which exec starts afresh. (wait4's ru_maxrss
# is not that: Linux carries the forking parent's peak across exec, so a child of an xdist
# worker that had grown to 4 GB reported 4 GB however little the graft used.)
_PEAK = """import sys
from edgepe.cli import main
peak, sys.argv = sys.argv[1], ["edgepe", *sys.argv[2:]]
try:
    main()
finally:
    hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]
    open(peak, 'w').write(hwm.split()[1])
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is read from Linux's "
                    "/proc/self/status")
def test_graft_proof_at_max_len_2_20_stays_under_1_5_gb(tmp_path):
    """The whole graft (proof included) at --max-len 2^20: the child's peak RSS (VmHWM, in KiB)
    under 1.5 GB (0.6 GB measured; 4.8 GB before)."""
    out, peak = tmp_path / "out.onnx", tmp_path / "peak"
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(peak), "graft", str(LLAMA), "--max-len", str(1 << 20),
         "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1+8 (positions 1048575..1048575)" in done.stdout and out.exists()
    assert int(peak.read_text()) * 1024 < 1.5e9


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is read from Linux's "
                    "/proc/self/status")
@pytest.mark.parametrize("family", ["llama", "bloom"])
def test_graft_without_position_ids_at_max_len_2_20_stays_under_1_5_gb(tmp_path, family):
    """A graft at --max-len 2^20 of a model without position_ids: the Llama above (its cones
    read the ids and the cache by shape: chunks of 4,096 after 4,096 k cached tokens) and
    Bloom (ALiBi from the mask's CumSum: its cone reads the mask, one sequence of 2^20, and
    masks of up to 2^21 + 4 for the caches past the table). The child's peak RSS (VmHWM) under
    1.5 GB, as the Llama's with position_ids above (measured 0.59 and 1.03 GB; 4.7 GB and over
    4 GB before, with a whole-model cache of 2^20 - 1 tokens). What grows over 2^16 (0.31 GB)
    is the PE's own rows at 2^20 positions (Bloom's over 2^21 past the table) and their
    copies; the comparison's float64 temporaries are bounded (``WORST_BLOCK``)."""
    path = (_without_position_ids(tmp_path / "nopos.onnx") if family == "llama" else
            LLAMA.parent.parent / "bloom" / "model.onnx")
    out, peak = tmp_path / "out.onnx", tmp_path / "peak"
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(peak), "graft", str(path), "--max-len", str(1 << 20),
         "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    beyond = ": the grafted model refuses them" if family == "llama" else ""  # Bloom computes
    assert "3+5, 1+8, every position 0..1048575 (the replaced tensors), 1+1048575 (the " \
        f"replaced tensors), 1+1048576, 1+1048577, 1+2097155 (the replaced tensors{beyond}):" \
        in done.stdout and out.exists()
    assert int(peak.read_text()) * 1024 < 1.5e9


@pytest.mark.parametrize("lowering", ["ort", "rotary23"])
def test_a_lowered_graft_of_a_model_without_position_ids_passes_its_proof(tmp_path, lowering):
    """Its positions are [1, S] (made inside): the fused RotaryEmbedding reads them expanded to
    the batch (graft's proof at batch 2 failed on both ops before: "dimension 0 should be of
    size batch_size, got 1")."""
    path = _without_position_ids(tmp_path / "nopos.onnx")
    report = edgepe.graft(path, out=tmp_path / "out.onnx", max_len=64, rope_lowering=lowering)
    assert report and all(c.passed for c in report.checks), str(report)
    ops = [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node]
    assert "RotaryEmbedding" in ops and "Expand" in ops
