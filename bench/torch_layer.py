#!/usr/bin/env python3
"""The shardscope Transformer layer in PyTorch: forward + backward time per step, f32, CPU or CUDA.

The same layer as parallel/layers/transformer_layer.cpp and parallel/layers/attention_core.cpp, op for op:
  x [s, b, h] -> LayerNorm -> QKV linear (columns grouped by head: [s, b, a, 3, d])
  -> q, k, v [b, a, s, d] -> scores = q k^T / sqrt(d) -> causal softmax -> dropout
  -> probs v -> [s, b, h] -> output linear -> dropout -> + x = h1
  h1 -> LayerNorm -> fc1 (4h) -> GeLU (tanh form) -> fc2 -> dropout -> + h1 = y
loss = sum(y); backward; parameter gradients accumulate, as in bench/layer_bench.cpp.

  python3 bench/torch_layer.py --threads 2 --shape 512,4,1024,16 [--shape ...] [--repetitions 5]
  python3 bench/torch_layer.py --device cuda --shape 1024,4,1024,16 --repetitions 20 --warmup 3
prints one line per shape: "s,b,h,a median_ms mean_ms repetitions", or with --per-step
"s,b,h,a ms ms ..." (each timed step), and on stderr the torch version and device. With
--device cuda: TF32 is off for matmuls and cuDNN (torch's default for matmuls, set explicitly so
that a site configuration cannot turn it on; shardscope's CUDA backend has it off too), and each
step is timed from a synchronised device to a synchronised device. Exits 3 with a message when
torch cannot be imported or the device is not there.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(f"torch_layer.py: PyTorch is missing ({error}); on Debian: apt-get install python3-torch",
          file=sys.stderr)
    sys.exit(3)


def make_weights(h, generator, device):
    # Drawn on the CPU (the same values on every device), then moved: leaves on `device`.
    def normal(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(device).requires_grad_()

    def const(n, value):
        return torch.full((n,), value, device=device).requires_grad_()

    # Linear weights are [in, out] as in shardscope, so a linear is x @ W + b (addmm).
    return {
        "ln1.weight": const(h, 1.0), "ln1.bias": const(h, 0.0),
        "qkv.weight": normal(h, 3 * h), "qkv.bias": normal(3 * h),
        "proj.weight": normal(h, h), "proj.bias": normal(h),
        "ln2.weight": const(h, 1.0), "ln2.bias": const(h, 0.0),
        "fc1.weight": normal(h, 4 * h), "fc1.bias": normal(4 * h),
        "fc2.weight": normal(4 * h, h), "fc2.bias": normal(h),
    }


def linear(x, w, b):
    return torch.matmul(x, w) + b


def layer(x, w, heads, p, causal_mask):
    s, b, h = x.shape
    d = h // heads
    ln1 = F.layer_norm(x, (h,), w["ln1.weight"], w["ln1.bias"], 1e-5)
    qkv = linear(ln1, w["qkv.weight"], w["qkv.bias"])
    # [s, b, a, 3, d] -> [3, b, a, s, d], copied as shardscope's permute does.
    grouped = qkv.reshape(s, b, heads, 3, d).permute(3, 1, 2, 0, 4).contiguous()
    q, k, v = grouped[0], grouped[1], grouped[2]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / d**0.5)
    probs = torch.softmax(scores.masked_fill(causal_mask, float("-inf")), dim=-1)
    probs = F.dropout(probs, p, training=True)
    context = torch.matmul(probs, v).permute(2, 0, 1, 3).reshape(s, b, h)
    h1 = x + F.dropout(linear(context, w["proj.weight"], w["proj.bias"]), p, training=True)
    ln2 = F.layer_norm(h1, (h,), w["ln2.weight"], w["ln2.bias"], 1e-5)
    m = F.gelu(linear(ln2, w["fc1.weight"], w["fc1.bias"]), approximate="tanh")
    m = linear(m, w["fc2.weight"], w["fc2.bias"])
    return h1 + F.dropout(m, p, training=True)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_shape(s, b, h, heads, p, repetitions, warmup, device):
    generator = torch.Generator().manual_seed(1)
    w = make_weights(h, generator, device)
    x = torch.randn(s, b, h, generator=generator).to(device)
    causal_mask = torch.ones(s, s, dtype=torch.bool, device=device).triu(1)
    times = []
    for step in range(warmup + repetitions):
        synchronize(device)
        start = time.perf_counter()
        layer(x, w, heads, p, causal_mask).sum().backward()
        synchronize(device)
        elapsed = time.perf_counter() - start
        if step >= warmup:
            times.append(elapsed * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU work)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--shape", action="append", required=True, help="s,b,h,a")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--per-step", action="store_true", help="print every step's time")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(f"torch_layer.py: --device {args.device}: torch {torch.__version__} sees no CUDA "
                  f"device (built for CUDA {torch.version.cuda})", file=sys.stderr)
            sys.exit(3)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        name = torch.cuda.get_device_name(device)
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {name}, TF32 off "
              f"(matmul allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
              f"cudnn allow_tf32={torch.backends.cudnn.allow_tf32})", file=sys.stderr)
    else:
        print(f"torch {torch.__version__} on cpu", file=sys.stderr)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for shape in args.shape:
        s, b, h, heads = (int(v) for v in shape.split(","))
        times = time_shape(s, b, h, heads, args.dropout, args.repetitions, args.warmup, device)
        if args.per_step:
            print(shape, *(f"{t:.2f}" for t in times), flush=True)
        else:
            median, mean = statistics.median(times), statistics.fmean(times)
            print(f"{shape} {median:.2f} {mean:.2f} {args.repetitions}", flush=True)


if __name__ == "__main__":
    main()
