// CachingAllocator: size classes, free lists, statistics.
#include "autograd/cuda/caching_allocator.h"

#include <algorithm>
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
    try {
      data = raw_.allocate(size);
    } catch (...) {
      if (stats_.cached == 0) throw;
      release_cached();  // other classes' blocks may make room; a second failure propagates
      data = raw_.allocate(size);
    }
    ++stats_.raw_allocations;
    stats_.reserved += size;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  in_use_.emplace(data, size);
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return data;
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
  cached_[size].push_back(data);
  cached_set_.emplace(data, size);
  stats_.in_use -= size;
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
