#!/usr/bin/env bash
# The visualizer from a fresh Debian 12 machine: installs what is missing, builds shardscope-viz
# and runs a tp-sp layer at degree 4 live (ranks are threads, every one paused before its first
# op). With a display it opens the window: step with the Controls panel. Without one (a server,
# CI) it draws under xvfb-run and writes three screenshots to build/default/viz-shots/: the
# forward stopped at the all-gather before QKV, at the reduce-scatter after the attention output
# projection, and the backward at a collective.
# Extra arguments go to shardscope-viz (for example --mode ulysses, or --trace FILE.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target shardscope-viz
viz=./build/default/viz/app/shardscope-viz
args=(--mode tp-sp --degree 4 --seq 64 --batch 2 --hidden 128 --heads 4 --steps 2 "$@")
if [ -n "${DISPLAY:-}" ]; then
  exec "$viz" "${args[@]}"
fi
out=build/default/viz-shots
mkdir -p "$out"
shot() {  # shot NAME SCRIPT
  xvfb-run -a -s "-screen 0 1600x1000x24" "$viz" "${args[@]}" --headless --width 1600 \
    --height 1000 --script "$2" --screenshot "$out/$1.png"
}
echo "no display: drawing under xvfb-run into $out/"
shot forward-all-gather "next-collective"
shot forward-reduce-scatter "next-collective 2"
shot backward-collective "break phase backward; continue; clear; next-collective"
