#!/usr/bin/env bash
# ThreadComm bus bandwidth beside memcpy on this machine, in one run of bench/comm_bench: for each
# size, memcpy by one thread and by two at once ("2x memcpy": two threads copying their own
# buffers together), then all_reduce, all_gather, reduce_scatter and all_to_all at 2, 4 and 8
# ranks; each the median of 3 repetitions. Prints one table with busbw / memcpy (one thread) per
# row. Definitions: bench/comm_bench.cpp.
#   bash bench/comm_vs_memcpy.sh [BUILD_DIR [COMM_BENCH_ARGS...]]   (BUILD_DIR: build/default)
# e.g. --benchmark_filter='Memcpy|ranks:2' for two ranks only (keep Memcpy in a filter: the ratio
# needs it). Ranks are threads: with more ranks than cores they take turns, and the table says so.
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
memcpy, memcpy2 = {}, {}
for run in runs:
    m = re.match(r"BM_Memcpy(TwoThreads)?/bytes:(\d+)", run["run_name"])
    if m:
        (memcpy2 if m.group(1) else memcpy)[int(m.group(2))] = run["bw"] / gib

def human(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"

print(f"{'collective':<15}{'ranks':>6}{'bytes':>10}{'time us':>11}{'algbw GiB/s':>13}"
      f"{'busbw GiB/s':>13}{'memcpy GiB/s':>14}{'busbw/memcpy':>14}{'2x memcpy GiB/s':>17}")
for run in runs:
    m = re.match(r"BM_Collective/(\w+)/ranks:(\d+)/bytes:(\d+)", run["run_name"])
    if not m:
        continue
    kind, ranks, size = m.group(1), int(m.group(2)), int(m.group(3))
    note = "  (more ranks than cores)" if ranks > cores else ""
    if "busbw" not in run:
        print(f"{kind:<15}{ranks:>6}{human(size):>10}  error: {run.get('error_message', '?')}")
        continue
    bus, ref = run["busbw"] / gib, memcpy.get(size, float("nan"))
    print(f"{kind:<15}{ranks:>6}{human(size):>10}{run['real_time']:>11.1f}{run['algbw'] / gib:>13.2f}"
          f"{bus:>13.2f}{ref:>14.2f}{bus / ref:>14.2f}{memcpy2.get(size, float('nan')):>17.2f}{note}")
EOF
