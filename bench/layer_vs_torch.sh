#!/usr/bin/env bash
# The single-device Transformer layer, forward + backward on CPU, shardscope beside PyTorch, on the
# same layers, shapes, dtypes and thread count, in one run: for each round, model, dtype and shape
# it runs bench/layer_bench (Google Benchmark) then bench/torch_layer.py back to back, and prints
# the median time per step of each over every round, and their ratio (shardscope / PyTorch: below
# 1, shardscope is faster); beside them, from BM_LayerPaired (a step, then its own GEMMs alone,
# then its other ops as copies of what each reads and writes, then the two together in the step's
# order, in turn, so that each ratio compares times taken moments apart): the GEMMs' time,
# step/gemm (how far the step is from its GEMM-only bound), in step (the step's products, timed
# inside it, / gemm-only: what they lose to the step's cache), the copies' time with apart =
# (gemm-only + that) / gemm-only, and floor = the products with the copies between them (each
# meeting the cache the other left) / gemm-only: the least step/gemm a step that runs op by op can
# reach on this machine; then own = the same GEMMs alone in the step's own memory (each product's
# operands where the step had them: as many bytes, shared where the step shared them) / gemm-only,
# what the products lose to the step's footprint, own floor = the floor in that memory /
# gemm-only, and mem floor = that floor with the other ops' copies in the step's memory too (each
# reading what its op read and writing what it wrote, where the step had them) / gemm-only: the
# least step/gemm an op-by-op step can reach with its own footprint. Ratios are medians of each
# iteration's own. Without PyTorch (Debian:
# python3-torch) the PyTorch column says so.
#   bash bench/layer_vs_torch.sh [BUILD_DIR [THREADS]]    (build/default; THREADS: nproc)
#   bash bench/layer_vs_torch.sh --table DIR               the table of the results kept in DIR
# THREADS sets OPENBLAS_NUM_THREADS for both (shardscope's CPU backend: its GEMMs and loops;
# PyTorch's GEMMs go to the same OpenBLAS) and torch.set_num_threads. Environment: ROUNDS (3) and
# REPS (3, steps per round and cell); MODELS ("gpt llama": apply_model's presets, llama with
# g = ceil(a/4) key/value heads, the GQA of Llama 3 8B); DTYPES ("f32 bf16": PyTorch's own CPU
# bfloat16 kernels as the peer of shardscope's bf16); DROPOUTS ("0.1 0": gpt's three dropouts;
# llama has none); SHAPES ("s,b,h,a ..."); TORCH=0 leaves PyTorch out. OMP_WAIT_POLICY=
# passive keeps PyTorch's idle OpenMP threads from spinning: on a machine shared with other work,
# spinning made its 2-thread steps several times slower. KEEP=DIR keeps each cell's results in DIR
# (a new or empty folder) as it finishes, so a run stopped part way (a full table takes an hour
# and more) still gives the table of what it finished, with --table DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
# The table of the results in folder $1.
print_table() {
  python3 - "$1" <<'EOF'
import collections, glob, json, os, statistics, sys
out = sys.argv[1]
# Per cell: BM_LayerStep's times, and BM_LayerPaired's counters, one value per repetition.
ours, torch = collections.defaultdict(list), collections.defaultdict(list)
paired = collections.defaultdict(lambda: collections.defaultdict(list))
for path in glob.glob(f"{out}/shardscope-*.json"):
    cell = os.path.basename(path)[:-5].split("-", 2)[2]  # shardscope-ROUND-CELL.json
    for run in json.load(open(path))["benchmarks"]:
        if run.get("run_type") != "iteration":
            continue
        if run["name"].startswith("BM_LayerPaired/"):
            for k in ("gemm_ms", "step_over_gemm", "in_step", "traffic_ms", "apart",
                      "floor_over_gemm", "own_over_gemm", "own_floor_over_gemm",
                      "mem_floor_over_gemm"):
                if k in run:  # in_step: from 2026-11-27 on; own*: 2026-11-28; mem*: 11-29
                    paired[cell][k].append(run[k])
        else:
            scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[run["time_unit"]]
            ours[cell].append(run["real_time"] * scale)
if os.path.exists(f"{out}/torch.txt"):
    for line in open(f"{out}/torch.txt"):
        cell, *times = line.split()
        torch[cell] += [float(t) for t in times]
print(f"{'model':<6} {'p':<4} {'dtype':<5} {'s,b,h,a,g':<18} {'shardscope ms/step':>19} "
      f"{'torch ms/step':>14} {'ratio':>6} {'gemm-only ms':>13} {'step/gemm':>10} {'in step':>8} "
      f"{'traffic ms':>11} {'apart':>6} {'floor':>6} {'own':>5} {'own floor':>9} {'mem floor':>9}  "
      "steps")
order = lambda cell: (*cell.split(",")[:3], int(cell.split(",")[3]))
fmt = lambda v, spec: "-" if v is None else format(v, spec)
for cell in sorted(ours, key=order):
    model, p, dtype, shape = cell.split(",", 3)
    a = statistics.median(ours[cell])
    t = statistics.median(torch[cell]) if torch[cell] else None
    m = {k: statistics.median(v) for k, v in paired[cell].items()}
    print(f"{model:<6} {p:<4} {dtype:<5} {shape:<18} {a:>19.1f} "
          f"{'(no torch)' if t is None else f'{t:.1f}':>14} {'' if t is None else f'{a / t:.2f}':>6} "
          f"{fmt(m.get('gemm_ms'), '.1f'):>13} {fmt(m.get('step_over_gemm'), '.2f'):>10} "
          f"{fmt(m.get('in_step'), '.2f'):>8} "
          f"{fmt(m.get('traffic_ms'), '.1f'):>11} {fmt(m.get('apart'), '.2f'):>6} "
          f"{fmt(m.get('floor_over_gemm'), '.2f'):>6} {fmt(m.get('own_over_gemm'), '.2f'):>5} "
          f"{fmt(m.get('own_floor_over_gemm'), '.2f'):>9} "
          f"{fmt(m.get('mem_floor_over_gemm'), '.2f'):>9}  "
          f"{len(ours[cell])}{'' if t is None else f' + {len(torch[cell])}'}")
EOF
}

