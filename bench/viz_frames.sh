#!/usr/bin/env bash
# Frame time of shardscope-viz, side by side in one run: a synthetic trace of 8 ranks and 100k
# events against a live tp-sp layer at degree 4 (a few hundred events), each with the views
# cached (an idle frame) and rebuilt every frame (a frame of a running session). Under xvfb-run
# when there is no display, so the OpenGL part is Mesa's software rasterizer: "frame_ms" then
# measures the CPU drawing pixels, "ui_ms" the view model and ImGui.
#   bash bench/viz_frames.sh [FRAMES [BUILD_DIR]]      (FRAMES: 100; BUILD_DIR: build/default)
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-100}
build=${2:-build/default}
viz=$build/viz/app/shardscope-viz
[ -x "$viz" ] || { echo "build shardscope-viz first: cmake --build $build --target shardscope-viz" >&2; exit 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg)"
run() {
  if [ -n "${DISPLAY:-}" ]; then "$viz" "$@"; else xvfb-run -a -s "-screen 0 1600x1000x24" "$viz" "$@"; fi
}
for rebuild in "" --bench-rebuild; do
  echo "synthetic 8 ranks x 100k events ${rebuild:-(views cached)}"
  run --synthetic 8,100000 --script continue --headless --bench-frames "$frames" $rebuild
  echo "live tp-sp t=4 in backward ${rebuild:-(views cached)}"
  run --mode tp-sp --degree 4 --seq 64 --hidden 128 --heads 4 --script "break phase backward; continue" \
    --headless --bench-frames "$frames" $rebuild
done
