#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: installs what is missing, builds shardscope and
# trains the single-device Transformer layer, printing its loss and activation-memory tables.
# Extra arguments go to `shardscope run` (for example --seq 256 --hidden 512 --heads 8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target shardscope
./build/default/apps/shardscope run --mode single --seq 128 --batch 4 --hidden 256 --heads 8 \
  --dropout 0.1 --steps 8 --lr 2 --report build/default/report.json "$@"
