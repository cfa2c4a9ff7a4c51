#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: installs what is missing, builds shardscope, then
# trains the Transformer layer single-device and under TP, TP-SP and Ulysses at degree 4 (ranks
# are threads), printing for each the loss per step, the check against the single-device layer,
# the communication table and the activation-memory table beside the papers' formulas; then the
# column-parallel linear -> LayerNorm -> row-parallel linear block with the exact and the local
# distributed LayerNorm. Reports, dumps (.npy + manifest.json) and Chrome traces (open them at
# ui.perfetto.dev) land in build/default/demo/.
# Extra arguments go to every `shardscope run` (for example --seq 256 --hidden 512 --heads 8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target shardscope
shape=(--seq 128 --batch 4 --hidden 256 --heads 8 --dropout 0.1 --steps 4 --lr 2)
out=build/default/demo
rm -rf "$out" && mkdir -p "$out"
./build/default/apps/shardscope run --mode single "${shape[@]}" --report "$out/report-single.json" \
  --dump "$out/dump-single" --trace "$out/trace-single.json" "$@"
for mode in tp tp-sp ulysses; do
  echo
  ./build/default/apps/shardscope run --mode "$mode" --degree 4 "${shape[@]}" \
    --report "$out/report-$mode.json" --dump "$out/dump-$mode" --trace "$out/trace-$mode.json" "$@"
done
echo
echo "== the tp dump against the single-device dump (shardscope check)"
./build/default/apps/shardscope check "$out/dump-tp" "$out/dump-single" | tail -4
echo
./build/default/apps/shardscope mlp-ln --degree 4 --norm both
echo
echo "traces, dumps and reports: $out (open a trace-*.json at ui.perfetto.dev or chrome://tracing)"
