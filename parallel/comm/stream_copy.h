// A copy with non-temporal (streaming) stores, for outputs too large to stay in the caches.
#pragma once

#include <cstddef>

namespace shardscope {

// A rank of ThreadComm whose output (or, for a reduction, input) is at least this large writes its
// output with streaming stores. A plain store first reads the cache line it writes (a read for
// ownership), so a plain copy moves 3 bytes of memory traffic per byte copied, a streaming one 2;
// an output this large (16 times the L2 of the project's machine) does not stay in the caches
// for the op that reads it next anyway. glibc's memcpy streams only past a threshold set from the
// L3 size the CPU reports (320 MiB on the project's VM), so ThreadComm's chunks were all copied
// with plain stores: a 256 MiB all_to_all of 2 ranks took 36 ms, now 22 ms (docs/benchmarks.md).
// Smaller outputs keep plain stores, which leave them in the caches.
constexpr std::size_t kStreamOutputBytes = std::size_t{16} << 20;

// memcpy(dst, src, bytes), with streaming stores where the CPU has them (SSE2) and then a store
// fence, so the bytes are visible to other threads once a lock released after it is taken, as
// plain stores are. The buffers must not overlap.
void stream_copy(void* dst, const void* src, std::size_t bytes);

// memcpy with plain stores, of the same type as stream_copy (bytes may be 0, with null pointers).
void plain_copy(void* dst, const void* src, std::size_t bytes);

// The same without the fence, for a run of copies that ends with one store_fence().
void stream_copy_unfenced(void* dst, const void* src, std::size_t bytes);
void store_fence();

}  // namespace shardscope
