// TraceRecorder: observer hooks to TraceEvents, one RankState per rank behind one HookLock; the
// records it keeps are io/trace_records.h.
#include "io/trace_recorder.h"

#include <algorithm>
#include <optional>

#include "autograd/errors.h"
#include "autograd/live_bytes.h"
#include "io/trace_records.h"

namespace shardscope {

using trace_records::Counter;
using trace_records::index_of;
using trace_records::kEveryCategory;
using trace_records::kNoCounter;
using trace_records::kSnapshotEvery;
using trace_records::order_entry;
using trace_records::Place;
using trace_records::ShapeTable;
using trace_records::Slice;
using trace_records::Store;
using trace_records::store_of;
using trace_records::Stores;
using trace_records::TextTable;

// A forward op or backward node that has begun and not yet ended on one rank.
struct TraceRecorder::OpenSlice {
  std::uint64_t seq = 0;
  Phase phase = Phase::forward;
  std::uint32_t op = 0, scope = 0, placement = 0, inputs = 0;
  Clock::time_point begin;
  std::uint64_t alloc_bytes = 0;
  std::uint64_t saved_bytes = 0;
  std::uint64_t saved_extra_bytes = 0;
  std::uint64_t released_bytes = 0;
};

// What the recorder tracks for one rank: its open slices (innermost last), its step, the time of
// its last event (a collective's slice starts there: see on_collective), and its live memory by
// category, counted by the ledger's rules (LiveBytes, autograd/live_bytes.h).
struct TraceRecorder::RankState {
  // What every event reads or writes first, together.
  bool has_step = false;
  bool has_place = false;
  bool has_counter = false;
  std::int64_t step = 0;
  Clock::time_point last_event;
  LiveBytes::Bytes memory{};
  Place place_key;                 // the rank's last place (valid once has_place)
  std::uint32_t place = 0;         // and its index
  std::uint32_t last_counter = 0;  // the index of its last counter (valid once has_counter)
  int since_snapshot = 0;          // counters since its last one that kept every category
  std::uint32_t last_op = 0, last_scope = 0, last_placement = 0;  // TextTable::id's hints
  std::vector<OpenSlice> open;
  // Its live bytes, by the ledger's rules (used under the recorder's lock only).
  LiveBytes bytes;
  std::optional<Clock::time_point> collective_start;  // set by on_collective_begin
  std::optional<TraceEvent> pending_collective;       // the call entered and not yet left
};

namespace {

// An event of no duration (a step mark, a memory counter) with its place in the run.
TraceEvent instant(TraceEventKind kind, int rank, std::int64_t step, Phase phase, int layer,
                   double ts_us) {
  TraceEvent e;
  e.kind = kind;
  e.rank = rank;
  e.step = step;
  e.phase = phase;
  e.layer = layer;
  e.ts_us = ts_us;
  return e;
}

double unix_micros_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double, std::micro>(since_epoch).count();
}

}  // namespace

TraceRecorder::TraceRecorder(TraceOptions options)
    : clock_(std::move(options.clock)),
      start_(clock_ ? clock_() : ticks_.time_of(ticks_.read())),
      clock_origin_unix_us_(unix_micros_now()),
      max_events_(options.max_events),
      config_(std::move(options.config)),
      stores_(std::make_unique<Stores>()),
      texts_(std::make_unique<TextTable>()),
      shapes_(std::make_unique<ShapeTable>()) {
  if (max_events_ > kMaxEvents) {
    throw ArgumentError("TraceOptions::max_events: expected at most " + std::to_string(kMaxEvents) +
                        " events, given " + std::to_string(max_events_));
  }
}

TraceRecorder::~TraceRecorder() = default;

TickClock::Reading TraceRecorder::read_clock() const {
  return clock_ ? TickClock::Reading{0, clock_()} : ticks_.read();
}

TraceRecorder::Clock::time_point TraceRecorder::time_locked(
    const TickClock::Reading& reading) const {
  return clock_ ? reading.steady : ticks_.time_of(reading);
}

