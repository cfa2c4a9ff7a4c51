// The CUDA kernels of CudaBackend. Each one is a thin launch shape (grid-stride loop over
// elements, one block per row, or one thread per column) around the math in autograd/kernels/,
// which the CPU backend calls too. Included by cuda_backend.cu only.
#pragma once

#include <cstdint>

#include "autograd/kernels/gelu.h"
#include "autograd/kernels/layernorm.h"
#include "autograd/kernels/layout.h"
#include "autograd/kernels/losses.h"
#include "autograd/kernels/philox.h"
#include "autograd/kernels/rope.h"
#include "autograd/kernels/softmax.h"
#include "autograd/kernels/swiglu.h"

namespace shardscope::cuda_kernels {

constexpr int kThreads = 256;  // threads per block; a power of two for block_reduce
constexpr int kMaxDims = 8;    // the most dims permute and dropout index on the device

// An index map passed by value: dims of the walked tensor and a stride for each.
struct IndexMap {
  int rank = 0;
  std::int64_t dims[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};
};

// The offset of element `linear` (row-major over map.dims) under map.strides. A map that
// index_map coalesced to one dim is a plain stride: no 64-bit division (which costs the GPU a
// long instruction sequence per dim, and made dropout run at a third of the copy's bandwidth).
__device__ inline std::int64_t mapped_index(std::int64_t linear, const IndexMap& map) {
  if (map.rank == 1) return linear * map.strides[0];  // linear < dims[0]: the loop's bound
  return kernels::strided_index(linear, map.rank, map.dims, map.strides);
}

#define SS_GRID_STRIDE(i, n)                                                          \
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += std::int64_t(blockDim.x) * gridDim.x)
#define SS_BLOCK_PER_ROW(row, rows) \
  for (std::int64_t row = blockIdx.x; row < (rows); row += gridDim.x)

struct SumOp {
  template <class V>
  __device__ V operator()(const V& a, const V& b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ double operator()(double a, double b) const { return kernels::max_of(a, b); }
};
struct WelfordOp {
  __device__ kernels::Welford<double> operator()(const kernels::Welford<double>& a,
                                                 const kernels::Welford<double>& b) const {
    return kernels::welford_combine(a, b);
  }
};

// Combines one value per thread of the block with `op` in a fixed tree order; every thread gets
// the result. All threads of the block must call it, and the block has at most kThreads threads (a
// power of two): the kernels that call it declare __launch_bounds__(kThreads).
template <class V, class Op>
__device__ V block_reduce(V value, Op op) {
  __shared__ alignas(16) unsigned char storage[kThreads * sizeof(V)];
  V* shared = reinterpret_cast<V*>(storage);
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  const V result = shared[0];
  __syncthreads();  // the storage is reused by the next call
  return result;
}

// ---- layout and elementwise -------------------------------------------------------------------

template <class T>
__global__ void fill(T* out, std::int64_t n, T value) {
  SS_GRID_STRIDE(i, n) out[i] = value;
}

// Word is an unsigned integer of the element size: permute moves bits, not values.
template <class Word>
__global__ void permute(const Word* in, Word* out, std::int64_t n, IndexMap out_to_in) {
  SS_GRID_STRIDE(i, n) {
    out[i] = in[mapped_index(i, out_to_in)];
  }
}

// out[to(i)] = in[from(i)] for i < n: a strided copy's two maps (StridedCopy), over the same dims.
template <class Word>
__global__ void copy_strided(const Word* in, Word* out, std::int64_t n, IndexMap from,
                             IndexMap to) {
  SS_GRID_STRIDE(i, n) {
    out[mapped_index(i, to)] = in[mapped_index(i, from)];
  }
}

// out = alpha a + beta b, b repeating every nb elements (a suffix of a's shape).
template <class T>
__global__ void add(const T* a, const T* b, T* out, std::int64_t n, std::int64_t nb, T alpha,
                    T beta) {
  SS_GRID_STRIDE(i, n) out[i] = alpha * a[i] + beta * b[i % nb];
}

// `rows` rows of `width` words from `in` to `out`, whose rows start every `in_pitch` and
// `out_pitch` words: a strided slice copy with 64-bit indices (n = rows * width).
template <class Word>
__global__ void copy_rows(const Word* in, std::int64_t in_pitch, Word* out, std::int64_t out_pitch,
                          std::int64_t width, std::int64_t n) {
  SS_GRID_STRIDE(i, n) {
    const std::int64_t row = i / width, column = i - row * width;
    out[row * out_pitch + column] = in[row * in_pitch + column];
  }
}

// Squares of n x n words: dst[e][i][j] = src[e][i][j] for j <= i, 0 above the diagonal (one
// thread per element of dst; in place only element by element, which this is).
template <class Word>
__global__ void lower_triangle(const Word* src, std::int64_t ld_src, std::int64_t stride_src,
                               Word* dst, std::int64_t ld_dst, std::int64_t stride_dst,
                               std::int64_t n_side, std::int64_t n) {
  SS_GRID_STRIDE(idx, n) {
    const std::int64_t e = idx / (n_side * n_side), ij = idx - e * n_side * n_side;
    const std::int64_t i = ij / n_side, j = ij - i * n_side;
    dst[e * stride_dst + i * ld_dst + j] = j <= i ? src[e * stride_src + i * ld_src + j] : Word(0);
  }
}

template <class T>
__global__ void mul(const T* a, const T* b, T* out, std::int64_t n, std::int64_t nb) {
  SS_GRID_STRIDE(i, n) out[i] = a[i] * b[i % nb];
}

template <class T>
__global__ void scale(const T* x, T* out, std::int64_t n, T alpha) {
  SS_GRID_STRIDE(i, n) out[i] = alpha * x[i];
}

template <class T>
__global__ void gelu_forward(const T* x, T* y, std::int64_t n) {
  SS_GRID_STRIDE(i, n) y[i] = kernels::gelu(x[i]);
}

template <class T>
__global__ void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
  SS_GRID_STRIDE(i, n) dx[i] = dy[i] * kernels::gelu_grad(x[i]);
}

