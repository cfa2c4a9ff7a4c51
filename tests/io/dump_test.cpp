// Dump folders: DumpWriter on one and two thread ranks (full tensors, per-rank shards, Replicate
// and Partial), load_dump, manifest validation errors, and compare_dumps with its table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/check.h"
#include "io/dump.h"
#include "io/npy.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/collective_ops.h"
#include "tests/temp_path.h"

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<double> ramp(std::int64_t n, double scale) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * (static_cast<double>(i) - 2.5);
  return v;
}

// The full tensors every sample dump holds; each rank passes its part to the DumpWriter.
struct Sample {
  static Tensor act(Context& c) { return Tensor::from_vector(c, {4, 3}, ramp(12, 0.5)); }
  static Tensor weight(Context& c) { return Tensor::from_vector(c, {2, 4}, ramp(8, 0.25)); }
  static Tensor bias(Context& c) { return Tensor::from_vector(c, {3}, {1, 2, 3}, DType::f64); }
  static Tensor mask(Context& c) { return Tensor::from_vector(c, {4}, {1, 0, 1, 1}, DType::u8); }
};

class DumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = shardscope::testing_files::temp_path("dump_" + std::string(info->name()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string dir(const std::string& name) const { return (root_ / name).string(); }

  // A dump of the sample tensors from `world` thread ranks.
  std::string write_sample(const std::string& name, int world) {
    const std::string out = dir(name);
    LayerConfig config;
    config.mode = world == 1 ? ParallelMode::single : ParallelMode::tp;
    config.degree = world;
    run_spmd(world, SpmdOptions{}, [&](RankEnv& env) {
      Context& c = env.ctx;
      DumpWriter writer(out, env.group, manifest_header(config));
      const int r = env.rank, t = env.world;
      writer.add("act", slice_of_full(Sample::act(c), Placement::shard(0), r, t),
                 Placement::shard(0));
      writer.add("weight", slice_of_full(Sample::weight(c), Placement::shard(1), r, t),
                 Placement::shard(1));
      writer.add("bias", Sample::bias(c), Placement::replicate());
      writer.add("mask", slice_of_full(Sample::mask(c), Placement::shard(0), r, t),
                 Placement::shard(0));
      // Partial: rank r holds (r + 1) * v; the full tensor is the sum.
      writer.add("partial", Tensor::from_vector(c, {2}, {1.0 * (r + 1), -2.0 * (r + 1)}),
                 Placement::partial());
      writer.finish();
    });
    return out;
  }

  static json read_json(const std::string& file) {
    std::ifstream in(file);
    return json::parse(in);
  }
  static void write_json(const std::string& file, const json& j) {
    std::ofstream(file) << j.dump(2);
  }
  // Drops every entry of tensor `name` from `dump`'s manifest; returns the manifest left.
  static json drop_from_manifest(const std::string& dump, const std::string& name) {
    const std::string file = dump + "/manifest.json";
    json j = read_json(file);
    auto& tensors = j["tensors"];
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const json& t) { return t["name"] == name; }),
                  tensors.end());
    write_json(file, j);
    return j;
  }
  // The ManifestError message of reading `dump` after `edit` changed its manifest.
  static std::string manifest_error(const std::string& dump,
                                    const std::function<void(json&)>& edit) {
    const std::string file = (fs::path(dump) / kManifestFile).string();
    const json original = read_json(file);
    json changed = original;
    edit(changed);
    write_json(file, changed);
    std::string message;
    try {
      read_manifest(dump);
    } catch (const ManifestError& e) {
      message = e.what();
    }
    write_json(file, original);
    return message;
  }

  Context ctx_;
  fs::path root_;
};

