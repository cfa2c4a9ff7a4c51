// The layer's declaration (parallel/layers/layer_decl.h) and the parts derived from it agree: the
// single-device layer's parameters, the parallel layer's placements and gradient reductions, the
// activation model's terms, and the scopes every op of a run executes in, in every mode.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>

#include "autograd/context.h"
#include "autograd/observer.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/layer_decl.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/layers/transformer_layer.h"
#include "parallel/models/memory_model.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

LayerConfig small(ParallelMode mode, int degree) {
  LayerConfig c;
  c.mode = mode;
  c.degree = degree;
  c.seq = 8;
  c.batch = 2;
  c.hidden = 16;
  c.heads = 4;
  c.dropout = 0.1;
  return c;
}

// The layers the declaration makes: GPT's, Llama's norm, MLP and no biases, and a SwiGLU whose f
// is no multiple of h.
std::vector<LayerConfig> variants(ParallelMode mode, int degree) {
  std::vector<LayerConfig> out(4, small(mode, degree));
  out[1].norm = Norm::rmsnorm;
  out[1].mlp = Mlp::swiglu;
  out[1].bias = false;
  out[1].rope = true;
  out[2].mlp = Mlp::swiglu;
  out[2].ffn = 20;
  out[3].norm = Norm::rmsnorm;
  out[3].ffn = 40;
  return out;
}
std::string variant_name(const LayerConfig& c) {
  return std::string(mode_name(c.mode)) + " " + norm_name(c.norm) + " " + mlp_name(c.mlp) +
         " f=" + std::to_string(c.ffn_width()) + (c.bias ? "" : " no bias") +
         (c.rope ? " rope" : "");
}

std::set<std::string> declared_scopes(const LayerConfig& c) {
  std::set<std::string> out;
  for (const decl::ModuleDecl& m : decl::modules(c)) out.insert(m.scope);
  return out;
}

// Each of the layer's weights is a declared parameter of its shape and initialisation, in order.
void expect_declared_parameters(const LayerConfig& c, const LayerWeights& w) {
  const std::vector<decl::Param> declared = decl::parameters(c);
  const auto named = w.named();
  ASSERT_EQ(named.size(), declared.size());
  for (std::size_t i = 0; i < declared.size(); ++i) {
    EXPECT_EQ(named[i].first, declared[i].name);
    EXPECT_EQ(named[i].second.shape(), declared[i].shape) << declared[i].name;
    EXPECT_EQ(named[i].second.name(), declared[i].name);
    const double first = named[i].second.to_vector().front();
    switch (declared[i].decl->init) {
      case decl::Init::one:
        EXPECT_EQ(first, 1.0) << declared[i].name;
        break;
      case decl::Init::zero:
        EXPECT_EQ(first, 0.0) << declared[i].name;
        break;
      case decl::Init::normal:
        EXPECT_NE(first, 0.0) << declared[i].name;
        break;
    }
  }
}

