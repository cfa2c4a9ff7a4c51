// CpuBackend: the activations (GeLU, SwiGLU), the rotary embedding and dropout, element by
// element in threads (the rest of the backend: cpu_backend.cpp, cpu_layout.cpp and cpu_rows.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/dispatch.h"
#include "autograd/cpu/exp_floats.h"
#include "autograd/cpu/grain.h"
#include "autograd/cpu/philox_words.h"
#include "autograd/kernels/gelu.h"
#include "autograd/kernels/half.h"
#include "autograd/kernels/layout.h"
#include "autograd/kernels/philox.h"
#include "autograd/kernels/rope.h"
#include "autograd/kernels/softmax.h"
#include "autograd/kernels/swiglu.h"

namespace shardscope {

using cpu::dispatch_floating;
using cpu::kCheapGrain;
using cpu::kCostlyGrain;

namespace {

// The most (position, pair) entries rope_forward tabulates (24 MiB of cosines and sines in double
// and f32, kept by the backend until another geometry's table replaces it); past that each
// element takes its own.
constexpr std::int64_t kRopeTableMost = std::int64_t{1} << 20;
// The fewest table entries worth a thread (a cosine and a sine each: some 40 ns).
constexpr std::int64_t kRopeTableGrain = 1024;

}  // namespace

namespace {

// The elements of a GeLU loop's chunk, so that its s values fit a stack buffer.
constexpr std::int64_t kGeluChunk = 256;

// v[j] = exp(v[j]): f32 through cpu/exp_floats.h (vectorised, within 1.5 ulp), f64
// through libm.
template <class C>
void exp_chunk(C* v, std::int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    cpu::exp_floats(v, n);
  } else {
    for (std::int64_t j = 0; j < n; ++j) v[j] = std::exp(v[j]);
  }
}

// s[j] = kernels::gelu_half_one_plus_tanh(x[j]) for j < n <= kGeluChunk, the same operations in
// the same order, in three loops that vectorise (f64's exp stays a libm call).
template <class T, class C = kernels::compute_t<T>>
void gelu_s(const T* x, std::int64_t n, C* s) {
  for (std::int64_t j = 0; j < n; ++j) s[j] = kernels::gelu_exp_argument(static_cast<C>(x[j]));
  exp_chunk(s, n);
  for (std::int64_t j = 0; j < n; ++j) s[j] = kernels::gelu_s_from_exp(s[j]);
}

// Elements [begin, end) of a GeLU or SwiGLU loop, kGeluChunk at a time: fill(i, n, s) puts the
// chunk's sigmoids in s (its exp in a loop of its own), then each(k, s) runs per element k in a
// loop that vectorises.
template <class C, class Fill, class Each>
void sigmoid_chunks(std::int64_t begin, std::int64_t end, Fill&& fill, Each&& each) {
  C s[kGeluChunk];
  for (std::int64_t i = begin; i < end; i += kGeluChunk) {
    const std::int64_t n = std::min(kGeluChunk, end - i);
    fill(i, n, s);
    for (std::int64_t j = 0; j < n; ++j) each(i + j, s[j]);
  }
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = kernels::compute_t<T>;
    const T* in = x.data<T>();
    T* o = y.data<T>();
    threads_.parallel_for(x.numel(), kCostlyGrain, [&](std::int64_t begin, std::int64_t end) {
      sigmoid_chunks<C>(
          begin, end, [&](std::int64_t i, std::int64_t n, C* s) { gelu_s(in + i, n, s); },
          [&](std::int64_t k, C s) { o[k] = static_cast<T>(static_cast<C>(in[k]) * s); });
    });
  });
}

void CpuBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = kernels::compute_t<T>;
    const T* in = x.data<T>();
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    threads_.parallel_for(x.numel(), kCostlyGrain, [&](std::int64_t begin, std::int64_t end) {
      sigmoid_chunks<C>(
          begin, end, [&](std::int64_t i, std::int64_t n, C* s) { gelu_s(in + i, n, s); },
          [&](std::int64_t k, C s) {
            const C grad = kernels::gelu_grad_from_s(static_cast<C>(in[k]), s);
            o[k] = static_cast<T>(static_cast<C>(g[k]) * grad);
          });
    });
  });
}

namespace {

// s[j] = kernels::sigmoid of the gate of output j (x[2 j]) for j < n <= kGeluChunk: the exp in a
// loop of its own, as gelu_s.
template <class T, class C = kernels::compute_t<T>>
void swiglu_sigmoids(const T* x, std::int64_t n, C* s) {
  for (std::int64_t j = 0; j < n; ++j) s[j] = -static_cast<C>(x[2 * j]);
  exp_chunk(s, n);
  for (std::int64_t j = 0; j < n; ++j) s[j] = kernels::sigmoid_from_exp(s[j]);
}

}  // namespace