TEST_F(DumpTest, WritesFullTensorsAndEveryRanksShard) {
  const std::string d = write_sample("two", 2);
  const Manifest m = read_manifest(d);
  EXPECT_EQ(m.degree, 2);
  EXPECT_EQ(m.mode, "tp");
  EXPECT_EQ(m.config.at("hidden"), 32);

  ASSERT_NE(m.find("act"), nullptr);
  EXPECT_EQ(m.find("act")->file, "act.npy");
  EXPECT_EQ(m.find("act")->shape, (Shape{4, 3}));
  EXPECT_EQ(m.find("act")->placement, Placement::shard(0));
  ASSERT_NE(m.find("act", 1), nullptr);
  EXPECT_EQ(m.find("act", 1)->file, "act.rank1.npy");
  EXPECT_EQ(m.find("act", 1)->shape, (Shape{2, 3}));
  EXPECT_EQ(read_npy(d + "/act.npy", ctx_).to_vector(), Sample::act(ctx_).to_vector());
  EXPECT_EQ(read_npy(d + "/act.rank1.npy", ctx_).to_vector(),
            slice_of_full(Sample::act(ctx_), Placement::shard(0), 1, 2).to_vector());
  EXPECT_EQ(read_npy(d + "/weight.rank1.npy", ctx_).to_vector(),
            slice_of_full(Sample::weight(ctx_), Placement::shard(1), 1, 2).to_vector());
  EXPECT_EQ(m.find("weight", 0)->shape, (Shape{2, 2}));

  EXPECT_NE(m.find("bias"), nullptr);
  EXPECT_EQ(m.find("bias", 0), nullptr) << "a Replicate tensor has only its full file";
  EXPECT_FALSE(fs::exists(d + "/bias.rank0.npy"));
  EXPECT_EQ(m.find("bias")->dtype, DType::f64);
  EXPECT_EQ(read_npy(d + "/mask.npy", ctx_).dtype(), DType::u8);

  EXPECT_EQ(read_npy(d + "/partial.npy", ctx_).to_vector(), (std::vector<double>{3, -6}));
  EXPECT_EQ(read_npy(d + "/partial.rank1.npy", ctx_).to_vector(), (std::vector<double>{2, -4}));

  const json j = read_json(d + "/manifest.json");
  EXPECT_EQ(j.at("format"), "shardscope-dump");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("dtype"), "f32");
  EXPECT_EQ(j.at("tensors").at(0).at("rank"), "full");
  EXPECT_EQ(j.at("tensors").at(1).at("rank"), 0);
  EXPECT_EQ(j.at("tensors").at(0).at("placement"), "Shard(0)");
  EXPECT_EQ(j.at("tensors").size(), 3u + 3u + 1u + 3u + 3u);
}

TEST_F(DumpTest, OneRankDumpsEqualTheTwoRankFullTensors) {
  const std::string one = write_sample("one", 1), two = write_sample("two", 2);
  const DumpComparison c = compare_dumps(one, two, 0, 0);
  ASSERT_EQ(c.rows.size(), 5u);
  for (const TensorComparison& row : c.rows) {  // a Partial's sum depends on the rank count
    EXPECT_EQ(row.passed, row.name != "partial") << row.name << ": " << row.note;
  }
}

TEST_F(DumpTest, RejectsBadNamesAndUndefinedTensors) {
  const std::string out = dir("bad");
  run_spmd(1, SpmdOptions{}, [&](RankEnv& env) {
    DumpWriter writer(out, env.group, manifest_header(LayerConfig{}));
    EXPECT_THROW(writer.add("a/b", Sample::bias(env.ctx), Placement::replicate()), ManifestError);
    EXPECT_THROW(writer.add("x.grad", Tensor(), Placement::replicate()), ArgumentError);
    writer.add("x", Sample::bias(env.ctx), Placement::replicate());
    EXPECT_THROW(writer.add("x", Sample::bias(env.ctx), Placement::replicate()), ArgumentError);
  });
}

TEST_F(DumpTest, LoadDumpReturnsTheFullTensors) {
  const std::string d = write_sample("two", 2);
  const LoadedDump dump = load_dump(d);
  EXPECT_EQ(dump.tensors.size(), 5u);
  EXPECT_EQ(dump.at("weight").to_vector(), Sample::weight(ctx_).to_vector());
  Context other(1);
  Tensor dst = Tensor::zeros(other, {4, 3});
  dump.copy_into("act", dst);
  EXPECT_EQ(dst.to_vector(), Sample::act(ctx_).to_vector());
  Tensor wrong = Tensor::zeros(other, {4, 3}, DType::f64);
  EXPECT_THAT([&] { dump.copy_into("act", wrong); },
              ::testing::ThrowsMessage<ManifestError>(AllOf(
                  HasSubstr("'act' is f32[4, 3] in the dump"), HasSubstr("needs f64[4, 3]"))));
  EXPECT_THAT([&] { dump.at("nope"); }, ::testing::ThrowsMessage<ManifestError>(
                                            AllOf(HasSubstr("no full tensor 'nope'"),
                                                  HasSubstr("act, bias, mask, partial, weight"))));
}

