// The CUDA backend against the CPU backend and against the reference backend (autograd/reference/:
// plain loops that share none of autograd/kernels/'s row math with the other two, so a bug there
// shows against it): every op of the kernel table on the same random inputs, forward and backward,
// in f32 and f64, then a Transformer layer. Every test skips with "no CUDA device: ..." on a
// machine without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {

// ctest's names read "GetParam() = f32" (found by argument-dependent lookup, so outside the
// anonymous namespace).
void PrintTo(DType dtype, std::ostream* os) {
  *os << dtype_name(dtype);
}

namespace {

// |gpu - cpu| <= atol + rtol |cpu| per element. f32: the GPU sums in another order (block
// reductions, cuBLAS) and its exp/tanh differ in the last bits: a few f32 roundings (6e-8 each)
// of O(1) values over sums of up to a few hundred terms. f64: the same in f64 (1e-16 each).
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType dtype) {
  return dtype == DType::f32 ? Tolerance{2e-5, 2e-5} : Tolerance{1e-12, 1e-12};
}

// Against the reference backend, which sums in double and rounds once: the rule of
// tests/autograd/reference_backend_testing.h, |gpu - ref| <= tol (1 + |ref|), tol 1e-4 in f32
// (the GPU's f32 sums against exact ones) and 1e-10 in f64.
Tolerance reference_tolerance(DType dtype) {
  return dtype == DType::f32 ? Tolerance{1e-4, 1e-4} : Tolerance{1e-10, 1e-10};
}

void expect_close(const Tensor& gpu, const Tensor& cpu, DType dtype, const std::string& what,
                  Tolerance tol) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> g = gpu.to_vector(), c = cpu.to_vector();
  int shown = 0;
  for (std::size_t i = 0; i < c.size() && shown < 5; ++i) {
    if (!(std::abs(g[i] - c[i]) <= tol.atol + tol.rtol * std::abs(c[i]))) {
      ADD_FAILURE() << what << " [" << dtype_name(dtype) << "] element " << i << ": cuda " << g[i]
                    << ", want " << c[i];
      ++shown;
    }
  }
}

// A build runs the same computation in a context and returns the tensors to compare.
using Build = std::function<std::vector<Tensor>(Context&, DType)>;

class CudaVsCpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda_device_report();
    }
    gpu_ = std::make_unique<Context>(0, Device::cuda(0));
  }

  void compare(const Build& build, const std::string& what) {
    const std::vector<Tensor> want = build(cpu_, GetParam());
    const std::vector<Tensor> got = build(*gpu_, GetParam());
    const std::vector<Tensor> oracle = build(reference_, GetParam());
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(oracle.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::string name = what + " output " + std::to_string(i);
      expect_close(got[i], want[i], GetParam(), name + " (against cpu)", tolerance(GetParam()));
      expect_close(got[i], oracle[i], GetParam(), name + " (against reference)",
                   reference_tolerance(GetParam()));
    }
  }

  Context cpu_;
  Context reference_{0, Device::reference()};
  std::unique_ptr<Context> gpu_;
};

Tensor leaf(Context& ctx, const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = Tensor::randn(ctx, shape, seed, 1.0, dtype);
  t.set_requires_grad(true);
  return t;
}

// y, then backward of sum(y * w) for a random w, then the leaves' gradients.
std::vector<Tensor> with_grads(Context& ctx, const Tensor& y, const std::vector<Tensor>& leaves) {
  const Tensor w = Tensor::randn(ctx, y.shape(), 99, 1.0, y.dtype());
  sum(mul(y, w)).backward();
  std::vector<Tensor> out{y};
  for (const Tensor& l : leaves) out.push_back(l.grad());
  return out;
}

TEST_P(CudaVsCpu, MatmulForwardAndBackward) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor a = leaf(ctx, {4, 5, 7}, 1, dt), b = leaf(ctx, {7, 3}, 2, dt);
        const Tensor c = leaf(ctx, {4, 3, 7}, 3, dt);
        const Tensor y = matmul(matmul(a, b), c);  // shared b, then a batched product
        const Tensor z = matmul(a, leaf(ctx, {4, 5, 7}, 4, dt), true);  // transposed b
        std::vector<Tensor> out = with_grads(ctx, y, {a, b, c});
        out.push_back(z);
        return out;
      },
      "matmul");
}