// Each thread a range of outputs i, reading the pair (x[2i], x[2i + 1]) = (gate, up).
void CpuBackend::swiglu_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = kernels::compute_t<T>;
    const T* in = x.data<T>();
    T* o = y.data<T>();
    threads_.parallel_for(y.numel(), kCostlyGrain, [&](std::int64_t begin, std::int64_t end) {
      sigmoid_chunks<C>(
          begin, end,
          [&](std::int64_t i, std::int64_t n, C* s) { swiglu_sigmoids(in + 2 * i, n, s); },
          [&](std::int64_t k, C s) {
            o[k] = static_cast<T>(kernels::swiglu_from_sigmoid(static_cast<C>(in[2 * k]),
                                                               static_cast<C>(in[2 * k + 1]), s));
          });
    });
  });
}

void CpuBackend::swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch_floating(x.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = kernels::compute_t<T>;
    const T* in = x.data<T>();
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    threads_.parallel_for(dy.numel(), kCostlyGrain, [&](std::int64_t begin, std::int64_t end) {
      sigmoid_chunks<C>(
          begin, end,
          [&](std::int64_t i, std::int64_t n, C* s) { swiglu_sigmoids(in + 2 * i, n, s); },
          [&](std::int64_t k, C s) {
            C dgate, dup;
            kernels::swiglu_grad_from_sigmoid(static_cast<C>(in[2 * k]),
                                              static_cast<C>(in[2 * k + 1]), static_cast<C>(g[k]),
                                              s, dgate, dup);
            o[2 * k] = static_cast<T>(dgate);
            o[2 * k + 1] = static_cast<T>(dup);
          });
    });
  });
}

std::shared_ptr<const CpuBackend::RopeTable> CpuBackend::rope_table(std::int64_t positions,
                                                                    std::int64_t first_position,
                                                                    std::int64_t d, double base) {
  const std::int64_t half = d / 2;
  {
    std::lock_guard<std::mutex> lock(rope_mutex_);
    const RopeTable* t = rope_table_.get();
    if (t && t->positions == positions && t->first_position == first_position && t->d == d &&
        t->base == base) {
      return rope_table_;
    }
  }
  auto table = std::make_shared<RopeTable>();
  table->positions = positions;
  table->first_position = first_position;
  table->d = d;
  table->base = base;
  const auto entries = static_cast<std::size_t>(positions * half);
  table->cos.resize(entries);
  table->sin.resize(entries);
  // Each pair's theta once (a pow; rope_angle's own), the positions' cosines and sines in threads:
  // the same doubles rope_rotate takes.
  std::vector<double> theta(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    theta[static_cast<std::size_t>(i)] = kernels::rope_theta(i, d, base);
  }
  threads_.parallel_for(
      positions, std::max<std::int64_t>(kRopeTableGrain / std::max<std::int64_t>(half, 1), 1),
      [&](std::int64_t first, std::int64_t end) {
        for (std::int64_t p = first; p < end; ++p) {
          const auto position = static_cast<double>(first_position + p);
          for (std::int64_t i = 0; i < half; ++i) {
            const double angle = position * theta[static_cast<std::size_t>(i)];
            table->cos[static_cast<std::size_t>(p * half + i)] = std::cos(angle);
            table->sin[static_cast<std::size_t>(p * half + i)] = std::sin(angle);
          }
        }
      });
  table->cos_f32.assign(table->cos.begin(), table->cos.end());
  table->sin_f32.assign(table->sin.begin(), table->sin.end());
  std::lock_guard<std::mutex> lock(rope_mutex_);
  rope_table_ = table;
  return table;
}

