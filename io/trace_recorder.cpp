// TraceRecorder: observer hooks to TraceEvents, one RankState per rank behind one mutex.
#include "io/trace_recorder.h"

#include <algorithm>
#include <optional>

#include "io/trace_writer.h"

namespace shardscope {

// A forward op or backward node that has begun and not yet ended on one rank.
struct TraceRecorder::OpenSlice {
  std::uint64_t seq = 0;
  Phase phase = Phase::forward;
  std::string op, scope;
  Clock::time_point begin;
  std::string placement;
  std::vector<std::string> inputs;
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
  std::optional<Clock::time_point> collective_start;  // set by on_collective_begin
  std::optional<TraceEvent> pending_collective;       // the call entered and not yet left
  MemoryLedger ledger;
  std::array<std::uint64_t, kMemoryCategoryCount> memory{};
};

namespace {

std::vector<std::string> shape_strings(const std::vector<Shape>* shapes) {
  std::vector<std::string> out;
  if (shapes == nullptr) return out;
  out.reserve(shapes->size());
  for (const Shape& s : *shapes) out.push_back(s.str());
  return out;
}

// Events are kept in one vector, which the writer reads in place. Doubling it from empty moved
// every kept event again at each growth, into memory the kernel maps page by page: a large part
// of the cost of recording an event. It starts at kFirstEvents (address space only: pages are
// mapped as events fill them) and then grows fourfold.
constexpr std::size_t kFirstEvents = std::size_t{1} << 16;

// A new event at the end of `events`, built in place (a TraceEvent is some 300 bytes of strings
// and vectors: constructing it elsewhere and moving it in cost as much again); null, and one
// more dropped (the first one's `step` kept in `first_dropped_step`), once `most` are kept.
TraceEvent* add_event(std::vector<TraceEvent>& events, std::size_t most, std::size_t& dropped,
                      std::int64_t step, std::int64_t& first_dropped_step) {
  if (events.size() >= most) {
    if (dropped++ == 0) first_dropped_step = step;
    return nullptr;
  }
  if (events.size() == events.capacity()) {
    events.reserve(std::min(most, std::max(kFirstEvents, 4 * events.capacity())));
  }
  return &events.emplace_back();
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
    TraceEvent mark;
    mark.kind = TraceEventKind::step;
    mark.rank = site.rank;
    mark.step = site.step;
    mark.phase = site.phase;
    mark.layer = site.layer;
    mark.ts_us = micros_since_start(now);
    keep(std::move(mark));
    state.has_step = true;
    state.step = site.step;
  }
  state.last_event = std::max(state.last_event, now);
  return state;
}

void TraceRecorder::keep(TraceEvent event) {
  TraceEvent* slot = add_event(events_, max_events_, dropped_, event.step, first_dropped_step_);
  if (slot) *slot = std::move(event);
}

// After the ledger saw a change: a counter event when the rank's live bytes changed.
void TraceRecorder::memory_changed(RankState& state, const Site& site, Clock::time_point now) {
  std::array<std::uint64_t, kMemoryCategoryCount> live{};
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    live[static_cast<std::size_t>(c)] = state.ledger.live(static_cast<MemoryCategory>(c));
  }
  if (live == state.memory) return;
  state.memory = live;
  TraceEvent* counter = add_event(events_, max_events_, dropped_, site.step, first_dropped_step_);
  if (!counter) return;
  counter->kind = TraceEventKind::memory;
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
  slice.inputs = shape_strings(e.inputs);
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
  if (TraceEvent* event =
          add_event(events_, max_events_, dropped_, e.site.step, first_dropped_step_)) {
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
    event->outputs = shape_strings(e.outputs);
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
  memory_changed(state, e.site, now);
}

void TraceRecorder::on_free(const StorageEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  state.ledger.on_free(e);
  memory_changed(state, e.site, now);
}

void TraceRecorder::on_recategorize(const StorageEvent& e) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& state = rank_state(e.site, now);
  state.ledger.on_recategorize(e);
  memory_changed(state, e.site, now);
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
  const std::size_t activation_before = state.ledger.live(MemoryCategory::saved_activation);
  const std::size_t extra_before = state.ledger.live(MemoryCategory::saved_extra);
  if (release) {
    state.ledger.on_release(e);
  } else {
    state.ledger.on_save(e);
  }
  const std::size_t activation_after = state.ledger.live(MemoryCategory::saved_activation);
  const std::size_t extra_after = state.ledger.live(MemoryCategory::saved_extra);
  // A save only adds saved bytes and a release only removes them.
  auto change = [release](std::size_t before, std::size_t after) -> std::uint64_t {
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
  memory_changed(state, e.site, now);
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
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::size_t TraceRecorder::events_since(std::size_t from, std::vector<TraceEvent>& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from < events_.size()) {
    out.insert(out.end(), events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end());
  }
  return events_.size();
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
  return trace_to_json(events_, meta_locked());
}

void TraceRecorder::write_chrome_trace(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);  // no copy of the events; recording waits
  write_trace_file(path, events_, meta_locked());
}

}  // namespace shardscope
