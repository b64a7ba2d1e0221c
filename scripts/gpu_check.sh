#!/usr/bin/env bash
# The README's GPU figures: run on a CUDA machine with onnxruntime-gpu installed (README, GPU).
# Usage: bash scripts/gpu_check.sh OUTDIR   (edgepe importable; $PYTHON, default python3)
# Writes OUTDIR/test_gpu.log, OUTDIR/verify.log, OUTDIR/reports.tar (one JSON report each) and
# OUTDIR/timings.md + timings.json (issue 44: rope and sinusoidal per call on CUDA, IOBinding).
# A few minutes on one H100/H200: the tests (the parity grid on cuda, the sliced artifacts, the
# fused graph at N up to 1048576, a grafted Llama), the verify figures, then the timings.
# On a lent device machine (its image has torch and transformers but the CPU onnxruntime): carry
# the onnxruntime-gpu wheel for CUDA 13 (.whl, pip download as /work/.library/device/README.md
# says), then: python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
# PYTHONPATH=/tmp/site:$PWD PYTHON=python3 bash scripts/gpu_check.sh $OUT (one call, timeout 600).
set -u -o pipefail
out=${1:?usage: gpu_check.sh OUTDIR}
work=$(mktemp -d)
mkdir -p "$out" "$work/models" "$work/reports"
py=${PYTHON:-python3}
"$py" -c "import onnxruntime as o, torch, onnx; print('onnxruntime', o.__version__, o.get_device(), o.get_available_providers()); print('torch', torch.__version__, 'onnx', onnx.__version__)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# the CUDA tests: placement of both lowerings, --strict-placement, the default grid's ONNX cells
"$py" -m pytest -p no:cacheprovider -q -rfs -m gpu tests/test_gpu.py > "$out/test_gpu.log" 2>&1
grep -E "passed|failed|^FAILED|^SKIPPED" "$out/test_gpu.log"
# figures: parity and placement of a few artifacts on cuda (and cpu), one JSON report each
for spec in "gray 512 bitwise" "gray 512 arith" "binary 512 bitwise" "binary 512 arith" \
            "fourier-binary 512 bitwise" "sinusoidal 512 -" "alibi 512 -" "rope 512 -" \
            "rope 32768 sliced" "rope 32768 sliced:ort" "rope 32768 sliced:rotary23" \
            "rope 32768 sliced:int8" "sinusoidal 32768 sliced" "sinusoidal 32768 sliced:ort" \
            "rope 32768 target" "sinusoidal 32768 target"; do
  set -- $spec
  name="$1-L$2${3/#-/}"
  [ "$3" != "-" ] && name="$1-L$2-${3/:/-}"
  opts=()
  case "$3" in
    -) ;;
    sliced) opts=(--mode sliced) ;;
    sliced:int8) opts=(--mode sliced --quantize int8) ;;
    sliced:ort) opts=(--mode sliced --rope-lowering ort) ;;
    sliced:rotary23) opts=(--mode sliced --rope-lowering rotary23 --opset 23) ;;
    target) opts=(--mode sliced --target ort-cuda) ;;  # the trunc lowering, and why not sliced
    *) opts=(--lowering "$3") ;;
  esac
  [ "$1" = rope ] && [ "$2" = 32768 ] && opts+=(--head-dim 128)
  [ "$1" = sinusoidal ] && [ "$2" = 32768 ] && opts+=(--d-model 128)
  "$py" -m edgepe export --scheme "$1" --max-len "$2" "${opts[@]}" \
    --out "$work/models/$name.onnx" --no-verify | grep -E "^(target|ort-cuda)" || true
  COLUMNS=160 "$py" -m edgepe verify "$work/models/$name.onnx" --providers cuda,cpu \
    --json "$work/reports/$name.json"
done > "$out/verify.log" 2>&1
grep -E "^parity|nodes ran|^ort-cuda|^target" "$out/verify.log"
tar -C "$work" -cf "$out/reports.tar" reports
# issue 44's timings: Sin/Cos, the cache, sliced (ort-cuda's lowering) and fused, N = 65535 to 1M
"$py" scripts/gpu_timings.py "$out/timings.json" > "$out/timings.md" 2>&1
tail -12 "$out/timings.md"
