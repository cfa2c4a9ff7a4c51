#!/usr/bin/env bash
# What activation recomputation costs and saves, side by side in one run: `shardscope run` with
# --recompute none, selective and full on the same layer, mode and degree; per setting the step
# time (median of steps 1 to STEPS-1, the reference check left out with --no-check), rank 0's
# saved activations (measured, equal to the formula) and its matrix-product FLOPs forward and run
# again in backward; then each setting's time and memory as a ratio of none's.
#   bash bench/recompute_cost.sh [BUILD_DIR [STEPS [RUN_FLAGS...]]]
# (BUILD_DIR build/default, STEPS 6, RUN_FLAGS --mode tp-sp --degree 2 --seq 512 --batch 2
# --hidden 512 --heads 8)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
steps=${2:-6}
(($# > 2)) && shift 2 || set --
flags=("$@")
((${#flags[@]})) || flags=(--mode tp-sp --degree 2 --seq 512 --batch 2 --hidden 512 --heads 8)
app=$build/apps/shardscope
[ -x "$app" ] || { echo "build shardscope first: cmake --build $build --target shardscope" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), nproc $(nproc)"
echo "flags: ${flags[*]} --steps $steps --no-check"
for r in none selective full; do
  "$app" run "${flags[@]}" --steps "$steps" --no-check --recompute "$r" \
    --report "$out/$r.json" >/dev/null
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for r in ("none", "selective", "full"):
    rep = json.load(open(f"{sys.argv[1]}/{r}.json"))
    ms = statistics.median(s["time_ms"] for s in rep["steps"][1:])
    mem = rep["memory"]["per_rank"][0]
    rows[r] = (ms, mem["saved_activation_bytes"], mem["formula_bytes"], mem["formula"],
               rep["flops"]["forward"], rep["flops"]["recomputed"])
base_ms, base_mem = rows["none"][0], rows["none"][1]
print(f"{'recompute':<10}{'step ms':>9}{'x none':>8}{'saved B':>12}{'x none':>8}"
      f"{'fwd GFLOP':>11}{'again GFLOP':>13}  formula (measured = formula)")
for r, (ms, saved, formula_b, formula, fwd, again) in rows.items():
    ok = "yes" if saved == formula_b else "NO"
    print(f"{r:<10}{ms:>9.1f}{ms / base_ms:>8.2f}{saved:>12.0f}{saved / base_mem:>8.3f}"
          f"{fwd / 1e9:>11.3f}{again / 1e9:>13.3f}  {formula} ({ok})")
PY
