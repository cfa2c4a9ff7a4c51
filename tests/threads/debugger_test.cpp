// Tests of the step Debugger: a rank thread runs small graphs while the test thread, as the
// controller, waits for stops, steps, pauses, resumes and shuts down. Every wait is bounded, so a
// bug fails the test instead of hanging it.
#include "autograd/debugger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"

namespace shardscope {
namespace {

using namespace std::chrono_literals;

// Generous: the tsan build on two cores is slow, and a correct run never waits this long.
constexpr std::chrono::milliseconds kWait = 10s;
// Longest run of stops a test expects; a loop that goes past it is a bug, not a slow machine.
constexpr int kMaxStops = 64;

// Runs `body` on a rank thread with its own Context, the debugger attached and the run marked
// (DebugRunGuard). The destructor shuts the debugger down, so a failed assertion never leaves the
// rank paused, and joins; a rank that does not end in time aborts the binary instead of hanging.
class RankThread {
 public:
  RankThread(Debugger& debugger, std::function<void(Context&)> body)
      : debugger_(debugger), done_future_(done_.get_future()) {
    thread_ = std::thread([this, body = std::move(body)] {
      try {
        Context ctx;
        ObserverGuard attach(ctx, debugger_);
        DebugRunGuard run(debugger_);
        body(ctx);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      done_.set_value();
    });
  }
  ~RankThread() {
    debugger_.shutdown();
    // Twice kWait: a rank may itself be in a bounded kWait when a test fails early.
    if (done_future_.wait_for(2 * kWait) != std::future_status::ready) {
      std::fprintf(stderr, "RankThread: the rank did not end after shutdown; aborting\n");
      std::abort();
    }
    thread_.join();
  }
  RankThread(const RankThread&) = delete;
  RankThread& operator=(const RankThread&) = delete;

  // Waits for the rank to end; false on timeout. error() is valid once it returned true.
  bool finish() { return done_future_.wait_for(kWait) == std::future_status::ready; }
  const std::string& error() const { return error_; }

 private:
  Debugger& debugger_;
  std::promise<void> done_;
  std::future<void> done_future_;
  std::string error_;
  std::thread thread_;
};

// "matmul forward": what a stop sequence is compared by.
std::string label(const Stop& s) {
  return s.op + " " + phase_name(s.phase);
}

// As controller: waits for each stop, records it and resumes with `step` or `resume`, until the
// run finishes. Fails when a wait times out instead.
std::vector<Stop> collect_stops(Debugger& debugger, bool single_step) {
  std::vector<Stop> stops;
  while (static_cast<int>(stops.size()) < kMaxStops) {
    std::optional<Stop> stop = debugger.wait_for_stop(kWait);
    if (!stop) break;
    stops.push_back(*stop);
    if (single_step) {
      debugger.step();
    } else {
      debugger.resume();
    }
  }
  EXPECT_TRUE(debugger.finished()) << "waiting for a stop timed out after " << stops.size()
                                   << " stops instead of seeing the run finish";
  return stops;
}

std::vector<std::string> labels(const std::vector<Stop>& stops) {
  std::vector<std::string> out;
  for (const Stop& s : stops) out.push_back(label(s));
  return out;
}

// loss = sum(gelu(x [2, 3] @ w [3, 4])) in f64, then backward.
void tiny_graph(Context& ctx) {
  Tensor x = Tensor::randn(ctx, {2, 3}, 1, 1.0, DType::f64).set_requires_grad(true);
  Tensor w = Tensor::randn(ctx, {3, 4}, 2, 1.0, DType::f64).set_requires_grad(true);
  Tensor loss = sum(gelu(matmul(x, w)));
  loss.backward();
}

// Two layers of h = gelu(h @ w_l), tagged with LayerGuard, then sum and backward.
void two_layers(Context& ctx) {
  Tensor h = Tensor::randn(ctx, {2, 3}, 1, 1.0, DType::f64).set_requires_grad(true);
  for (int layer = 0; layer < 2; ++layer) {
    LayerGuard in_layer(ctx, layer);
    Tensor w = Tensor::randn(ctx, {3, 3}, 10 + layer, 1.0, DType::f64).set_requires_grad(true);
    h = gelu(matmul(h, w));
  }
  sum(h).backward();
}

TEST(Debugger, SingleStepStopsAtEveryForwardOpAndBackwardNodeInOrder) {
  Debugger debugger(Debugger::StartMode::stop_at_first_op);
  RankThread rank(debugger, tiny_graph);
  const std::vector<Stop> stops = collect_stops(debugger, /*single_step=*/true);
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");

  const std::vector<std::string> expected = {"matmul forward", "gelu forward",  "sum forward",
                                             "sum backward",   "gelu backward", "matmul backward"};
  EXPECT_EQ(labels(stops), expected);
  ASSERT_EQ(stops.size(), expected.size());
  EXPECT_EQ(stops[0].reason, StopReason::first_op);
  EXPECT_EQ(stops[0].inputs, (std::vector<Shape>{Shape{2, 3}, Shape{3, 4}}));
  EXPECT_TRUE(stops[0].outputs.empty());
  EXPECT_GT(stops[0].seq, 0u);
  EXPECT_EQ(stops[0].seq, stops[5].seq);  // a forward op and its backward node share the number
  for (std::size_t i = 0; i < stops.size(); ++i) {
    EXPECT_EQ(stops[i].number, i + 1);
    EXPECT_EQ(stops[i].op_index, i + 1);
    if (i > 0) {
      EXPECT_EQ(stops[i].reason, StopReason::step) << stops[i].str();
    }
    EXPECT_EQ(stops[i].breakpoint_id, -1);
    EXPECT_EQ(stops[i].layer, -1);
    EXPECT_EQ(stops[i].rank, 0);
  }
  // The matmul backward node carries its forward op's number and the gradient shapes.
  EXPECT_GT(stops[5].seq, 0u);
  EXPECT_LT(stops[5].seq, stops[3].seq);  // matmul was recorded before sum
  EXPECT_EQ(stops[5].inputs, (std::vector<Shape>{Shape{2, 4}}));
  EXPECT_EQ(stops[5].outputs, (std::vector<Shape>{Shape{2, 3}, Shape{3, 4}}));
  EXPECT_EQ(debugger.stop_count(), 6u);
  EXPECT_FALSE(debugger.paused());
}

TEST(Debugger, BreakpointOnOpAndPhaseStopsOnlyThere) {
  Debugger debugger;
  const int id = debugger.add_breakpoint({"gelu", Phase::backward, std::nullopt});
  RankThread rank(debugger, tiny_graph);
  const std::vector<Stop> stops = collect_stops(debugger, /*single_step=*/false);
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");

  EXPECT_EQ(labels(stops), std::vector<std::string>{"gelu backward"});
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].reason, StopReason::breakpoint);
  EXPECT_EQ(stops[0].breakpoint_id, id);
  EXPECT_EQ(stops[0].op_index, 5u);  // matmul, gelu, sum forward; sum, gelu backward
  const std::vector<BreakpointEntry> entries = debugger.breakpoints();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].hits, 1u);
}

