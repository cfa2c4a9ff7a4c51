#!/usr/bin/env bash
# ctest bench.layer_kernels: layer_bench's BM_LayerKernel on a tiny layer of each preset. Checks
# that each preset's kernels are the ones its choices make (gpt: LayerNorm and GeLU; llama:
# RMSNorm, SwiGLU and RoPE; both the softmax, the dropouts, the heads' split and merge and the
# copy), that each reports the bytes of every tensor it takes, worked out here from the shape (f32:
# 4 bytes; masks 1; the MLP's width from the copy's, 4h for gpt; the fused QKV columns from the
# key/value heads g in the names), and a rate above 0.
#   bash bench/test_layer_kernels.sh BUILD_DIR
test_name=bench.layer_kernels
source "$(dirname "$0")/testing.sh" "$1"
s=16 b=2 h=32 a=4
for model in gpt llama; do
  shape=$s,$b,$h,$a
  [ $model = llama ] && shape=$shape,2  # grouped-query attention: 2 key/value heads
  OPENBLAS_NUM_THREADS=1 "$build/bench/layer_bench" --model=$model --shape=$shape \
    --benchmark_filter=BM_LayerKernel --benchmark_min_time=0.001 --benchmark_format=json \
    >"$work/$model.json" 2>"$work/$model.err" || fail "layer_bench --model=$model exited $?"
  python3 - "$work/$model.json" $model $s $b $h $a <<'PY' || fail "$model: the kernels above"
import json, re, sys
path, model, s, b, h, a = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
benchmarks = json.load(open(path))["benchmarks"]
runs = {run["name"].split("/")[1]: run for run in benchmarks}
# The key/value heads g from the names' g: (the preset's; a for gpt).
g = int(re.search(r"/g:(\d+)/", benchmarks[0]["name"]).group(1))
# The MLP's width f from the copy of [s, b, f] (llama's f is its preset's, not 4h).
f = round(runs["copy_ffn"]["MB"] * 1e6 / 8 / (s * b)) if "copy_ffn" in runs else 0
hid, sco, ffn, rows = s * b * h, b * a * s * s, s * b * f, s * b
gate = 2 * ffn if model == "llama" else ffn  # SwiGLU's input: the gate and up values
norm = {  # every tensor each kernel takes, in elements of 4 bytes (and masks of 1)
    "gpt": {"layernorm_forward": 4 * (2 * hid + 2 * h + 2 * rows),
            "layernorm_backward": 4 * (3 * hid + 3 * h + 2 * rows),
            "gelu_forward": 4 * (gate + ffn), "gelu_backward": 4 * (2 * gate + ffn)},
    "llama": {"rmsnorm_forward": 4 * (2 * hid + h + rows),
              "rmsnorm_backward": 4 * (3 * hid + 2 * h + rows),
              "swiglu_forward": 4 * (gate + ffn), "swiglu_backward": 4 * (2 * gate + ffn),
              "rope_forward": 4 * 2 * hid},
}[model]
expected = dict(norm, softmax_forward=4 * 2 * sco, softmax_backward=4 * 3 * sco,
                dropout_forward_scores=4 * 2 * sco + sco, dropout_backward_scores=4 * 2 * sco + sco,
                dropout_forward_hidden=4 * 2 * hid + hid, copy_ffn=4 * 2 * ffn,
                head_split=4 * 2 * s * b * (a + 2 * g) * (h // a), merge_heads=4 * 2 * hid)
bad = [] if model == "llama" or f == 4 * h else [f"f = {f}, expected 4h = {4 * h}"]
if set(runs) != set(expected):
    bad.append(f"kernels {sorted(runs)}, expected {sorted(expected)}")
for name, bytes_ in expected.items():
    run = runs.get(name)
    if run is None:
        continue
    if abs(run["MB"] * 1e6 - bytes_) > 0.5:
        bad.append(f"{name}: {run['MB'] * 1e6:.0f} bytes, expected {bytes_}")
    if not run["bytes_per_second"] > 0:
        bad.append(f"{name}: a rate of {run['bytes_per_second']} bytes/s")
for line in bad:
    print(f"{model}: {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
done
echo "bench.layer_kernels: passed (gpt and llama at s=$s b=$b h=$h a=$a, llama's g=2)"
