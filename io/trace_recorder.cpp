// TraceRecorder: observer hooks to TraceEvents, one RankState per rank behind one mutex.
#include "io/trace_recorder.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace shardscope {
namespace {

// A hash of a shape list's dims (FNV-1a over the dims and each shape's rank), for the recorder's
// cache of shape text: cheaper than ordering lists element by element in a map.
struct ShapesHash {
  std::size_t operator()(const std::vector<Shape>& shapes) const {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (const Shape& s : shapes) {
      mix(s.dims().size());
      for (std::int64_t d : s.dims()) mix(static_cast<std::uint64_t>(d));
    }
    return static_cast<std::size_t>(h);
  }
};

}  // namespace

// A memory counter as the recorder keeps it (TraceRecorder::event_at_locked builds the event).
struct TraceRecorder::Counter {
  int rank = 0;
  int layer = -1;
  std::int64_t step = 0;
  double ts_us = 0;
  Phase phase = Phase::forward;
  std::array<std::uint64_t, kMemoryCategoryCount> memory{};
};

// A forward op or backward node that has begun and not yet ended on one rank.
struct TraceRecorder::OpenSlice {
  std::uint64_t seq = 0;
  Phase phase = Phase::forward;
  std::string op, scope;
  Clock::time_point begin;
  std::string placement;
  ShapeStrings inputs;
  std::uint64_t alloc_bytes = 0;
  std::uint64_t saved_bytes = 0;
  std::uint64_t saved_extra_bytes = 0;
  std::uint64_t released_bytes = 0;
};

// What the recorder tracks for one rank: its open slices (innermost last), its step, the time of
// its last event (a collective's slice starts there: see on_collective), and its live memory by
// category, kept by a MemoryLedger of its own so the counters follow the ledger's rules.
struct TraceRecorder::RankState {
  std::vector<OpenSlice> open;
  bool has_step = false;
  std::int64_t step = 0;
  Clock::time_point last_event;
  std::optional<Clock::time_point> collective_start;     // set by on_collective_begin
  std::optional<TraceEvent> pending_collective;          // the call entered and not yet left
  MemoryLedger ledger{MemoryLedger::Locking::by_owner};  // used under the recorder's mutex only
  std::array<std::uint64_t, kMemoryCategoryCount> memory{};
  std::unordered_map<std::vector<Shape>, ShapeStrings, ShapesHash> shape_text;  // each list's, once

  // `shapes` as text, shared with every earlier slice of the same shapes.
  ShapeStrings shape_strings(const std::vector<Shape>* shapes) {
    if (shapes == nullptr || shapes->empty()) return {};
    auto it = shape_text.find(*shapes);
    if (it == shape_text.end()) {
      std::vector<std::string> text;
      text.reserve(shapes->size());
      for (const Shape& s : *shapes) text.push_back(s.str());
      it = shape_text.emplace(*shapes, ShapeStrings(std::move(text))).first;
    }
    return it->second;
  }
};

namespace {

// Asks the kernel to back [data, data + bytes) with 2 MiB pages where it can (Linux with
// transparent huge pages in "madvise" mode, as Debian ships it): the events fill the vector's
// pages one by one, and a fault per 4 KiB page (some 13 events) cost more than recording them.
void advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kHuge - 1) / kHuge * kHuge;
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) / kHuge * kHuge;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Kept events live in vectors that start at kFirstEvents (address space only: pages are mapped
// as events fill them) and grow fourfold. Doubling from empty moved every kept event again at
// each growth, into memory the kernel maps page by page: a large part of the cost of recording.
constexpr std::size_t kFirstEvents = std::size_t{1} << 16;
constexpr std::size_t kCounterBit = std::size_t{1} << (8 * sizeof(std::size_t) - 1);

// A new element at the end of `kept`, built in place (a TraceEvent is some 300 bytes of strings
// and vectors: constructing it elsewhere and moving it in cost as much again).
template <class T>
T* append(std::vector<T>& kept, std::size_t most) {
  if (kept.size() == kept.capacity()) {
    kept.reserve(std::min(most, std::max(kFirstEvents, 4 * kept.capacity())));
    advise_huge_pages(kept.data(), kept.capacity() * sizeof(T));
  }
  return &kept.emplace_back();
}

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
    : now_(options.clock ? std::move(options.clock) : [] { return Clock::now(); }),
      start_(now_()),
      clock_origin_unix_us_(unix_micros_now()),
      max_events_(options.max_events),
      config_(std::move(options.config)) {}

TraceRecorder::~TraceRecorder() = default;

double TraceRecorder::micros_since_start(Clock::time_point t) const {
  return micros_between(start_, t);
}

// From whole nanoseconds, so a nested slice's end never passes its parent's after rounding.
double TraceRecorder::micros_between(Clock::time_point from, Clock::time_point to) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  return static_cast<double>(ns) / 1000.0;
}

