// LiveBytes: the rules by which shardscope counts live memory, kept in one place: bytes by
// category, live and peak, from the storage and save events of one or more ranks. A storage counts
// from its allocation (one allocated before the counting began counts only while saved); a saved
// tensor's bytes move to saved_activation or saved_extra (SaveRole) while any op keeps it, counted
// once however many ops save it; parameters' saves are not activations. Frees or releases of more
// bytes than are live are counted as accounting errors (0 in a correct run).
//
// Not thread-safe: its owner serializes the calls (MemoryLedger under its lock; the trace recorder,
// one per rank, under its own). Inline, so that the recorder's hooks, which call it on every
// storage event, run it without a call into another library.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "autograd/flat_id_map.h"
#include "autograd/observer.h"

namespace shardscope {

class LiveBytes {
  static_assert(kMemoryCategoryCount <= 8, "take_changed's categories are the bits of a byte");

 public:
  using Bytes = std::array<std::size_t, kMemoryCategoryCount>;

  // A storage being counted.
  struct Entry {
    std::size_t bytes = 0;
    MemoryCategory base = MemoryCategory::activation;  // its category while not saved
    bool counted = false;  // allocated while counting (else only its saves count)
    int saves = 0;
    SaveRole role = SaveRole::activation;  // its first saver's
    std::uint32_t site = 0;                // the owner's note of its first saver (MemoryLedger's)
  };

  void on_alloc(const StorageEvent& e) {
    Entry entry;
    entry.bytes = e.bytes;
    entry.base = e.category;
    entry.counted = true;
    *entries_.try_emplace(key_of(e.site, e.storage_id)).first = entry;
    add(e.category, e.bytes);
  }

  void on_free(const StorageEvent& e) {
    const std::uint64_t key = key_of(e.site, e.storage_id);
    const Entry* entry = entries_.find(key);
    if (entry == nullptr) return;
    if (entry->counted || entry->saves > 0) sub(effective(*entry), entry->bytes);
    entries_.erase(key);
  }

  void on_recategorize(const StorageEvent& e) {
    Entry* entry = entries_.find(key_of(e.site, e.storage_id));
    if (entry == nullptr) return;
    if (entry->counted && entry->saves == 0) {
      sub(entry->base, entry->bytes);
      add(e.category, entry->bytes);
    }
    entry->base = e.category;
  }

  // The storage's entry when this save is its first (its bytes now count as saved); else null.
  Entry* on_save(const SaveEvent& e) {
    if (e.storage_category == MemoryCategory::parameter) return nullptr;  // not activations
    auto [entry, inserted] = entries_.try_emplace(key_of(e.site, e.storage_id));
    if (inserted) {  // allocated before the counting began
      entry->bytes = e.bytes;
      entry->base = e.storage_category;
    }
    if (entry->saves++ > 0) return nullptr;  // already counted under its first saver
    if (entry->counted) sub(entry->base, entry->bytes);
    entry->role = e.role;
    add(effective(*entry), entry->bytes);
    return entry;
  }

  // Found by entry, not by the storage's category now: a tensor saved as an activation and made a
  // parameter later is still released. Parameter saves never made an entry count (saves == 0).
  void on_release(const SaveEvent& e) {
    const std::uint64_t key = key_of(e.site, e.storage_id);
    Entry* entry = entries_.find(key);
    if (entry == nullptr || entry->saves == 0) return;
    if (--entry->saves > 0) return;
    sub(saved_category(entry->role), entry->bytes);
    if (entry->counted) {
      add(entry->base, entry->bytes);
    } else {
      entries_.erase(key);
    }
  }

  const Bytes& live() const { return live_; }
  const Bytes& peak() const { return peak_; }
  std::size_t live_total() const { return live_total_; }
  std::size_t peak_total() const { return peak_total_; }
  std::size_t accounting_errors() const { return accounting_errors_; }
  // Peaks restart from the live values (for a per-step peak).
  void reset_peaks() {
    peak_ = live_;
    peak_total_ = live_total_;
  }

  // Brings `copy` (live() as of the last call, or zeros before the first) up to date with the
  // categories events added to or took from since, and returns those whose value it changed (a
  // bit per MemoryCategory); then starts over. An observer that follows the live bytes event by
  // event reads only those.
  std::uint8_t take_changed(Bytes& copy) {
    std::uint8_t changed = 0;
    for (unsigned bits = touched_; bits != 0; bits &= bits - 1) {
      const auto c = static_cast<std::size_t>(__builtin_ctz(bits));
      if (copy[c] != live_[c]) changed |= static_cast<std::uint8_t>(1u << c);
      copy[c] = live_[c];
    }
    touched_ = 0;
    return changed;
  }

  // Calls f(const Entry&) for every storage being counted.
  template <class F>
  void for_each(F&& f) const {
    entries_.for_each([&](std::uint64_t, const Entry& entry) { f(entry); });
  }

 private:
  static MemoryCategory saved_category(SaveRole role) {
    return role == SaveRole::activation ? MemoryCategory::saved_activation
                                        : MemoryCategory::saved_extra;
  }
  // Storage ids count per Context; the rank in the high bits keeps several ranks apart.
  static std::uint64_t key_of(const Site& site, std::uint64_t storage_id) {
    return (static_cast<std::uint64_t>(site.rank) << 48) ^ storage_id;
  }
  static std::size_t index_of(MemoryCategory c) { return static_cast<std::size_t>(c); }
  static MemoryCategory effective(const Entry& e) {
    return e.saves == 0 ? e.base : saved_category(e.role);
  }
  void add(MemoryCategory c, std::size_t bytes) {
    std::size_t& live = live_[index_of(c)];
    live += bytes;
    touched_ |= static_cast<std::uint8_t>(1u << index_of(c));
    peak_[index_of(c)] = std::max(peak_[index_of(c)], live);
    live_total_ += bytes;
    peak_total_ = std::max(peak_total_, live_total_);
  }
  void sub(MemoryCategory c, std::size_t bytes) {
    std::size_t& live = live_[index_of(c)];
    if (bytes > live || bytes > live_total_) ++accounting_errors_;
    touched_ |= static_cast<std::uint8_t>(1u << index_of(c));
    live -= std::min(bytes, live);
    live_total_ -= std::min(bytes, live_total_);
  }

  FlatIdMap<Entry> entries_;  // by key_of(rank, storage id)
  Bytes live_{};
  Bytes peak_{};
  std::uint8_t touched_ = 0;  // take_changed's categories
  std::size_t live_total_ = 0;
  std::size_t peak_total_ = 0;
  std::size_t accounting_errors_ = 0;
};

}  // namespace shardscope