// n outputs; output i reads the pair (x[2i], x[2i + 1]) = (gate, up) and its gradient writes both.
template <class T>
__global__ void swiglu_forward(const T* x, T* y, std::int64_t n) {
  SS_GRID_STRIDE(i, n) y[i] = kernels::swiglu(x[2 * i], x[2 * i + 1]);
}

template <class T>
__global__ void swiglu_backward(const T* x, const T* dy, T* dx, std::int64_t n) {
  SS_GRID_STRIDE(i, n) {
    kernels::swiglu_grad(x[2 * i], x[2 * i + 1], dy[i], dx[2 * i], dx[2 * i + 1]);
  }
}

// n elements of x; y[i] is element i's half of its pair's rotation (by -angle when inverse).
template <class T>
__global__ void rope_forward(const T* x, T* y, std::int64_t n, kernels::RopeGeometry g,
                             bool inverse) {
  SS_GRID_STRIDE(i, n) y[i] = kernels::rope_element(x, i, g, inverse);
}

// local_to_global maps a local linear index to its offset from `origin` in the global tensor.
// kernels::dropout_keep per element. One Philox call gives the words of the four global indices
// 4c .. 4c + 3; where the local tensor is one contiguous run of the global one starting at a
// multiple of 4 (`contiguous`), each warp takes tiles of 128 elements, lane L makes the call of
// the tile's counter base / 4 + L, and every lane fetches its elements' words by shuffles, so
// each call is made once, not once per element, and loads and stores stay coalesced.
template <class T>
__global__ void dropout_forward(const T* x, std::uint8_t* mask, T* y, std::int64_t n,
                                IndexMap local_to_global, std::int64_t origin, bool contiguous,
                                std::uint64_t seed, std::uint32_t stream, std::uint32_t step,
                                std::uint32_t threshold, T keep_scale, std::int64_t causal_queries,
                                std::int64_t causal_keys) {
  // DropoutSpec::causal (causal_keys > 0): elements after their row's visible keys are dropped.
  auto hidden = [=](std::int64_t i) {
    return causal_keys > 0 && kernels::causal_hidden(i, causal_queries, causal_keys);
  };
  if (!contiguous) {
    SS_GRID_STRIDE(i, n) {
      if (hidden(i)) {
        mask[i] = 0;
        y[i] = T(0);
        continue;
      }
      const auto global = static_cast<std::uint64_t>(origin + mapped_index(i, local_to_global));
      const bool keep =
          kernels::dropout_keeps(kernels::philox_bits(seed, stream, step, global), threshold);
      mask[i] = keep ? 1 : 0;
      y[i] = kernels::dropout_apply(x[i], keep, keep_scale);
    }
    return;
  }
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warps = (std::int64_t(gridDim.x) * blockDim.x) / 32;
  for (std::int64_t tile = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       tile * 128 < n; tile += warps) {  // warp-uniform bound: every lane reaches the shuffles
    const std::int64_t base = tile * 128;
    const auto counter = static_cast<std::uint64_t>((origin + base) / 4 + lane);
    const kernels::Philox4 w =
        kernels::philox4x32(static_cast<std::uint32_t>(counter),
                            static_cast<std::uint32_t>(counter >> 32), stream, step, seed);
    for (int k = 0; k < 4; ++k) {
      // Element base + 32k + lane has counter (origin + base) / 4 + 8k + lane / 4, word lane % 4.
      const int source = 8 * k + lane / 4;
      std::uint32_t bits = 0;
      for (int word = 0; word < 4; ++word) {
        const std::uint32_t v = __shfl_sync(kAll, w.v[word], source);
        if (word == (lane & 3)) bits = v;
      }
      const std::int64_t i = base + 32 * k + lane;
      if (i < n) {
        const bool keep = !hidden(i) && kernels::dropout_keeps(bits, threshold);
        mask[i] = keep ? 1 : 0;
        y[i] = kernels::dropout_apply(x[i], keep, keep_scale);
      }
    }
  }
}