TEST(Debugger, LayerBreakpointStopsOnlyInThatLayer) {
  Debugger debugger;
  debugger.add_breakpoint({"", std::nullopt, 1});
  RankThread rank(debugger, two_layers);
  const std::vector<Stop> stops = collect_stops(debugger, /*single_step=*/false);
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");

  const std::vector<std::string> expected = {"matmul forward", "gelu forward", "gelu backward",
                                             "matmul backward"};
  EXPECT_EQ(labels(stops), expected);
  for (const Stop& s : stops) EXPECT_EQ(s.layer, 1) << s.str();
}

TEST(Debugger, StepLayerStopsAtTheFirstOpOfAnotherLayerOrPhase) {
  Debugger debugger(Debugger::StartMode::stop_at_first_op);
  RankThread rank(debugger, two_layers);
  std::vector<Stop> stops;
  while (static_cast<int>(stops.size()) < kMaxStops) {
    std::optional<Stop> stop = debugger.wait_for_stop(kWait);
    if (!stop) break;
    stops.push_back(*stop);
    debugger.step_layer();
  }
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");
  // randn is outside any layer (-1); then layer 0 forward, layer 1 forward, sum (layer -1), the
  // backward of layer 1 and of layer 0.
  std::vector<std::string> got;
  for (const Stop& s : stops) got.push_back(label(s) + " " + std::to_string(s.layer));
  const std::vector<std::string> expected = {"matmul forward 0", "matmul forward 1",
                                             "sum forward -1",   "sum backward -1",
                                             "gelu backward 1",  "gelu backward 0"};
  EXPECT_EQ(got, expected);
}

