"""Shared by the benchmark's parts: where the repository is, the demo, issue 8's targets."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BARE_IMPORT = "import torch, onnx, onnxruntime"
DEMO = {"scheme": "binary", "max_len": 512, "d_model": 64}
DEMO_CASE = "binary-L512-d64"

# Targets of issue 8 (demo scheme unless stated).
COMPUTE_LATENCY_VS_PEER = 1.0
COMPUTE_BYTES_VS_PEER = 1 / 8
COMPUTE_BYTES_FLOOR_FACTOR, COMPUTE_BYTES_FLOOR_SLACK = 1.25, 600
TABLE_LATENCY_VS_IDENTITY = 1.2
EXPORT_VS_BARE_IMPORT = 1.3
HELP_SECONDS = 0.5
SCALE_PEAK_VS_TABLE = 3.0
# "Stays linear": the work per MiB at the largest table is at most this much the median work per
# MiB over all sizes (fixed costs only make small tables dearer per MiB; superlinear growth
# fails; the median keeps one noisy small size from deciding).
SCALE_PER_MIB_GROWTH = 1.25


# bench.py -v sets this (its child processes inherit it): progress lines and the exporters'
# own output (torch.onnx's graph dumps, ExecuTorch's logs) are shown only then.
VERBOSE_ENV = "EDGEPE_BENCH_VERBOSE"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def progress(message: str) -> None:
    """A progress line on stderr, with ``-v`` only."""
    if verbose():
        print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def muted():
    """Silence what a third-party exporter prints, at the file-descriptor level (C++ and Python
    writes, warnings, torch's loggers), unless ``-v``; what the block raises still propagates."""
    if verbose():
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    levels = {name: logging.getLogger(name).level for name in ("torch", "onnxscript")}
    try:
        with tempfile.TemporaryFile() as sink, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in levels:
                logging.getLogger(name).setLevel(logging.ERROR)
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