TEST_F(DumpTest, ManifestErrorsNameTheFieldAndTensor) {
  const std::string d = write_sample("two", 2);
  ASSERT_NO_THROW(read_manifest(d));
  auto error = [&](const std::function<void(json&)>& edit) { return manifest_error(d, edit); };
  EXPECT_THAT(error([](json& j) { j.erase("format"); }), HasSubstr("missing field 'format'"));
  EXPECT_THAT(error([](json& j) { j["format"] = "other"; }),
              HasSubstr("expected 'shardscope-dump'"));
  EXPECT_THAT(error([](json& j) { j["version"] = 2; }), HasSubstr("version 2 is not supported"));
  EXPECT_THAT(error([](json& j) { j["degree"] = "two"; }),
              HasSubstr("field 'degree' must be an integer, given \"two\""));
  EXPECT_THAT(error([](json& j) { j["tensors"] = json::object(); }),
              HasSubstr("field 'tensors' must be an array"));
  EXPECT_THAT(error([](json& j) { j["tensors"][3].erase("shape"); }),
              AllOf(HasSubstr("tensors[3] ('weight')"), HasSubstr("missing field 'shape'")));
  EXPECT_THAT(error([](json& j) {
                j["tensors"][3]["shape"] = {2, -4};
              }),
              HasSubstr("field 'shape' must be an array of non-negative integers"));
  EXPECT_THAT(error([](json& j) { j["tensors"][0]["dtype"] = "f8"; }),
              AllOf(HasSubstr("('act')"), HasSubstr("dtype 'f8' is not one of")));
  // A dtype the manifest knows but the file does not hold is named as a mismatch.
  EXPECT_THAT(error([](json& j) { j["tensors"][0]["dtype"] = "f16"; }),
              AllOf(HasSubstr("tensor 'act'"), HasSubstr("the manifest says f16[4, 3], act.npy "
                                                         "holds f32[4, 3]")));
  EXPECT_THAT(error([](json& j) { j["tensors"][0]["placement"] = "Shard(x)"; }),
              HasSubstr("placement 'Shard(x)' is not one of"));
  EXPECT_THAT(error([](json& j) { j["tensors"][1]["rank"] = 2; }),
              HasSubstr("field 'rank' must be \"full\" or an integer in [0, degree 2), given 2"));
  EXPECT_THAT(error([](json& j) { j["tensors"][1]["rank"] = "full"; }),
              HasSubstr("tensor 'act' appears twice"));
  EXPECT_THAT(error([](json& j) { j["tensors"][0]["file"] = "../act.npy"; }),
              HasSubstr("field 'file' must be a file name inside the dump folder"));
  EXPECT_THAT(error([](json& j) { j["tensors"][0]["file"] = "gone.npy"; }),
              AllOf(HasSubstr("tensor 'act'"), HasSubstr("gone.npy is missing")));
  EXPECT_THAT(error([](json& j) {
                j["tensors"][0]["shape"] = {3, 4};
              }),
              AllOf(HasSubstr("tensor 'act': the manifest says f32[3, 4]"),
                    HasSubstr("act.npy holds f32[4, 3]")));
  EXPECT_THAT(error([](json& j) { j["tensors"][1]["dtype"] = "f64"; }),
              HasSubstr("tensor 'act (rank 0)': the manifest says f64[2, 3]"));

  std::ofstream(d + "/manifest.json") << "{\"format\": ";
  EXPECT_THAT([&] { read_manifest(d); },
              ::testing::ThrowsMessage<ManifestError>(HasSubstr("not valid JSON")));
  EXPECT_THAT([&] { read_manifest(dir("nowhere")); },
              ::testing::ThrowsMessage<ManifestError>(HasSubstr("cannot open the manifest")));
}