TEST(Debugger, ScopedNameBreakpointMatchesOnlyThatModule) {
  Debugger debugger;
  debugger.add_breakpoint({"mlp.fc1/matmul", std::nullopt, std::nullopt});
  RankThread rank(debugger, [](Context& ctx) {
    Tensor x = Tensor::randn(ctx, {2, 3}, 1, 1.0, DType::f64).set_requires_grad(true);
    Tensor w1 = Tensor::randn(ctx, {3, 4}, 2, 1.0, DType::f64).set_requires_grad(true);
    Tensor w2 = Tensor::randn(ctx, {4, 3}, 3, 1.0, DType::f64).set_requires_grad(true);
    ScopeGuard mlp(ctx, "mlp");
    Tensor h;
    {
      ScopeGuard fc1(ctx, "fc1");
      h = gelu(matmul(x, w1));
    }
    {
      ScopeGuard fc2(ctx, "fc2");
      h = matmul(h, w2);
    }
    sum(h).backward();
  });
  const std::vector<Stop> stops = collect_stops(debugger, /*single_step=*/false);
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");

  EXPECT_EQ(labels(stops), (std::vector<std::string>{"matmul forward", "matmul backward"}));
  for (const Stop& s : stops) EXPECT_EQ(s.name(), "mlp.fc1/matmul") << s.str();
}

// x -> 0.5 * gelu(x), `iterations` times, then sum and backward; returns h's values and x's grad.
// `before_iteration` runs on the rank thread before each iteration's ops.
std::vector<double> gelu_loop(Context& ctx, int iterations,
                              const std::function<void(int)>& before_iteration) {
  Tensor x = Tensor::randn(ctx, {4, 5}, 7, 1.0, DType::f64).set_requires_grad(true);
  Tensor h = x;
  for (int i = 0; i < iterations; ++i) {
    before_iteration(i);
    h = scale(gelu(h), 0.5);
  }
  sum(h).backward();
  std::vector<double> out = h.to_vector();
  const std::vector<double> grad = x.grad().to_vector();
  out.insert(out.end(), grad.begin(), grad.end());
  return out;
}

