// MemoryLedger: live/peak bytes per category and saved activations per saving op.
#include "autograd/memory_ledger.h"

#include <algorithm>
#include <string>

#include "autograd/errors.h"

namespace shardscope {
namespace {

std::size_t index_of(MemoryCategory c) {
  return static_cast<std::size_t>(c);
}

// Storage ids count per Context; the rank in the high bits keeps several ranks apart.
std::uint64_t key_of(const Site& site, std::uint64_t storage_id) {
  return (static_cast<std::uint64_t>(site.rank) << 48) ^ storage_id;
}

MemoryCategory saved_category(SaveRole role) {
  return role == SaveRole::activation ? MemoryCategory::saved_activation
                                      : MemoryCategory::saved_extra;
}

}  // namespace

MemoryCategory MemoryLedger::effective(const Entry& e) const {
  return e.saves == 0 ? e.base : saved_category(e.role);
}

void MemoryLedger::add_live(MemoryCategory c, std::size_t bytes) {
  std::size_t& live = live_[index_of(c)];
  live += bytes;
  changed_ |= static_cast<std::uint8_t>(1u << index_of(c));
  peak_[index_of(c)] = std::max(peak_[index_of(c)], live);
  live_total_ += bytes;
  peak_total_ = std::max(peak_total_, live_total_);
}

void MemoryLedger::sub_live(MemoryCategory c, std::size_t bytes) {
  if (bytes > live_[index_of(c)] || bytes > live_total_) ++accounting_errors_;
  changed_ |= static_cast<std::uint8_t>(1u << index_of(c));
  live_[index_of(c)] -= std::min(bytes, live_[index_of(c)]);
  live_total_ -= std::min(bytes, live_total_);
}

void MemoryLedger::on_alloc(const StorageEvent& e) {
  const std::unique_lock<HookLock> lock = guard();
  Entry entry;
  entry.bytes = e.bytes;
  entry.base = e.category;
  entry.counted = true;
  *entries_.try_emplace(key_of(e.site, e.storage_id)).first = entry;
  add_live(e.category, e.bytes);
  if (detail_ == Detail::live_only) return;
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
  const std::unique_lock<HookLock> lock = guard();
  const std::uint64_t key = key_of(e.site, e.storage_id);
  const Entry* entry = entries_.find(key);
  if (entry == nullptr) return;
  if (entry->counted || entry->saves > 0) sub_live(effective(*entry), entry->bytes);
  entries_.erase(key);
}

void MemoryLedger::on_recategorize(const StorageEvent& e) {
  const std::unique_lock<HookLock> lock = guard();
  Entry* entry = entries_.find(key_of(e.site, e.storage_id));
  if (entry == nullptr) return;
  if (entry->counted && entry->saves == 0) {
    sub_live(entry->base, entry->bytes);
    add_live(e.category, entry->bytes);
  }
  entry->base = e.category;
}

std::size_t MemoryLedger::site_index(const SaveEvent& e) {
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
  if (e.storage_category == MemoryCategory::parameter) return;  // weights are not activations
  const std::unique_lock<HookLock> lock = guard();
  auto [found, inserted] = entries_.try_emplace(key_of(e.site, e.storage_id));
  Entry& entry = *found;
  if (inserted) {  // allocated before the ledger was attached
    entry.bytes = e.bytes;
    entry.base = e.storage_category;
  }
  if (entry.saves++ > 0) return;  // already counted under its first saver
  if (entry.counted) sub_live(entry.base, entry.bytes);
  entry.role = e.role;
  if (detail_ == Detail::full) entry.site = site_index(e);
  add_live(effective(entry), entry.bytes);
}

void MemoryLedger::on_release(const SaveEvent& e) {
  // Found by entry, not by the storage's category now: a tensor saved as an activation and made
  // a parameter later is still released. Parameter saves never made an entry count (saves == 0).
  const std::unique_lock<HookLock> lock = guard();
  const std::uint64_t key = key_of(e.site, e.storage_id);
  Entry* entry = entries_.find(key);
  if (entry == nullptr || entry->saves == 0) return;
  if (--entry->saves > 0) return;
  sub_live(saved_category(entry->role), entry->bytes);
  if (entry->counted) {
    add_live(entry->base, entry->bytes);
  } else {
    entries_.erase(key);
  }
}

std::size_t MemoryLedger::live(MemoryCategory c) const {
  const std::unique_lock<HookLock> lock = guard();
  return live_[index_of(c)];
}

std::array<std::size_t, kMemoryCategoryCount> MemoryLedger::live_all() const {
  const std::unique_lock<HookLock> lock = guard();
  return live_;
}

std::uint8_t MemoryLedger::take_changed(std::array<std::size_t, kMemoryCategoryCount>& live) {
  const std::unique_lock<HookLock> lock = guard();
  std::uint8_t changed = 0;
  for (unsigned bits = changed_; bits != 0; bits &= bits - 1) {
    const auto c = static_cast<std::size_t>(__builtin_ctz(bits));
    if (live[c] != live_[c]) changed |= static_cast<std::uint8_t>(1u << c);
    live[c] = live_[c];
  }
  changed_ = 0;
  return changed;
}

std::size_t MemoryLedger::peak(MemoryCategory c) const {
  const std::unique_lock<HookLock> lock = guard();
  return peak_[index_of(c)];
}

std::size_t MemoryLedger::live_total() const {
  const std::unique_lock<HookLock> lock = guard();
  return live_total_;
}

std::size_t MemoryLedger::peak_total() const {
  const std::unique_lock<HookLock> lock = guard();
  return peak_total_;
}

void MemoryLedger::reset_peaks() {
  const std::unique_lock<HookLock> lock = guard();
  peak_ = live_;
  peak_total_ = live_total_;
}

void MemoryLedger::require_full(const char* query) const {
  if (detail_ == Detail::full) return;
  throw StateError(std::string("MemoryLedger::") + query +
                   ": this ledger keeps live bytes only (Detail::live_only), not the saving sites "
                   "and the allocations by op");
}

std::size_t MemoryLedger::saved_bytes(SaveRole role, std::optional<int> layer) const {
  if (layer) require_full("saved bytes of one layer");
  const std::unique_lock<HookLock> lock = guard();
  std::size_t total = 0;
  entries_.for_each([&](std::uint64_t, const Entry& entry) {
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
  require_full("saved_by_site");
  const std::unique_lock<HookLock> lock = guard();
  std::vector<SavedSite> sites(site_keys_.size());
  for (std::size_t i = 0; i < site_keys_.size(); ++i) {
    const SiteKey& k = site_keys_[i];
    sites[i] = {k.scope, k.op, k.layer, k.role, 0};
  }
  entries_.for_each([&](std::uint64_t, const Entry& entry) {
    if (entry.saves > 0) sites[entry.site].bytes += entry.bytes;
  });
  std::vector<SavedSite> out;
  for (SavedSite& s : sites) {
    if (s.bytes > 0 && (!layer || s.layer == *layer)) out.push_back(std::move(s));
  }
  return out;
}

std::size_t MemoryLedger::accounting_errors() const {
  const std::unique_lock<HookLock> lock = guard();
  return accounting_errors_;
}

std::vector<MemoryLedger::OpAllocations> MemoryLedger::allocations_by_op() const {
  require_full("allocations_by_op");
  const std::unique_lock<HookLock> lock = guard();
  return op_allocations_;
}

}  // namespace shardscope
