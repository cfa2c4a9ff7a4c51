// CachingAllocator bookkeeping on the CPU: a host RawAllocator stands in for cudaMalloc/cudaFree;
// and the CPU backend's own cache of large blocks.
#include "autograd/caching_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "autograd/cpu/cpu_backend.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"
#include "autograd/ops.h"

namespace shardscope {
namespace {

// malloc/free that records what is outstanding and can be given a capacity. Like cudaMalloc, a
// failed allocation leaves an error set until clear_error: the next allocate checks that it was
// cleared (CUDA's next launch check would otherwise report it).
class HostRawAllocator final : public RawAllocator {
 public:
  explicit HostRawAllocator(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  ~HostRawAllocator() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks leaked"; }

  void* allocate(std::size_t bytes) override {
    EXPECT_FALSE(error_set_) << "an allocation after a failed one that nobody cleared";
    if (held_ + bytes > capacity_) {
      error_set_ = true;
      throw OutOfMemoryError("host stand-in: " + std::to_string(bytes) + " bytes do not fit");
    }
    void* p = std::malloc(bytes);
    live_[p] = bytes;
    held_ += bytes;
    ++allocations;
    return p;
  }
  void release(void* data, std::size_t bytes) override {
    EXPECT_EQ(live_.at(data), bytes);
    live_.erase(data);
    held_ -= bytes;
    std::free(data);
    ++releases;
  }
  void clear_error() override {
    error_set_ = false;
    ++clears;
  }
  std::size_t held() const { return held_; }
  bool error_set() const { return error_set_; }

  int allocations = 0;
  int releases = 0;
  int clears = 0;

 private:
  bool error_set_ = false;
  std::size_t capacity_;
  std::size_t held_ = 0;
  std::map<void*, std::size_t> live_;
};

std::string pointer_text(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

TEST(CachingAllocator, RoundsRequestsUpTo512ByteClasses) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(4000), 4096u);

  HostRawAllocator raw;
  CachingAllocator alloc(raw);
  void* p = alloc.allocate(700);
  EXPECT_EQ(raw.held(), 1024u);
  EXPECT_EQ(alloc.stats().in_use, 1024u);
  alloc.deallocate(p, 700);
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameClass) {
  HostRawAllocator raw;
  CachingAllocator alloc(raw);
  void* a = alloc.allocate(1000);
  alloc.deallocate(a, 1000);
  EXPECT_EQ(raw.releases, 0);  // kept, not returned

  void* b = alloc.allocate(600);  // the same 1024-byte class
  EXPECT_EQ(b, a);
  EXPECT_EQ(raw.allocations, 1);
  void* c = alloc.allocate(2000);  // another class: a new block
  EXPECT_NE(c, a);
  EXPECT_EQ(raw.allocations, 2);

  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.raw_allocations, 2u);
  EXPECT_EQ(s.reuses, 1u);
  alloc.deallocate(b, 600);
  alloc.deallocate(c, 2000);
}

TEST(CachingAllocator, TracksInUseCachedReservedAndPeaks) {
  HostRawAllocator raw;
  CachingAllocator alloc(raw);
  void* a = alloc.allocate(512);
  void* b = alloc.allocate(1024);
  alloc.deallocate(a, 512);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(s.cached, 512u);
  EXPECT_EQ(s.reserved, 1536u);
  EXPECT_EQ(s.peak_in_use, 1536u);
  EXPECT_EQ(s.peak_reserved, 1536u);

  alloc.deallocate(b, 1024);
  s = alloc.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.cached, 1536u);
  EXPECT_EQ(s.reserved, 1536u);
  EXPECT_EQ(s.peak_in_use, 1536u);
  EXPECT_EQ(raw.held(), 1536u);
}

