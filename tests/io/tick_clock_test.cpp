// TickClock against a simulated counter and steady clock: the steady time until calibrated, then
// times within a fraction of a microsecond of the steady clock's, at any counter rate and while the
// steady clock is slewed (as NTP slews CLOCK_MONOTONIC); never a time before one already given;
// steady times only without a counter; and, on this machine, a time that lies between the steady
// times read around it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>

#include "io/tick_clock.h"

namespace shardscope {
namespace {

using Clock = TickClock::Clock;
using std::chrono::nanoseconds;

// A simulated moment: every read of either source moves it on by `step_ns`. The counter runs at
// `ticks_per_ns` from `tick_origin`; the steady clock reads true time scaled by `steady_rate`
// after `slew_from_ns` (1 before), plus a jitter of up to +-`jitter_ns` that changes every read.
struct World {
  double ticks_per_ns = 2.7;
  std::uint64_t tick_origin = 123456789;
  std::int64_t step_ns = 25;
  std::int64_t jitter_ns = 0;
  std::int64_t slew_from_ns = -1;  // <0: never
  double steady_rate = 1.0;

  std::int64_t true_ns = 1'000'000'000;
  std::uint64_t reads = 0;

  std::uint64_t ticks() {
    true_ns += step_ns;
    return tick_origin +
           static_cast<std::uint64_t>(std::llround(static_cast<double>(true_ns) * ticks_per_ns));
  }
  // What the steady clock reads at true time `t` (no jitter).
  std::int64_t steady_ns_at(std::int64_t t) const {
    if (slew_from_ns < 0 || t < slew_from_ns) return t;
    return slew_from_ns + std::llround(static_cast<double>(t - slew_from_ns) * steady_rate);
  }
  Clock::time_point steady() {
    true_ns += step_ns;
    ++reads;
    // A deterministic jitter in [-jitter_ns, jitter_ns].
    const std::int64_t jitter =
        jitter_ns == 0
            ? 0
            : static_cast<std::int64_t>((reads * 2654435761u) % (2 * jitter_ns + 1)) - jitter_ns;
    return Clock::time_point(nanoseconds(steady_ns_at(true_ns) + jitter));
  }
  TickClock::Sources sources() {
    return {[this] { return ticks(); }, [this] { return steady(); }};
  }
};

std::int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<nanoseconds>(t.time_since_epoch()).count();
}

// Reads the clock every `every_ns` for `for_ns` of simulated time; returns the largest
// |time given - steady time (no jitter) at the reading| after the first `settle_ns`, and checks
// that times never go back.
double worst_error_ns(World& world, TickClock& clock, std::int64_t every_ns, std::int64_t for_ns,
                      std::int64_t settle_ns) {
  const std::int64_t begin = world.true_ns;
  double worst = 0;
  std::int64_t last = 0;
  while (world.true_ns - begin < for_ns) {
    const TickClock::Reading reading = clock.read();
    const std::int64_t truth = world.steady_ns_at(world.true_ns);
    const std::int64_t given = ns_of(clock.time_of(reading));
    EXPECT_GE(given, last) << "a time before one already given, at " << world.true_ns - begin
                           << " ns";
    last = given;
    if (world.true_ns - begin >= settle_ns) {
      worst = std::max(worst, std::abs(static_cast<double>(given - truth)));
    }
    world.true_ns += every_ns;
  }
  return worst;
}

TEST(TickClock, GivesTheSteadyTimeUntilCalibrated) {
  World world;
  TickClock clock(world.sources());
  ASSERT_TRUE(clock.counts_ticks());
  world.true_ns += 300'000;  // 0.3 ms: not yet calibrated
  const TickClock::Reading reading = clock.read();
  const std::int64_t truth = world.true_ns;
  const std::int64_t given = ns_of(clock.time_of(reading));
  // The steady time read inside time_of, a few source reads after the reading.
  EXPECT_GE(given, truth);
  EXPECT_LE(given, truth + 20 * world.step_ns);
}

TEST(TickClock, ConvertsTicksWithinAFractionOfAMicrosecondAtAnyRate) {
  for (const double ticks_per_ns : {1.0, 2.7, 3.9}) {
    World world;
    world.ticks_per_ns = ticks_per_ns;
    TickClock clock(world.sources());
    // 20 ms read every 3.7 us; the first 2 ms calibrate.
    EXPECT_LT(worst_error_ns(world, clock, 3'700, 20'000'000, 2'000'000), 100.0)
        << ticks_per_ns << " ticks per ns";
  }
}

TEST(TickClock, StaysWithinAMicrosecondOfAJitteryAndSlewedSteadyClock) {
  World world;
  world.jitter_ns = 150;
  world.slew_from_ns = world.true_ns + 5'000'000;  // after 5 ms the steady clock runs 500 ppm slow
  world.steady_rate = 1.0 - 500e-6;
  TickClock clock(world.sources());
  // 60 ms: without moving its anchor the clock would be 27 us off by the end.
  EXPECT_LT(worst_error_ns(world, clock, 2'900, 60'000'000, 2'000'000), 1'000.0);
}

TEST(TickClock, NeverGoesBackForAReadingMadeBeforeTheAnchorMoved) {
  World world;
  world.jitter_ns = 400;
  TickClock clock(world.sources());
  std::int64_t last = 0;
  for (int i = 0; i < 4000; ++i) {
    // Two readings, converted in the opposite order: the earlier one after the later one (which
    // may move the anchor).
    const TickClock::Reading early = clock.read();
    world.true_ns += 1'000;
    const TickClock::Reading late = clock.read();
    world.true_ns += 1'000;
    const std::int64_t late_time = ns_of(clock.time_of(late));
    const std::int64_t early_time = ns_of(clock.time_of(early));
    ASSERT_GE(late_time, last) << "read " << i;
    ASSERT_GE(early_time, late_time) << "read " << i;
    last = early_time;
  }
}

TEST(TickClock, WithoutACounterGivesTheSteadyTimeOfTheReading) {
  World world;
  TickClock clock(TickClock::Sources{{}, [&world] { return world.steady(); }});
  EXPECT_FALSE(clock.counts_ticks());
  for (int i = 0; i < 100; ++i) {
    world.true_ns += 10'000;
    const TickClock::Reading reading = clock.read();
    const std::int64_t read_at = world.true_ns;
    world.true_ns += 5'000;  // the conversion comes later: the time is still the reading's
    EXPECT_EQ(ns_of(clock.time_of(reading)), read_at);
  }
}

// This machine's clocks: a time converted from a reading lies between the steady times read just
// before and after it, to within the error of an anchor (a few microseconds where a thread is
// preempted while it reads one; 50 is loose enough for a loaded CI machine, and a rate a tenth
// off, up to 90 us off by the next anchor, fails it).
TEST(TickClock, OnThisMachineATimeLiesBetweenTheSteadyTimesAroundIt) {
  TickClock clock;
  if (!clock.counts_ticks()) {
    GTEST_SKIP() << "the kernel's clock source is not the TSC: TickClock reads steady_clock here";
  }
  const auto tolerance = std::chrono::microseconds(50);
  const Clock::time_point begin = Clock::now();
  int checked = 0;
  while (Clock::now() - begin < std::chrono::milliseconds(30)) {
    const Clock::time_point before = Clock::now();
    const TickClock::Reading reading = clock.read();
    const Clock::time_point after = Clock::now();
    const Clock::time_point time = clock.time_of(reading);
    if (after - begin < std::chrono::milliseconds(2)) continue;  // calibrating
    // How far outside [before, after] the time lies, in microseconds.
    const Clock::duration outside = time < before  ? before - time
                                    : time > after ? time - after
                                                   : Clock::duration::zero();
    ASSERT_LE(outside, tolerance) << std::chrono::duration<double, std::micro>(outside).count()
                                  << " us outside, after " << checked << " readings";
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace shardscope
