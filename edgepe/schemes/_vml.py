"""One single-threaded first call of every MKL VML function torch routes float math through.

Why (issue 41, point 6): ``edgepe export --scheme rope --max-len 512`` failed its own parity
check once ("8078 of 35008 elements beyond atol 1e-06, first at position 256 column 0"), and the
README's doc test once failed a whole chunk from position 2048. Both are the second half of the
process's FIRST ``torch.cos``/``torch.sin`` call on the sweep's chunk: torch (MKL builds, these
wheels: oneMKL 2024.2 build 20240605, ``torch.__config__.show()``) computes contiguous float
``cos``, ``sin``, ``exp``, ``log``, ``sqrt``... through MKL VML (``aten/src/ATen/cpu/vml.h``,
``vmsCos(n, in, out, VML_HA | ...)``), split over its intra-op threads in chunks of at least
2048 elements (``UnaryOpsKernel.cpp``), so with 2 threads ``[512, 32]`` angles split at row 256
and ``[4096, 32]`` at row 2048. oneMKL resolves each VML function's kernel lazily on its first
call; when that first call runs on several threads at once, one thread can run the
low-accuracy kernel (AVX2 ``VML_EP``, errors up to ~4000 ulp) for its whole chunk of that one
call, and every later call is right (pytorch/pytorch#188792, fixed upstream by the same warm-up
in pytorch/pytorch#188791; oneMKL 2025.0 no longer races). So the reference, or a table, or an
artifact's own values, were wrong at random for one chunk, under load (the race needs the two
threads' first calls to coincide).

``warm()`` calls each such function once on a one-element tensor (below the 2048-element grain:
one thread) in float32 and float64, before any reference is computed: the kernel is resolved
before any concurrent use, and identical afterwards whatever the threads. It runs once per
process (in the first ``Scheme.__init__``, ``edgepe.schemes._base``), costs ~0.1 ms, and is
harmless on builds without MKL (SLEEF: no lazy dispatch).
"""

from __future__ import annotations

import torch

# The float unary ops aten sends to MKL VML (aten/src/ATen/cpu/vml.h, IMPLEMENT_VML_MKL; abs,
# cosh, sinh, expm1 and log1p are commented out there), by torch name.
# tests/test_vml_warmup.py checks this list against the installed torch's vml.h.
VML_OPS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2",
           "sin", "sqrt", "tan", "tanh", "trunc")

_warmed = False


def warm() -> None:
    """Resolve MKL VML's dispatch of every ``VML_OPS`` function, single-threaded, once."""
    global _warmed
    if _warmed:
        return
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            x = torch.full((1,), 0.5, dtype=dtype)  # in every function's domain
            for name in VML_OPS:
                getattr(torch, name)(x)
    _warmed = True
