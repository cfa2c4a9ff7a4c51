// OperandRegions: the memory a step's matrix products read and write, so that a replay of the
// products can meet the same memory as the step did. Each operand of each recorded call is a span
// of addresses [begin, end); spans that overlap (a tensor one product writes and a later one reads,
// a weight read forward and backward, the pieces of a causal product inside one tensor) merge into
// one region. A replay that gives each region a buffer of its size and each operand its offset
// there touches as many bytes as the step's products, with the same operands shared, where a
// replay on one buffer per operand kind keeps every product's operands in cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardscope::bench {

struct AddressSpan {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;  // one past the last byte
};

class OperandRegions {
 public:
  // Empty spans (begin == end) take no region; a span with end < begin is an error.
  explicit OperandRegions(std::vector<AddressSpan> spans) {
    for (const AddressSpan& s : spans) {
      if (s.end < s.begin) {
        throw std::invalid_argument("OperandRegions: a span ends (" + std::to_string(s.end) +
                                    ") before it begins (" + std::to_string(s.begin) + ")");
      }
    }
    spans.erase(std::remove_if(spans.begin(), spans.end(),
                               [](const AddressSpan& s) { return s.begin == s.end; }),
                spans.end());
    std::sort(spans.begin(), spans.end(),
              [](const AddressSpan& a, const AddressSpan& b) { return a.begin < b.begin; });
    for (const AddressSpan& s : spans) {
      if (!regions_.empty() && s.begin < regions_.back().end) {  // overlaps the last region
        regions_.back().end = std::max(regions_.back().end, s.end);
      } else {
        regions_.push_back(s);
      }
    }
  }

  std::size_t count() const { return regions_.size(); }
  std::size_t bytes(std::size_t region) const {
    return regions_.at(region).end - regions_.at(region).begin;
  }
  std::size_t total_bytes() const {
    std::size_t n = 0;
    for (const AddressSpan& r : regions_) n += r.end - r.begin;
    return n;
  }
  // The region that holds `address`, and the address's offset from the region's start. Throws
  // std::out_of_range for an address outside every span given.
  std::pair<std::size_t, std::size_t> locate(std::uintptr_t address) const {
    auto after =
        std::upper_bound(regions_.begin(), regions_.end(), address,
                         [](std::uintptr_t a, const AddressSpan& r) { return a < r.begin; });
    if (after == regions_.begin() || address >= std::prev(after)->end) {
      throw std::out_of_range("OperandRegions::locate: address " + std::to_string(address) +
                              " is in none of the " + std::to_string(regions_.size()) + " regions");
    }
    const auto region = static_cast<std::size_t>(std::prev(after) - regions_.begin());
    return {region, address - regions_[region].begin};
  }

 private:
  std::vector<AddressSpan> regions_;  // by address, none overlapping
};

}  // namespace shardscope::bench