// Found by fuzz/manifest_fuzz.cpp (seeds tests/fuzz_corpus/manifest/regression_*): a number out
// of range and a file name too long for the file system escaped read_manifest as nlohmann and
// std::filesystem exceptions, and 100k nested '[' overflowed the stack printing the value.
TEST_F(DumpTest, ManifestNumbersOutOfRangeLongFileNamesAndDeepNestingAreManifestErrors) {
  const std::string d = write_sample("two", 2);
  EXPECT_THAT(manifest_error(d, [](json& j) { j["tensors"][0]["file"] = std::string(300, 'x'); }),
              AllOf(HasSubstr("tensor 'act'"), HasSubstr("is missing (File name too long)")));
  std::ofstream(d + "/manifest.json") << R"({"format": "shardscope-dump", "degree": 1e400})";
  EXPECT_THAT([&] { read_manifest(d); },
              ::testing::ThrowsMessage<ManifestError>(
                  AllOf(HasSubstr("not valid JSON"), HasSubstr("number overflow"))));
  std::ofstream(d + "/manifest.json", std::ios::trunc)
      << R"({"format": )" << std::string(100000, '[') << std::string(100000, ']') << "}";
  EXPECT_THAT([&] { read_manifest(d); }, ::testing::ThrowsMessage<ManifestError>(
                                             HasSubstr("nested more than 64 levels deep")));
}

// The config's integers are taken as integers in range only: a float there (1e300 for the degree
// was undefined behaviour in the conversion, 2.9 truncated to 2) or an integer past int is named.
TEST_F(DumpTest, ConfigIntegersOutOfRangeOrFloatsAreNamed) {
  auto error = [](const std::function<void(json&)>& edit) {
    json j = layer_config_json(LayerConfig{});
    edit(j);
    std::string message;
    try {
      layer_config_from_json(j, "m.json");
    } catch (const ManifestError& e) {
      message = e.what();
    }
    return message;
  };
  EXPECT_EQ(error([](json&) {}), "");
  EXPECT_THAT(
      error([](json& j) { j["degree"] = 1e300; }),
      AllOf(HasSubstr("m.json: config"),
            HasSubstr("field 'degree' must be an integer in [1, 2147483647], given 1e+300")));
  EXPECT_THAT(error([](json& j) { j["degree"] = 2.9; }),
              HasSubstr("field 'degree' must be an integer in [1, 2147483647], given 2.9"));
  EXPECT_THAT(error([](json& j) { j["layer"] = 4294967296LL; }),
              HasSubstr("field 'layer' must be an integer in [0, 2147483647], given 4294967296"));
  EXPECT_THAT(error([](json& j) { j["seed"] = -1.5; }),
              HasSubstr("field 'seed' must be an integer >= 0, given -1.5"));
}

TEST_F(DumpTest, ABadNpyFileIsNamedWithItsTensor) {
  const std::string d = write_sample("two", 2);
  std::ofstream(d + "/bias.npy", std::ios::binary | std::ios::trunc) << "garbage";
  EXPECT_THAT([&] { read_manifest(d); },
              ::testing::ThrowsMessage<ManifestError>(
                  AllOf(HasSubstr("tensor 'bias'"), HasSubstr("wrong magic"))));
}

TEST_F(DumpTest, CompareDumpsPassesIdenticalDumps) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  const DumpComparison c = compare_dumps(a, b);
  EXPECT_TRUE(c.passed());
  ASSERT_EQ(c.rows.size(), 5u) << "full tensors only by default";
  for (const TensorComparison& row : c.rows) EXPECT_EQ(row.max_abs, 0) << row.name;
  EXPECT_EQ(compare_dumps(a, b, 0, 0, /*shards=*/true).rows.size(), 5u + 2u * 4u);
}

