#!/usr/bin/env bash
# The GPU check of a shardscope bundle (scripts/gpu-bundle.sh), the one command to run on a GPU
# machine:  DIR/gpu-check.sh [--out FOLDER] [--budget SECONDS]
# In under 10 minutes on one H100 (--budget 570 s for all steps, each under its own limit): the
# gpu-labelled tests, every mode at degree 1, 2 and 4 with --backend cuda and the reference check,
# CUDA against CPU in f32 and f64, compute-sanitizer memcheck and racecheck, the layer step beside
# PyTorch and the elementwise kernels' bandwidth beside a copy (gpu_check.py says exactly what).
# It prints each step as it ends, then a summary, then the path of the results file
# (DIR/results/gpu-check-DATE/results.json unless --out). Exit 0: every step passed; 1: a step
# failed, timed out, could not run or was cut by the budget; 2: no GPU found (one line, no
# results file) or no python3.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
if ! command -v python3 >/dev/null; then
  echo "gpu-check: python3 not found: the check is a Python script ($here/gpu_check.py)" >&2
  exit 2
fi
exec python3 -B "$here/gpu_check.py" --bundle "$here" "$@"
