#!/usr/bin/env bash
# The single-device Transformer layer, forward + backward on CPU in f32, shardscope beside
# PyTorch, on the same shapes and thread count, in one run: for each round and shape it runs
# bench/layer_bench (Google Benchmark) then bench/torch_layer.py back to back, and prints the
# median time per step of each over every round, and their ratio (shardscope / PyTorch: below 1,
# shardscope is faster). Without PyTorch (Debian: python3-torch) the PyTorch column says so.
#   bash bench/layer_vs_torch.sh [BUILD_DIR [THREADS]]    (build/default; THREADS: nproc)
# THREADS sets OPENBLAS_NUM_THREADS for both (shardscope's CPU backend: its GEMMs and loops;
# PyTorch's GEMMs go to the same OpenBLAS) and torch.set_num_threads. Environment: ROUNDS (3) and
# REPS (3, steps per round and shape); SHAPES ("s,b,h,a ..."; those layer_bench registers). OMP_WAIT_POLICY=passive keeps PyTorch's idle OpenMP threads from spinning: on a
# machine shared with other work, spinning made its 2-thread steps several times slower.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
bench=$build/bench/layer_bench
[ -x "$bench" ] || { echo "build layer_bench first: cmake --build $build --target layer_bench" >&2; exit 1; }
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=${2:-$cores}
rounds=${ROUNDS:-3}
reps=${REPS:-3}
shapes=${SHAPES:-"128,4,256,8 256,4,512,8 512,4,1024,16"}
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive

# Debian's python3-torch installs for /usr/bin/python3, which may not be the python3 on PATH.
torch_python=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c "import torch" 2>/dev/null; then torch_python=$py; break; fi
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), nproc $cores"
echo "threads: OPENBLAS_NUM_THREADS=$threads (shardscope GEMMs and loops), torch.set_num_threads($threads)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$torch_python" ] || echo "PyTorch is missing (Debian: apt-get install python3-torch): shardscope alone"
for round in $(seq "$rounds"); do
  for shape in $shapes; do
    IFS=, read -r s b h a <<<"$shape"
    "$bench" --benchmark_filter="^BM_LayerStep/s:$s/b:$b/h:$h/a:$a/" --benchmark_repetitions="$reps" \
      --benchmark_format=json >"$out/shardscope-$round-$shape.json" 2>/dev/null
    if [ -n "$torch_python" ]; then
      "$torch_python" bench/torch_layer.py --threads "$threads" --shape "$shape" --repetitions "$reps" \
        --per-step >>"$out/torch.txt"
    fi
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$shapes" <<'EOF'
import glob, json, statistics, sys
out, shapes = sys.argv[1], sys.argv[2].split()
ours, torch = {s: [] for s in shapes}, {s: [] for s in shapes}
for path in glob.glob(f"{out}/shardscope-*.json"):
    shape = path.rsplit("-", 1)[1][:-5]
    for run in json.load(open(path))["benchmarks"]:
        if run.get("run_type") == "iteration":
            scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[run["time_unit"]]
            ours[shape].append(run["real_time"] * scale)
try:
    for line in open(f"{out}/torch.txt"):
        shape, *times = line.split()
        torch[shape] += [float(t) for t in times]
except FileNotFoundError:
    pass
print(f"{'shape (s,b,h,a)':<18} {'shardscope ms/step':>19} {'torch ms/step':>14} {'ratio':>6}  steps")
for s in shapes:
    a = statistics.median(ours[s])
    if torch[s]:
        t = statistics.median(torch[s])
        print(f"{s:<18} {a:>19.1f} {t:>14.1f} {a / t:>6.2f}  {len(ours[s])} + {len(torch[s])}")
    else:
        print(f"{s:<18} {a:>19.1f} {'(no torch)':>14} {'':>6}  {len(ours[s])}")
EOF