// Each thread a range of rows of d, each row at one position, rotating its d/2 pairs
// (x[i], x[i + d/2]).
void CpuBackend::rope_forward(const Tensor& x, int seq_dim, std::int64_t first_position,
                              double base, bool inverse, Tensor& y) {
  const kernels::RopeGeometry g =
      kernels::rope_geometry(x.shape().dims().data(), x.rank(), seq_dim, first_position, base);
  // Fast path: each (position, pair)'s cosine and sine from a table kept from call to call (the
  // rows of one position share them: b x heads rows a position), past kRopeTableMost entries
  // each element's own.
  std::shared_ptr<const RopeTable> table;
  if (g.positions * (g.d / 2) <= kRopeTableMost) {
    table = rope_table(g.positions, g.first_position, g.d, g.base);
  }
  dispatch_floating(x.dtype(), "rope_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = y.data<T>();
    const std::int64_t d = g.d, half = d / 2;
    auto rows = [&](std::int64_t first, std::int64_t end) {
      // Row r's position is first_position + (r / inner) % positions (rope_row_position): an
      // odometer over (position, row within it) from the chunk's first row, no division a row.
      std::int64_t within = first % g.inner;
      std::int64_t position = kernels::rope_row_position(first, g);
      for (std::int64_t row = first; row < end; ++row) {
        if (row != first && ++within == g.inner) {
          within = 0;
          if (++position == g.first_position + g.positions) position = g.first_position;
        }
        const T* a = in + row * d;
        T* out = o + row * d;
        const std::int64_t at = (position - g.first_position) * half;
        if (table && kernels::is_half_v<T>) {
          // The rotation in f32 with the table's cosines and sines rounded to f32, then rounded
          // once to T (as softmax_backward's row): a loop the compiler vectorises.
          const float* c = table->cos_f32.data() + at;
          const float* sn = table->sin_f32.data() + at;
          const float sign = inverse ? -1.0f : 1.0f;
          for (std::int64_t i = 0; i < half; ++i) {
            const auto xa = static_cast<float>(a[i]), xb = static_cast<float>(a[i + half]);
            const float s = sign * sn[i];
            out[i] = static_cast<T>(xa * c[i] - xb * s);
            out[i + half] = static_cast<T>(xb * c[i] + xa * s);
          }
          continue;
        }
        if (table) {
          // rope_rotate_by's doubles, cosines and sines in arrays of their own: a loop the
          // compiler vectorises.
          const double* c = table->cos.data() + at;
          const double* sn = table->sin.data() + at;
          const double sign = inverse ? -1.0 : 1.0;
          for (std::int64_t i = 0; i < half; ++i) {
            kernels::rope_rotate_by(a[i], a[i + half], c[i], sign * sn[i], out[i], out[i + half]);
          }
          continue;
        }
        for (std::int64_t i = 0; i < half; ++i) {
          kernels::rope_rotate(a[i], a[i + half], kernels::rope_angle(position, i, d, g.base),
                               inverse, out[i], out[i + half]);
        }
      }
    };
    threads_.parallel_for(x.numel() / d, std::max<std::int64_t>(kCostlyGrain / d, 1), rows);
  });
}

