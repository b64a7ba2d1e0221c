"""The guide's minimum bit width ``ceil(log2 L)`` (guide 7.1) and its 3.7 example (issue 16).

The bit-family schemes accept ``d_model`` (bits per group for binary-multilevel, per coordinate
for binary-2d, the bit half for hybrid-int-binary) down to ``ceil(log2 L)``; one less is
refused. Defaults keep ``n = ceil(log2(L + 1))``, and the demo's ``binary`` keeps its ``n_bits``
(its state_dict depends on it).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.contract.errors import BadParameterError
from edgepe.schemes import build, resolve
from tests._export_helpers import assert_parity, feeds_for, graph, reference, run_ort

# scheme -> d_model at the guide's minimum width m = ceil(log2 L)
MIN_WIDTH = {
    "binary-bits": lambda m: m,
    "binary-signed": lambda m: m,
    "binary-smooth": lambda m: m,
    "gray": lambda m: m,
    "binary-gated": lambda m: m,
    "binary-multilevel": lambda m: 3 * m,  # groups = 3
    "binary-2d": lambda m: 2 * m,
    "hybrid-int-binary": lambda m: 2 * m,  # the bit half is d - floor(d / 2) = m
}
LENGTHS = [2, 16, 100, 512]


def guide_minimum(max_len: int) -> int:
    """ceil(log2 L) by floating-point logs (an independent computation), at least 1 bit."""
    return max(1, math.ceil(math.log2(max_len)))


def test_guide_3_7_example_through_the_cli(tmp_path):
    """`edgepe export --scheme binary-multilevel --max-len 16 --d-model 12`: position 13 is
    group 0 = bits of 13, group 1 = bits of 6, group 2 = bits of 3, LSB first (the formula;
    the guide prints group 0 MSB first)."""
    out = tmp_path / "ml.onnx"
    runner = CliRunner()
    result = runner.invoke(app, ["export", "--scheme", "binary-multilevel", "--max-len", "16",
                                 "--d-model", "12", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.with_name("ml.onnx.json").read_text())["d_model"] == 12
    import edgepe

    row = edgepe.load(out).encode(np.array([13]))[0]
    assert row.tolist() == [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0]


@pytest.mark.parametrize("max_len", LENGTHS)
@pytest.mark.parametrize("scheme", list(MIN_WIDTH))
def test_minimum_width_is_accepted_distinct_and_exported_exactly(scheme, max_len):
    m = guide_minimum(max_len)
    width = MIN_WIDTH[scheme](m)
    if m > 1:  # one bit fewer (in every group / coordinate / the bit half) is refused
        with pytest.raises(BadParameterError, match=rf"needs ceil\(log2 {max_len}\) = {m} bits"):
            resolve(scheme, max_len, d_model=MIN_WIDTH[scheme](m - 1))
    config, module, model = graph(scheme, max_len, d_model=width)
    if scheme != "binary-2d":  # positions 0 .. L-1 keep distinct codes
        with torch.no_grad():
            codes = module.encode(torch.arange(max_len)).numpy()
        assert len(np.unique(codes, axis=0)) == max_len
    feeds = feeds_for(config)  # every position and the wrap probe (int64 extremes included)
    assert_parity(config, run_ort(model, feeds), reference(config, module, feeds))


def test_defaults_keep_the_demos_width():
    """Derived defaults stay n = ceil(log2(L + 1)) (goldens unchanged), and binary's projection
    stays Linear(n_bits, d_model) as in the demo: L = 512 -> 10 bits, not the guide's 9."""
    assert resolve("binary-bits", 512).d_model == 10
    assert resolve("binary-multilevel", 16).d_model == 15
    state = build(resolve("binary", 512)).state_dict()
    assert tuple(state["projection.weight"].shape) == (64, 10)