template <class T>
__global__ void dropout_backward(const T* dy, const std::uint8_t* mask, T* dx, std::int64_t n,
                                 T keep_scale) {
  SS_GRID_STRIDE(i, n) dx[i] = kernels::dropout_apply(dy[i], mask[i] != 0, keep_scale);
}

// ---- reductions ---------------------------------------------------------------------------------

// Column sums in two passes, so that every SM has work however few the columns: pass 1 gives
// each (chunk of rows, column) pair a thread that sums the chunk's rows in row order into a double
// partial, pass 2 sums each column's partials in chunk order. The order depends on the shapes
// alone, so the result is deterministic. (One thread per column over all rows left most of an
// H100 idle: 7 ms for the bias gradients of one layer step at s=1024 b=4 h=1024.)
constexpr std::int64_t kRowsPerChunk = 32;

// partial[c * m + j] = sum of x[r * m + j] over the rows r of chunk c = blockIdx.y.
template <class T>
__global__ void column_partials(const T* x, double* partial, std::int64_t rows, std::int64_t m,
                                std::int64_t chunk) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= m) return;
  const std::int64_t begin = std::int64_t(blockIdx.y) * chunk;
  const std::int64_t end = begin + chunk < rows ? begin + chunk : rows;
  double acc = 0.0;
  for (std::int64_t r = begin; r < end; ++r) acc += x[r * m + j];
  partial[std::int64_t(blockIdx.y) * m + j] = acc;
}

// out[j] = sum over chunks c of partial[c * m + j], in chunk order.
template <class T>
__global__ void column_finish(const double* partial, T* out, std::int64_t chunks, std::int64_t m) {
  SS_GRID_STRIDE(j, m) {
    double acc = 0.0;
    for (std::int64_t c = 0; c < chunks; ++c) acc += partial[c * m + j];
    out[j] = static_cast<T>(acc);
  }
}

// Whole-tensor sums in two passes: block b sums its contiguous range of `per` elements (x, or with
// a target (x - target)^2: MSE) into partial[b]; then one block sums the partials in a fixed tree
// order and writes total / divisor. (One block for everything took 7.5 ms for a 16 MiB loss sum.)
template <class In>
__global__ void __launch_bounds__(kThreads)
    sum_partials(const In* x, const In* target, double* partial, std::int64_t n, std::int64_t per) {
  const std::int64_t begin = std::int64_t(blockIdx.x) * per;
  const std::int64_t end = begin + per < n ? begin + per : n;
  double acc = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    acc += target ? kernels::squared_error(x[i], target[i]) : static_cast<double>(x[i]);
  }
  acc = block_reduce(acc, SumOp{});
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class Out>
__global__ void __launch_bounds__(kThreads)
    sum_finish(const double* partial, Out* out, std::int64_t blocks, double divisor) {
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{});
  if (threadIdx.x == 0) *out = static_cast<Out>(acc / divisor);
}

// ---- row-wise: one block per row --------------------------------------------------------------

// The LayerNorm kernels also run RMSNorm: with mean == nullptr (and beta == nullptr) the rows are
// uncentered, the mean taken as 0, and there is no shift and no dbeta (kernels/layernorm.h).

