// CpuBackend's layout kernels: copies (whole, strided, a slice), permutes and lower_triangle, each
// over the loop threads. They move bytes (memcpy) or elements as unsigned integers of the
// element's size (kernels::with_unsigned_of_size): no value is looked at, whatever the dtype.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/grain.h"
#include "autograd/errors.h"
#include "autograd/kernels/layout.h"

namespace shardscope {

using cpu::kCheapGrain;
using kernels::with_unsigned_of_size;

namespace {

// Entries [begin, end) of the squares: row i keeps its first i + 1 elements and zeroes the
// rest, in loops over elements of E (an unsigned type of the element's size) that vectorise. A
// memmove and a memset per row were about 2000 library calls for the 32 squares of 32 x 32 of one
// causal block at s=128, 20 to 40 us a call of lower_triangle.
template <class E>
void lower_triangle_entries(const TriangleDesc& d, const E* in, E* out, std::int64_t begin,
                            std::int64_t end) {
  const std::int64_t n = d.n;
  for (std::int64_t e = begin; e < end; ++e) {
    for (std::int64_t i = 0; i < n; ++i) {
      const E* from = in + e * d.stride_src + i * d.ld_src;
      E* to = out + e * d.stride_dst + i * d.ld_dst;
      if (from == to) {
        for (std::int64_t j = i + 1; j < n; ++j) to[j] = E{0};
      } else {
        for (std::int64_t j = 0; j < n; ++j) to[j] = j <= i ? from[j] : E{0};
      }
    }
  }
}

}  // namespace

// Square by square over the threads (src and dst are the same squares, or apart), a quarter of
// a cheap loop's grain a thread: rows of a square are short and strided, and the 32 squares of
// 32 x 32 of a causal block at s=128 (a cheap grain) ran on the caller alone, 2% of a 2-thread
// step's time while the other core waited.
void CpuBackend::lower_triangle(const TriangleDesc& d, DType dtype, const void* src, void* dst) {
  d.validate();
  const std::int64_t grain =
      std::max<std::int64_t>(kCheapGrain / 4 / std::max<std::int64_t>(d.n * d.n, 1), 1);
  auto run = [&](auto element) {
    using E = decltype(element);
    const auto* in = static_cast<const E*>(src);
    auto* out = static_cast<E*>(dst);
    threads_.parallel_for(d.batch, grain, [&](std::int64_t begin, std::int64_t end) {
      lower_triangle_entries(d, in, out, begin, end);
    });
  };
  if (!with_unsigned_of_size(dtype_size(dtype), run)) {
    throw ArgumentError("lower_triangle: elements of 1, 2, 4 or 8 bytes expected, given " +
                        std::string(dtype_name(dtype)));
  }
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  if (src.raw_data() == dst.raw_data()) return;
  copy_bytes(src.raw_data(), dst.raw_data(), static_cast<std::int64_t>(src.bytes()));
}

// A memcpy whose ranges of bytes the threads share out.
void CpuBackend::copy_bytes(const void* src, void* dst, std::int64_t bytes) {
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  threads_.parallel_for(bytes, 4 * kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
    std::memcpy(out + begin, in + begin, static_cast<std::size_t>(end - begin));
  });
}

namespace {

// A strided copy (StridedCopy, a permute) as rows: its dims coalesced on both sides, the last one
// the row where it is contiguous on both (else rows of one element), copied in tiles of two row
// dims: a block of `inner`, the dim along which output rows follow each other, by every position
// of `across`, the one along which input rows do, for each position of the other dims. Both sides
// of a tile then read and write runs of several rows. Row by row in output order, the heads'
// [s, b, a, d] -> [b, a, s, d] at s=128 read each row from another page (rows 4 KiB apart): a
// memcpy a row took 4 times a copy's time and did not go faster on two threads.
struct RowCopy {
  std::vector<std::int64_t> dims, in_step, out_step;  // the row dims, steps in elements
  std::int64_t row = 1;
  std::size_t inner = 0;
  std::optional<std::size_t> across;  // none: a tile is a run of `inner` alone
  std::int64_t block = 1, tiles = 0;
};

RowCopy plan_rows(std::vector<std::int64_t> dims, std::vector<std::int64_t> in,
                  std::vector<std::int64_t> out, std::size_t es) {
  if (dims.empty()) dims = in = out = {1};  // a rank-0 tensor: one element
  const auto rank = static_cast<std::size_t>(
      kernels::coalesce_dims2(static_cast<int>(dims.size()), dims.data(), in.data(), out.data()));
  dims.resize(rank);
  in.resize(rank);
  out.resize(rank);
  RowCopy t;
  if (in.back() == 1 && out.back() == 1) {
    t.row = dims.back();
    dims.pop_back(), in.pop_back(), out.pop_back();
  }
  if (dims.empty()) dims = in = out = {1};  // one row
  t.dims = std::move(dims), t.in_step = std::move(in), t.out_step = std::move(out);
  const std::size_t n = t.dims.size();
  t.inner = n - 1;
  for (std::size_t d = 0; d < n; ++d) {
    if (t.out_step[d] == t.row) t.inner = d;
  }
  for (std::size_t d = 0; d < n; ++d) {
    if (d != t.inner && t.in_step[d] == t.row) t.across = d;
  }
  // A tile of at most 32 KiB, so that it stays in the cache between its reads and writes (and,
  // with no `across`, so that a copy of many rows, such as a bias broadcast to every row, is cut
  // into tiles for the threads rather than one).
  const auto tile_rows = static_cast<std::int64_t>((std::size_t{32} << 10) / es) / t.row;
  t.block =
      std::clamp<std::int64_t>(tile_rows / (t.across ? t.dims[*t.across] : 1), 1, t.dims[t.inner]);
  t.tiles = (t.dims[t.inner] + t.block - 1) / t.block;
  for (std::size_t d = 0; d < n; ++d) {
    if (d != t.inner && d != t.across) t.tiles *= t.dims[d];
  }
  return t;
}

// Copies the tiles [first, end) of `t` (numbered over the other row dims, then the blocks of
// `inner`), with elements of type E.
template <class E>
void copy_row_tiles(const RowCopy& t, const E* in, E* out, std::int64_t first, std::int64_t end) {
  const std::size_t inner = t.inner;
  const std::int64_t blocks = (t.dims[inner] + t.block - 1) / t.block;
  const std::int64_t across = t.across ? t.dims[*t.across] : 1;
  const std::int64_t across_in = t.across ? t.in_step[*t.across] : 0;
  const std::int64_t across_out = t.across ? t.out_step[*t.across] : 0;
  for (std::int64_t tile = first; tile < end; ++tile) {
    const std::int64_t b0 = (tile % blocks) * t.block, b1 = std::min(b0 + t.block, t.dims[inner]);
    std::int64_t from = b0 * t.in_step[inner], to = b0 * t.out_step[inner];
    for (std::size_t d = t.dims.size(), rest = static_cast<std::size_t>(tile / blocks); d-- > 0;) {
      if (d == inner || d == t.across) continue;
      const auto at = static_cast<std::int64_t>(rest % static_cast<std::size_t>(t.dims[d]));
      rest /= static_cast<std::size_t>(t.dims[d]);
      from += at * t.in_step[d];
      to += at * t.out_step[d];
    }
    for (std::int64_t j = 0; j < across; ++j) {
      for (std::int64_t i = 0; i < b1 - b0; ++i) {
        const E* src = in + from + j * across_in + i * t.in_step[inner];
        E* dst = out + to + j * across_out + i * t.out_step[inner];
        for (std::int64_t k = 0; k < t.row; ++k) dst[k] = src[k];
      }
    }
  }
}

}  // namespace

