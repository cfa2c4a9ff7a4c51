// Storage: one contiguous block of device memory, reported to the Context's observers when it is
// allocated, recategorised and freed. Tensors share a Storage through std::shared_ptr.
#pragma once

#include <cstddef>
#include <cstdint>

#include "autograd/observer.h"

namespace shardscope {

class Context;

class Storage {
 public:
  // zeroed: Backend::allocate; else Backend::allocate_uninitialized.
  Storage(Context& ctx, std::size_t bytes, MemoryCategory category, bool zeroed = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t id() const { return id_; }
  MemoryCategory category() const { return category_; }
  void set_category(MemoryCategory category);
  Context& ctx() const { return ctx_; }

 private:
  StorageEvent event() const;

  Context& ctx_;
  void* data_ = nullptr;
  std::size_t bytes_;
  std::uint64_t id_;
  MemoryCategory category_;
};

}  // namespace shardscope