template <class T>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                      std::int64_t rows, std::int64_t h, double eps) {
  const bool centered = mean != nullptr;
  SS_BLOCK_PER_ROW(r, rows) {
    const T* in = x + r * h;
    kernels::Welford<double> w =
        kernels::layernorm_row_statistics(in, h, threadIdx.x, blockDim.x, centered);
    w = block_reduce(w, WelfordOp{});
    const double inv = kernels::layernorm_rstd(w, eps);
    kernels::layernorm_normalise_row(in, gamma, beta, y + r * h, h, threadIdx.x, blockDim.x, w.mean,
                                     inv);
    if (threadIdx.x == 0) {
      if (centered) mean[r] = static_cast<T>(w.mean);
      rstd[r] = static_cast<T>(inv);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_rows(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                            T* dx, std::int64_t rows, std::int64_t h) {
  const bool centered = mean != nullptr;
  SS_BLOCK_PER_ROW(r, rows) {
    const double mu = centered ? static_cast<double>(mean[r]) : 0.0, inv = rstd[r];
    kernels::LayerNormRowSums s = kernels::layernorm_backward_row_sums(
        dy + r * h, x + r * h, gamma, h, threadIdx.x, blockDim.x, mu, inv);
    s = block_reduce(s, SumOp{});
    const double n = static_cast<double>(h);
    kernels::layernorm_backward_row(dy + r * h, x + r * h, gamma, dx + r * h, h, threadIdx.x,
                                    blockDim.x, mu, inv, centered ? s.dxhat / n : 0.0,
                                    s.dxhat_xhat / n);
  }
}

// Pass 1 of dgamma and dbeta, as column_partials: partial[c * h + j] holds chunk c's part of
// dgamma[j] and, when centered, partial[(chunks + c) * h + j] its part of dbeta[j]; column_finish
// sums each.
template <class T>
__global__ void layernorm_param_partials(const T* dy, const T* x, const T* mean, const T* rstd,
                                         double* partial, std::int64_t rows, std::int64_t h,
                                         std::int64_t chunk) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= h) return;
  const bool centered = mean != nullptr;
  const std::int64_t c = blockIdx.y, chunks = gridDim.y;
  const std::int64_t begin = c * chunk, end = begin + chunk < rows ? begin + chunk : rows;
  double dg = 0.0, db = 0.0;
  for (std::int64_t r = begin; r < end; ++r) {
    const double mu = centered ? static_cast<double>(mean[r]) : 0.0;
    kernels::layernorm_param_grad_add(dg, centered ? &db : nullptr, dy[r * h + j], x[r * h + j], mu,
                                      static_cast<double>(rstd[r]));
  }
  partial[c * h + j] = dg;
  if (centered) partial[(chunks + c) * h + j] = db;
}

// Softmax of each row (s_q = 1 and causal = false for plain rows). With row_loss set, the rows
// are cross-entropy logits and row_loss[r] receives -log softmax(x)[targets[r]].
template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t s_k, std::int64_t s_q,
                    bool causal, const std::int64_t* targets, double* row_loss) {
  SS_BLOCK_PER_ROW(r, rows) {
    const T* in = x + r * s_k;
    const std::int64_t visible = kernels::softmax_visible(r, s_q, s_k, causal);
    double mx = kernels::row_max(in, visible, threadIdx.x, blockDim.x);
    mx = block_reduce(mx, MaxOp{});
    double total = kernels::row_sum_exp(in, visible, threadIdx.x, blockDim.x, mx);
    total = block_reduce(total, SumOp{});
    kernels::softmax_write_row(in, y + r * s_k, s_k, visible, threadIdx.x, blockDim.x, mx, total);
    if (row_loss && threadIdx.x == 0) {
      row_loss[r] = kernels::cross_entropy_row_loss(total, mx, in[targets[r]]);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t s_k) {
  SS_BLOCK_PER_ROW(r, rows) {
    double dot =
        kernels::softmax_backward_dot(y + r * s_k, dy + r * s_k, s_k, threadIdx.x, blockDim.x);
    dot = block_reduce(dot, SumOp{});
    kernels::softmax_backward_row(y + r * s_k, dy + r * s_k, dx + r * s_k, s_k, threadIdx.x,
                                  blockDim.x, dot);
  }
}

template <class T>
__global__ void cross_entropy_backward(const T* probs, const std::int64_t* targets, double scale,
                                       T* dlogits, std::int64_t n, std::int64_t c) {
  SS_GRID_STRIDE(i, n) {
    dlogits[i] = kernels::cross_entropy_grad(probs[i], i % c == targets[i / c], scale);
  }
}

#undef SS_GRID_STRIDE
#undef SS_BLOCK_PER_ROW

}  // namespace shardscope::cuda_kernels