if [ "${1:-}" = --table ]; then
  [ -n "${2:-}" ] && ls "$2"/shardscope-*.json >/dev/null 2>&1 ||
    { echo "layer_vs_torch: --table needs a folder a KEEP=DIR run wrote results to, given '${2:-}'" >&2; exit 2; }
  print_table "$2"
  exit
fi
build=${1:-build/default}
bench=$build/bench/layer_bench
[ -x "$bench" ] || { echo "build layer_bench first: cmake --build $build --target layer_bench" >&2; exit 1; }
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=${2:-$cores}
rounds=${ROUNDS:-3}
reps=${REPS:-3}
models=${MODELS:-"gpt llama"}
dtypes=${DTYPES:-"f32 bf16"}
dropouts=${DROPOUTS:-"0.1 0"}
shapes=${SHAPES:-"128,4,256,8 256,4,512,8 512,4,1024,16"}
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive

# Debian's python3-torch installs for /usr/bin/python3, which may not be the python3 on PATH.
torch_python=""
if [ "${TORCH:-1}" != 0 ]; then
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c "import torch" 2>/dev/null; then torch_python=$py; break; fi
  done
fi

if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  [ -z "$(ls -A "$KEEP")" ] || { echo "layer_vs_torch: KEEP=$KEEP is not empty (give a new folder)" >&2; exit 2; }
  out=$KEEP
  echo "results kept in $out (the table again: bash bench/layer_vs_torch.sh --table $out)"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), nproc $cores"
echo "threads: OPENBLAS_NUM_THREADS=$threads (shardscope GEMMs and loops), torch.set_num_threads($threads)"
if [ -n "$torch_python" ]; then
  echo "torch: $("$torch_python" -c 'import torch; print(torch.__version__)')"
else
  if [ "${TORCH:-1}" = 0 ]; then
    echo "PyTorch left out (TORCH=0): shardscope alone"
  else
    echo "PyTorch is missing (Debian: apt-get install python3-torch): shardscope alone"
  fi
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for model in $models; do
    ps=$dropouts
    [ "$model" = llama ] && ps=0  # Llama's layer has no dropout
    for p in $ps; do
      for dtype in $dtypes; do
        for shape in $shapes; do
          IFS=, read -r s b h a <<<"$shape"
          g=$a
          [ "$model" = llama ] && g=$(((a + 3) / 4))
          cell="$model,$p,$dtype,$s,$b,$h,$a,$g"
          "$bench" --model="$model" --dtype="$dtype" --dropout="$p" --shape="$s,$b,$h,$a,$g" \
            --benchmark_filter="^BM_Layer(Step|Paired)/" --benchmark_repetitions="$reps" \
            --benchmark_format=json >"$out/partial.json" 2>/dev/null
          mv "$out/partial.json" "$out/shardscope-$round-$cell.json"  # whole cells only
          if [ -n "$torch_python" ]; then
            times=$("$torch_python" bench/torch_layer.py --threads "$threads" --model "$model" \
              --dtype "$dtype" --dropout "$p" --shape "$s,$b,$h,$a,$g" --repetitions "$reps" \
              --per-step 2>/dev/null |
              cut -d' ' -f2-)
            echo "$cell $times" >>"$out/torch.txt"
          fi
        done
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
print_table "$out"
