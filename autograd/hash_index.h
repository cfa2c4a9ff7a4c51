// HashIndex: the indices of entries kept elsewhere (a vector of texts, of shape lists), found by a
// 64-bit hash of an entry and an equality test the caller gives: open addressing in one array of
// (hash, index) slots, linear probing, at most half full. For the observers' interning, which
// runs between a step's ops: a look-up reads a slot and the entry it names, where a map of
// strings or of shape vectors chased a node and the key's own heap memory, cache lines the ops
// had evicted (docs/benchmarks.md, Observer overhead). fnv1a hashes texts for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace shardscope {

class HashIndex {
 public:
  // The index of the entry with `hash` for which same(index) holds; else add() appends the entry
  // as index `next` (the caller's count of entries so far), which is then kept under `hash`.
  template <class Same, class Add>
  std::uint32_t find_or_add(std::uint64_t hash, std::size_t next, Same&& same, Add&& add) {
    const std::uint32_t found = find(hash, same);
    if (found != kNone) return found;
    add();
    const auto index = static_cast<std::uint32_t>(next);
    insert(hash, index);
    return index;
  }

 private:
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t index = kNone;
  };

  template <class Same>
  std::uint32_t find(std::uint64_t hash, Same&& same) const {
    if (slots_.empty()) return kNone;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.index == kNone) return kNone;
      if (slot.hash == hash && same(slot.index)) return slot.index;
    }
  }

  void insert(std::uint64_t hash, std::uint32_t index) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(hash, index);
    ++size_;
  }
  void place(std::uint64_t hash, std::uint32_t index) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (slots_[i].index != kNone) i = (i + 1) & mask;
    slots_[i] = Slot{hash, index};
  }
  void grow() {
    std::vector<Slot> old(slots_.empty() ? 16 : 2 * slots_.size());
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.index != kNone) place(slot.hash, slot.index);
    }
  }

  std::vector<Slot> slots_;  // a power of two of them, or none yet
  std::size_t size_ = 0;
};

// FNV-1a's offset basis: the hash of nothing, where a chain of fnv1a and fnv1a_mix starts.
constexpr std::uint64_t kFnv1aBasis = 1469598103934665603ull;

// FNV-1a of `v`'s bytes after `h` (chained, so that one hash covers several fields).
inline std::uint64_t fnv1a(std::string_view v, std::uint64_t h = kFnv1aBasis) {
  for (const char c : v) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
// FNV-1a of one 64-bit value after `h`, as one step (shape dims, a layer).
inline std::uint64_t fnv1a_mix(std::uint64_t v, std::uint64_t h) {
  return (h ^ v) * 1099511628211ull;
}

}  // namespace shardscope