double TraceRecorder::micros_since_start(Clock::time_point t) const {
  return micros_between(start_, t);
}

// From whole nanoseconds, so a nested slice's end never passes its parent's after rounding.
double TraceRecorder::micros_between(Clock::time_point from, Clock::time_point to) {
  return micros(nanos_between(from, to));
}

std::int64_t TraceRecorder::nanos_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

double TraceRecorder::micros(std::int64_t nanos) {
  return static_cast<double>(nanos) / 1000.0;
}

// The rank's state; emits a step mark first when the event's step is not the rank's step. The
// common case (the rank and step of the event before) stays small; the rest is out of line.
TraceRecorder::RankState& TraceRecorder::rank_state(const Site& site, Clock::time_point now) {
  if (last_state_ == nullptr || last_rank_ != site.rank || !last_state_->has_step ||
      last_state_->step != site.step) {
    return new_rank_or_step(site, now);
  }
  RankState& state = *last_state_;
  state.last_event = std::max(state.last_event, now);
  return state;
}

TraceRecorder::RankState& TraceRecorder::new_rank_or_step(const Site& site, Clock::time_point now) {
  if (last_state_ == nullptr || last_rank_ != site.rank) {
    std::unique_ptr<RankState>& slot = ranks_[site.rank];
    if (!slot) {
      slot = std::make_unique<RankState>();
      slot->last_event = now;
    }
    last_state_ = slot.get();
    last_rank_ = site.rank;
  }
  RankState& state = *last_state_;
  if (!state.has_step || state.step != site.step) {
    keep(instant(TraceEventKind::step, site.rank, site.step, site.phase, site.layer,
                 micros_since_start(now)));
    state.has_step = true;
    state.step = site.step;
  }
  state.last_event = std::max(state.last_event, now);
  return state;
}

void TraceRecorder::keep(TraceEvent event) {
  if (!make_room(event.step)) return;
  stores_->order.push() = order_entry(Store::full, full_.size());
  full_.push_back(std::move(event));
}

bool TraceRecorder::make_room(std::int64_t step) {
  if (stores_->order.size() < max_events_) return true;
  if (dropped_++ == 0) first_dropped_step_ = step;
  return false;
}

TraceEvent TraceRecorder::event_at_locked(std::size_t i) const {
  const std::uint32_t entry = stores_->order[i];
  const std::size_t index = index_of(entry);
  switch (store_of(entry)) {
    case Store::slice: {
      const Slice& s = stores_->slices[index];
      const Place& p = places_[s.place];
      TraceEvent e = instant(TraceEventKind::op, p.rank, p.step, p.phase, p.layer, micros(s.ts_ns));
      e.op = std::string(texts_->text(s.op));
      e.scope = std::string(texts_->text(s.scope));
      e.seq = s.seq;
      e.dur_us = micros(s.dur_ns);
      e.placement = std::string(texts_->text(s.placement));
      e.inputs = shapes_->strings(s.inputs);
      e.outputs = shapes_->strings(s.outputs);
      e.alloc_bytes = s.alloc_bytes;
      e.saved_bytes = s.saved_bytes;
      e.saved_extra_bytes = s.saved_extra_bytes;
      e.released_bytes = s.released_bytes;
      return e;
    }
    case Store::counter: {
      const Counter& c = stores_->counters[index];
      const Place& p = places_[c.place];
      TraceEvent e =
          instant(TraceEventKind::memory, p.rank, p.step, p.phase, p.layer, micros(c.ts_ns));
      e.memory = live_at(index);
      return e;
    }
    case Store::full:
      break;
  }
  return full_[index];
}

TraceEventSource TraceRecorder::source_locked() const {
  TraceEventSource source;
  source.count = stores_->order.size();
  source.key = [this](std::size_t i) {
    const std::uint32_t entry = stores_->order[i];
    const std::size_t index = index_of(entry);
    switch (store_of(entry)) {
      case Store::slice:
        return TraceOrderKey{micros(stores_->slices[index].ts_ns),
                             micros(stores_->slices[index].dur_ns), TraceEventKind::op};
      case Store::counter:
        return TraceOrderKey{micros(stores_->counters[index].ts_ns), 0.0, TraceEventKind::memory};
      case Store::full:
        break;
    }
    return order_key(full_[index]);
  };
  source.event = [this](std::size_t i) { return event_at_locked(i); };
  return source;
}

