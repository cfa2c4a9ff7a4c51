// CachingAllocator: keeps freed blocks for reuse instead of returning them to where they came
// from. On a GPU, cudaMalloc/cudaFree synchronise the device and are slow; on the CPU, a large
// block from malloc is fresh pages from the kernel, faulted in and zeroed page by page at every
// first touch. Sizes round up to 512-byte classes; a freed block goes to its class's free list and
// the next request of that class takes it back. Host-only C++ over a RawAllocator, so its
// bookkeeping is tested on the CPU with a host stand-in. On a device, blocks are reused without
// waiting: every kernel of a backend runs on its one stream, so a block freed and reallocated is
// used after the work that used it before, in stream order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardscope {

// Where the blocks come from: cudaMalloc/cudaFree on a device, malloc/free in tests. allocate
// throws when the memory is not there: OutOfMemoryError when the device is full, another Error
// when the call failed for another reason.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* data, std::size_t bytes) = 0;
  // Called once after every allocate that threw, before the retry or the error goes on: the CUDA
  // runtime keeps a failed cudaMalloc's status as its last error, which the next launch check
  // (cudaGetLastError) would report as that launch's error; the CUDA raw allocator resets it here.
  virtual void clear_error() {}
};

struct AllocatorStats {
  std::size_t in_use = 0;    // bytes of blocks handed out (rounded sizes)
  std::size_t cached = 0;    // bytes of freed blocks kept for reuse
  std::size_t reserved = 0;  // in_use + cached: what the raw allocator holds for us
  std::size_t peak_in_use = 0;
  std::size_t peak_reserved = 0;
  std::uint64_t raw_allocations = 0;  // calls to RawAllocator::allocate
  std::uint64_t reuses = 0;           // requests served from a free list
};

class CachingAllocator {
 public:
  static constexpr std::size_t kGranule = 512;

  // How much the free lists may hold.
  enum class CacheLimit {
    none,         // every freed block (a device: the cache is emptied when an allocation fails)
    peak_in_use,  // at most the peak bytes in use: a freed block past it goes back to the raw
                  // allocator, so the allocator holds at most twice its peak (the CPU, where an
                  // allocation rarely fails but uses up the machine's memory)
  };

  // `device` names the device in out-of-memory errors ("cuda:0").
  explicit CachingAllocator(RawAllocator& raw, std::string device = "the device",
                            CacheLimit limit = CacheLimit::none)
      : raw_(raw), device_(std::move(device)), limit_(limit) {}
  ~CachingAllocator();  // returns every block, cached or not, to the raw allocator
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class of a request: bytes rounded up to a multiple of 512 (0 counts as 1).
  static std::size_t size_class(std::size_t bytes);

  // A block of at least `bytes`. When the raw allocator fails, the cache is emptied and the
  // request tried once more before the error goes to the caller; an out-of-memory error then
  // becomes OutOfMemoryError "out of memory on <device>: asked for N bytes (...)", naming the
  // request, its size class and what this allocator holds.
  void* allocate(std::size_t bytes);
  // Gives back a block from allocate; `bytes` is the size it was requested with. Throws
  // StateError naming the pointer for a block freed twice, a pointer never allocated here, or a
  // size that does not match the block's.
  void deallocate(void* data, std::size_t bytes);
  // Returns the cached blocks to the raw allocator.
  void empty_cache();
  AllocatorStats stats() const;

 private:
  void release_cached();                                    // with mutex_ held
  void* allocate_raw(std::size_t size, std::size_t bytes);  // with mutex_ held

  RawAllocator& raw_;
  std::string device_;
  CacheLimit limit_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> in_use_;      // block -> size class
  std::map<std::size_t, std::vector<void*>> cached_;   // size class -> free blocks
  std::unordered_map<void*, std::size_t> cached_set_;  // free block -> size class
  AllocatorStats stats_;
};

}  // namespace shardscope