// The rank's state; emits a step mark first when the event's step is not the rank's step.
TraceRecorder::RankState& TraceRecorder::rank_state(const Site& site, Clock::time_point now) {
  std::unique_ptr<RankState>& slot = ranks_[site.rank];
  if (!slot) {
    slot = std::make_unique<RankState>();
    slot->last_event = now;
  }
  RankState& state = *slot;
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
  TraceEvent* slot = add_full(event.step);
  if (slot) *slot = std::move(event);
}

// False, and one more dropped (the first one's `step` kept in first_dropped_step_), once
// max_events_ are kept.
bool TraceRecorder::make_room(std::int64_t step) {
  if (order_.size() >= max_events_) {
    if (dropped_++ == 0) first_dropped_step_ = step;
    return false;
  }
  if (order_.size() == order_.capacity()) {
    order_.reserve(std::min(max_events_, std::max(kFirstEvents, 4 * order_.capacity())));
  }
  return true;
}

TraceEvent* TraceRecorder::add_full(std::int64_t step) {
  if (!make_room(step)) return nullptr;
  order_.push_back(full_.size());
  return append(full_, max_events_);
}

TraceRecorder::Counter* TraceRecorder::add_counter(std::int64_t step) {
  if (!make_room(step)) return nullptr;
  order_.push_back(counters_.size() | kCounterBit);
  return append(counters_, max_events_);
}

TraceEvent TraceRecorder::event_at_locked(std::size_t i) const {
  const std::size_t entry = order_[i];
  if (!(entry & kCounterBit)) return full_[entry];
  const Counter& c = counters_[entry & ~kCounterBit];
  TraceEvent e = instant(TraceEventKind::memory, c.rank, c.step, c.phase, c.layer, c.ts_us);
  e.memory = c.memory;
  return e;
}

TraceEventSource TraceRecorder::source_locked() const {
  TraceEventSource source;
  source.count = order_.size();
  source.key = [this](std::size_t i) {
    const std::size_t entry = order_[i];
    if (entry & kCounterBit) {
      return TraceOrderKey{counters_[entry & ~kCounterBit].ts_us, 0.0, TraceEventKind::memory};
    }
    return order_key(full_[entry]);
  };
  source.event = [this](std::size_t i) { return event_at_locked(i); };
  return source;
}

// After the ledger saw a change: a counter event when the rank's live bytes changed.
std::array<std::uint64_t, kMemoryCategoryCount> TraceRecorder::live_bytes(const RankState& state) {
  const std::array<std::size_t, kMemoryCategoryCount> bytes = state.ledger.live_all();
  std::array<std::uint64_t, kMemoryCategoryCount> live{};
  std::copy(bytes.begin(), bytes.end(), live.begin());
  return live;
}

void TraceRecorder::memory_changed(RankState& state, const Site& site, Clock::time_point now,
                                   const std::array<std::uint64_t, kMemoryCategoryCount>& live) {
  if (live == state.memory) return;
  state.memory = live;
  Counter* counter = add_counter(site.step);
  if (!counter) return;
  counter->rank = site.rank;
  counter->step = site.step;
  counter->phase = site.phase;
  counter->layer = site.layer;
  counter->ts_us = micros_since_start(now);
  counter->memory = live;
}

void TraceRecorder::on_op_begin(const OpEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  OpenSlice slice;
  slice.seq = e.seq;
  slice.phase = e.site.phase;
  slice.op = std::string(e.site.op);
  slice.scope = std::string(e.site.scope);
  slice.begin = now;
  slice.inputs = state.shape_strings(e.inputs);
  slice.placement = std::string(e.placement);
  state.open.push_back(std::move(slice));
}

void TraceRecorder::on_op_end(const OpEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  auto it = std::find_if(state.open.rbegin(), state.open.rend(), [&](const OpenSlice& s) {
    return s.seq == e.seq && s.phase == e.site.phase;
  });
  if (it == state.open.rend()) return;  // begun before the recorder was attached
  OpenSlice& slice = *it;
  if (TraceEvent* event = add_full(e.site.step)) {
    event->kind = TraceEventKind::op;
    event->rank = e.site.rank;
    event->step = e.site.step;
    event->phase = e.site.phase;
    event->layer = e.site.layer;
    // The end's op and scope (the begin's, which the slice kept: moved rather than copied).
    event->op = slice.op == e.site.op ? std::move(slice.op) : std::string(e.site.op);
    event->scope = slice.scope == e.site.scope ? std::move(slice.scope) : std::string(e.site.scope);
    event->seq = e.seq;
    event->ts_us = micros_since_start(slice.begin);
    event->dur_us = micros_between(slice.begin, now);
    event->inputs = std::move(slice.inputs);
    event->placement = std::move(slice.placement);
    event->outputs = state.shape_strings(e.outputs);
    event->alloc_bytes = slice.alloc_bytes;
    event->saved_bytes = slice.saved_bytes;
    event->saved_extra_bytes = slice.saved_extra_bytes;
    event->released_bytes = slice.released_bytes;
  }
  state.open.erase(std::next(it).base());
}

