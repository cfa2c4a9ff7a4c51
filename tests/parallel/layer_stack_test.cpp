// A stack of L layers (LayerConfig::layers): the single-device stack is its layers one after
// another, each with weights and dropout streams of its own; every parallel mode's stack matches
// it on every tensor of every layer, and each layer's saved activations and collectives match the
// layer's models under its own index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "autograd/errors.h"
#include "parallel/layers/layer_stack.h"
#include "tests/parallel/run_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

TEST(LayerStack, IsItsLayersOneAfterAnotherEachWithItsOwnWeights) {
  Context ctx(0);
  LayerConfig c = small_spec(ParallelMode::single, 1, 0.1, DType::f64).layer;
  c.layers = 2;
  const std::vector<LayerWeights> weights = make_stack_weights(ctx, c);
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_NE(weights[0].qkv_weight.to_vector(), weights[1].qkv_weight.to_vector());
  const TransformerStack stack(c, weights);
  const Tensor x = Tensor::randn(ctx, Shape{c.seq, c.batch, c.hidden}, 7, 1.0, c.dtype);
  const TransformerLayer first(stack_layer(c, 0), copy_weights(weights[0], ctx));
  const TransformerLayer second(stack_layer(c, 1), copy_weights(weights[1], ctx));
  EXPECT_EQ(stack.forward(x).to_vector(), second.forward(first.forward(x)).to_vector());
  // Layer 1's dropout masks are its own: the same weights under index 0 give another output.
  const TransformerLayer second_as_first(stack_layer(c, 0), copy_weights(weights[1], ctx));
  EXPECT_NE(second.forward(x).to_vector(), second_as_first.forward(x).to_vector());

  const auto named = stack.named();
  ASSERT_EQ(named.size(), 2 * decl::parameters(c).size());
  EXPECT_EQ(named.front().first, "layers.0.ln1.weight");
  EXPECT_EQ(named.back().first, "layers.1.mlp.fc2.bias");
  EXPECT_EQ(named.back().second.name(), "layers.1.mlp.fc2.bias");
  c.layers = 1;  // a stack of one keeps the layer's names
  EXPECT_EQ(stack_named(c, {weights[0]}).front().first, "ln1.weight");
}

TEST(LayerStack, BadStacksAreRefusedNamingTheField) {
  LayerConfig c;
  c.layers = 0;
  try {
    c.validate();
    FAIL() << "layers = 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layers must be in [1, 65536], given 0"));
    EXPECT_EQ(e.fields(), std::vector<std::string>{"layers"});
  }
  c.layers = 2;
  EXPECT_THROW(stack_layer(c, 2), ConfigError);
  Context ctx(0);
  try {
    TransformerStack stack(c, {make_layer_weights(ctx, stack_layer(c, 0))});
    FAIL() << "a stack of 2 built from one layer's weights";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a stack of layers 2 needs the weights of 2 layers, given 1"));
  }
}

using StackCase = std::tuple<ParallelMode, int>;

class LayerStacks : public ::testing::TestWithParam<StackCase> {};

// Three layers, two steps (the SGD updates of every layer checked too), GPT's layer with dropout
// and Llama's with GQA (t = 2 splits its g = 2 key/value heads, t = 4 replicates them).
TEST_P(LayerStacks, MatchTheSingleDeviceStackAndEachLayersModels) {
  const auto [mode, degree] = GetParam();
  LayerRunSpec spec = small_spec(mode, degree, 0.1, DType::f32);
  spec.layer.layers = 3;
  spec.steps = 2;
  for (const LayerConfig& layer : {spec.layer, llama_layer(spec.layer, 2)}) {
    LayerRunSpec s = spec;
    s.layer = layer;
    const std::string what =
        layer.shape_text() + ", " + mode_name(mode) + " t=" + std::to_string(degree);
    const std::vector<RankRun> runs = run_all_ranks(s);
    expect_checked_and_modelled(s, runs, what);
    // Every layer saves its share: a layer run under another's index would leave one empty.
    for (const LayerMemory& l : runs[0].memory.layers) {
      EXPECT_GT(l.saved_activation_bytes, 0) << what << " layer " << l.layer;
    }
    EXPECT_EQ(runs[0].memory.formula_bytes, 3 * runs[0].memory.layers[0].formula_bytes) << what;
  }
}

std::string stack_case_name(const ::testing::TestParamInfo<StackCase>& info) {
  return mode_test_name(std::get<0>(info.param)) + "_t" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllModes, LayerStacks,
                         ::testing::Combine(::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                                              ParallelMode::ulysses),
                                            ::testing::Values(2, 4)),
                         stack_case_name);

// A mistake the check catches is named in every layer it is made in.
TEST(LayerStack, APlantedBugFailsTheCheckInEveryLayerByName) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp, 2, 0.1, DType::f32);
  spec.layer.layers = 2;
  spec.layer.planted_bug = PlantedBug::sp_layernorm_grad_not_reduced;
  const CheckResult check = run_all_ranks(spec)[0].check;
  ASSERT_TRUE(check.ran);
  EXPECT_FALSE(check.passed);
  std::vector<std::string> failed;
  for (const TensorCheck& t : check.tensors) {
    if (!t.passed) failed.push_back(t.name);
  }
  EXPECT_THAT(failed,
              ::testing::IsSupersetOf({"layers.0.ln1.weight.grad", "layers.1.ln1.weight.grad",
                                       "layers.0.ln2.bias.grad", "layers.1.ln2.bias.grad"}));
}

}  // namespace
}  // namespace shardscope