std::uint32_t TraceRecorder::place_of(RankState& state, const Site& site) {
  if (!state.has_place || !state.place_key.is(site)) {
    state.place_key = Place{site.rank, site.layer, site.step, site.phase};
    state.place = static_cast<std::uint32_t>(places_.size());
    state.has_place = true;
    places_.push_back(state.place_key);
  }
  return state.place;
}

std::array<std::uint64_t, kMemoryCategoryCount> TraceRecorder::live_at(std::size_t counter) const {
  std::array<std::uint64_t, kMemoryCategoryCount> live{};
  std::uint8_t found = 0;
  // Back from `counter` through its rank's counters, each category's latest value; a snapshot
  // (every category) at most kSnapshotEvery counters back ends the walk.
  for (std::uint32_t i = static_cast<std::uint32_t>(counter); found != kEveryCategory;) {
    const Counter& c = stores_->counters[i];
    std::size_t value = c.first_value;
    for (int k = 0; k < kMemoryCategoryCount; ++k) {
      const auto bit = static_cast<std::uint8_t>(1u << k);
      if (!(c.changed & bit)) continue;
      if (!(found & bit)) live[static_cast<std::size_t>(k)] = stores_->values[value];
      found |= bit;
      ++value;
    }
    if (c.previous == kNoCounter) break;  // the rank's first counter: a snapshot
    i = c.previous;
  }
  return live;
}

void TraceRecorder::memory_changed(RankState& state, const Site& site, Clock::time_point now) {
  // state.memory follows the live bytes: the categories the event touched are read.
  std::uint8_t changed = state.bytes.take_changed(state.memory);
  if (changed == 0 || !make_room(site.step)) return;
  if (!state.has_counter || ++state.since_snapshot == kSnapshotEvery) {
    changed = kEveryCategory;
    state.since_snapshot = 0;
  }
  const auto index = static_cast<std::uint32_t>(stores_->counters.size());
  stores_->order.push() = order_entry(Store::counter, index);
  Counter& counter = stores_->counters.push();
  counter.ts_ns = nanos_between(start_, now);
  counter.place = place_of(state, site);
  counter.previous = state.has_counter ? state.last_counter : kNoCounter;
  counter.first_value = static_cast<std::uint32_t>(stores_->values.size());
  counter.changed = changed;
  for (unsigned bits = changed; bits != 0; bits &= bits - 1) {
    stores_->values.push() = state.memory[static_cast<std::size_t>(__builtin_ctz(bits))];
  }
  state.last_counter = index;
  state.has_counter = true;
}

void TraceRecorder::on_op_begin(const OpEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  OpenSlice& slice = state.open.emplace_back();
  slice.seq = e.seq;
  slice.phase = e.site.phase;
  slice.op = texts_->id(e.site.op, state.last_op);
  slice.scope = texts_->id(e.site.scope, state.last_scope);
  slice.placement = texts_->id(e.placement, state.last_placement);
  slice.inputs = shapes_->id(e.inputs);
  slice.begin = now;
}

void TraceRecorder::on_op_end(const OpEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  auto it = std::find_if(state.open.rbegin(), state.open.rend(), [&](const OpenSlice& s) {
    return s.seq == e.seq && s.phase == e.site.phase;
  });
  if (it == state.open.rend()) return;  // begun before the recorder was attached
  const OpenSlice& open = *it;
  if (make_room(e.site.step)) {
    stores_->order.push() = order_entry(Store::slice, stores_->slices.size());
    Slice& slice = stores_->slices.push();
    slice.place = place_of(state, e.site);
    // The end's op and scope (mostly the begin's).
    slice.op = texts_->text(open.op) == e.site.op ? open.op : texts_->id(e.site.op);
    slice.scope = texts_->text(open.scope) == e.site.scope ? open.scope : texts_->id(e.site.scope);
    slice.placement = open.placement;
    slice.inputs = open.inputs;
    slice.outputs = shapes_->id(e.outputs);
    slice.seq = e.seq;
    slice.ts_ns = nanos_between(start_, open.begin);
    slice.dur_ns = nanos_between(open.begin, now);
    slice.alloc_bytes = open.alloc_bytes;
    slice.saved_bytes = open.saved_bytes;
    slice.saved_extra_bytes = open.saved_extra_bytes;
    slice.released_bytes = open.released_bytes;
  }
  state.open.erase(std::next(it).base());
}

