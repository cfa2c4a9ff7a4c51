#!/usr/bin/env bash
# ctest bench.trace_ops: bench/trace_ops.py on the trace of a tiny `shardscope run`. Checks that
# the layer's ops are rows (the products among them, the others not), that each total is the sum
# of its rows, that one step's totals add up to every forward and backward slice of that step
# (summed here from the trace itself), and that a step range with no slices exits 2.
#   bash bench/test_trace_ops.sh BUILD_DIR
test_name=bench.trace_ops
source "$(dirname "$0")/testing.sh" "$1"
OPENBLAS_NUM_THREADS=1 "$build/apps/shardscope" run --mode single --seq 16 --batch 1 --hidden 32 \
  --heads 4 --steps 3 --dropout 0.1 --no-check --trace "$work/trace.json" >/dev/null ||
  fail "shardscope run exited $?"
python3 bench/trace_ops.py --steps 1:1 "$work/trace.json" "$work/trace.json" >"$work/ops.txt" ||
  fail "trace_ops.py exited $?"
cat "$work/ops.txt"
grep -qE '^forward +attn\.qkv +matmul ' "$work/ops.txt" || fail "no row for attn.qkv's matmul"
grep -qE '^backward +mlp\.gelu +gelu ' "$work/ops.txt" || fail "no row for mlp.gelu's backward"
# phase scope op ms ms ratio: the sums of the rows by kind, against the totals' lines (each
# printed to 0.0005 ms).
awk '
  $1 == "total" && $2 == "products" { products = $3 }
  $1 == "total" && $2 == "other" { other = $4 }
  ($1 == "forward" || $1 == "backward") && NF == 6 {
    if ($3 == "matmul" || $3 == "causal_matmul") { rows_p += $4; n_p++ } else { rows_o += $4; n_o++ }
  }
  END {
    if (n_p == 0 || n_o == 0) { print "no product or no other rows"; exit 1 }
    if (products - rows_p > 0.0005 * (n_p + 1) || rows_p - products > 0.0005 * (n_p + 1)) {
      print "products total " products ", its rows add up to " rows_p; exit 1 }
    if (other - rows_o > 0.0005 * (n_o + 1) || rows_o - other > 0.0005 * (n_o + 1)) {
      print "other ops total " other ", its rows add up to " rows_o; exit 1 }
  }' "$work/ops.txt" || fail "the totals are not the sums of their rows"
whole=$(python3 -c '
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
print("%.4f" % (sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in ("forward", "backward")
          and e.get("args", {}).get("step") == 1) / 1000.0))' "$work/trace.json")
awk -v whole="$whole" '$1 == "total" && $2 == "products" { p = $3 } $1 == "total" && $2 == "other" { o = $4 }
  END { d = p + o - whole; exit !(d < 0.002 && d > -0.002) }' "$work/ops.txt" ||
  fail "step 1's totals do not add up to its slices ($whole ms)"
if python3 bench/trace_ops.py --steps 50:60 "$work/trace.json" >/dev/null 2>"$work/err.txt"; then
  fail "steps with no slices did not fail"
else
  [[ $? == 2 ]] || fail "steps with no slices exited other than 2"
fi
grep -q "no forward or backward slices in steps 50 to 60" "$work/err.txt" ||
  fail "the error does not name the steps: $(cat "$work/err.txt")"
echo "bench.trace_ops: passed (step 1: $whole ms of slices)"