// Limited to the peak in use, the free lists never hold more than that peak: a freed block past
// it goes back to the raw allocator, so what is held stays within twice the peak.
TEST(CachingAllocator, CacheLimitedToThePeakInUseGivesBackWhatWouldPassIt) {
  HostRawAllocator raw;
  CachingAllocator alloc(raw, "cpu", CachingAllocator::CacheLimit::peak_in_use);
  void* a = alloc.allocate(512);
  void* b = alloc.allocate(512);
  void* c = alloc.allocate(512);
  alloc.deallocate(a, 512);
  alloc.deallocate(b, 512);
  alloc.deallocate(c, 512);
  EXPECT_EQ(raw.releases, 0);  // 1536 cached, the peak
  EXPECT_EQ(alloc.stats().cached, 1536u);

  void* big = alloc.allocate(2048);  // in use 2048: the new peak
  alloc.deallocate(big, 2048);       // 1536 + 2048 would pass it
  EXPECT_EQ(raw.releases, 1);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.cached, 1536u);
  EXPECT_EQ(s.reserved, 1536u);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(raw.held(), 1536u);

  // Without the limit the same block stays.
  HostRawAllocator raw2;
  CachingAllocator unlimited(raw2);
  void* d = unlimited.allocate(512);
  unlimited.deallocate(d, 512);
  void* big2 = unlimited.allocate(2048);
  unlimited.deallocate(big2, 2048);
  EXPECT_EQ(raw2.releases, 0);
  EXPECT_EQ(unlimited.stats().cached, 2560u);
}

// The CPU backend keeps large freed blocks and hands them out again zeroed, as Backend::allocate
// promises.
TEST(CpuBlockCache, ALargeBlockComesBackZeroed) {
  if (!CpuBackend::caches_blocks()) {
    GTEST_SKIP() << "this build (AddressSanitizer or ThreadSanitizer, which need every free) or "
                    "SHARDSCOPE_CPU_CACHE=0 turns the CPU block cache off";
  }
  CpuBackend cpu;
  const std::size_t bytes = CpuBackend::kCachedBlockBytes + 100;
  auto* first = static_cast<unsigned char*>(cpu.allocate(bytes));
  std::memset(first, 0xab, bytes);
  cpu.deallocate(first, bytes);
  auto* again = static_cast<unsigned char*>(cpu.allocate(bytes));
  EXPECT_EQ(again, first) << "the freed block was not reused";
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < bytes; ++i) nonzero += again[i] != 0;
  EXPECT_EQ(nonzero, 0u) << "bytes of a reused block not zeroed";
  EXPECT_EQ(cpu.cache_stats().reuses, 1u);
  cpu.deallocate(again, bytes);

  // Below the threshold: no cache.
  void* small = cpu.allocate(CpuBackend::kCachedBlockBytes - 1);
  cpu.deallocate(small, CpuBackend::kCachedBlockBytes - 1);
  EXPECT_EQ(cpu.cache_stats().raw_allocations, 1u);

  // A block large enough to be zeroed by several threads (an odd size: the last share is short).
  CpuBackend other;
  const std::size_t large = (std::size_t{1} << 20) + 13;
  auto* block = static_cast<unsigned char*>(other.allocate(large));
  std::memset(block, 0xcd, large);
  other.deallocate(block, large);
  auto* reused = static_cast<unsigned char*>(other.allocate(large));
  EXPECT_EQ(reused, block) << "the freed block of " << large << " bytes was not reused";
  nonzero = 0;
  for (std::size_t i = 0; i < large; ++i) nonzero += reused[i] != 0;
  EXPECT_EQ(nonzero, 0u) << "bytes of a reused block of " << large << " not zeroed";
  other.deallocate(reused, large);
}

// A training step's blocks at the labs' smallest shapes (64 KiB to 1 MiB) come from the cache in
// later steps: none from malloc, whose heap gave them back to the kernel at the end of each
// step and faulted them in again (brk, six times a step at s=64: a fifth of the step).
TEST(CpuBlockCache, LaterStepsAtSmallShapesReuseEveryBlock) {
  if (!CpuBackend::caches_blocks()) {
    GTEST_SKIP() << "this build (AddressSanitizer or ThreadSanitizer, which need every free) or "
                    "SHARDSCOPE_CPU_CACHE=0 turns the CPU block cache off";
  }
  Context ctx;
  auto& cpu = dynamic_cast<CpuBackend&>(ctx.backend());
  Tensor w = Tensor::randn(ctx, {128, 512}, 1);
  w.set_requires_grad(true);
  Tensor x = Tensor::randn(ctx, {128, 128}, 2);  // 64 KiB, the product 256 KiB
  auto step = [&] {
    Tensor loss = sum(gelu(matmul(x, w)));
    loss.backward();
  };
  step();
  step();  // the first to accumulate into w's gradient from step 1
  const AllocatorStats first = cpu.cache_stats();
  step();
  const AllocatorStats second = cpu.cache_stats();
  EXPECT_EQ(second.raw_allocations, first.raw_allocations) << "blocks from malloc in step 3";
  EXPECT_GE(second.reuses - first.reuses, 3u) << "the product, its GeLU and their gradients";
}

