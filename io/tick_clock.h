// TickClock: steady_clock times from the CPU's time-stamp counter, for the trace recorder, which
// reads the time at every event (some 260 a step of the small layer). On the build machine rdtsc
// took 17 ns where steady_clock::now() took 46 through the vDSO (docs/benchmarks.md, Observer
// overhead).
//
// Ticks become times by a rate measured against steady_clock: the clock reads steady_clock for
// its first kCalibration, then converts ticks from an anchor (a steady time and the ticks read with
// it) that it moves every kReanchor, each time measuring the rate again over all its life. Times
// never go back: a time before the last one given is that one.
//
// The TSC is read only where the kernel's own clock source is "tsc" (the kernel checked that it
// runs at a constant rate and agrees across cores); elsewhere every time is steady_clock's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace shardscope {

class TickClock {
 public:
  using Clock = std::chrono::steady_clock;
  // The counter and the steady clock a TickClock reads (tests give their own; `steady` empty:
  // steady_clock's now()).
  struct Sources {
    std::function<std::uint64_t()> ticks;
    std::function<Clock::time_point()> steady;
  };
  static constexpr std::chrono::microseconds kCalibration{1000};
  static constexpr std::chrono::microseconds kReanchor{1000};

  // The TSC where the kernel's clock source is the TSC; else none (times are steady_clock's).
  TickClock();
  // `sources.ticks` empty: no counter (every time is the steady clock's).
  explicit TickClock(Sources sources);

  // A moment: the counter's ticks, or without a counter the steady time.
  struct Reading {
    std::uint64_t ticks = 0;
    Clock::time_point steady;
  };

  // Whether it reads a counter (its times are the steady clock's until calibrated, then the
  // counter's).
  bool counts_ticks() const { return static_cast<bool>(sources_.ticks); }
  // Now: cheap, and safe from any thread.
  Reading read() const {
#if defined(__x86_64__)
    if (tsc_) return Reading{__builtin_ia32_rdtsc(), {}};  // inline: no call through sources_
#endif
    return sources_.ticks ? Reading{sources_.ticks(), {}} : Reading{0, steady_now()};
  }
  // The steady time of a reading made a moment before (a caller takes its lock between the two).
  // Not thread-safe: the caller serializes the calls.
  Clock::time_point time_of(const Reading& reading);

  // Whether the kernel's clock source is the TSC (x86-64 Linux only).
  static bool kernel_clock_is_tsc();

 private:
  // Reads the steady time and the ticks together: the ticks' moment is between two steady
  // reads, and the steady time given is their middle.
  void read_anchor(std::uint64_t& ticks, Clock::time_point& steady) const;
  Clock::time_point steady_now() const {
    return sources_.steady ? sources_.steady() : Clock::now();
  }
  // Moves the anchor to now and, from kCalibration on, measures the rate over the clock's life.
  void calibrate();

  Sources sources_;   // sources_.steady empty: Clock::now()
  bool tsc_ = false;  // sources_.ticks is the TSC (read() reads it inline)
  std::uint64_t origin_ticks_ = 0;
  Clock::time_point origin_;
  std::uint64_t anchor_ticks_ = 0;
  Clock::time_point anchor_;
  std::int64_t reanchor_ticks_ = 0;  // kReanchor in ticks (0 until calibrated)
  double ns_per_tick_ = 0;
  Clock::time_point last_;
};

}  // namespace shardscope