TEST_F(DumpTest, CompareDumpsNamesAPerturbedTensorAndItsWorstIndex) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  std::vector<double> act = Sample::act(ctx_).to_vector();
  act[7] += 0.01;  // [2, 1]
  act[4] += 1e-6;  // within atol + rtol * |b|
  write_npy(b + "/act.npy", Tensor::from_vector(ctx_, {4, 3}, act));
  const DumpComparison c = compare_dumps(a, b, 1e-4, 1e-6);
  EXPECT_FALSE(c.passed());
  const TensorComparison& row = c.rows[0];
  EXPECT_EQ(row.name, "act");
  EXPECT_FALSE(row.passed);
  EXPECT_EQ(row.failed_elements, 1);
  EXPECT_THAT(row.worst_index, ElementsAre(2, 1));
  EXPECT_NEAR(row.max_abs, 0.01, 1e-6);
  for (std::size_t i = 1; i < c.rows.size(); ++i) EXPECT_TRUE(c.rows[i].passed) << c.rows[i].name;

  std::ostringstream table;
  print_comparison(c, table);
  EXPECT_THAT(table.str(), AllOf(HasSubstr("act "), HasSubstr("[2, 1] ("), HasSubstr(" 1 of 12 "),
                                 HasSubstr("4 of 5 tensors passed: FAIL")));
}

TEST_F(DumpTest, CompareDumpsFailsAMissingTensorAndAShapeMismatch) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  const std::string file = b + "/manifest.json";
  json j = drop_from_manifest(b, "bias");
  write_npy(b + "/partial.npy", Tensor::zeros(ctx_, {1, 2}));
  for (auto& t : j["tensors"]) {
    if (t["name"] == "partial" && t["rank"] == "full") t["shape"] = {1, 2};
  }
  write_json(file, j);
  const DumpComparison c = compare_dumps(a, b);
  EXPECT_FALSE(c.passed());
  std::ostringstream table;
  print_comparison(c, table);
  EXPECT_THAT(table.str(), AllOf(HasSubstr("FAIL (missing in B)"),
                                 HasSubstr("FAIL (shape [2] in A, [1, 2] in B)"),
                                 HasSubstr("3 of 5 tensors passed: FAIL")));
  const DumpComparison reversed = compare_dumps(b, a);
  EXPECT_EQ(reversed.rows.back().name, "bias");
  EXPECT_EQ(reversed.rows.back().note, "missing in A");
}

TEST_F(DumpTest, CompareTensorsHandlesNanInfinityAndDtypes) {
  const Tensor a = Tensor::from_vector(ctx_, {4}, {1, INFINITY, NAN, 0}, DType::f64);
  const Tensor b = Tensor::from_vector(ctx_, {4}, {1, INFINITY, 1, 0}, DType::f32);
  const TensorComparison c = compare_tensors("x", a, b, {1e-3, 1e-3});
  EXPECT_FALSE(c.passed);
  EXPECT_EQ(c.failed_elements, 1);
  EXPECT_THAT(c.worst_index, ElementsAre(2));
  EXPECT_THAT(c.note, HasSubstr("dtype f64 in A, f32 in B"));
  const Tensor inf = Tensor::from_vector(ctx_, {1}, {INFINITY}),
               one = Tensor::from_vector(ctx_, {1}, {1});
  EXPECT_FALSE(compare_tensors("y", one, inf, {1, 1}).passed) << "1 is not close to inf";
  EXPECT_TRUE(compare_tensors("z", one, one, {0, 0}).passed);
}

// A partial dump (here: B without bias) is checked with `only`; `ignore` leaves tensors out; each
// entry is a name or a shell pattern, and one that matches nothing is an error naming it.
TEST_F(DumpTest, CompareDumpsOnlyAndIgnoreSelectTensorsByNameOrPattern) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  drop_from_manifest(b, "bias");
  EXPECT_FALSE(compare_dumps(a, b).passed()) << "bias is missing in B";
  CompareOptions only;
  only.only = {"act", "w*"};
  const DumpComparison c = compare_dumps(a, b, only);
  EXPECT_TRUE(c.passed());
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[0].name, "act");
  EXPECT_EQ(c.rows[1].name, "weight");
  EXPECT_EQ(c.left_out, 3);
  std::ostringstream table;
  print_comparison(c, table);
  EXPECT_THAT(table.str(), HasSubstr("2 of 2 tensors passed (3 left out as asked)"));
  CompareOptions ignore;
  ignore.ignore = {"bias"};
  EXPECT_TRUE(compare_dumps(a, b, ignore).passed());
  EXPECT_EQ(compare_dumps(a, b, ignore).rows.size(), 4u);
  ignore.shards = true;
  EXPECT_EQ(compare_dumps(a, b, ignore).rows.size(), 4u + 2u * 4u) << "shards of the rest too";
  CompareOptions misspelt;
  misspelt.only = {"act", "wieght"};
  EXPECT_THAT([&] { compare_dumps(a, b, misspelt); },
              ::testing::ThrowsMessage<UnmatchedNameError>(
                  HasSubstr("only entry 'wieght' matches no tensor of either dump")));
  try {
    compare_dumps(a, b, misspelt);
  } catch (const UnmatchedNameError& e) {
    EXPECT_EQ(e.field, "only");
    EXPECT_EQ(e.pattern, "wieght");
  }
}

