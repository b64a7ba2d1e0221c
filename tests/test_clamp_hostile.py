"""Table graphs clamp every int64 position to ``[0, L - 1]`` exactly, at the hostile ones too.

onnxruntime 1.31.1's CPU Clip/Min/Max on int64 return wrong results for values in
``[2^31, 2^32)`` (they clamp 2^31 .. 2^32 - 1 to row 0; an Eigen SSE2 path, fixed in 1.32), and
onnxruntime-gpu has no 1.32 wheel: edgepe supports both (pyproject), so its table graphs clamp
in float32 (``Cast``, ``Clip``, ``Cast``: exact up to 2^24 rows) or with ``Where``. These tests
run on whatever onnxruntime is installed; with an int64 ``Clip`` they fail on 1.31.1 (3 wrong
rows of the 9 hostile positions; docs/readme/int8-speed.md has the run).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from _export_helpers import graph

from edgepe.graphs.table_values import full_table

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
HOSTILE = np.array([2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, INT64_MAX, INT64_MIN,
                    INT64_MIN + 1, -(2**31), -1, 0, 1], dtype=np.int64)
L = 64
CASES = [("learned", {}), ("sinusoidal", {}), ("binary", {"dtype": "float16"}),
         ("binary-bits", {"dtype": "uint8"}), ("sinusoidal", {"quantize": "int8"}),
         ("sinusoidal", {"quantize": "int8", "int8_runtime": "live"})]


def _run(model: bytes, feeds) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize(("scheme", "options"), CASES,
                         ids=[f"{s}-{'-'.join(map(str, o.values())) or 'float32'}"
                              for s, o in CASES])
def test_table_rows_at_hostile_positions_are_the_clamped_rows(scheme, options):
    config, module, model = graph(scheme, L, mode="table", **options)
    got = _run(model, {"positions": HOSTILE})
    want = _run(model, {"positions": np.clip(HOSTILE, 0, L - 1)})
    assert np.array_equal(got, want)  # bit for bit, every row
    if "quantize" not in options:  # and those rows are the stored table's
        table = full_table(config.scheme, module).astype(got.dtype)
        assert np.array_equal(got, table[np.clip(HOSTILE, 0, L - 1)])


def test_bias_table_clamps_the_distance_at_hostile_positions():
    """A bias table reads the row of ``t - u`` clamped to the table (issue 16), positions
    saturated at +-2^61 first: exact at every hostile pair (tests/_table_oracle.py)."""
    from _table_oracle import clamped_reference

    config, module, model = graph("alibi", L, heads=4, mode="table")
    keys = HOSTILE[::-1].copy()
    got = _run(model, {"positions": HOSTILE, "key_positions": keys})
    want = clamped_reference(config.scheme, module, HOSTILE, keys).numpy()
    assert np.array_equal(got, want)