TEST_P(CudaVsCpu, ElementwiseOpsForwardAndBackward) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {3, 4, 6}, 1, dt), bias = leaf(ctx, {6}, 2, dt);
        const Tensor g = leaf(ctx, {4, 6}, 3, dt);
        const Tensor y = gelu(scale(mul(add(x, bias), g), 0.7));  // broadcasts: sum_to_suffix
        return with_grads(ctx, y, {x, bias, g});
      },
      "add/mul/scale/gelu");
}

TEST_P(CudaVsCpu, DropoutDrawsTheSameMaskAtAShardOffset) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {4, 3, 10}, 1, dt);
        DropoutSpec spec;
        spec.p = 0.3;
        spec.seed = 7;
        spec.stream = dropout_stream(2, 1);
        spec.step = 5;
        spec.global_shape = Shape{8, 3, 20};
        spec.offset = {4, 0, 10};
        return with_grads(ctx, dropout(x, spec), {x});
      },
      "dropout");
}

// A local tensor that is one contiguous run of the global one: the kernel's warp-tile path when
// the run starts at a multiple of 4 (rows 4.. of 9: origin 308), with a tail of 385 - 384
// elements past its last full tile of 128; the per-element path when it does not (rows 3..).
TEST_P(CudaVsCpu, DropoutDrawsTheSameMaskOverAContiguousShard) {
  for (std::int64_t first_row : {4, 3}) {
    compare(
        [first_row](Context& ctx, DType dt) {
          const Tensor x = leaf(ctx, {5, 7, 11}, 1, dt);
          DropoutSpec spec;
          spec.p = 0.4;
          spec.seed = 11;
          spec.stream = dropout_stream(1, 0);
          spec.step = 2;
          spec.global_shape = Shape{9, 7, 11};
          spec.offset = {first_row, 0, 0};
          return with_grads(ctx, dropout(x, spec), {x});
        },
        "dropout rows " + std::to_string(first_row) + "..");
  }
}

// Causal probabilities (DropoutSpec::causal): whole, through the warp-tile path, and a shard of
// the heads (rows 1.. of 3: origin 162, not a multiple of 4), through the per-element path.
TEST_P(CudaVsCpu, CausalDropoutDropsWhatTheCpuDrops) {
  for (std::int64_t first_head : {0, 1}) {
    compare(
        [first_head](Context& ctx, DType dt) {
          const Tensor x = leaf(ctx, {2, first_head == 0 ? 3 : 2, 9, 18}, 1, dt);
          DropoutSpec spec;
          spec.p = 0.3;
          spec.seed = 5;
          spec.stream = dropout_stream(0, 1);
          spec.step = 4;
          spec.global_shape = Shape{2, 3, 9, 18};
          spec.offset = {0, first_head, 0, 0};
          spec.causal = true;
          return with_grads(ctx, dropout(x, spec), {x});
        },
        "causal dropout, heads " + std::to_string(first_head) + "..");
  }
}

TEST_P(CudaVsCpu, LayerNormForwardAndBackward) {
  for (std::int64_t h : {1, 7, 300, 1000}) {
    compare(
        [h](Context& ctx, DType dt) {
          const Tensor x = leaf(ctx, {3, 5, h}, 1, dt), gamma = leaf(ctx, {h}, 2, dt);
          const Tensor beta = leaf(ctx, {h}, 3, dt);
          return with_grads(ctx, layernorm(x, gamma, beta), {x, gamma, beta});
        },
        "layernorm h=" + std::to_string(h));
  }
}

TEST_P(CudaVsCpu, RmsNormForwardAndBackward) {
  // h = 1000 spans several passes of a 256-thread block; 3 * 5 * 40 = 600 rows span 19 chunks of
  // the column sums (kRowsPerChunk = 32).
  for (std::int64_t h : {1, 7, 300, 1000}) {
    for (std::int64_t s : {5, 40}) {
      compare(
          [h, s](Context& ctx, DType dt) {
            const Tensor x = leaf(ctx, {3, s, h}, 1, dt), gamma = leaf(ctx, {h}, 2, dt);
            return with_grads(ctx, rmsnorm(add(x, Tensor::full(ctx, {h}, 0.5, dt)), gamma),
                              {x, gamma});
          },
          "rmsnorm h=" + std::to_string(h) + " s=" + std::to_string(s));
    }
  }
}

