// The trace recorder's kept records (io/trace_recorder.cpp, docs/benchmarks.md "Observer
// overhead"): op slices and memory counters as compact records that name their place, texts and
// shape lists by index into tables kept once, in chunked logs that never move, and the order of
// all kept events as 32-bit entries. The recorder's hooks write them; reading builds TraceEvents.
// Internal to io/: only the recorder includes it (and tests/io/trace_records_test.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "autograd/hash_index.h"
#include "autograd/observer.h"
#include "autograd/shape.h"
#include "io/trace_event.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace shardscope::trace_records {

// Asks the kernel to back [data, data + bytes) with 2 MiB pages where it can (Linux with
// transparent huge pages in "madvise" mode, as Debian ships it).
inline void advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__)
  madvise(data, bytes, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Where a kept slice or counter happened: its rank, step, phase and layer (few distinct ones a
// step, so records name them by index into TraceRecorder::places_).
struct Place {
  int rank = 0;
  int layer = -1;
  std::int64_t step = 0;
  Phase phase = Phase::forward;
  bool is(const Site& site) const {
    return rank == site.rank && layer == site.layer && step == site.step && phase == site.phase;
  }
};

// An op slice as the recorder keeps it: its place, texts and shape lists as ids into the
// recorder's tables (TraceRecorder::event_at_locked builds the event).
struct Slice {
  std::uint32_t place = 0;
  std::uint32_t op = 0, scope = 0, placement = 0;  // TextTable ids
  std::uint32_t inputs = 0, outputs = 0;           // ShapeTable ids
  std::uint64_t seq = 0;
  std::int64_t ts_ns = 0, dur_ns = 0;  // since the recorder was made; microseconds when read
  std::uint64_t alloc_bytes = 0, saved_bytes = 0, saved_extra_bytes = 0, released_bytes = 0;
};

// A memory counter as the recorder keeps it: the live bytes of the categories that changed since
// the rank's counter before (`changed`, a bit per MemoryCategory), which are the values from
// first_value on, in category order. Every kSnapshotEvery-th counter of a rank (its first included)
// keeps all of them, so reading one goes back at most that many counters (TraceRecorder::live_at).
struct Counter {
  std::int64_t ts_ns = 0;  // since the recorder was made
  std::uint32_t place = 0;
  std::uint32_t previous = 0;  // the index of the rank's counter before, or kNoCounter
  std::uint32_t first_value = 0;
  std::uint8_t changed = 0;
};

// The texts slices name (op kinds, scopes, placements), each kept once and named by its index.
// A text is one load from its id (views_), and a text not the hint is found through a HashIndex:
// the hooks' look-ups touch few of the cache lines the step's ops evicted between two of them.
class TextTable {
 public:
  TextTable() { id(""); }  // id 0: the empty text
  std::string_view text(std::uint32_t id) const { return views_[id]; }
  std::uint32_t id(std::string_view text) {
    return index_.find_or_add(
        fnv1a(text), views_.size(), [&](std::uint32_t i) { return views_[i] == text; },
        [&] { views_.push_back(texts_.emplace_back(text)); });  // the deque's copies never move
  }
  // `text`'s id, trying `last` (the same field's id in the event before) first: consecutive
  // events mostly repeat their op, scope and placement, and comparing costs less than hashing.
  std::uint32_t id(std::string_view text, std::uint32_t& last) {
    if (views_[last] != text) last = id(text);
    return last;
  }

 private:
  std::deque<std::string> texts_;
  std::vector<std::string_view> views_;
  HashIndex index_;
};

// FNV-1a over each shape's rank and dims.
struct ShapesFnv {
  std::uint64_t operator()(const std::vector<Shape>& shapes) const {
    std::uint64_t h = kFnv1aBasis;
    for (const Shape& s : shapes) {
      h = fnv1a_mix(s.dims().size(), h);
      for (std::int64_t d : s.dims()) h = fnv1a_mix(static_cast<std::uint64_t>(d), h);
    }
    return h;
  }
};

// The shape lists slices name, each kept once as text (ShapeStrings, shared by every event built
// from it) and named by its index, found through a HashIndex by their runs: each list flat in one
// array, each shape's rank then its dims. Hash: ShapesFnv; a test gives one under which every
// list collides, so that lists are told apart by their runs alone.
template <class Hash>
class BasicShapeTable {
 public:
  BasicShapeTable() : strings_(1), runs_(1) {}  // id 0: no shapes
  const ShapeStrings& strings(std::uint32_t id) const { return strings_[id]; }
  std::uint32_t id(const std::vector<Shape>* shapes) {
    if (shapes == nullptr || shapes->empty()) return 0;
    return index_.find_or_add(
        Hash{}(*shapes), strings_.size(), [&](std::uint32_t i) { return same(runs_[i], *shapes); },
        [&] { add(*shapes); });
  }

 private:
  struct Run {
    std::size_t first = 0, size = 0;  // in dims_
  };
  // Appends the list's text and its run.
  void add(const std::vector<Shape>& shapes) {
    std::vector<std::string> text;
    text.reserve(shapes.size());
    Run run{dims_.size(), 0};
    for (const Shape& s : shapes) {
      text.push_back(s.str());
      dims_.push_back(static_cast<std::int64_t>(s.dims().size()));
      dims_.insert(dims_.end(), s.dims().begin(), s.dims().end());
    }
    run.size = dims_.size() - run.first;
    strings_.emplace_back(std::move(text));
    runs_.push_back(run);
  }
  bool same(const Run& run, const std::vector<Shape>& shapes) const {
    const std::int64_t* v = dims_.data() + run.first;
    const std::int64_t* end = v + run.size;
    for (const Shape& s : shapes) {
      const std::vector<std::int64_t>& dims = s.dims();
      if (end - v < static_cast<std::ptrdiff_t>(dims.size() + 1)) return false;
      if (*v++ != static_cast<std::int64_t>(dims.size())) return false;
      for (std::int64_t d : dims) {
        if (*v++ != d) return false;
      }
    }
    return v == end;
  }

  std::vector<ShapeStrings> strings_;
  std::vector<Run> runs_;           // each id's run in dims_
  std::vector<std::int64_t> dims_;  // the runs, one after another
  HashIndex index_;
};

class ShapeTable final : public BasicShapeTable<ShapesFnv> {};

// Kept records in chunks of 2 MiB that never move: appending writes one record (no vector growth
// moving every kept one), and each chunk is asked for 2 MiB pages (a fault per 4 KiB page cost
// more than recording the records on it). Records are trivial: a chunk's pages are mapped as
// records fill them.
template <class T>
class ChunkedLog {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  static constexpr std::size_t kChunkBytes = std::size_t{2} << 20;
  static constexpr std::size_t kPerChunk = kChunkBytes / sizeof(T);
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };

 public:
  std::size_t size() const { return size_; }
  const T& operator[](std::size_t i) const {
    return static_cast<const T*>(chunks_[i / kPerChunk].get())[i % kPerChunk];
  }
  // A new value-initialised record at the end (it reads and writes the log's first three fields
  // and the record's memory: nothing else while the chunk lasts).
  T& push() {
    if (tail_ == end_) add_chunk();
    ++size_;
    return *new (tail_++) T();
  }

 private:
  void add_chunk() {
    void* memory = std::aligned_alloc(kChunkBytes, kChunkBytes);
    if (memory == nullptr) throw std::bad_alloc();
    chunks_.emplace_back(memory);
    advise_huge_pages(memory, kChunkBytes);
    tail_ = static_cast<T*>(memory);
    end_ = tail_ + kPerChunk;
  }
  T* tail_ = nullptr;  // the next record's place in the last chunk, and that chunk's end
  T* end_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::unique_ptr<void, Free>> chunks_;
};

// The kept records, side by side: appending a counter touches the order's, the counters' and the
// values' fields here (and the records), a few cache lines that stay near each other.
struct Stores {
  ChunkedLog<std::uint32_t> order;
  ChunkedLog<Slice> slices;
  ChunkedLog<Counter> counters;
  ChunkedLog<std::uint64_t> values;
};

// Where a kept event is: the order's entries name their store in the top two bits, its index in
// the rest (TraceRecorder's constructor bounds max_events so that every index fits).
enum class Store : std::uint32_t { full = 0, slice = 1, counter = 2 };
constexpr int kStoreShift = 30;
constexpr std::uint32_t kIndexMask = (std::uint32_t{1} << kStoreShift) - 1;

inline std::uint32_t order_entry(Store store, std::size_t index) {
  return (static_cast<std::uint32_t>(store) << kStoreShift) | static_cast<std::uint32_t>(index);
}
inline Store store_of(std::uint32_t entry) {
  return static_cast<Store>(entry >> kStoreShift);
}
inline std::size_t index_of(std::uint32_t entry) {
  return entry & kIndexMask;
}

constexpr std::uint32_t kNoCounter = ~std::uint32_t{0};
constexpr std::uint8_t kEveryCategory = (1u << kMemoryCategoryCount) - 1;
constexpr int kSnapshotEvery = 64;

}  // namespace shardscope::trace_records