TEST_F(DumpTest, CompareDumpsOfTwoDegreesShardByShardIsOneError) {
  const std::string one = write_sample("one", 1), two = write_sample("two", 2);
  EXPECT_EQ(compare_dumps(one, two).rows.size(), 5u) << "the full tensors pair up at any degree";
  EXPECT_THAT([&] { compare_dumps(one, two, 0, 0, /*shards=*/true); },
              ::testing::ThrowsMessage<DegreeMismatchError>(
                  AllOf(HasSubstr("by 1 rank(s) in mode single"), HasSubstr("by 2 in mode tp"),
                        HasSubstr("their shards do not pair up"))));
}

// Two dumps of one degree from modes that shard a tensor differently (tp and tp-sp: the input
// replicated or split by sequence) have no shards to pair up either.
TEST_F(DumpTest, CompareDumpsShardedAnotherWayShardByShardIsOneError) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  json j = read_json(b + "/manifest.json");
  j["mode"] = "tp-sp";
  for (json& t : j["tensors"]) {
    if (t["name"] == "bias") t["placement"] = "Shard(0)";
  }
  write_json(b + "/manifest.json", j);
  EXPECT_TRUE(compare_dumps(a, b).passed()) << "the full tensors still pair up";
  EXPECT_THAT([&] { compare_dumps(a, b, 0, 0, /*shards=*/true); },
              ::testing::ThrowsMessage<DegreeMismatchError>(
                  AllOf(HasSubstr("mode tp) holds tensor 'bias' as Replicate"),
                        HasSubstr("mode tp-sp) as Shard(0): their shards do not pair up"))));
}

// A failed tensor is diagnosed: here B's weight is half of A's in a dump of degree 2, so A's is a
// factor of t too large; a flipped bias is a sign flip.
TEST_F(DumpTest, CompareDumpsSaysWhatAFailedTensorsDifferenceLooksLike) {
  const std::string a = write_sample("a", 2), b = write_sample("b", 2);
  std::vector<double> w = Sample::weight(ctx_).to_vector(), bias = Sample::bias(ctx_).to_vector();
  for (double& x : w) x /= 2;
  for (double& x : bias) x = -x;
  write_npy(b + "/weight.npy", Tensor::from_vector(ctx_, Sample::weight(ctx_).shape(), w,
                                                   Sample::weight(ctx_).dtype()));
  write_npy(b + "/bias.npy", Tensor::from_vector(ctx_, Sample::bias(ctx_).shape(), bias,
                                                 Sample::bias(ctx_).dtype()));
  const DumpComparison c = compare_dumps(a, b);
  std::ostringstream table;
  print_comparison(c, table);
  EXPECT_THAT(table.str(),
              AllOf(HasSubstr("  weight: a constant ratio: a = 2 x b: a factor of t = 2"),
                    HasSubstr("  bias: the sign is flipped: a = -b")));
}

TEST(LayerConfigJson, RandomNormsRoundTrips) {
  LayerConfig c;
  c.random_norms = true;
  EXPECT_TRUE(layer_config_from_json(layer_config_json(c), "m.json").random_norms);
  c.random_norms = false;
  EXPECT_FALSE(layer_config_from_json(layer_config_json(c), "m.json").random_norms);
}

TEST_F(DumpTest, ADumpWithNoFullTensorsDoesNotPass) {
  fs::create_directories(dir("empty"));
  write_manifest(dir("empty"), Manifest{});
  const DumpComparison c = compare_dumps(dir("empty"), dir("empty"));
  EXPECT_FALSE(c.passed());
  std::ostringstream table;
  print_comparison(c, table);
  EXPECT_THAT(table.str(), HasSubstr("no tensors to compare"));
}

}  // namespace
}  // namespace shardscope
