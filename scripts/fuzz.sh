#!/usr/bin/env bash
# The fuzz job: builds the libFuzzer targets (the `fuzz` preset: clang++, ASan + UBSan, in
# build/fuzz) and runs each for SECONDS (12 by default) over a scratch copy of its seed corpus
# tests/fuzz_corpus/<target>/ (with tests/fuzz_corpus/<target>.dict), each input bounded in time
# and memory. A crash, a leak, undefined behaviour, a broken property, a slow input or too much
# memory fails the script, naming the target, the report and the reproducer (kept in
# build/fuzz/crashes/); replay one with build/fuzz/fuzz/<target>_fuzz <reproducer>.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]  (targets: all of them by default)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-12}
(($#)) && shift
targets=("$@")
((${#targets[@]})) || targets=(trace_reader manifest npy cli debugger)

cmake --preset fuzz -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/shardscope-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
crashes=build/fuzz/crashes
mkdir -p "$crashes"
export UBSAN_OPTIONS=print_stacktrace=1
failed=()
for target in "${targets[@]}"; do
  cp -r "tests/fuzz_corpus/$target" "$scratch/$target"
  flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
    -artifact_prefix="$crashes/$target-")
  [[ -f tests/fuzz_corpus/$target.dict ]] && flags+=(-dict="tests/fuzz_corpus/$target.dict")
  log=$scratch/$target.log
  # TMPDIR: the targets' scratch files (fuzz/fuzz_support.h) go with the rest, even after a crash.
  if TMPDIR=$scratch "build/fuzz/fuzz/${target}_fuzz" "${flags[@]}" "$scratch/$target" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $target: ${runs:-?} inputs in ${seconds} s, no failure"
  else
    echo "fuzz: $target FAILED; the end of its log:" >&2
    { grep -v '^#[0-9]' "$log" || true; } | tail -40 >&2
    reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz: $target: reproducer ${reproducer:-(none written)}; replay:" \
      "build/fuzz/fuzz/${target}_fuzz ${reproducer:-}" >&2
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets clean, ${seconds} s each"
