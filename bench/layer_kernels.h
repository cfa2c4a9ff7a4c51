// LayerKernels: the single-device layer's element and row kernels, each with tensors of its own
// at the layer's sizes, for layer_bench's BM_LayerKernel to time one at a time.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/tensor.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/layer_config.h"

namespace shardscope::bench {

// The layer's element and row kernels one at a time, each called back to back on tensors of its
// own at the layer's sizes (so in cache, with nothing else running): what each costs alone,
// beside the step's slices of it (bench/trace_ops.py) and a copy of the same bytes. The kernels
// are the backend calls of the layer's choices: its norm (LayerNorm or RMSNorm), the attention's
// softmax (causal or not) and its dropout on the [b, a, s, s] scores, the MLP's activation (GeLU
// or SwiGLU), a dropout on [s, b, h] (hidden), RoPE's rotation where the layer has it, the heads'
// split and merge, and a copy of the MLP's [s, b, f] (ffn) for the machine's rate at that size.
class LayerKernels {
 public:
  using Run = std::function<void()>;
  struct Kernel {
    std::string name;
    double bytes;  // read and written by one call (every tensor it takes, whole)
    Run run;
  };

  LayerKernels(Context& ctx, const LayerConfig& c) : ctx_(ctx), config_(c) {
    Backend& be = ctx.backend();
    const DType dt = c.dtype;
    const std::int64_t s = c.seq, b = c.batch, h = c.hidden, a = c.heads, f = c.ffn_width();
    const bool swiglu = c.mlp == Mlp::swiglu;
    const Shape hidden{s, b, h}, scores{b, a, s, s}, inner{s, b, f};
    Tensor& x = make(hidden, dt, 1);
    Tensor& y = make(hidden, dt, 0);
    Tensor& dy = make(hidden, dt, 2);
    Tensor& dx = make(hidden, dt, 0);
    Tensor& gamma = make({h}, dt, 3);
    Tensor& beta = make({h}, dt, 4);
    Tensor& dgamma = make({h}, dt, 0);
    Tensor& dbeta = make({h}, dt, 0);
    Tensor& mean = make({s * b}, statistics_dtype(dt), 0);
    Tensor& rstd = make({s * b}, statistics_dtype(dt), 0);
    const double eps = c.layernorm_eps;
    if (c.norm == Norm::layernorm) {
      add("layernorm_forward", {&x, &gamma, &beta, &y, &mean, &rstd},
          [&be, &x, &gamma, &beta, eps, &y, &mean, &rstd] {
            be.layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
          });
      kernels_.back().run();  // the mean and rstd backward reads
      add("layernorm_backward", {&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta},
          [&be, &dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta] {
            be.layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
          });
    } else {
      add("rmsnorm_forward", {&x, &gamma, &y, &rstd},
          [&be, &x, &gamma, eps, &y, &rstd] { be.rmsnorm_forward(x, gamma, eps, y, rstd); });
      kernels_.back().run();  // the rstd backward reads
      add("rmsnorm_backward", {&dy, &x, &gamma, &rstd, &dx, &dgamma},
          [&be, &dy, &x, &gamma, &rstd, &dx, &dgamma] {
            be.rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
          });
    }
    Tensor& logits = make(scores, dt, 5);
    Tensor& probs = make(scores, dt, 0);
    Tensor& dprobs = make(scores, dt, 6);
    Tensor& dlogits = make(scores, dt, 0);
    Tensor& kept = make(scores, dt, 0);
    Tensor& mask = make(scores, DType::u8, 0);
    const bool causal = c.causal;
    add("softmax_forward", {&logits, &probs},
        [&be, &logits, causal, &probs] { be.softmax_forward(logits, causal, probs); });
    kernels_.back().run();  // the probabilities backward and the dropout read
    add("softmax_backward", {&probs, &dprobs, &dlogits},
        [&be, &probs, &dprobs, &dlogits] { be.softmax_backward(probs, dprobs, dlogits); });
    DropoutSpec attention;
    attention.p = c.dropout;
    attention.seed = c.seed;
    attention.causal = causal;
    add("dropout_forward_scores", {&probs, &mask, &kept}, [&be, &probs, attention, &mask, &kept] {
      be.dropout_forward(probs, attention, mask, kept);
    });
    const double p = c.dropout;
    add("dropout_backward_scores", {&dprobs, &mask, &dlogits},
        [&be, &dprobs, &mask, p, &dlogits] { be.dropout_backward(dprobs, mask, p, dlogits); });
    Tensor& hidden_mask = make(hidden, DType::u8, 0);
    DropoutSpec plain = attention;
    plain.causal = false;
    plain.stream = 1;
    add("dropout_forward_hidden", {&x, &hidden_mask, &y},
        [&be, &x, plain, &hidden_mask, &y] { be.dropout_forward(x, plain, hidden_mask, y); });
    Tensor& act_in = make({s, b, swiglu ? 2 * f : f}, dt, 7);
    Tensor& act_out = make(inner, dt, 0);
    Tensor& act_dy = make(inner, dt, 8);
    Tensor& act_dx = make({s, b, swiglu ? 2 * f : f}, dt, 0);
    if (swiglu) {
      add("swiglu_forward", {&act_in, &act_out},
          [&be, &act_in, &act_out] { be.swiglu_forward(act_in, act_out); });
      add("swiglu_backward", {&act_in, &act_dy, &act_dx},
          [&be, &act_in, &act_dy, &act_dx] { be.swiglu_backward(act_in, act_dy, act_dx); });
    } else {
      add("gelu_forward", {&act_in, &act_out},
          [&be, &act_in, &act_out] { be.gelu_forward(act_in, act_out); });
      add("gelu_backward", {&act_in, &act_dy, &act_dx},
          [&be, &act_in, &act_dy, &act_dx] { be.gelu_backward(act_in, act_dy, act_dx); });
    }
    if (c.rope) {  // the queries' rotation, in the layout the attention takes them: [b, a, s, d]
      const Shape heads{b, a, s, c.head_dim()};
      Tensor& q = make(heads, dt, 9);
      Tensor& rotated = make(heads, dt, 0);
      const double base = c.rope_base;
      add("rope_forward", {&q, &rotated},
          [&be, &q, base, &rotated] { be.rope_forward(q, 2, 0, base, false, rotated); });
    }
    // The attention's heads out of the fused QKV columns and the context's back to [s, b, h]
    // (head_split and merge_heads' permute, two copies), through the layer's own functions, so
    // that the columns are its (GPT's grouped by head; under GQA the queries', then the keys' and
    // values'). Their outputs are new tensors each call, from the backend's cache, as many bytes
    // as their inputs (the second entry of each list stands for them).
    const std::int64_t d = c.head_dim(), g = c.kv_heads_count();
    Tensor& qkv = make({s, b, (a + 2 * g) * d}, dt, 10);
    const LayerConfig* layer = &config_;  // the kernels may outlive `c`
    add("head_split", {&qkv, &qkv}, [layer, &qkv, a, g] { split_heads(*layer, qkv, a, g); });
    Tensor& context = make({b, a, s, d}, dt, 11);
    add("merge_heads", {&context, &context}, [layer, &context] { merge_heads(*layer, context); });
    add("copy_ffn", {&act_dy, &act_out}, [&be, &act_dy, &act_out] { be.copy(act_dy, act_out); });
  }
  LayerKernels(const LayerKernels&) = delete;  // the kernels hold this set's tensors
  LayerKernels& operator=(const LayerKernels&) = delete;
  const std::vector<Kernel>& kernels() const { return kernels_; }
  // Reads one byte of the first tensor on the host: waits for the device, no more.
  void wait() const {
    unsigned char first = 0;
    ctx_.backend().copy_to_host(&first, tensors_.front().raw_data(), 1);
    benchmark::DoNotOptimize(first);
  }

 private:
  // A tensor of this set: random for a seed > 0, else zeros. Held in a deque, so references
  // stay valid as more are made.
  Tensor& make(const Shape& shape, DType dtype, std::uint64_t seed) {
    tensors_.push_back(seed && dtype != DType::u8 ? Tensor::randn(ctx_, shape, seed, 1.0, dtype)
                                                  : Tensor::zeros(ctx_, shape, dtype));
    return tensors_.back();
  }
  void add(std::string name, std::initializer_list<const Tensor*> touched, Run run) {
    double bytes = 0;
    for (const Tensor* t : touched) bytes += static_cast<double>(t->bytes());
    kernels_.push_back({std::move(name), bytes, std::move(run)});
  }
  Context& ctx_;
  const LayerConfig config_;
  std::deque<Tensor> tensors_;
  std::vector<Kernel> kernels_;
};

}  // namespace shardscope::bench
