#include "parallel/comm/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardscope {

void stream_copy(void* dst, const void* src, std::size_t bytes) {
  stream_copy_unfenced(dst, src, bytes);
  store_fence();
}

void plain_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void stream_copy_unfenced(void* dst, const void* src, std::size_t bytes) {
#if defined(__SSE2__)
  constexpr std::size_t kLine = 64;
  if (bytes >= 4 * kLine) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    // Plain stores up to d's first cache line, whole lines streamed, plain stores for the tail.
    const std::size_t head = (kLine - reinterpret_cast<std::uintptr_t>(d) % kLine) % kLine;
    std::memcpy(d, s, head);
    std::size_t at = head;
    for (; at + kLine <= bytes; at += kLine) {
      const auto* from = reinterpret_cast<const __m128i*>(s + at);
      auto* to = reinterpret_cast<__m128i*>(d + at);
      const __m128i w0 = _mm_loadu_si128(from), w1 = _mm_loadu_si128(from + 1);
      const __m128i w2 = _mm_loadu_si128(from + 2), w3 = _mm_loadu_si128(from + 3);
      _mm_stream_si128(to, w0);
      _mm_stream_si128(to + 1, w1);
      _mm_stream_si128(to + 2, w2);
      _mm_stream_si128(to + 3, w3);
    }
    std::memcpy(d + at, s + at, bytes - at);
    return;
  }
#endif
  if (bytes) std::memcpy(dst, src, bytes);
}

}  // namespace shardscope
