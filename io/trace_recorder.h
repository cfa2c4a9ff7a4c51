// TraceRecorder: an observer that records a run as TraceEvents for a Chrome trace (docs/
// trace-format.md): a slice per forward op and backward node, a slice per collective on its own
// lane, a memory counter by category after every change, and a mark when a rank's step changes.
// Capture only: it keeps events in a bounded buffer (the first max_events; later ones are counted
// as dropped) and writes them on request; viewers read the file.
//
// Thread-safe: one recorder may be attached to the Context of every rank of a threads run, and
// the ranks record in parallel. Times are steady_clock microseconds since the recorder was made.
// Under MPI each process records its own rank: write to rank_trace_path(path, rank) and merge the
// files with merge_trace_files (io/trace_reader.h).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/hook_lock.h"
#include "autograd/observer.h"
#include "io/tick_clock.h"
#include "io/trace_event.h"
#include "io/trace_writer.h"

namespace shardscope {

namespace trace_records {  // io/trace_records.h
struct Place;
struct Stores;
class TextTable;
class ShapeTable;
}  // namespace trace_records

struct TraceOptions {
  // In memory, about 100 bytes each for a memory counter (most of them), 300 for a slice.
  std::size_t max_events = 2'000'000;
  nlohmann::json config = nlohmann::json::object();  // written to otherData.config
  // Where times come from; empty: steady_clock's, read through a TickClock (the TSC where the
  // kernel's clock is the TSC, io/tick_clock.h). A live viewer passes a clock that stops while
  // every rank is paused, so the time a person spends looking is not on the timeline.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class TraceRecorder final : public Observer {
 public:
  // The largest TraceOptions::max_events (its records name events by 32-bit indices). Kept events
  // take some 50 bytes each: the bound is 13 GiB of them.
  static constexpr std::size_t kMaxEvents = std::size_t{1} << 28;

  // Throws ArgumentError when options.max_events is above kMaxEvents.
  explicit TraceRecorder(TraceOptions options = {});
  ~TraceRecorder() override;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Replaces otherData.config (for example once the run's configuration is known).
  void set_config(nlohmann::json config);

  // The kept events in recording order, and what the file will say about itself.
  std::vector<TraceEvent> events() const;
  // Appends the kept events from index `from` on to `out` and returns how many are kept in all,
  // so a live viewer copies only what is new.
  std::size_t events_since(std::size_t from, std::vector<TraceEvent>& out) const;
  // Each rank's collective entered and not yet completed (a live viewer draws it open, up to
  // now); not kept events: the slice is kept when the collective completes.
  std::vector<TraceEvent> collectives_in_progress() const;
  TraceMeta meta() const;
  std::size_t dropped_events() const;

  nlohmann::json to_chrome_trace() const;
  // Throws Error naming the path when it cannot be written.
  void write_chrome_trace(const std::string& path) const;

  void on_op_begin(const OpEvent& e) override;
  void on_op_end(const OpEvent& e) override;
  void on_alloc(const StorageEvent& e) override;
  void on_free(const StorageEvent& e) override;
  void on_recategorize(const StorageEvent& e) override;
  void on_save(const SaveEvent& e) override;
  void on_release(const SaveEvent& e) override;
  void on_collective_begin(const CollectiveEvent& e) override;
  void on_collective(const CollectiveEvent& e) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct OpenSlice;
  struct RankState;

  // An event's moment, read before the lock is taken (TickClock's reading, or the time of
  // TraceOptions::clock), and its time, once it is held.
  TickClock::Reading read_clock() const;
  Clock::time_point time_locked(const TickClock::Reading& reading) const;
  double micros_since_start(Clock::time_point t) const;
  static double micros_between(Clock::time_point from, Clock::time_point to);
  // Kept records hold whole nanoseconds (a division less per event); events, microseconds.
  static std::int64_t nanos_between(Clock::time_point from, Clock::time_point to);
  static double micros(std::int64_t nanos);
  TraceMeta meta_locked() const;
  RankState& rank_state(const Site& site, Clock::time_point now);
  [[gnu::noinline]] RankState& new_rank_or_step(const Site& site, Clock::time_point now);
  void record_saved(const SaveEvent& e, bool release);
  OpenSlice* saving_slice(RankState& state, const Site& site) const;
  void keep(TraceEvent event);
  // False, and one more dropped, once max_events_ are kept; else true and the order has room.
  bool make_room(std::int64_t step);
  TraceEvent event_at_locked(std::size_t i) const;
  void append_events_locked(std::size_t from, std::vector<TraceEvent>& out) const;
  TraceEventSource source_locked() const;
  TraceEvent collective_slice(const CollectiveEvent& e, const RankState& state,
                              Clock::time_point start, Clock::time_point end) const;
  // A memory counter when the rank's live bytes changed with the event just given to them.
  void memory_changed(RankState& state, const Site& site, Clock::time_point now);
  // The index in places_ of `site`'s place (the rank's last one when it is the same).
  std::uint32_t place_of(RankState& state, const Site& site);
  // The live bytes by category that the counter at index `counter` shows.
  std::array<std::uint64_t, kMemoryCategoryCount> live_at(std::size_t counter) const;

  const std::function<Clock::time_point()> clock_;  // TraceOptions::clock (empty: ticks_)
  mutable TickClock ticks_;  // the time-stamp counter, or steady_clock (used under hook_lock_)
  const Clock::time_point start_;
  const double clock_origin_unix_us_;
  const std::size_t max_events_;
  mutable HookLock hook_lock_;
  nlohmann::json config_;
  // The kept events in recording order: each entry of the order is an index into full_, the slices
  // or the counters, with the store in its top bits. Op slices and memory counters (all but a few
  // of a step's events) are kept as compact records (a counter: the categories that changed), their
  // places, texts and shapes as ids into tables kept once, and built into TraceEvents when read:
  // recording one writes some 40 to 80 bytes and allocates nothing (docs/benchmarks.md, Observer
  // overhead: fresh memory the events fill costs more than the rest of recording them).
  std::unique_ptr<trace_records::Stores>
      stores_;                    // order, slices, counters and the counters' values
  std::vector<TraceEvent> full_;  // step marks and collectives
  std::vector<trace_records::Place> places_;
  std::unique_ptr<trace_records::TextTable> texts_;
  std::unique_ptr<trace_records::ShapeTable> shapes_;
  std::size_t dropped_ = 0;
  std::int64_t first_dropped_step_ = -1;  // the step of the first dropped event; -1 while none is
  std::map<int, std::unique_ptr<RankState>> ranks_;
  RankState* last_state_ = nullptr;  // rank_state's last answer, and its rank
  int last_rank_ = 0;
};

}  // namespace shardscope