TEST(LayerDecl, TheSingleDeviceLayersParametersAreTheDeclaredOnes) {
  for (const LayerConfig& c : variants(ParallelMode::single, 1)) {
    SCOPED_TRACE(variant_name(c));
    Context ctx;
    expect_declared_parameters(c, make_layer_weights(ctx, c));
  }
  const LayerConfig c = small(ParallelMode::single, 1);
  // Widths by name: the fused QKV is [h, 3h], fc2 [4h, h].
  EXPECT_EQ(decl::parameter(c, "attn.qkv.weight").shape, (Shape{16, 48}));
  EXPECT_EQ(decl::parameter(c, "mlp.fc2.weight").shape, (Shape{64, 16}));
  EXPECT_EQ(decl::parameter(c, "mlp.fc2.weight").dims, (std::vector<std::string>{"4h", "h"}));
  // Llama's: RMSNorm keeps a weight only, no linear has a bias, SwiGLU's fc1 makes 2f columns.
  const LayerConfig llama = variants(ParallelMode::single, 1)[1];
  EXPECT_EQ(decl::parameters(llama).size(), 6u);
  EXPECT_EQ(decl::parameter(llama, "mlp.fc1.weight").shape, (Shape{16, 128}));
  EXPECT_EQ(decl::parameter(llama, "mlp.fc1.weight").dims, (std::vector<std::string>{"h", "8h"}));
  const LayerConfig odd_f = variants(ParallelMode::single, 1)[2];
  EXPECT_EQ(decl::parameter(odd_f, "mlp.fc1.weight").dims, (std::vector<std::string>{"h", "2f"}));
  EXPECT_EQ(decl::parameter(odd_f, "mlp.fc2.weight").shape, (Shape{20, 16}));
  // A parameter keeps its values whichever others the configuration declares.
  Context ctx;
  const LayerWeights gpt = make_layer_weights(ctx, small(ParallelMode::single, 1));
  const LayerWeights no_bias = make_layer_weights(ctx, llama);
  EXPECT_EQ(gpt.qkv_weight.to_vector(), no_bias.qkv_weight.to_vector());
  EXPECT_FALSE(no_bias.qkv_bias.defined());
  EXPECT_FALSE(no_bias.ln1_bias.defined());
  // A weight the configuration does not declare is refused, naming the layer it was given for.
  LayerConfig grouped = small(ParallelMode::single, 1);
  grouped.kv_heads = 1;
  LayerWeights extra = make_layer_weights(ctx, grouped);
  extra.qkv_weight = gpt.qkv_weight;
  try {
    TransformerLayer(grouped, extra);
    FAIL() << "an undeclared weight was taken";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("attn.qkv.weight is given, but a layer of s=8 b=2 h=16 "
                                         "a=4 g=1 has no such parameter"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(&extra.at("attn.qkv.kv_weight"), &extra.kv_weight);
  EXPECT_THROW(no_bias.at("attn.qkv.bias"), ArgumentError);
}

// Megatron's split: column-parallel weights Shard(1) and biases Shard(0), row-parallel weights
// Shard(0) with a replicated bias, LayerNorms replicated; Ulysses replicates everything. The
// parallel layer places its parameters as declared and reduces exactly the partial gradients.
TEST(LayerDecl, TheParallelLayerPlacesAndReducesAsDeclared) {
  const decl::Modules& m = decl::layer(LayerConfig());
  const LayerConfig tp = small(ParallelMode::tp, 2), tp_sp = small(ParallelMode::tp_sp, 2),
                    ulysses = small(ParallelMode::ulysses, 2);
  EXPECT_EQ(decl::placement(m.qkv.params[0], tp), Placement::shard(1));
  EXPECT_EQ(decl::placement(m.qkv.params[1], tp), Placement::shard(0));
  EXPECT_EQ(decl::placement(m.fc2.params[0], tp_sp), Placement::shard(0));
  EXPECT_EQ(decl::placement(m.fc2.params[1], tp_sp), Placement::replicate());
  EXPECT_EQ(decl::placement(m.ln1.params[0], tp), Placement::replicate());
  EXPECT_EQ(decl::placement(m.qkv.params[0], ulysses), Placement::replicate());
  EXPECT_FALSE(decl::partial_grad(m.ln1.params[0], tp));
  EXPECT_TRUE(decl::partial_grad(m.ln1.params[0], tp_sp));
  EXPECT_FALSE(decl::partial_grad(m.qkv.params[0], tp_sp));
  EXPECT_TRUE(decl::partial_grad(m.qkv.params[0], ulysses));
  // Grouped-query attention: the key/value weight splits by whole heads where t <= g, and is
  // replicated with partial gradients where t > g.
  LayerConfig gqa = small(ParallelMode::tp, 2);
  gqa.kv_heads = 2;
  const decl::ModuleDecl& qkv = decl::layer(gqa).qkv;
  EXPECT_EQ(decl::weights(qkv),
            (std::vector<std::string>{"attn.qkv.q_weight", "attn.qkv.kv_weight"}));
  const decl::ParamDecl& kv = qkv.params[2];
  EXPECT_EQ(decl::placement(kv, gqa), Placement::shard(1));
  EXPECT_FALSE(decl::partial_grad(kv, gqa));
  gqa.degree = 4;
  EXPECT_EQ(decl::placement(kv, gqa), Placement::replicate());
  EXPECT_TRUE(decl::partial_grad(kv, gqa));
  EXPECT_EQ(decl::placement(qkv.params[0], gqa), Placement::shard(1));

  for (const ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    for (const LayerConfig& c : variants(mode, 2)) {
      SCOPED_TRACE(variant_name(c));
      run_spmd(2, SpmdOptions{}, [&](RankEnv& env) {
        const LayerWeights full = make_layer_weights(env.ctx, c);
        const ParallelTransformerLayer layer(c, env.group, full);
        ASSERT_EQ(layer.parameters().size(), decl::parameters(c).size());
        for (const ShardedParameter& p : layer.parameters()) {
          const decl::Param d = decl::parameter(c, p.name);
          EXPECT_EQ(p.module, d.module) << p.name;
          EXPECT_EQ(p.placement, decl::placement(*d.decl, c)) << p.name;
          EXPECT_EQ(p.partial_grad, decl::partial_grad(*d.decl, c)) << p.name;
          EXPECT_EQ(p.global, d.shape) << p.name;
        }
      });
    }
  }
}

// Every term of the activation model is a declared module's, and every declared term of the
// configuration (dropout on or off) is in the model, once.
TEST(LayerDecl, TheActivationModelsTermsAreTheDeclaredOnes) {
  for (const double dropout : {0.0, 0.1}) {
    for (const ParallelMode mode :
         {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
      for (LayerConfig c : variants(mode, mode == ParallelMode::single ? 1 : 2)) {
        c.dropout = dropout;
        const ActivationModel model = activation_model(c, false);
        std::multiset<std::string> declared, modelled;
        for (const decl::ModuleDecl& m : decl::modules(c)) {
          for (const decl::SavedDecl& d : m.saved) {
            const bool applies = d.when == decl::SavedDecl::When::always ||
                                 (d.when == decl::SavedDecl::When::with_dropout) == (dropout > 0);
            if (applies) declared.insert(std::string(m.scope) + ": " + d.what);
          }
        }
        for (const ActivationTerm& t : model.terms) modelled.insert(t.scope + ": " + t.what);
        EXPECT_EQ(modelled, declared) << variant_name(c) << " dropout " << dropout;
      }
    }
  }
}

// Records the scope of every op a rank runs.
class ScopeRecorder final : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    scopes_.insert(std::string(e.site.scope));
  }
  std::set<std::string> scopes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return scopes_;
  }

 private:
  mutable std::mutex mutex_;
  std::set<std::string> scopes_;
};

