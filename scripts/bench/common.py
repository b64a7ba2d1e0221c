"""Shared by the benchmark's parts: where the repository is, the demo, issue 8's targets."""

from __future__ import annotations

import sys
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