TEST(Debugger, PauseRequestStopsARunningRankAndResumeLetsItFinish) {
  constexpr int kIterations = 40;
  constexpr int kPauseAt = 10;
  Debugger debugger;
  std::promise<void> pause_requested;
  std::shared_future<void> pause_requested_future = pause_requested.get_future().share();
  std::promise<void> reached;
  std::atomic<int> iteration{0};
  std::vector<double> debugged;
  RankThread rank(debugger, [&](Context& ctx) {
    debugged = gelu_loop(ctx, kIterations, [&](int i) {
      iteration.store(i);
      if (i != kPauseAt) return;
      // Hand over to the controller and wait for its pause request, so the request lands while
      // the rank is mid-loop on every machine.
      reached.set_value();
      if (pause_requested_future.wait_for(kWait) != std::future_status::ready) {
        throw StateError("the controller never requested the pause");
      }
    });
  });

  ASSERT_EQ(reached.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(debugger.paused());
  debugger.request_pause();
  pause_requested.set_value();
  const std::optional<Stop> stop = debugger.wait_for_stop(kWait);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->reason, StopReason::pause_request);
  EXPECT_EQ(label(*stop), "gelu forward");       // the first op of iteration kPauseAt
  EXPECT_EQ(stop->op_index, 2u * kPauseAt + 1);  // two ops (gelu, scale) per iteration
  EXPECT_TRUE(debugger.paused());
  ASSERT_TRUE(debugger.current_stop().has_value());
  EXPECT_EQ(debugger.current_stop()->number, stop->number);
  // The rank really is blocked: it makes no progress while paused.
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(iteration.load(), kPauseAt);
  EXPECT_TRUE(debugger.paused());

  debugger.resume();
  EXPECT_FALSE(debugger.paused());
  EXPECT_FALSE(debugger.wait_for_stop(kWait).has_value());  // no more stops: the run finishes
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "");
  EXPECT_TRUE(debugger.finished());
  EXPECT_EQ(debugger.stop_count(), 1u);

  // The pause changed nothing: the same loop without a debugger gives the same values, exactly.
  Context plain;
  EXPECT_EQ(debugged, gelu_loop(plain, kIterations, [](int) {}));
}

TEST(Debugger, ShutdownReleasesAPausedRankAndItNeverStopsAgain) {
  auto debugger = std::make_unique<Debugger>(Debugger::StartMode::stop_at_first_op);
  debugger->add_breakpoint({"gelu", std::nullopt, std::nullopt});
  {
    RankThread rank(*debugger, tiny_graph);
    const std::optional<Stop> stop = debugger->wait_for_stop(kWait);
    ASSERT_TRUE(stop.has_value());
    EXPECT_EQ(label(*stop), "matmul forward");
    debugger->shutdown();
    // Neither the gelu breakpoints nor a pause request stop it again.
    debugger->request_pause();
    ASSERT_TRUE(rank.finish());
    EXPECT_EQ(rank.error(), "");
    EXPECT_FALSE(debugger->paused());
    EXPECT_TRUE(debugger->is_shut_down());
    EXPECT_EQ(debugger->stop_count(), 1u);
    // A controller waiting on a shut-down debugger returns at once.
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(debugger->wait_for_stop(kWait).has_value());
    EXPECT_LT(std::chrono::steady_clock::now() - start, kWait / 2);
  }
  debugger.reset();  // the rank thread is gone and detached: destruction returns at once
}

TEST(Debugger, WaitForStopTimesOutAndSeesAFailedRunFinish) {
  Debugger debugger;
  EXPECT_FALSE(debugger.wait_for_stop(30ms).has_value());
  EXPECT_FALSE(debugger.finished());
  RankThread rank(debugger, [](Context&) { throw StateError("the rank failed"); });
  EXPECT_FALSE(debugger.wait_for_stop(kWait).has_value());
  ASSERT_TRUE(rank.finish());
  EXPECT_EQ(rank.error(), "the rank failed");
  EXPECT_TRUE(debugger.finished());
}

TEST(Debugger, StepWhileRunningActsAsAPauseRequest) {
  Debugger debugger;
  debugger.step();  // not paused: the rank stops at its next op, here the first
  RankThread rank(debugger, tiny_graph);
  const std::optional<Stop> stop = debugger.wait_for_stop(kWait);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(label(*stop), "matmul forward");
  EXPECT_EQ(stop->reason, StopReason::pause_request);
  EXPECT_EQ(debugger.wait_for_stop(kWait)->number, stop->number);  // still the same stop
  debugger.resume();
  EXPECT_FALSE(debugger.wait_for_stop(kWait).has_value());
  ASSERT_TRUE(rank.finish());
}

// ---- Breakpoint matching and the breakpoint list, without threads ----

