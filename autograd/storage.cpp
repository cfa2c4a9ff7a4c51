// Storage: device memory reported to observers.
#include "autograd/storage.h"

#include "autograd/backend.h"
#include "autograd/context.h"

namespace shardscope {

Storage::Storage(Context& ctx, std::size_t bytes, MemoryCategory category, bool zeroed)
    : ctx_(ctx), bytes_(bytes), id_(ctx.next_storage_id()), category_(category) {
  data_ = zeroed ? ctx.backend().allocate(bytes) : ctx.backend().allocate_uninitialized(bytes);
  if (ctx_.observed()) {
    const StorageEvent e = event();
    ctx_.notify([&](Observer& o) { o.on_alloc(e); });
  }
}

Storage::~Storage() {
  if (ctx_.observed()) {
    const StorageEvent e = event();
    ctx_.notify([&](Observer& o) { o.on_free(e); });
  }
  ctx_.backend().deallocate(data_, bytes_);
}

void Storage::set_category(MemoryCategory category) {
  if (category == category_) return;
  const MemoryCategory previous = category_;
  category_ = category;
  if (ctx_.observed()) {
    StorageEvent e = event();
    e.previous = previous;
    ctx_.notify([&](Observer& o) { o.on_recategorize(e); });
  }
}

StorageEvent Storage::event() const {
  StorageEvent e;
  e.site = ctx_.site();
  e.storage_id = id_;
  e.bytes = bytes_;
  e.category = category_;
  e.previous = category_;
  return e;
}

}  // namespace shardscope