namespace {

// kernels::dropout_apply(x, keep, scale) without a branch, so that a loop of them vectorises:
// x scale with every bit cleared where dropped (+0, dropout_apply's zero).
template <class C>
C dropout_select(C x, bool keep, C scale) {
  using Bits = std::conditional_t<sizeof(C) == 8, std::uint64_t, std::uint32_t>;
  const C kept = x * scale;
  Bits bits;
  std::memcpy(&bits, &kept, sizeof bits);
  bits &= Bits{0} - static_cast<Bits>(keep);
  C out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace

void CpuBackend::dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask,
                                 Tensor& y) {
  const Shape& local = x.shape();
  const Shape global = spec.global_shape.rank() ? spec.global_shape : local;
  const int r = local.rank();
  const std::vector<std::int64_t> gstride = global.strides();
  // Global linear index of the local tensor's first element.
  std::int64_t origin = 0;
  for (int d = 0; d < r && !spec.offset.empty(); ++d)
    origin += spec.offset[static_cast<std::size_t>(d)] * gstride[static_cast<std::size_t>(d)];
  // The local tensor as runs of elements whose global indices are consecutive: the inner dims the
  // shard holds whole times the first one it holds in part (the whole tensor when unsharded), cut
  // into pieces of at most kPiece elements.
  std::int64_t run = 1;
  int whole = r - 1;
  for (; whole >= 0 && local[whole] == global[whole]; --whole) run *= local[whole];
  if (whole >= 0) run *= local[whole];
  constexpr std::int64_t kPiece = 4096;
  const std::int64_t piece = std::max<std::int64_t>(std::min(run, kPiece), 1);
  const std::int64_t pieces_per_run = (run + piece - 1) / piece;
  const std::int64_t pieces = run ? x.numel() / run * pieces_per_run : 0;
  auto* m = mask.data<std::uint8_t>();
  dispatch_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    using C = kernels::compute_t<T>;
    const C keep_scale = static_cast<C>(1.0 / (1.0 - spec.p));
    if (pieces == 0) return;
    const std::uint32_t threshold = kernels::dropout_keep_threshold(spec.p);
    // kernels::dropout_keep, with each Philox call's four words used for the four elements that
    // share its counter (global indices 4c .. 4c + 3) instead of drawn once per element, and the
    // calls made together (cpu::philox_words: 16 side by side on AVX-512, 8 on AVX2).
    auto global_index = [&](std::int64_t start) {
      return static_cast<std::uint64_t>(
          origin + kernels::strided_index(start, r, local.dims().data(), gstride.data()));
    };
    // Philox blocks holding the words of `elements` elements from global index base on.
    auto blocks_for = [](std::uint64_t base, std::int64_t elements) -> std::uint64_t {
      if (elements <= 0) return 0;
      return ((base + static_cast<std::uint64_t>(elements) - 1) >> 2) - (base >> 2) + 1;
    };
    // Elements start .. start + length: the first `visible` are kept or dropped by their words
    // (bits[j]), the rest dropped (DropoutSpec::causal; else all are visible). One loop over all
    // of them (bits[j] past `visible` is read but not used: any word there), which vectorises
    // where a loop to `visible` and a fill after it cost two calls and a tail a row.
    auto apply = [&](std::int64_t start, std::int64_t length, std::int64_t visible,
                     const std::uint32_t* bits) {
      // Locals, not the captures: a store through the u8 mask may alias anything, so the
      // compiler would reload every captured pointer after each one.
      const T* piece_in = in + start;
      T* piece_out = out + start;
      std::uint8_t* piece_mask = m + start;
      const C scale = keep_scale;
      const std::uint32_t limit = threshold;
      for (std::int64_t j = 0; j < length; ++j) {
        const bool keep = (j < visible) & ((bits[j] >> 8) >= limit);
        piece_mask[j] = keep ? 1 : 0;
        piece_out[j] = static_cast<T>(dropout_select(static_cast<C>(piece_in[j]), keep, scale));
      }
    };
    if (spec.causal) {
      // Row by row, the visible keys drawn and the rest dropped without drawing. The blocks of
      // kRows rows' visible keys are listed and drawn together (philox_words_listed): drawn row by
      // row, a short row's few blocks cost twice what they cost in a long run.
      constexpr std::int64_t kRows = 16;
      const std::int64_t keys = local.dim(-1), queries = local.dim(-2);
      // A row's visible keys span at most blocks_for(3, keys) blocks, whatever its base.
      const auto most = static_cast<std::size_t>(kRows) * blocks_for(3, keys);
      threads_.parallel_for(x.numel() / keys, std::max<std::int64_t>(kCostlyGrain / keys, 1),
                            [&](std::int64_t first, std::int64_t end) {
                              std::vector<std::uint64_t> blocks(most);
                              std::vector<std::uint32_t> words(4 * most);
                              std::uint64_t bases[kRows];
                              std::int64_t visible[kRows];
                              std::size_t listed_at[kRows];
                              std::uint64_t base = global_index(first * keys);
                              for (std::int64_t row0 = first; row0 < end; row0 += kRows) {
                                const std::int64_t rows = std::min(kRows, end - row0);
                                std::size_t listed = 0;
                                for (std::int64_t i = 0; i < rows; ++i) {
                                  const std::int64_t start = (row0 + i) * keys;
                                  // Rows of one run have consecutive global indices.
                                  if (row0 + i > first)
                                    base = start % run == 0 ? global_index(start) : base + keys;
                                  bases[i] = base;
                                  visible[i] = std::clamp<std::int64_t>(
                                      kernels::softmax_visible(row0 + i, queries, keys, true), 0,
                                      keys);
                                  listed_at[i] = listed;
                                  const std::uint64_t count = blocks_for(base, visible[i]);
                                  std::uint64_t* list = blocks.data() + listed;
                                  for (std::uint64_t c = 0; c < count; ++c)
                                    list[c] = (base >> 2) + c;
                                  listed += count;
                                }
                                cpu::philox_words_listed(blocks.data(), listed, spec.stream,
                                                         spec.step, spec.seed, words.data());
                                for (std::int64_t i = 0; i < rows; ++i) {
                                  apply((row0 + i) * keys, keys, visible[i],
                                        words.data() + 4 * listed_at[i] + (bases[i] & 3u));
                                }
                              }
                            });
      return;
    }
    threads_.parallel_for(
        pieces, std::max<std::int64_t>(kCostlyGrain / piece, 1),
        [&](std::int64_t first, std::int64_t end) {
          std::vector<std::uint32_t> words;
          for (std::int64_t k = first; k < end; ++k) {
            const std::int64_t within = (k % pieces_per_run) * piece;
            const std::int64_t start = k / pieces_per_run * run + within;
            const std::int64_t length = std::min(piece, run - within);
            const std::uint64_t base = global_index(start), blocks = blocks_for(base, length);
            words.resize(4 * blocks);
            cpu::philox_words(base >> 2, blocks, spec.stream, spec.step, spec.seed, words.data());
            apply(start, length, length, words.data() + (base & 3u));
          }
        });
  });
}

void CpuBackend::dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) {
  dispatch_floating(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    const auto* m = mask.data<std::uint8_t>();
    T* o = dx.data<T>();
    using C = kernels::compute_t<T>;
    const C keep_scale = static_cast<C>(1.0 / (1.0 - p));
    threads_.parallel_for(dy.numel(), kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        o[i] = static_cast<T>(dropout_select(static_cast<C>(g[i]), m[i] != 0, keep_scale));
      }
    });
  });
}

}  // namespace shardscope
