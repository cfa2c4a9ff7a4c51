#!/usr/bin/env bash
# ctest bench.layer_table: bench/layer_vs_torch.sh on one tiny cell, kept (KEEP=DIR), then its
# table printed again from what it kept (--table DIR), without PyTorch unless TORCH=1. Checks that the two tables are the same,
# that the cell's row has every column (PyTorch's, or "(no torch)" without it), that step/gemm
# and apart, both from BM_LayerPaired, are above 1 (a step runs its GEMMs and more; apart adds
# the copies' time to the GEMMs'), that in step (the step's products timed inside it / the GEMMs
# alone) is above 0 and below step/gemm, that own, own floor and mem floor (the GEMMs, the floor,
# and the floor with the other ops' copies too, in the step's own memory) are above 0, and that a
# KEEP folder already holding results is refused.
#   bash bench/test_layer_table.sh BUILD_DIR
test_name=bench.layer_table
source "$(dirname "$0")/testing.sh" "$1"
run() {
  ROUNDS=1 REPS=1 MODELS=gpt DTYPES=f32 DROPOUTS=0.1 SHAPES=16,1,32,4 TORCH=${TORCH:-0} "$@"
}
run env KEEP="$work/run" bash bench/layer_vs_torch.sh "$build" 1 >"$work/first.txt" ||
  fail "the run exited $?"
cat "$work/first.txt"
bash bench/layer_vs_torch.sh --table "$work/run" >"$work/again.txt" || fail "--table exited $?"
[[ $(tail -n 2 "$work/first.txt") == "$(cat "$work/again.txt")" ]] ||
  fail "--table printed another table than the run: $(cat "$work/again.txt")"
row=$(grep -E '^gpt +0\.1 +f32 +16,1,32,4,4 ' "$work/again.txt") || fail "no row for the cell"
# model p dtype shape ours torch ratio gemm-only step/gemm in-step traffic apart floor own
# own-floor mem-floor steps (without PyTorch, "(no torch)" and no ratio: made two fields here)
read -r -a f <<<"${row/(no torch)/no-torch -}"
((${#f[@]} >= 17)) || fail "a row of ${#f[@]} fields, expected 17 or more: $row"
step_over_gemm=${f[8]} in_step=${f[9]} apart=${f[11]} floor=${f[12]} own=${f[13]} own_floor=${f[14]}
mem_floor=${f[15]}
awk -v a="$own" -v b="$own_floor" -v c="$mem_floor" 'BEGIN { exit !(a > 0 && b > 0 && c > 0) }' ||
  fail "own $own, own floor $own_floor and mem floor $mem_floor should be above 0: $row"
awk -v a="$step_over_gemm" -v b="$apart" -v c="$floor" 'BEGIN { exit !(a > 1 && b > 1 && c > 0) }' ||
  fail "step/gemm $step_over_gemm and apart $apart should be above 1, floor $floor above 0: $row"
awk -v i="$in_step" -v a="$step_over_gemm" 'BEGIN { exit !(i > 0 && i < a) }' ||
  fail "in step $in_step should be above 0 and below step/gemm $step_over_gemm: $row"
if run env KEEP="$work/run" bash bench/layer_vs_torch.sh "$build" 1 >/dev/null 2>"$work/err.txt"; then
  fail "a KEEP folder holding results was not refused"
fi
grep -q "is not empty" "$work/err.txt" || fail "the refusal does not say why: $(cat "$work/err.txt")"
echo "bench.layer_table: passed (step/gemm $step_over_gemm, in step $in_step, apart $apart, floor $floor, own $own, own floor $own_floor, mem floor $mem_floor)"
