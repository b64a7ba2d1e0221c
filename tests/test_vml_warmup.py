"""MKL VML's first call of each function is single-threaded (issue 41, point 6).

The intermittent rope parity failure ("8078 of 35008 elements beyond atol 1e-06, first at
position 256 column 0"): torch computes contiguous float cos/sin/exp... through MKL VML, split
over its intra-op threads in chunks of at least 2048 elements, and oneMKL 2024.2 resolves each
function's kernel on its first call, racily: two threads making that first call at once can get
one of them the low-accuracy kernel for its whole chunk (pytorch/pytorch#188792). Whether the
race fires is timing; whether edgepe ever lets a FIRST call run on more than one thread is not:
these tests watch every aten call of a fresh process (a ``TorchDispatchMode`` installed before
edgepe is imported) and require each VML function's first call to be under torch's 2048-element
grain, so one thread makes it. Before ``edgepe.schemes._vml.warm`` the export's quick check made
its first ``cos`` on the ``[512, 32]`` angles: 16384 elements, two threads, split at row 256.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edgepe.schemes._vml import VML_OPS

GRAIN = 2048  # aten/src/ATen/native/cpu/UnaryOpsKernel.cpp: IMPLEMENT_FLOAT_KERNEL's grain_size

WATCH = r"""
import json, sys, tempfile
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ops = set(json.loads(sys.argv[1]))
first = {}

class Watch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ops and name not in first and args and args[0].dtype.is_floating_point:
            first[name] = args[0].numel()
        return func(*args, **(kwargs or {}))

with Watch():
    from edgepe import api
    out = tempfile.mkdtemp()
    for scheme, length in json.loads(sys.argv[2]):
        config = api.make_config(scheme, length, out=f"{out}/{scheme}.onnx")
        result, report = api.export(config)
        assert report, str(report)
print(json.dumps(first))
"""


def first_calls(exports: list[tuple[str, int]]) -> dict[str, int]:
    """``{op: numel of its first float call}`` in a fresh process that runs ``exports``."""
    done = subprocess.run([sys.executable, "-c", WATCH, json.dumps(VML_OPS), json.dumps(exports)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_rope_exports_first_cos_and_sin_run_on_one_thread():
    # The failing command: edgepe export --scheme rope --max-len 512 (its quick check's chunk
    # is [547, 32] angles; unwarmed, cos and sin were first called on 17504 elements).
    first = first_calls([("rope", 512)])
    assert {"cos", "sin"} <= set(first)
    assert {op: n for op, n in first.items() if n >= GRAIN} == {}


@pytest.mark.slow
def test_every_trig_and_exp_schemes_first_vml_calls_run_on_one_thread():
    first = first_calls([("sinusoidal", 4096), ("gaussian", 4096), ("binary-smooth", 4096),
                         ("fourier-binary", 4096), ("binary-gated", 4096)])
    assert {"cos", "sin", "exp"} <= set(first)
    assert {op: n for op, n in first.items() if n >= GRAIN} == {}


def test_warm_resolves_every_vml_op_in_both_float_widths(monkeypatch):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from edgepe.schemes import _vml

    seen = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in VML_OPS:
                seen.append((func.overloadpacket.__name__, args[0].dtype, args[0].numel()))
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(_vml, "_warmed", False)  # as in a fresh process
    with Watch():
        _vml.warm()
        _vml.warm()  # once per process: the second call does nothing
    assert seen == [(op, dtype, 1) for dtype in (torch.float32, torch.float64)
                    for op in VML_OPS]
    assert _vml._warmed



def test_vml_ops_are_the_functions_the_installed_torch_sends_to_mkl_vml():
    """``VML_OPS`` is exactly the uncommented ``IMPLEMENT_VML_MKL(op, ...)`` lines of this
    torch's ``ATen/cpu/vml.h`` (the header its wheel ships): a function torch routes through VML
    that warm() skips would race on its first call again."""
    import torch

    header = Path(torch.__file__).parent / "include" / "ATen" / "cpu" / "vml.h"
    if not header.is_file():
        pytest.skip("this torch ships no C++ headers")
    routed = re.findall(r"^IMPLEMENT_VML_MKL\((\w+),", header.read_text(), re.MULTILINE)
    assert routed and sorted(routed) == sorted(VML_OPS), (routed, VML_OPS)
