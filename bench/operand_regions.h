// OperandRegions: the memory a step's matrix products read and write, so that a replay of the
// products can meet the same memory as the step did. Each operand of each recorded call is a span
// of addresses [begin, end); spans that overlap (a tensor one product writes and a later one reads,
// a weight read forward and backward, the pieces of a causal product inside one tensor) merge into
// one region. A replay that gives each region a buffer of its size and each operand its offset
// there touches as many bytes as the step's products, with the same operands shared, where a
// replay on one buffer per operand kind keeps every product's operands in cache. An op other
// than a product moves its bytes in the replay as copies from what it read to what it wrote
// (stream_copies), at the same offsets in the same regions.
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

// The bytes of s; a span that ends before it begins is an error, `who` ("OperandRegions: a span")
// naming it.
inline std::size_t span_bytes(const AddressSpan& s, const std::string& who) {
  if (s.end < s.begin) {
    throw std::invalid_argument(who + " ends (" + std::to_string(s.end) + ") before it begins (" +
                                std::to_string(s.begin) + ")");
  }
  return s.end - s.begin;
}

// A copy of `bytes` bytes from address `from` to address `to`; where from_scratch (to_scratch)
// is set the copy reads (writes) the first bytes of a scratch buffer instead, and `from` (`to`)
// is 0.
struct CopyPiece {
  std::uintptr_t from = 0;
  std::uintptr_t to = 0;
  std::size_t bytes = 0;
  bool from_scratch = false;
  bool to_scratch = false;
};

// The copies that move an op's bytes where the op had them, each byte read and each written
// once: the spans it read, in order, as one stream of R bytes, the spans it wrote as one of W
// bytes; the first min(R, W) bytes of each copied from the one to the other (cut where a span
// ends), then the rest of the longer stream to a scratch buffer (more read than written: a norm's
// backward) or from it (more written: a dropout's mask), in pieces of at most `scratch_bytes`
// (a scratch that small stays in cache: its side costs little). A copy of n bytes reads n and
// writes n, so these move 2 max(R, W) bytes against the op's R + W. Spans with end < begin, and a
// scratch of 0 bytes, are errors.
inline std::vector<CopyPiece> stream_copies(const std::vector<AddressSpan>& reads,
                                            const std::vector<AddressSpan>& writes,
                                            std::size_t scratch_bytes) {
  if (scratch_bytes == 0) throw std::invalid_argument("stream_copies: a scratch of 0 bytes");
  auto total = [](const std::vector<AddressSpan>& spans, const char* which) {
    std::size_t n = 0;
    for (const AddressSpan& s : spans) {
      n += span_bytes(s, std::string("stream_copies: a span of the ") + which);
    }
    return n;
  };
  const std::size_t read_bytes = total(reads, "reads"), write_bytes = total(writes, "writes");
  // A place in a stream: its span and the offset there; `next` moves past spans left behind
  // (ended or empty). Only called while the stream has bytes left.
  struct Place {
    const std::vector<AddressSpan>& spans;
    std::size_t span = 0, offset = 0;
    std::size_t left() const { return spans[span].end - spans[span].begin - offset; }
    std::uintptr_t address() const { return spans[span].begin + offset; }
    void next() {
      while (left() == 0) {
        ++span;
        offset = 0;
      }
    }
  };
  Place from{reads}, to{writes};
  std::vector<CopyPiece> pieces;
  const std::size_t paired = std::min(read_bytes, write_bytes);
  const std::size_t n = std::max(read_bytes, write_bytes);
  for (std::size_t done = 0; done < n;) {
    CopyPiece piece;
    std::size_t k = n - done;
    if (done < paired) {
      from.next();
      to.next();
      k = std::min(from.left(), to.left());  // the shorter stream ends at `paired`
      piece.from = from.address();
      piece.to = to.address();
    } else if (read_bytes > write_bytes) {
      from.next();
      k = std::min({from.left(), scratch_bytes, k});
      piece.from = from.address();
      piece.to_scratch = true;
    } else {
      to.next();
      k = std::min({to.left(), scratch_bytes, k});
      piece.to = to.address();
      piece.from_scratch = true;
    }
    piece.bytes = k;
    pieces.push_back(piece);
    if (!piece.from_scratch) from.offset += k;
    if (!piece.to_scratch) to.offset += k;
    done += k;
  }
  return pieces;
}

class OperandRegions {
 public:
  // Empty spans (begin == end) take no region; a span with end < begin is an error.
  explicit OperandRegions(std::vector<AddressSpan> spans) {
    for (const AddressSpan& s : spans) span_bytes(s, "OperandRegions: a span");
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
  std::uintptr_t start(std::size_t region) const { return regions_.at(region).begin; }
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
