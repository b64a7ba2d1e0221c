"""graft's proof in bounded memory (issue 41 point 4): the decode step at the table's last
position keeps a short KV cache (``DECODE_PAST`` tokens, ``position_ids`` shifted to
``max_len - 1``) instead of one of ``max_len - 1`` tokens, which peaked at 4.8 GB RSS at
``--max-len 2^20`` on a tiny Llama export."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edgepe.graft.prove import DECODE_PAST, hf_feeds, proof_cases

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
