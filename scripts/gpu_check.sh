#!/usr/bin/env bash
# The README's GPU figures: run on a CUDA machine with onnxruntime-gpu installed (README, GPU).
# Usage: bash scripts/gpu_check.sh OUTDIR   (edgepe importable; $PYTHON, default python3)
# Writes OUTDIR/test_gpu.log, OUTDIR/verify.log and OUTDIR/reports.tar (one JSON report each).
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
            "fourier-binary 512 bitwise" "sinusoidal 512 -" "alibi 512 -" "rope 512 -"; do
  set -- $spec
  name="$1-L$2${3/#-/}"
  [ "$3" != "-" ] && name="$1-L$2-$3"
  lowering=(); [ "$3" != "-" ] && lowering=(--lowering "$3")
  "$py" -m edgepe -q export --scheme "$1" --max-len "$2" "${lowering[@]}" \
    --out "$work/models/$name.onnx" --no-verify
  COLUMNS=160 "$py" -m edgepe verify "$work/models/$name.onnx" --providers cuda,cpu \
    --json "$work/reports/$name.json"
done > "$out/verify.log" 2>&1
grep -E "^parity|nodes ran" "$out/verify.log"
tar -C "$work" -cf "$out/reports.tar" reports
