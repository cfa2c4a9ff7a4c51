// check_loaded_dump: a --load dump of another layer is refused naming the flags to type, a dump
// from another mode or degree is accepted, and a NaN or Inf in a tensor the run starts from is
// named with its first bad element.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "apps/load_check.h"
#include "parallel/layers/layer_stack.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunOptions small_run() {
  RunOptions o;
  o.spec.layer.seq = 4;
  o.spec.layer.batch = 1;
  o.spec.layer.hidden = 8;
  o.spec.layer.heads = 2;
  return o;
}

// What load_dump would give for a dump of `c`'s layer (its config recorded when `with_config`).
LoadedDump dump_of(const LayerConfig& c, bool with_config = true) {
  LoadedDump d;
  d.context = std::make_shared<Context>(0);
  d.dir = "some/dump";
  d.manifest.dtype = c.dtype;
  if (with_config) d.manifest.config = layer_config_json(c);
  for (const auto& [name, t] : stack_named(c, make_stack_weights(*d.context, c)))
    d.tensors.emplace(name, t);
  const Shape shape{c.seq, c.batch, c.hidden};
  d.tensors.emplace("input", Tensor::zeros(*d.context, shape, c.dtype));
  d.tensors.emplace("target", Tensor::zeros(*d.context, shape, c.dtype));
  return d;
}

std::string error_of(const LoadedDump& d, const RunOptions& o) {
  try {
    check_loaded_dump(d, o);
  } catch (const ArgumentError& e) {
    return std::string("ArgumentError: ") + e.what();
  } catch (const NumericalError& e) {
    return std::string("NumericalError: ") + e.what();
  }
  return "";
}

TEST(CheckLoadedDump, TheSameLayerFromAnyModeOrDegreeIsAccepted) {
  const RunOptions run = small_run();
  LayerConfig other = run.spec.layer;
  other.mode = ParallelMode::tp;
  other.degree = 2;
  EXPECT_EQ(error_of(dump_of(other), run), "");
}

TEST(CheckLoadedDump, AnotherShapeNamesOnlyTheFlagsThatDiffer) {
  const RunOptions run = small_run();
  LayerConfig other = run.spec.layer;
  other.seq = 6;
  other.hidden = 12;
  const std::string e = error_of(dump_of(other), run);
  EXPECT_THAT(e, HasSubstr("ArgumentError: --load some/dump is a dump of s=6 b=1 h=12 a=2 f32"));
  EXPECT_THAT(e, HasSubstr("the flags give s=4 b=1 h=8 a=2 f32: run with --seq 6 --hidden 12"));
  EXPECT_THAT(e, Not(HasSubstr("--batch")));
}

TEST(CheckLoadedDump, AnotherKindOfLayerNamesTheFlagsThatMakeIt) {
  const RunOptions run = small_run();
  LayerConfig llama = run.spec.layer;
  llama.norm = Norm::rmsnorm;
  llama.mlp = Mlp::swiglu;
  llama.bias = false;
  llama.ffn = 24;
  const std::string e = error_of(dump_of(llama), run);
  EXPECT_THAT(e, HasSubstr("is a dump of s=4 b=1 h=8 a=2 f=24, rmsnorm, swiglu, no biases f32"));
  EXPECT_THAT(e, HasSubstr("run with --ffn 24 --norm rmsnorm --mlp swiglu --no-bias"));
  LayerConfig rotated = run.spec.layer;
  rotated.rope = true;
  rotated.rope_base = 500000;
  EXPECT_THAT(error_of(dump_of(rotated), run), HasSubstr("run with --rope-base 500000 --rope"));
  RunOptions with_rope = run;
  with_rope.spec.layer.rope = true;
  EXPECT_THAT(error_of(dump_of(rotated), with_rope),
              ::testing::EndsWith("a=2, rope f32: run with --rope-base 500000"));
  EXPECT_THAT(error_of(dump_of(rotated), with_rope), HasSubstr("a dump of s=4 b=1 h=8 a=2, rope "
                                                               "(base 500000) f32"));
  RunOptions with_bias_off = run;
  with_bias_off.spec.layer.bias = false;
  EXPECT_THAT(error_of(dump_of(run.spec.layer), with_bias_off), HasSubstr("run without --no-bias"));
}

TEST(CheckLoadedDump, AStackOfAnotherDepthNamesTheLayersFlag) {
  RunOptions run = small_run();
  LayerConfig stack = run.spec.layer;
  stack.layers = 3;
  EXPECT_THAT(error_of(dump_of(stack), run),
              HasSubstr("is a dump of s=4 b=1 h=8 a=2 L=3 f32, the flags give s=4 b=1 h=8 a=2 "
                        "f32: run with --layers 3"));
  run.spec.layer.layers = 3;  // the same stack loads, every layer's tensors by their names
  EXPECT_EQ(error_of(dump_of(stack), run), "");
  // Without a configuration the names tell: layer 2's tensors are missing from a stack of two.
  stack.layers = 2;
  try {
    check_loaded_dump(dump_of(stack, false), run);
    FAIL() << "a stack of two loaded as three";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no full tensor 'layers.2.ln1.weight'"));
  }
}

TEST(CheckLoadedDump, AnotherDtypeOrHeadCountIsRefused) {
  const RunOptions run = small_run();
  LayerConfig other = run.spec.layer;
  other.dtype = DType::f64;
  EXPECT_THAT(error_of(dump_of(other), run), HasSubstr("run with --dtype f64"));
  other = run.spec.layer;
  other.heads = 4;
  EXPECT_THAT(error_of(dump_of(other), run), HasSubstr("run with --heads 4"));
}

TEST(CheckLoadedDump, ADumpWithoutAConfigIsComparedByItsShapes) {
  const RunOptions run = small_run();
  LayerConfig other = run.spec.layer;
  other.hidden = 12;
  EXPECT_EQ(error_of(dump_of(run.spec.layer, false), run), "");
  EXPECT_THAT(error_of(dump_of(other, false), run),
              HasSubstr("ArgumentError: --load some/dump: tensor 'ln1.weight' is f32[12] in the "
                        "dump, the flags (s=4 b=1 h=8 a=2 f32) need f32[8]"));
}

TEST(CheckLoadedDump, NaNOrInfNamesTheTensorAndItsFirstBadElement) {
  const RunOptions run = small_run();
  LoadedDump d = dump_of(run.spec.layer);
  Tensor& w = d.tensors.at("attn.qkv.weight");  // [8, 24]
  std::vector<double> v = w.to_vector();
  v[1 * 24 + 5] = std::numeric_limits<double>::infinity();
  v[3 * 24 + 1] = std::nan("");
  w = Tensor::from_vector(*d.context, w.shape(), v, w.dtype());
  EXPECT_THAT(error_of(d, run),
              HasSubstr("NumericalError: --load some/dump: tensor 'attn.qkv.weight' holds inf "
                        "at [1, 5]"));
  Tensor& x = d.tensors.at("target");
  x = Tensor::full(*d.context, x.shape(), std::nan(""), x.dtype());
  d.tensors.at("attn.qkv.weight") = Tensor::zeros(*d.context, w.shape(), w.dtype());
  EXPECT_THAT(error_of(d, run), HasSubstr("tensor 'target' holds nan at [0, 0, 0]"));
}

}  // namespace
}  // namespace shardscope
