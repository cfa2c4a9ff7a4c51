// The helpers of the tests that run the layer (or a stack of layers) on every rank and hold the
// result against the single-device reference and the models.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/spmd.h"
#include "parallel/layers/layer_decl.h"
#include "parallel/models/comm_model.h"
#include "parallel/models/memory_model.h"
#include "parallel/run/layer_run.h"
#include "tests/backend_testing.h"

namespace shardscope {

// s = 12, h = 48, a = 12: divisible by the degrees 1, 2, 3 and 4 in every mode.
inline LayerRunSpec small_spec(ParallelMode mode, int degree, double dropout, DType dtype) {
  LayerRunSpec spec;
  spec.layer.seq = 12;
  spec.layer.batch = 2;
  spec.layer.hidden = 48;
  spec.layer.heads = 12;
  spec.layer.dropout = dropout;
  spec.layer.dtype = dtype;
  spec.layer.mode = mode;
  spec.layer.degree = degree;
  spec.steps = 1;
  return spec;
}

// A mode's name as a GoogleTest parameter name may hold it ([A-Za-z0-9_]): "tp_sp".
inline std::string mode_test_name(ParallelMode mode) {
  std::string name = mode_name(mode);
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

// Llama's layer (apply_model) on `base`'s shape with f = 48 (divisible by the degrees 1 to 4 at
// h = 48) and `kv_heads` key/value heads.
inline LayerConfig llama_layer(LayerConfig base, std::int64_t kv_heads) {
  apply_model("llama", base);
  base.ffn = 48;
  base.kv_heads = kv_heads;
  return base;
}

inline std::vector<RankRun> run_all_ranks(
    const LayerRunSpec& spec, testing::TestBackend backend = testing::TestBackend::cpu) {
  std::vector<RankRun> runs(static_cast<std::size_t>(spec.layer.degree));
  std::mutex mutex;
  SpmdOptions options;
  options.comm = CommKind::threads;
  options.backend = backend == testing::TestBackend::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  options.timeout = std::chrono::milliseconds(20000);
  run_spmd(spec.layer.degree, options, [&](RankEnv& env) {
    RankRun run = run_layer_rank(env, spec);
    std::lock_guard<std::mutex> lock(mutex);
    runs[static_cast<std::size_t>(env.rank)] = std::move(run);
  });
  return runs;
}

inline void expect_comm_matches_model(const std::vector<CommLine>& measured,
                                      const std::vector<CommLine>& model, const std::string& what) {
  std::vector<CommLine> modelled;
  for (const CommLine& m : measured) {
    if (m.purpose == CommPurpose::activation || m.purpose == CommPurpose::param_grad) {
      modelled.push_back(m);
    }
  }
  ASSERT_EQ(modelled.size(), model.size()) << what;
  for (const CommLine& e : model) {
    bool found = false;
    for (const CommLine& m : modelled) {
      if (m.layer == e.layer && m.kind == e.kind && m.phase == e.phase && m.purpose == e.purpose) {
        found = true;
        EXPECT_EQ(m.count, e.count) << what << " " << collective_name(e.kind);
        EXPECT_EQ(m.bytes_sent, e.bytes_sent) << what << " " << collective_name(e.kind);
      }
    }
    EXPECT_TRUE(found) << what << ": no " << collective_name(e.kind) << " " << phase_name(e.phase)
                       << " in layer " << e.layer;
  }
}

// Every step checked in lockstep and passed: the output, the loss, input.grad, each declared
// parameter's gradient and the parameter after the update; on every rank the saved activations
// equal to the model term by term and the collectives to the communication model.
inline void expect_checked_and_modelled(const LayerRunSpec& spec, const std::vector<RankRun>& runs,
                                        const std::string& what) {
  const CheckResult& check = runs[0].check;
  ASSERT_TRUE(check.ran) << what;
  EXPECT_EQ(check.steps_checked, spec.steps) << what;
  EXPECT_EQ(check.step, spec.steps - 1) << what;
  const std::size_t layers = static_cast<std::size_t>(spec.layer.layers);
  EXPECT_EQ(check.tensors.size(), 3u + 2u * layers * decl::parameters(spec.layer).size()) << what;
  for (const TensorCheck& t : check.tensors) {
    EXPECT_TRUE(t.passed) << what << ": " << t.name << " " << t.failed << " of " << t.elements
                          << " elements out of tolerance, max_rel_err " << t.max_rel_err;
  }
  // A 2-byte run's step 0 against the f32 single-device layer too, every tensor.
  const CheckResult& wide = runs[0].f32_check;
  EXPECT_EQ(wide.ran, is_half(spec.layer.dtype)) << what;
  if (wide.ran) {
    EXPECT_EQ(wide.step, 0) << what;
    EXPECT_EQ(wide.tensors.size(), check.tensors.size()) << what;
    for (const TensorCheck& t : wide.tensors) {
      EXPECT_TRUE(t.passed) << what << " against f32: " << t.name << " " << t.failed << " of "
                            << t.elements << " elements out of tolerance";
    }
  }
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.memory.saved_activation_bytes, run.memory.formula_bytes) << what;
    EXPECT_EQ(run.memory.extras_bytes, run.memory.formula_extras_bytes) << what;
    ASSERT_EQ(run.memory.layers.size(), layers) << what;
    for (const LayerMemory& layer : run.memory.layers) {
      EXPECT_EQ(layer.saved_activation_bytes, layer.formula_bytes)
          << what << " layer " << layer.layer;
    }
    EXPECT_EQ(run.memory.terms.size(), layers * activation_model(spec.layer, false).terms.size())
        << what;
    for (const MeasuredTerm& term : run.memory.terms) {
      EXPECT_EQ(term.measured_bytes, term.model_bytes)
          << what << ": layer " << term.layer << " " << term.what;
    }
    expect_comm_matches_model(run.comm, comm_model(spec.layer, false), what);
  }
}

}  // namespace shardscope