TEST_P(CudaVsCpu, SwigluForwardAndBackward) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {3, 4, 10}, 1, dt);
        return with_grads(ctx, swiglu(scale(x, 3.0)), {x});  // gates out to the flat tails
      },
      "swiglu");
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {300, 2 * 257}, 2, dt);  // 77100 outputs, many blocks
        return with_grads(ctx, swiglu(x), {x});
      },
      "swiglu, large");
}

TEST_P(CudaVsCpu, RopeForwardAndBackward) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {5, 2, 3, 8}, 1, dt);  // [s, b, h, d], positions along dim 0
        return with_grads(ctx, rope(x, 0, 3, 100.0), {x});
      },
      "rope [s, b, h, d]");
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {2, 3, 40, 6}, 2, dt);  // [b, h, s, d], positions along dim 2
        return with_grads(ctx, rope(x, 2, 0), {x});
      },
      "rope [b, h, s, d]");
  compare(
      [](Context& ctx, DType dt) {
        // 153600 elements, many blocks. Positions under 300: an angle p theta carries a rounding of
        // p * 1e-16 rad wherever it is computed (CUDA's pow within 2 ulp), under the f64 tolerance
        // up to here; OpsForward's f32-against-f64 check takes the device to positions near 10^5.
        const Tensor x = leaf(ctx, {300, 2, 4, 64}, 3, dt);
        return with_grads(ctx, rope(x, 0, 0), {x});
      },
      "rope, large");
}

TEST_P(CudaVsCpu, SoftmaxCausalAndPlainForwardAndBackward) {
  for (bool causal : {false, true}) {
    compare(
        [causal](Context& ctx, DType dt) {
          const Tensor x = leaf(ctx, {2, 6, 9}, 1, dt);
          return with_grads(ctx, softmax(scale(x, 3.0), causal), {x});
        },
        causal ? "causal softmax" : "softmax");
  }
  compare(
      [](Context& ctx, DType dt) {
        return with_grads(ctx, softmax(leaf(ctx, {3, 700}, 4, dt)), {});
      },
      "softmax of long rows");
}

TEST_P(CudaVsCpu, LayoutOpsMoveTheSameElements) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {2, 3, 4, 5}, 1, dt);
        const Tensor p = permute(x, {2, 0, 3, 1});
        const std::vector<Tensor> parts = split(x, 2, {1, 3});
        const Tensor joined = concat({parts[1], parts[0]}, 2);
        std::vector<Tensor> out = with_grads(ctx, add(permute(joined, {2, 0, 3, 1}), p), {x});
        out.push_back(Tensor::full(ctx, {3, 3}, 2.5, dt));
        out.push_back(Tensor::zeros(ctx, {1000}, dt));
        return out;
      },
      "permute/split/concat/fill");
  compare(
      [](Context& ctx, DType dt) {
        // Heads out of fused columns and their gradients back (copy_strided both ways).
        const Tensor x = leaf(ctx, {3, 2, 12}, 2, dt);
        const std::vector<Tensor> h = head_split(x, 2, {{0, 2, 6}, {2, 2, 6}, {4, 2, 6}});
        return with_grads(ctx, add(mul(h[0], h[1]), h[2]), {x});
      },
      "head_split");
}

TEST_P(CudaVsCpu, ReductionsAndLosses) {
  compare(
      [](Context& ctx, DType dt) {
        const Tensor x = leaf(ctx, {40, 33}, 1, dt), t = Tensor::randn(ctx, {40, 33}, 2, 1.0, dt);
        const Tensor logits = leaf(ctx, {6, 11}, 3, dt);
        const std::vector<std::int64_t> targets{0, 10, 3, 3, 7, 1};
        const Tensor loss =
            add(add(mse_loss(x, t), cross_entropy(logits, targets)), scale(mean(x), 0.5));
        loss.backward();
        return std::vector<Tensor>{loss, sum(x), x.grad(), logits.grad()};
      },
      "sum/mean/mse/cross_entropy");
}

