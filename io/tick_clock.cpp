// TickClock: steady times from the time-stamp counter, calibrated against steady_clock.
#include "io/tick_clock.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

namespace shardscope {
namespace {

std::function<std::uint64_t()> tsc_if_the_kernels() {
#if defined(__x86_64__)
  if (TickClock::kernel_clock_is_tsc()) return [] { return std::uint64_t{__builtin_ia32_rdtsc()}; };
#endif
  return {};
}

}  // namespace

bool TickClock::kernel_clock_is_tsc() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool is_tsc = [] {
    std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string name;
    return static_cast<bool>(in >> name) && name == "tsc";
  }();
  return is_tsc;
#else
  return false;
#endif
}

TickClock::TickClock() : TickClock(Sources{tsc_if_the_kernels(), {}}) {
  tsc_ = counts_ticks();
}

TickClock::TickClock(Sources sources) : sources_(std::move(sources)) {
  if (sources_.ticks) {
    read_anchor(origin_ticks_, origin_);
  } else {
    origin_ = steady_now();
  }
  anchor_ticks_ = origin_ticks_;
  anchor_ = origin_;
  last_ = origin_;
}

void TickClock::read_anchor(std::uint64_t& ticks, Clock::time_point& steady) const {
  // The narrowest of three tries: a thread preempted between the steady reads widens one.
  Clock::duration narrowest = Clock::duration::max();
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Clock::time_point before = steady_now();
    const std::uint64_t read = sources_.ticks();
    const Clock::time_point after = steady_now();
    if (after - before >= narrowest) continue;
    narrowest = after - before;
    ticks = read;
    steady = before + (after - before) / 2;
  }
}

TickClock::Clock::time_point TickClock::time_of(const Reading& reading) {
  if (sources_.ticks &&
      (reanchor_ticks_ == 0 ||
       static_cast<std::int64_t>(reading.ticks - anchor_ticks_) >= reanchor_ticks_)) {
    calibrate();
  }
  Clock::time_point time;
  if (!sources_.ticks) {
    time = reading.steady;
  } else if (reanchor_ticks_ == 0) {
    time = anchor_;  // calibrating: the steady time read just now (a moment after the reading)
  } else {
    // From the anchor; the reading may be from before it (made before another caller moved it).
    const auto since =
        static_cast<double>(static_cast<std::int64_t>(reading.ticks - anchor_ticks_));
    time = anchor_ + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::nano>(since * ns_per_tick_));
  }
  last_ = std::max(last_, time);
  return last_;
}

void TickClock::calibrate() {
  std::uint64_t ticks = 0;
  Clock::time_point now;
  read_anchor(ticks, now);
  anchor_ticks_ = ticks;
  anchor_ = now;
  if (now - origin_ < kCalibration || ticks <= origin_ticks_) return;  // too soon to measure
  // The rate over the clock's whole life.
  const auto lived = std::chrono::duration<double, std::nano>(now - origin_).count();
  ns_per_tick_ = lived / static_cast<double>(ticks - origin_ticks_);
  const auto reanchor_ns = std::chrono::duration<double, std::nano>(kReanchor).count();
  reanchor_ticks_ = std::max<std::int64_t>(1, std::llround(reanchor_ns / ns_per_tick_));
}

}  // namespace shardscope
