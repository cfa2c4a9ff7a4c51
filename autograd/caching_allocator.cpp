// CachingAllocator: size classes, free lists, statistics.
#include "autograd/caching_allocator.h"

#include <algorithm>
#include <new>
#include <sstream>
#include <string>

#include "autograd/errors.h"

namespace shardscope {
namespace {

std::string pointer_name(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

// "out of memory on cuda:0: asked for 1000 bytes (a 1024-byte block) with 3072 bytes in use and
// 2048 cached bytes given back to retry (cudaMalloc: out of memory ...)"
std::string out_of_memory_message(const std::string& device, std::size_t bytes, std::size_t size,
                                  std::size_t in_use, std::size_t released, const char* raw) {
  std::string out = "out of memory on " + device + ": asked for " + std::to_string(bytes) +
                    " bytes (a " + std::to_string(size) + "-byte block) with " +
                    std::to_string(in_use) + " bytes in use and ";
  out += released ? std::to_string(released) + " cached bytes given back to retry"
                  : std::string("nothing cached to give back");
  return out + " (" + raw + ")";
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  for (const auto& [data, size] : in_use_) raw_.release(data, size);
  release_cached();
}

std::size_t CachingAllocator::size_class(std::size_t bytes) {
  const std::size_t blocks = (std::max<std::size_t>(bytes, 1) + kGranule - 1) / kGranule;
  return blocks * kGranule;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* data = nullptr;
  auto list = cached_.find(size);
  if (list != cached_.end() && !list->second.empty()) {
    data = list->second.back();
    list->second.pop_back();
    cached_set_.erase(data);
    stats_.cached -= size;
    ++stats_.reuses;
  } else {
    data = allocate_raw(size, bytes);
    ++stats_.raw_allocations;
    stats_.reserved += size;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  in_use_.emplace(data, size);
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return data;
}

// A new block from the raw allocator. When it fails, the cached blocks of every class go back to
// it (they may make room) and the request is tried once more; a second failure goes to the caller,
// an out-of-memory one as OutOfMemoryError naming the request. Every failure clears the raw
// allocator's error state, so a retry that succeeds leaves no error behind.
void* CachingAllocator::allocate_raw(std::size_t size, std::size_t bytes) {
  std::size_t released = 0;
  const auto out_of_memory = [&](const char* raw) {
    return OutOfMemoryError(
        out_of_memory_message(device_, bytes, size, stats_.in_use, released, raw));
  };
  for (;;) {
    const bool can_retry = released == 0 && stats_.cached > 0;
    try {
      return raw_.allocate(size);
    } catch (const OutOfMemoryError& e) {
      raw_.clear_error();
      if (!can_retry) throw out_of_memory(e.what());
    } catch (const std::bad_alloc& e) {
      raw_.clear_error();
      if (!can_retry) throw out_of_memory(e.what());
    } catch (...) {
      raw_.clear_error();
      if (!can_retry) throw;
    }
    released = stats_.cached;
    release_cached();
  }
}

void CachingAllocator::deallocate(void* data, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto block = in_use_.find(data);
  if (block == in_use_.end()) {
    if (cached_set_.count(data)) {
      throw StateError("caching allocator: block " + pointer_name(data) +
                       " freed twice (it is already in the free list)");
    }
    throw StateError("caching allocator: freeing " + pointer_name(data) +
                     ", which this allocator did not allocate");
  }
  const std::size_t size = block->second;
  if (size_class(bytes) != size) {
    throw StateError("caching allocator: block " + pointer_name(data) + " of " +
                     std::to_string(size) + " bytes freed as " + std::to_string(bytes) + " bytes");
  }
  in_use_.erase(block);
  stats_.in_use -= size;
  if (limit_ == CacheLimit::peak_in_use && stats_.cached + size > stats_.peak_in_use) {
    raw_.release(data, size);
    stats_.reserved -= size;
    return;
  }
  cached_[size].push_back(data);
  cached_set_.emplace(data, size);
  stats_.cached += size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void CachingAllocator::release_cached() {
  for (auto& [size, blocks] : cached_) {
    for (void* data : blocks) raw_.release(data, size);
    stats_.reserved -= size * blocks.size();
  }
  cached_.clear();
  cached_set_.clear();
  stats_.cached = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace shardscope
