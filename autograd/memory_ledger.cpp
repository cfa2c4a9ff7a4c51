// MemoryLedger: live/peak bytes per category (LiveBytes) and saved activations per saving op.
#include "autograd/memory_ledger.h"

#include <string>

namespace shardscope {

void MemoryLedger::on_alloc(const StorageEvent& e) {
  std::lock_guard<HookLock> lock(hook_lock_);
  bytes_.on_alloc(e);
  if (last_op_ >= op_allocations_.size() || op_allocations_[last_op_].op != e.site.op ||
      op_allocations_[last_op_].scope != e.site.scope) {
    last_op_ = op_index_.find_or_add(
        fnv1a(e.site.op, fnv1a(e.site.scope)), op_allocations_.size(),
        [&](std::uint32_t i) {
          return op_allocations_[i].op == e.site.op && op_allocations_[i].scope == e.site.scope;
        },
        [&] {
          op_allocations_.push_back({std::string(e.site.scope), std::string(e.site.op), 0, 0});
        });
  }
  op_allocations_[last_op_].bytes += e.bytes;
  op_allocations_[last_op_].count += 1;
}

void MemoryLedger::on_free(const StorageEvent& e) {
  std::lock_guard<HookLock> lock(hook_lock_);
  bytes_.on_free(e);
}

void MemoryLedger::on_recategorize(const StorageEvent& e) {
  std::lock_guard<HookLock> lock(hook_lock_);
  bytes_.on_recategorize(e);
}

std::uint32_t MemoryLedger::site_index(const SaveEvent& e) {
  const std::uint64_t hash = fnv1a_mix(
      static_cast<std::uint64_t>(e.role),
      fnv1a_mix(static_cast<std::uint64_t>(e.site.layer), fnv1a(e.site.op, fnv1a(e.site.scope))));
  return site_index_.find_or_add(
      hash, site_keys_.size(),
      [&](std::uint32_t i) {
        const SiteKey& k = site_keys_[i];
        return k.layer == e.site.layer && k.role == e.role && k.scope == e.site.scope &&
               k.op == e.site.op;
      },
      [&] {
        site_keys_.push_back(
            {std::string(e.site.scope), std::string(e.site.op), e.site.layer, e.role});
      });
}

void MemoryLedger::on_save(const SaveEvent& e) {
  std::lock_guard<HookLock> lock(hook_lock_);
  if (LiveBytes::Entry* first = bytes_.on_save(e)) first->site = site_index(e);
}

void MemoryLedger::on_release(const SaveEvent& e) {
  std::lock_guard<HookLock> lock(hook_lock_);
  bytes_.on_release(e);
}

std::size_t MemoryLedger::live(MemoryCategory c) const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.live()[static_cast<std::size_t>(c)];
}

std::array<std::size_t, kMemoryCategoryCount> MemoryLedger::live_all() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.live();
}

std::size_t MemoryLedger::peak(MemoryCategory c) const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.peak()[static_cast<std::size_t>(c)];
}

std::size_t MemoryLedger::live_total() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.live_total();
}

std::size_t MemoryLedger::peak_total() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.peak_total();
}

void MemoryLedger::reset_peaks() {
  std::lock_guard<HookLock> lock(hook_lock_);
  bytes_.reset_peaks();
}

std::size_t MemoryLedger::saved_bytes(SaveRole role, std::optional<int> layer) const {
  std::lock_guard<HookLock> lock(hook_lock_);
  std::size_t total = 0;
  bytes_.for_each([&](const LiveBytes::Entry& entry) {
    if (entry.saves == 0 || entry.role != role) return;
    if (layer && site_keys_[entry.site].layer != *layer) return;
    total += entry.bytes;
  });
  return total;
}

std::size_t MemoryLedger::saved_activation_bytes(std::optional<int> layer) const {
  return saved_bytes(SaveRole::activation, layer);
}

std::size_t MemoryLedger::extras_bytes(std::optional<int> layer) const {
  return saved_bytes(SaveRole::extra, layer);
}

std::vector<MemoryLedger::SavedSite> MemoryLedger::saved_by_site(std::optional<int> layer) const {
  std::lock_guard<HookLock> lock(hook_lock_);
  std::vector<SavedSite> sites(site_keys_.size());
  for (std::size_t i = 0; i < site_keys_.size(); ++i) {
    const SiteKey& k = site_keys_[i];
    sites[i] = {k.scope, k.op, k.layer, k.role, 0};
  }
  bytes_.for_each([&](const LiveBytes::Entry& entry) {
    if (entry.saves > 0) sites[entry.site].bytes += entry.bytes;
  });
  std::vector<SavedSite> out;
  for (SavedSite& s : sites) {
    if (s.bytes > 0 && (!layer || s.layer == *layer)) out.push_back(std::move(s));
  }
  return out;
}

std::size_t MemoryLedger::accounting_errors() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return bytes_.accounting_errors();
}

std::vector<MemoryLedger::OpAllocations> MemoryLedger::allocations_by_op() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return op_allocations_;
}

}  // namespace shardscope