// The elements of `in` at in_step offsets to those of `out` at out_step offsets, over `dims`.
void CpuBackend::copy_rows(const char* kernel, const std::vector<std::int64_t>& dims,
                           const std::vector<std::int64_t>& in_step, const void* in,
                           const std::vector<std::int64_t>& out_step, void* out, DType dtype) {
  const std::int64_t n = Shape(dims).numel();
  if (n == 0) return;
  const std::size_t es = dtype_size(dtype);
  const RowCopy t = plan_rows(dims, in_step, out_step, es);
  if (t.tiles == 1 && t.across == std::nullopt && t.dims[t.inner] == 1) {
    // One contiguous run on both sides: shared out as a copy is.
    copy_bytes(in, out, static_cast<std::int64_t>(es) * t.row);
    return;
  }
  const std::int64_t per_tile = std::max<std::int64_t>(n / t.tiles, 1);
  const bool copied = with_unsigned_of_size(es, [&](auto element) {
    using E = decltype(element);
    threads_.parallel_for(t.tiles, std::max<std::int64_t>(kCheapGrain / per_tile, 1),
                          [&](std::int64_t first, std::int64_t end) {
                            copy_row_tiles(t, static_cast<const E*>(in), static_cast<E*>(out),
                                           first, end);
                          });
  });
  if (!copied) {
    throw ArgumentError(std::string(kernel) + ": elements of 1, 2, 4 or 8 bytes expected, given " +
                        dtype_name(dtype));
  }
}

void CpuBackend::permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) {
  const std::vector<std::int64_t> in_strides = src.shape().strides();
  // `in_step[d]` is how far the input moves for output dim d.
  std::vector<std::int64_t> in_step(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d)
    in_step[d] = in_strides[static_cast<std::size_t>(perm[d])];
  copy_rows("permute", dst.shape().dims(), in_step, src.raw_data(), dst.shape().strides(),
            dst.raw_data(), src.dtype());
}

void CpuBackend::copy_strided(const StridedCopy& copy, const Tensor& src, Tensor& dst) {
  copy.validate(src.numel(), dst.numel());
  const std::size_t es = dtype_size(src.dtype());
  copy_rows(
      "copy_strided", copy.dims, copy.src_strides,
      static_cast<const unsigned char*>(src.raw_data()) +
          static_cast<std::size_t>(copy.src_offset) * es,
      copy.dst_strides,
      static_cast<unsigned char*>(dst.raw_data()) + static_cast<std::size_t>(copy.dst_offset) * es,
      src.dtype());
}

void CpuBackend::copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                            std::int64_t dst_offset, std::int64_t count) {
  const Shape& s = src.shape();
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int d = dim + 1; d < s.rank(); ++d) inner *= s[d];
  const std::size_t es = dtype_size(src.dtype());
  const std::int64_t src_dim = s[dim], dst_dim = dst.shape()[dim];
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  // `outer` runs of `run` elements; the threads take ranges of the elements of all of them, so a
  // slice of one long run (a split along the first dim) is shared out too.
  const std::int64_t run = count * inner;
  if (run == 0) return;
  threads_.parallel_for(outer * run, kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end;) {
      const std::int64_t o = i / run, within = i % run, n = std::min(run - within, end - i);
      std::memcpy(out + static_cast<std::size_t>((o * dst_dim + dst_offset) * inner + within) * es,
                  in + static_cast<std::size_t>((o * src_dim + src_offset) * inner + within) * es,
                  static_cast<std::size_t>(n) * es);
      i += n;
    }
  });
}

}  // namespace shardscope