void TraceRecorder::on_alloc(const StorageEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  for (OpenSlice& slice : state.open) slice.alloc_bytes += e.bytes;
  state.ledger.on_alloc(e);
  memory_changed(state, e.site, now, live_bytes(state));
}

void TraceRecorder::on_free(const StorageEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  state.ledger.on_free(e);
  memory_changed(state, e.site, now, live_bytes(state));
}

void TraceRecorder::on_recategorize(const StorageEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  state.ledger.on_recategorize(e);
  memory_changed(state, e.site, now, live_bytes(state));
}

// The open slice of the op that saves (or whose node releases) a tensor: the innermost one with
// the save's op, scope and phase, else the innermost; null when none is open.
TraceRecorder::OpenSlice* TraceRecorder::saving_slice(RankState& state, const Site& site) {
  for (auto it = state.open.rbegin(); it != state.open.rend(); ++it) {
    if (it->phase == site.phase && it->op == site.op && it->scope == site.scope) return &*it;
  }
  return state.open.empty() ? nullptr : &state.open.back();
}

// A save or release goes to the rank's ledger, then a memory counter. The slice is credited with
// what the ledger counted (the change of its live saved bytes): a tensor once, under its first
// saver (the softmax output that probs x V saves again counts under softmax), never a parameter;
// so a forward slice's saved bytes are the ledger's for its site, extras split out.
void TraceRecorder::record_saved(const SaveEvent& e, bool release) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  // The ledger's live bytes before this event: state.memory (memory_changed, after every event
  // the ledger sees, keeps it equal to them).
  const auto activation_index = static_cast<std::size_t>(MemoryCategory::saved_activation);
  const auto extra_index = static_cast<std::size_t>(MemoryCategory::saved_extra);
  const std::uint64_t activation_before = state.memory[activation_index];
  const std::uint64_t extra_before = state.memory[extra_index];
  if (release) {
    state.ledger.on_release(e);
  } else {
    state.ledger.on_save(e);
  }
  const std::array<std::uint64_t, kMemoryCategoryCount> live = live_bytes(state);
  const std::uint64_t activation_after = live[activation_index];
  const std::uint64_t extra_after = live[extra_index];
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
  memory_changed(state, e.site, now, live);
}

void TraceRecorder::on_save(const SaveEvent& e) {
  record_saved(e, false);
}
void TraceRecorder::on_release(const SaveEvent& e) {
  record_saved(e, true);
}

void TraceRecorder::on_collective_begin(const CollectiveEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
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
  if (!state.open.empty()) event.placement = state.open.back().placement;  // the issuing op's
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
  const double now = micros_since_start(now_());
  std::lock_guard<std::mutex> lock(mutex_);
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
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = ranks_.find(e.site.rank);
  Clock::time_point previous = found != ranks_.end() ? found->second->last_event : now;
  RankState& state = rank_state(e.site, now);
  if (state.collective_start) previous = *state.collective_start;
  state.collective_start.reset();
  state.pending_collective.reset();
  TraceEvent event = collective_slice(e, state, previous, now);
  keep(std::move(event));
}

void TraceRecorder::set_config(nlohmann::json config) {
  std::lock_guard<std::mutex> lock(mutex_);
  config_ = std::move(config);
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::vector<TraceEvent> out;
  events_since(0, out);
  return out;
}

std::size_t TraceRecorder::events_since(std::size_t from, std::vector<TraceEvent>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  append_events_locked(from, out);
  return order_.size();
}

void TraceRecorder::append_events_locked(std::size_t from, std::vector<TraceEvent>& out) const {
  if (from < order_.size()) out.reserve(out.size() + (order_.size() - from));
  for (std::size_t i = from; i < order_.size(); ++i) out.push_back(event_at_locked(i));
}

std::size_t TraceRecorder::dropped_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

TraceMeta TraceRecorder::meta() const {
  std::lock_guard<std::mutex> lock(mutex_);
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
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TraceEvent> events;
  append_events_locked(0, events);
  return trace_to_json(events, meta_locked());
}

void TraceRecorder::write_chrome_trace(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);  // no copy of the events; recording waits
  write_trace_file(path, source_locked(), meta_locked());
}

}  // namespace shardscope