TEST_P(CudaVsCpu, TransformerLayerForwardAndBackward) {
  compare(
      [](Context& ctx, DType dt) {
        LayerConfig config;
        config.seq = 8;
        config.batch = 2;
        config.hidden = 32;
        config.heads = 4;
        config.dtype = dt;
        const TransformerLayer layer(config, make_layer_weights(ctx, config));
        const Tensor x = leaf(ctx, {config.seq, config.batch, config.hidden}, 11, dt);
        const LayerWeights& w = layer.weights();
        return with_grads(ctx, layer.forward(x),
                          {x, w.ln1_weight, w.qkv_weight, w.proj_bias, w.fc1_weight, w.fc2_weight});
      },
      "transformer layer");
}

TEST_P(CudaVsCpu, CachingAllocatorReusesFreedBlocks) {
  const std::size_t before = cuda_memory_stats(gpu_->backend()).raw_allocations;
  for (int i = 0; i < 10; ++i) Tensor::zeros(*gpu_, {256}, GetParam());
  const AllocatorStats s = cuda_memory_stats(gpu_->backend());
  EXPECT_LE(s.raw_allocations, before + 1);
  EXPECT_GE(s.reuses, 9u);
  EXPECT_THROW(cuda_memory_stats(cpu_.backend()), ArgumentError);
  EXPECT_NE(cuda_backend_stream(gpu_->backend()), nullptr);
}

// A request larger than any GPU: an OutOfMemoryError naming the bytes, the device and the op, and
// afterwards kernels still launch (the failed cudaMalloc's status was not left as the runtime's
// last error, which the next launch check would report as "out of memory").
TEST(CudaBackend, OutOfMemoryNamesTheOpAndLeavesLaunchesWorking) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_device_report();
  Context gpu(0, Device::cuda(0));
  Tensor::zeros(gpu, {1000});  // a cached block: the allocator empties its cache and retries
  const std::int64_t huge = std::int64_t{1} << 40;  // 4 TiB of f32
  gpu.set_current_op("make_huge");
  try {
    Tensor::zeros(gpu, {huge});
    ADD_FAILURE() << "4 TiB fitted on cuda:0";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("out of memory on cuda:0: asked for " +
                                                std::to_string(huge * 4) + " bytes"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cudaErrorMemoryAllocation"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("in op 'make_huge'"));
  }
  gpu.set_current_op("");
  const Tensor x = Tensor::full(gpu, {300}, 2.0);
  EXPECT_EQ(sum(scale(x, 0.5)).item(), 300.0);  // fill, scale and sum_all launch and check
}

// A slice whose rows are 2 GiB apart, which cudaMemcpy2DAsync refuses (pitch limit): the rows are
// copied by a kernel. 4 GiB of u8 on the device.
TEST(CudaBackend, CopySliceHandlesRowPitchesOf2GiB) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_device_report();
  Context gpu(0, Device::cuda(0));
  const std::int64_t row = (std::int64_t{1} << 31) + 64, at = std::int64_t{1} << 31;
  const Tensor src = Tensor::zeros(gpu, {2, row}, DType::u8);
  std::vector<unsigned char> values(64);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 64; ++i)
      values[static_cast<std::size_t>(i)] = static_cast<unsigned char>(r * 100 + i);
    auto* start =
        static_cast<unsigned char*>(src.raw_data()) + static_cast<std::size_t>(r * row + at);
    gpu.backend().copy_from_host(start, values.data(), values.size());
  }
  Tensor dst = Tensor::zeros(gpu, {2, 64}, DType::u8);
  gpu.backend().copy_slice(src, 1, at, dst, 0, 64);
  const std::vector<double> got = dst.to_vector();
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(got[static_cast<std::size_t>(r * 64 + i)], r * 100 + i) << "row " << r << ", " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaVsCpu, ::testing::Values(DType::f32, DType::f64),
                         [](const ::testing::TestParamInfo<DType>& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

}  // namespace
}  // namespace shardscope
