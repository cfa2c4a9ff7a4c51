// FlatIdMap: a hash map from 64-bit ids to values in one array (open addressing, linear probing),
// for LiveBytes' map of live storages (the ledger's and the trace recorder's): an insert and an
// erase per allocation and free, which in std::unordered_map each made or freed a node and
// followed a pointer to it. Ids are hashed by a multiply (Fibonacci hashing); the array stays at
// most half full; an erase shifts the entries after it back, so no slot is ever a tombstone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardscope {

template <class V>
class FlatIdMap {
 public:
  std::size_t size() const { return size_; }

  // The value of `id`, or null.
  V* find(std::uint64_t id) {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(id);; i = next(i)) {
      Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.id == id) return &s.value;
    }
  }

  // The value of `id`, value-initialised and true when it was not there.
  std::pair<V*, bool> try_emplace(std::uint64_t id) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    std::size_t i = home(id);
    for (; slots_[i].used; i = next(i)) {
      if (slots_[i].id == id) return {&slots_[i].value, false};
    }
    slots_[i].used = true;
    slots_[i].id = id;
    slots_[i].value = V();
    ++size_;
    return {&slots_[i].value, true};
  }

  // Removes `id`; false when it was not there. Pointers to values are invalid afterwards.
  bool erase(std::uint64_t id) {
    if (slots_.empty()) return false;
    std::size_t hole = home(id);
    for (;; hole = next(hole)) {
      if (!slots_[hole].used) return false;
      if (slots_[hole].id == id) break;
    }
    // Move back every entry after the hole whose home is not between the hole and it (cyclically),
    // so that a lookup from its home still reaches it without passing an empty slot.
    for (std::size_t i = next(hole); slots_[i].used; i = next(i)) {
      const std::size_t h = home(slots_[i].id);
      const bool stays = hole < i ? (hole < h && h <= i) : (hole < h || h <= i);
      if (stays) continue;
      slots_[hole] = std::move(slots_[i]);
      hole = i;
    }
    slots_[hole].used = false;
    --size_;
    return true;
  }

  // Calls f(id, value) for every entry, in no particular order.
  template <class F>
  void for_each(F f) const {
    for (const Slot& s : slots_) {
      if (s.used) f(s.id, s.value);
    }
  }

 private:
  struct Slot {
    std::uint64_t id = 0;
    bool used = false;
    V value{};
  };

  std::size_t home(std::uint64_t id) const {
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::size_t next(std::size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 64 : 2 * old.size();
    slots_.assign(capacity, Slot());
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (Slot& s : old) {
      if (!s.used) continue;
      std::size_t i = home(s.id);
      while (slots_[i].used) i = next(i);
      slots_[i] = std::move(s);
    }
  }

  std::vector<Slot> slots_;  // a power of two of them
  std::size_t size_ = 0;
  int shift_ = 64;  // 64 - log2(capacity): home() keeps the product's top bits
};

}  // namespace shardscope