TEST(CachingAllocator, EmptyCacheReturnsOnlyFreeBlocks) {
  HostRawAllocator raw;
  CachingAllocator alloc(raw);
  void* kept = alloc.allocate(100);
  void* freed = alloc.allocate(5000);
  alloc.deallocate(freed, 5000);
  alloc.empty_cache();
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.reserved, 512u);
  EXPECT_EQ(s.in_use, 512u);
  EXPECT_EQ(raw.held(), 512u);
  EXPECT_EQ(raw.releases, 1);
  alloc.deallocate(kept, 100);
}

TEST(CachingAllocator, ReleasesEverythingWhenDestroyed) {
  HostRawAllocator raw;
  {
    CachingAllocator alloc(raw);
    alloc.allocate(10);  // still in use at destruction
    alloc.deallocate(alloc.allocate(3000), 3000);
  }
  EXPECT_EQ(raw.held(), 0u);
  EXPECT_EQ(raw.releases, 2);
}

TEST(CachingAllocator, FreesTheCacheAndRetriesWhenTheRawAllocatorIsFull) {
  HostRawAllocator raw(2048);
  CachingAllocator alloc(raw);
  alloc.deallocate(alloc.allocate(1536), 1536);  // 1536 bytes cached
  void* p = alloc.allocate(1024);                // does not fit beside the cache
  EXPECT_EQ(alloc.stats().cached, 0u);
  EXPECT_EQ(alloc.stats().reserved, 1024u);
  // The retry succeeded, and the failure before it left no error behind for the next launch.
  EXPECT_EQ(raw.clears, 1);
  EXPECT_FALSE(raw.error_set());
  EXPECT_THROW(alloc.allocate(2048), OutOfMemoryError);  // nothing left to free: the error stays
  EXPECT_EQ(raw.clears, 2);
  EXPECT_FALSE(raw.error_set());
  alloc.deallocate(p, 1024);
}

TEST(CachingAllocator, OutOfMemoryNamesTheDeviceTheRequestAndWhatIsHeld) {
  HostRawAllocator raw(4096);
  CachingAllocator alloc(raw, "cuda:3");
  void* kept = alloc.allocate(1024);
  alloc.deallocate(alloc.allocate(2048), 2048);  // cached, given back before the retry
  try {
    alloc.allocate(3500);
    ADD_FAILURE() << "3584 bytes beside 1024 in use cannot fit in 4096";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("out of memory on cuda:3: asked for 3500 bytes "
                                                "(a 3584-byte block) with 1024 bytes in use and "
                                                "2048 cached bytes given back to retry"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("host stand-in: 3584 bytes do not fit"));
  }
  EXPECT_EQ(raw.clears, 2);  // the first try and the retry
  EXPECT_FALSE(raw.error_set());
  alloc.deallocate(kept, 1024);
}

TEST(CachingAllocator, DoubleFreeUnknownPointerAndWrongSizeNameThePointer) {
  HostRawAllocator raw;
  CachingAllocator alloc(raw);
  void* p = alloc.allocate(64);
  try {
    alloc.deallocate(p, 4096);
    ADD_FAILURE() << "a wrong size must throw";
  } catch (const StateError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(pointer_text(p)));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("freed as 4096 bytes"));
  }
  alloc.deallocate(p, 64);
  try {
    alloc.deallocate(p, 64);
    ADD_FAILURE() << "a double free must throw";
  } catch (const StateError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(pointer_text(p)));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("freed twice"));
  }
  int local = 0;
  try {
    alloc.deallocate(&local, 4);
    ADD_FAILURE() << "an unknown pointer must throw";
  } catch (const StateError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(pointer_text(&local)));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("did not allocate"));
  }
}

// Without a CUDA build or a device, a cuda backend is a clear error and the device count is 0.
TEST(CudaEntryPoints, NoDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: tests/cuda covers it";
  try {
    make_cuda_backend(0);
    ADD_FAILURE() << "make_cuda_backend must throw without a device";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (cuda_backend_built()) {
      EXPECT_THAT(what, ::testing::StartsWith("no CUDA device"));
    } else {
      EXPECT_THAT(what, ::testing::HasSubstr("this build has no CUDA backend"));
    }
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
  EXPECT_FALSE(cuda_device_report().empty());
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  EXPECT_THROW(cuda_memory_stats(*cpu), ArgumentError);
  EXPECT_THROW(cuda_backend_stream(*cpu), ArgumentError);
}

}  // namespace
}  // namespace shardscope
