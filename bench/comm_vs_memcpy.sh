#!/usr/bin/env bash
# ThreadComm against the bound that shared memory puts on it, in one run of bench/comm_bench. For
# each size: memcpy by one thread, and two threads copying their own buffers at once with memcpy
# and with streaming stores; then all_reduce, all_gather, reduce_scatter and all_to_all at 2, 4
# and 8 ranks, each beside its bound: the bytes its ranks read and write (thread_comm_traffic,
# parallel/comm/thread_comm.h) at the two threads' copy rate C measured right after it, a copied
# byte being one read and one write (bound = traffic / 2C). Each the median of 3 repetitions.
# BM_CollectivePlain rows ("all_gather plain") are the same collectives with plain stores only.
# Prints the copy rates, then busbw, the bound and bound / time per collective. Definitions:
# bench/comm_bench.cpp; the derivation: docs/benchmarks.md.
#   bash bench/comm_vs_memcpy.sh [BUILD_DIR [COMM_BENCH_ARGS...]]   (BUILD_DIR: build/default)
# e.g. --benchmark_filter='Memcpy|Copy|Collective/.*ranks:2' for two ranks only, with streaming
# stores as ThreadComm uses them (each bound is measured beside its collective; Memcpy|Copy adds
# the table of copy rates). Ranks are threads: with more ranks than cores they take turns, and
# the table says so.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
(($#)) && shift
bench=$build/bench/comm_bench
[ -x "$bench" ] || { echo "build comm_bench first: cmake --build $build --target comm_bench" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), nproc $cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.2 "$@" --benchmark_format=json >"$out/comm.json" 2>/dev/null
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/comm.json" "$cores" <<'EOF'
import json, re, sys
path, cores = sys.argv[1], int(sys.argv[2])
gib = 1024.0**3
runs = [r for r in json.load(open(path))["benchmarks"] if r.get("aggregate_name") == "median"]

def human(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"

copies = {}  # size -> {benchmark: GiB/s}
for run in runs:
    m = re.match(r"BM_(Memcpy|MemcpyTwoThreads|StreamCopyTwoThreads)/bytes:(\d+)", run["run_name"])
    if m:
        copies.setdefault(int(m.group(2)), {})[m.group(1)] = run["bw"] / gib
if copies:
    print("copy rates, GiB/s copied (two threads: both together)")
    print(f"{'bytes':>10}{'memcpy':>10}{'2x memcpy':>12}{'2x streaming':>15}")
    for size in sorted(copies):
        c = copies[size]
        print(f"{human(size):>10}" + "".join(f"{c.get(k, float('nan')):>{w}.2f}" for k, w in
              (("Memcpy", 10), ("MemcpyTwoThreads", 12), ("StreamCopyTwoThreads", 15))))
    print()
print(f"{'collective':<21}{'ranks':>6}{'bytes':>10}{'time us':>11}{'busbw GiB/s':>13}"
      f"{'bound us':>11}{'of bound':>10}")
for run in runs:
    m = re.match(r"BM_Collective(Plain)?/(\w+)/ranks:(\d+)/bytes:(\d+)", run["run_name"])
    if not m:
        continue
    kind, ranks, size = m.group(2) + (" plain" if m.group(1) else ""), int(m.group(3)), int(m.group(4))
    note = "  (more ranks than cores)" if ranks > cores else ""
    if "busbw" not in run:
        print(f"{kind:<21}{ranks:>6}{human(size):>10}  error: {run.get('error_message', '?')}")
        continue
    bound = run["bound_us"]
    print(f"{kind:<21}{ranks:>6}{human(size):>10}{run['real_time']:>11.1f}{run['busbw'] / gib:>13.2f}"
          f"{bound:>11.1f}{bound / run['real_time']:>10.2f}{note}")
EOF