Site site_of(std::string_view op, std::string_view scope, Phase phase, int layer) {
  Site s;
  s.op = op;
  s.scope = scope;
  s.phase = phase;
  s.layer = layer;
  return s;
}

TEST(Breakpoint, MatchesOpKindScopedNamePhaseAndLayer) {
  const Site fc1 = site_of("matmul", "mlp.fc1", Phase::forward, 0);
  const Site bare = site_of("matmul", "", Phase::backward, -1);
  EXPECT_TRUE(Breakpoint{}.matches(fc1));
  EXPECT_TRUE((Breakpoint{"matmul", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_FALSE((Breakpoint{"gelu", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_TRUE((Breakpoint{"mlp.fc1/matmul", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_FALSE((Breakpoint{"mlp/matmul", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_FALSE((Breakpoint{"mlp.fc1/gelu", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_TRUE((Breakpoint{"mlp.fc1/", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_TRUE((Breakpoint{"/matmul", std::nullopt, std::nullopt}.matches(bare)));
  EXPECT_FALSE((Breakpoint{"/matmul", std::nullopt, std::nullopt}.matches(fc1)));
  EXPECT_FALSE((Breakpoint{"", Phase::backward, std::nullopt}.matches(fc1)));
  EXPECT_TRUE((Breakpoint{"", Phase::backward, std::nullopt}.matches(bare)));
  EXPECT_TRUE((Breakpoint{"", std::nullopt, 0}.matches(fc1)));
  EXPECT_FALSE((Breakpoint{"", std::nullopt, 1}.matches(fc1)));
  EXPECT_TRUE((Breakpoint{"", std::nullopt, -1}.matches(bare)));
  EXPECT_EQ((Breakpoint{"gelu", Phase::backward, 2}.str()), "gelu backward layer 2");
  EXPECT_EQ(Breakpoint{}.str(), "any op");
}

TEST(Breakpoint, AddRemoveClearAndValidate) {
  Debugger debugger;
  const int a = debugger.add_breakpoint({"matmul", std::nullopt, std::nullopt});
  const int b = debugger.add_breakpoint({"gelu", Phase::forward, 0});
  EXPECT_NE(a, b);
  ASSERT_EQ(debugger.breakpoints().size(), 2u);
  EXPECT_EQ(debugger.breakpoints()[1].breakpoint.str(), "gelu forward layer 0");
  EXPECT_TRUE(debugger.remove_breakpoint(a));
  EXPECT_FALSE(debugger.remove_breakpoint(a));
  ASSERT_EQ(debugger.breakpoints().size(), 1u);
  EXPECT_EQ(debugger.breakpoints()[0].id, b);
  debugger.clear_breakpoints();
  EXPECT_TRUE(debugger.breakpoints().empty());

  EXPECT_THROW(debugger.add_breakpoint({"a/b/matmul", std::nullopt, std::nullopt}), ArgumentError);
  EXPECT_THROW(debugger.add_breakpoint({"", std::nullopt, -2}), ArgumentError);
  try {
    debugger.add_breakpoint({"a/b/matmul", std::nullopt, std::nullopt});
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("a/b/matmul"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(debugger.breakpoints().empty());
}

}  // namespace
}  // namespace shardscope

namespace shardscope {
namespace {

TEST(Breakpoint, ParsesTheTextFormsEveryFrontEndTakes) {
  EXPECT_EQ(Breakpoint::parse("gelu").op, "gelu");
  EXPECT_EQ(Breakpoint::parse("attn.qkv/matmul").op, "attn.qkv/matmul");
  EXPECT_EQ(Breakpoint::parse("layer 3").layer, 3);
  EXPECT_EQ(Breakpoint::parse("  phase backward ").phase, Phase::backward);
  for (const char* bad :
       {"", "layer", "layer x", "layer 2x", "phase sideways", "gelu now", "a/b/c", "layer -2"}) {
    try {
      Breakpoint::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("breakpoint"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace shardscope