// The code runs the declaration: every op of a training step, forward and backward, executes in
// a declared module's scope (or the run's loss and gradient reduction), and every declared
// module runs, in every mode.
TEST(LayerDecl, EveryOpOfARunIsInADeclaredScopeInEveryMode) {
  for (const ParallelMode mode :
       {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    for (const LayerConfig& c : variants(mode, mode == ParallelMode::single ? 1 : 2)) {
      SCOPED_TRACE(variant_name(c));
      std::set<std::string> allowed = declared_scopes(c);
      allowed.insert(decl::kLossScope);
      allowed.insert(decl::kGradReduceScope);
      LayerRunSpec spec;
      spec.layer = c;
      spec.steps = 1;
      spec.check = false;  // the reference layer's ops are not the run's
      ScopeRecorder recorder;
      run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
        ObserverGuard attach(env.ctx, recorder);
        run_layer_rank(env, spec);
      });
      const std::set<std::string> seen = recorder.scopes();
      for (const std::string& scope : seen) {
        if (scope.empty()) continue;  // the run's own ops outside the layer (data, the optimiser)
        EXPECT_TRUE(allowed.count(scope)) << "an op ran in scope \"" << scope
                                          << "\", which the layer's declaration does not have";
      }
      for (const std::string& scope : declared_scopes(c)) {
        EXPECT_TRUE(seen.count(scope)) << "the declared module " << scope << " never ran";
      }
    }
  }
}

TEST(LayerDecl, DropoutSitesAndLookupsNameWhatIsDeclared) {
  const LayerConfig gpt;
  const decl::Modules& m = decl::layer(gpt);
  EXPECT_EQ(m.attn_dropout.dropout_site, kAttentionProbs);
  EXPECT_EQ(m.out_dropout.dropout_site, kAttentionOutput);
  EXPECT_EQ(m.mlp_dropout.dropout_site, kMlpOutput);
  EXPECT_EQ(decl::weight(m.qkv), "attn.qkv.weight");
  try {
    decl::module(gpt, "attn.qvk");
    FAIL() << "an undeclared module was found";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("no module \"attn.qvk\" (declared: ln1, attn.qkv,"),
              std::string::npos)
        << e.what();
  }
  try {
    decl::bias(m.act);
    FAIL() << "gelu has no bias";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("module mlp.gelu has no parameter bias (declared: none)"),
              std::string::npos)
        << e.what();
  }
  try {
    decl::parameter(small(ParallelMode::single, 1), "attn.qkv.wieght");
    FAIL() << "an undeclared parameter was found";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("no parameter \"attn.qkv.wieght\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shardscope