void TraceRecorder::on_alloc(const StorageEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  for (OpenSlice& slice : state.open) slice.alloc_bytes += e.bytes;
  state.bytes.on_alloc(e);
  memory_changed(state, e.site, now);
}

void TraceRecorder::on_free(const StorageEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  state.bytes.on_free(e);
  memory_changed(state, e.site, now);
}

void TraceRecorder::on_recategorize(const StorageEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  state.bytes.on_recategorize(e);
  memory_changed(state, e.site, now);
}

// The open slice of the op that saves (or whose node releases) a tensor: the innermost one with
// the save's op, scope and phase, else the innermost; null when none is open.
TraceRecorder::OpenSlice* TraceRecorder::saving_slice(RankState& state, const Site& site) const {
  for (auto it = state.open.rbegin(); it != state.open.rend(); ++it) {
    if (it->phase == site.phase && texts_->text(it->op) == site.op &&
        texts_->text(it->scope) == site.scope) {
      return &*it;
    }
  }
  return state.open.empty() ? nullptr : &state.open.back();
}

// A save or release goes to the rank's live bytes, then a memory counter. The slice is credited
// with what they counted (the change of its live saved bytes): a tensor once, under its first
// saver (the softmax output that probs x V saves again counts under softmax), never a parameter;
// so a forward slice's saved bytes are the ledger's for its site, extras split out.
void TraceRecorder::record_saved(const SaveEvent& e, bool release) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  // The live bytes before and after this event: state.memory (memory_changed, after every
  // event, sets it to them).
  const auto activation_index = static_cast<std::size_t>(MemoryCategory::saved_activation);
  const auto extra_index = static_cast<std::size_t>(MemoryCategory::saved_extra);
  const std::uint64_t activation_before = state.memory[activation_index];
  const std::uint64_t extra_before = state.memory[extra_index];
  if (release) {
    state.bytes.on_release(e);
  } else {
    state.bytes.on_save(e);
  }
  memory_changed(state, e.site, now);
  const std::uint64_t activation_after = state.memory[activation_index];
  const std::uint64_t extra_after = state.memory[extra_index];
  // A save only adds saved bytes and a release only removes them.
  auto change = [release](std::uint64_t before, std::uint64_t after) -> std::uint64_t {
    if (release) return before > after ? before - after : 0;
    return after > before ? after - before : 0;
  };
  const std::uint64_t activation = change(activation_before, activation_after);
  const std::uint64_t extra = change(extra_before, extra_after);
  if (OpenSlice* slice = saving_slice(state, e.site)) {
    if (release) {
      slice->released_bytes += activation + extra;
    } else {
      slice->saved_bytes += activation + extra;
      slice->saved_extra_bytes += extra;
    }
  }
}

void TraceRecorder::on_save(const SaveEvent& e) {
  record_saved(e, false);
}
void TraceRecorder::on_release(const SaveEvent& e) {
  record_saved(e, true);
}

void TraceRecorder::on_collective_begin(const CollectiveEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  RankState& state = rank_state(e.site, now);
  state.collective_start = now;
  state.pending_collective = collective_slice(e, state, now, now);
}

