#!/usr/bin/env python3
"""The shardscope Transformer layer in PyTorch: forward + backward time per step, CPU or CUDA.

The same layers as parallel/layers/transformer_layer.cpp and parallel/layers/attention_core.cpp
(apply_model's presets), op for op. --model gpt (the default):
  x [s, b, h] -> LayerNorm -> QKV linear (columns grouped by head: [s, b, a, 3, d])
  -> q, k, v [b, a, s, d] -> scores = q k^T / sqrt(d) -> causal softmax -> dropout
  -> probs v -> [s, b, h] -> output linear -> dropout -> + x = h1
  h1 -> LayerNorm -> fc1 (4h) -> GeLU (tanh form) -> fc2 -> dropout -> + h1 = y
--model llama (no biases, no dropout, g key/value heads):
  x -> RMSNorm -> QKV (a d query columns, then g pairs of key and value heads [s, b, g, 2, d])
  -> rotary embedding of q and k (rotate-half, base 10000) -> q [b, g, r s, d] (r = a / g query
  heads per key/value head), k, v [b, g, s, d] -> scores / sqrt(d) -> causal softmax -> probs v
  -> [s, b, h] -> output linear -> + x = h1
  h1 -> RMSNorm -> fc1 (2f: gate and up interleaved in pairs) -> SiLU(gate) up -> fc2 -> + h1 = y
  with f = 8h/3 rounded up to a multiple of 48.
loss = sum(y); backward; parameter gradients accumulate, as in bench/layer_bench.cpp. --dtype
bf16: weights, input and every activation in bfloat16 (PyTorch's own CPU bf16 kernels).

  python3 bench/torch_layer.py --threads 2 --shape 512,4,1024,16 [--shape ...] [--repetitions 5]
  python3 bench/torch_layer.py --model llama --dtype bf16 --shape 256,4,512,8,2
  python3 bench/torch_layer.py --device cuda --shape 1024,4,1024,16 --repetitions 20 --warmup 3
  python3 bench/torch_layer.py --compare-dump DIR    (a `shardscope run --mode single --dump DIR`)
--shape is s,b,h,a or s,b,h,a,g (g: key/value heads, llama only; default a). Prints one line per
shape: "SHAPE median_ms mean_ms repetitions", or with --per-step "SHAPE ms ms ..." (each timed
step), SHAPE as given, and on stderr the torch version and device. --compare-dump runs this
file's layer on a single-device f32 or f64 dump's weights and input (a gpt one with --dropout 0,
f64 for a margin: 1e-10 against f32's 1e-5) and
prints the largest |difference| from the dump's output y over the largest |y - x| (what the
sublayers add to the input x): the proof that the two layers are the same; it exits 1 above the bound. With
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


def make_weights(model, h, heads, kv_heads, generator, device, dtype):
    # Drawn on the CPU (the same values on every device), then moved: leaves on `device`.
    def normal(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(device, dtype).requires_grad_()

    def const(n, value):
        return torch.full((n,), value, device=device, dtype=dtype).requires_grad_()

    # Linear weights are [in, out] as in shardscope, so a linear is x @ W + b (addmm).
    if model == "llama":
        d, f = h // heads, llama_ffn(h)
        return {
            "norm1.weight": const(h, 1.0), "qkv.weight": normal(h, (heads + 2 * kv_heads) * d),
            "proj.weight": normal(h, h), "norm2.weight": const(h, 1.0),
            "fc1.weight": normal(h, 2 * f), "fc2.weight": normal(f, h),
        }
    return {
        "ln1.weight": const(h, 1.0), "ln1.bias": const(h, 0.0),
        "qkv.weight": normal(h, 3 * h), "qkv.bias": normal(3 * h),
        "proj.weight": normal(h, h), "proj.bias": normal(h),
        "ln2.weight": const(h, 1.0), "ln2.bias": const(h, 0.0),
        "fc1.weight": normal(h, 4 * h), "fc1.bias": normal(4 * h),
        "fc2.weight": normal(4 * h, h), "fc2.bias": normal(h),
    }


def llama_ffn(h):
    # apply_model (parallel/layers/layer_config.cpp): ceil(8h/3) rounded up to a multiple of 48.
    f = (8 * h + 2) // 3
    return (f + 47) // 48 * 48


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


def rms_norm(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, cos, sin):
    # Rotate-half (autograd/kernels/rope.h): element i pairs with i + d/2.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def llama_layer(x, w, heads, kv_heads, rope, causal_mask):
    s, b, h = x.shape
    d, r = h // heads, heads // kv_heads
    cos, sin = rope
    n1 = rms_norm(x, w["norm1.weight"])
    q, kv = torch.matmul(n1, w["qkv.weight"]).split([heads * d, 2 * kv_heads * d], dim=-1)
    kv = kv.reshape(s, b, kv_heads, 2, d)
    q = rotate(q.reshape(s, b, heads, d), cos, sin)
    k = rotate(kv[:, :, :, 0], cos, sin)
    q = q.permute(1, 2, 0, 3).reshape(b, kv_heads, r * s, d)
    k = k.permute(1, 2, 0, 3)
    v = kv[:, :, :, 1].permute(1, 2, 0, 3)
    scores = (torch.matmul(q, k.transpose(-1, -2)) * (1.0 / d**0.5)).reshape(b, heads, s, s)
    probs = torch.softmax(scores.masked_fill(causal_mask, float("-inf")), dim=-1)
    context = torch.matmul(probs.reshape(b, kv_heads, r * s, s), v)
    context = context.reshape(b, heads, s, d).permute(2, 0, 1, 3).reshape(s, b, h)
    h1 = x + torch.matmul(context, w["proj.weight"])
    gate_up = torch.matmul(rms_norm(h1, w["norm2.weight"]), w["fc1.weight"])
    gate_up = gate_up.reshape(s, b, -1, 2)
    m = F.silu(gate_up[..., 0]) * gate_up[..., 1]
    return h1 + torch.matmul(m, w["fc2.weight"])


def rope_tables(s, d, device, dtype, base=10000.0):
    # cos and sin of p theta_i, theta_i = base^(-2i/d), taken in double as rope.h does: [s, 1, 1, d/2].
    theta = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    angle = torch.arange(s, dtype=torch.float64)[:, None] * theta[None, :]
    shape = (s, 1, 1, d // 2)
    return (angle.cos().reshape(shape).to(device, dtype),
            angle.sin().reshape(shape).to(device, dtype))


def compare_dump(path):
    import json
    import numpy as np

    config = json.load(open(f"{path}/manifest.json"))["config"]
    if config["mode"] != "single" or config["dtype"] not in ("f32", "f64") or config["layers"] != 1:
        sys.exit(f"torch_layer.py: {path}: expected a single-device f32 or f64 dump of one layer")
    dtype = torch.float64 if config["dtype"] == "f64" else torch.float32
    load = lambda name: torch.from_numpy(np.load(f"{path}/{name}.npy"))
    x, want = load("input"), load("output")
    s, heads, kv_heads = config["seq"], config["heads"], config["kv_heads"]
    causal_mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    with torch.no_grad():
        if config["norm"] == "rmsnorm":  # the llama preset
            if kv_heads != heads:
                qkv = torch.cat([load("attn.qkv.q_weight"), load("attn.qkv.kv_weight")], dim=1)
            else:  # columns by head [a, 3, d] (q, k, v of each head): to [q | a (k, v) pairs]
                by_head = load("attn.qkv.weight").reshape(x.shape[2], heads, 3, -1)
                qkv = torch.cat([by_head[:, :, 0].flatten(1), by_head[:, :, 1:].flatten(1)], dim=1)
            w = {"norm1.weight": load("ln1.weight"), "qkv.weight": qkv,
                 "proj.weight": load("attn.proj.weight"), "norm2.weight": load("ln2.weight"),
                 "fc1.weight": load("mlp.fc1.weight"), "fc2.weight": load("mlp.fc2.weight")}
            rope = rope_tables(s, x.shape[2] // heads, "cpu", dtype, config["rope_base"])
            got = llama_layer(x, w, heads, kv_heads, rope, causal_mask)
        else:
            if config["dropout"] != 0:
                sys.exit(f"torch_layer.py: {path}: dump a gpt layer with --dropout 0")
            names = ["ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                     "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                     "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"]
            w = {name.split(".", 1)[1] if name.startswith(("attn.", "mlp.")) else name: load(name)
                 for name in names}
            got = layer(x, w, heads, 0.0, causal_mask)
    # Over the sublayers' part of the output (y - x): the residual stream of order 1 would hide a
    # mistake inside a sublayer (docs/derivations.md, "The tolerance of the reference check").
    error = ((got - want).abs().max() / (want - x).abs().max()).item()
    bound = 1e-10 if dtype == torch.float64 else 1e-5
    print(f"{path}: max |torch - shardscope| / max |shardscope's y - x| = {error:.2e} "
          f"({'within' if error <= bound else 'OVER'} {bound:g})")
    return error <= bound


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_shape(model, shape, p, repetitions, warmup, device, dtype):
    s, b, h, heads, kv_heads = shape
    generator = torch.Generator().manual_seed(1)
    w = make_weights(model, h, heads, kv_heads, generator, device, dtype)
    x = torch.randn(s, b, h, generator=generator).to(device, dtype)
    causal_mask = torch.ones(s, s, dtype=torch.bool, device=device).triu(1)
    if model == "llama":
        rope = rope_tables(s, h // heads, device, dtype)
        step_loss = lambda: llama_layer(x, w, heads, kv_heads, rope, causal_mask).sum()
    else:
        step_loss = lambda: layer(x, w, heads, p, causal_mask).sum()
    times = []
    for step in range(warmup + repetitions):
        synchronize(device)
        start = time.perf_counter()
        step_loss().backward()
        synchronize(device)
        elapsed = time.perf_counter() - start
        if step >= warmup:
            times.append(elapsed * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU work)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--shape", action="append", help="s,b,h,a[,g]")
    parser.add_argument("--compare-dump", metavar="DIR", help="check this layer against a dump")
    parser.add_argument("--model", default="gpt", choices=["gpt", "llama"])
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--dropout", type=float, default=0.1, help="gpt's (llama has none)")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--per-step", action="store_true", help="print every step's time")
    args = parser.parse_args()
    if args.compare_dump:
        sys.exit(0 if compare_dump(args.compare_dump) else 1)
    if not args.shape:
        parser.error("--shape is required (or --compare-dump)")
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
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    for shape in args.shape:
        dims = [int(v) for v in shape.split(",")]
        if len(dims) not in (4, 5) or min(dims) < 1:
            parser.error(f"--shape {shape}: expected s,b,h,a or s,b,h,a,g (integers >= 1)")
        if len(dims) == 4:
            dims.append(dims[3])
        if args.model == "gpt" and dims[4] != dims[3]:
            parser.error(f"--shape {shape}: the gpt layer has g = a key/value heads")
        times = time_shape(args.model, dims, args.dropout, args.repetitions, args.warmup, device,
                           dtype)
        if args.per_step:
            print(shape, *(f"{t:.2f}" for t in times), flush=True)
        else:
            median, mean = statistics.median(times), statistics.fmean(times)
            print(f"{shape} {median:.2f} {mean:.2f} {args.repetitions}", flush=True)


if __name__ == "__main__":
    main()