TraceEvent TraceRecorder::collective_slice(const CollectiveEvent& e, const RankState& state,
                                           Clock::time_point start, Clock::time_point end) const {
  TraceEvent event;
  event.kind = TraceEventKind::collective;
  event.rank = e.site.rank;
  event.step = e.site.step;
  event.phase = e.site.phase;
  event.layer = e.site.layer;
  event.op = std::string(e.site.op);
  event.scope = std::string(e.site.scope);
  // The issuing op's number; ProcessGroup leaves it 0, and the innermost open slice is the op
  // (forward) or node (backward) that issued the collective.
  event.seq = e.seq != 0 || state.open.empty() ? e.seq : state.open.back().seq;
  event.ts_us = micros_since_start(start);
  event.dur_us = micros_between(start, end);
  if (!state.open.empty())
    event.placement = std::string(texts_->text(state.open.back().placement));  // the issuing op's
  event.collective = e.kind;
  event.purpose = e.purpose;
  event.reduce = e.reduce;
  event.group_size = e.group_size;
  event.count = e.count;
  event.dtype = e.dtype;
  event.full_bytes = e.full_bytes;
  event.bytes_sent = e.bytes_sent;
  return event;
}

std::vector<TraceEvent> TraceRecorder::collectives_in_progress() const {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const double now = micros_since_start(time_locked(reading));
  std::vector<TraceEvent> out;
  for (const auto& [rank, state] : ranks_) {
    if (!state->pending_collective) continue;
    out.push_back(*state->pending_collective);
    out.back().dur_us = now - out.back().ts_us;
  }
  return out;
}

// A collective's slice runs from on_collective_begin (the rank enters it) to its completion, so
// it includes the wait for the slowest rank. Without a begin (an emitter that reports only the
// end) it starts at the rank's previous event, an upper bound.
void TraceRecorder::on_collective(const CollectiveEvent& e) {
  const TickClock::Reading reading = read_clock();
  std::lock_guard<HookLock> lock(hook_lock_);
  const Clock::time_point now = time_locked(reading);
  auto found = ranks_.find(e.site.rank);
  Clock::time_point previous = found != ranks_.end() ? found->second->last_event : now;
  RankState& state = rank_state(e.site, now);
  if (state.collective_start) previous = *state.collective_start;
  state.collective_start.reset();
  state.pending_collective.reset();
  keep(collective_slice(e, state, previous, now));
}

void TraceRecorder::set_config(nlohmann::json config) {
  std::lock_guard<HookLock> lock(hook_lock_);
  config_ = std::move(config);
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::vector<TraceEvent> out;
  events_since(0, out);
  return out;
}

std::size_t TraceRecorder::events_since(std::size_t from, std::vector<TraceEvent>& out) const {
  std::lock_guard<HookLock> lock(hook_lock_);
  append_events_locked(from, out);
  return stores_->order.size();
}

void TraceRecorder::append_events_locked(std::size_t from, std::vector<TraceEvent>& out) const {
  const std::size_t kept = stores_->order.size();
  if (from < kept) out.reserve(out.size() + (kept - from));
  for (std::size_t i = from; i < kept; ++i) out.push_back(event_at_locked(i));
}

std::size_t TraceRecorder::dropped_events() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return dropped_;
}

TraceMeta TraceRecorder::meta() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  return meta_locked();
}

TraceMeta TraceRecorder::meta_locked() const {
  TraceMeta meta;
  meta.config = config_;
  for (const auto& [rank, state] : ranks_) meta.ranks.push_back(rank);
  meta.max_events = max_events_;
  meta.dropped_events = dropped_;
  meta.first_dropped_step = first_dropped_step_;
  meta.clock_origin_unix_us = clock_origin_unix_us_;
  return meta;
}

nlohmann::json TraceRecorder::to_chrome_trace() const {
  std::lock_guard<HookLock> lock(hook_lock_);
  std::vector<TraceEvent> events;
  append_events_locked(0, events);
  return trace_to_json(events, meta_locked());
}

void TraceRecorder::write_chrome_trace(const std::string& path) const {
  std::lock_guard<HookLock> lock(hook_lock_);  // no copy of the events; recording waits
  write_trace_file(path, source_locked(), meta_locked());
}

}  // namespace shardscope
