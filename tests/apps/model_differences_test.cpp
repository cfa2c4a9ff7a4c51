// model_differences: the measured saved-activation bytes and collectives against the models, the
// reason `shardscope run` exits 4. Equal measurements give nothing; each planted difference (a
// rank's total, a term, a collective's count or bytes, a line the model lacks or never seen) is
// named in one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "apps/run.h"

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

RankMemory memory_of(int rank, double saved, double formula) {
  RankMemory m;
  m.rank = rank;
  m.saved_activation_bytes = saved;
  m.formula_bytes = formula;
  return m;
}

CommLine line(CollectiveKind kind, Phase phase, CommPurpose purpose, int count, double bytes) {
  CommLine l;
  l.layer = 0;
  l.kind = kind;
  l.phase = phase;
  l.purpose = purpose;
  l.count = count;
  l.bytes_sent = bytes;
  return l;
}

TEST(ModelDifferences, EqualMeasurementsGiveNone) {
  std::vector<RankMemory> memory{memory_of(0, 100, 100), memory_of(1, 100, 100)};
  MeasuredTerm term;
  term.what = "QKV input";
  term.measured_bytes = term.model_bytes = 40;
  memory[0].terms.push_back(term);
  const std::vector<CommLine> comm{
      line(CollectiveKind::all_reduce, Phase::forward, CommPurpose::activation, 2, 512),
      line(CollectiveKind::all_reduce, Phase::backward, CommPurpose::loss, 1, 8)};
  const std::vector<CommLine> model{comm[0]};
  EXPECT_THAT(model_differences(memory, comm, model), IsEmpty());
}

TEST(ModelDifferences, EachPlantedDifferenceIsNamed) {
  std::vector<RankMemory> memory{memory_of(0, 100, 100), memory_of(1, 104, 100)};
  MeasuredTerm term;
  term.what = "softmax output";
  term.scope = "attn.core";
  term.op = "softmax";
  term.measured_bytes = 48;
  term.model_bytes = 40;
  memory[0].terms.push_back(term);
  memory[1].layers.push_back({0, 50, 50, 0, 0});
  memory[1].layers.push_back({1, 54, 50, 0, 0});
  const CommLine fwd =
      line(CollectiveKind::all_reduce, Phase::forward, CommPurpose::activation, 2, 512);
  const CommLine extra =
      line(CollectiveKind::all_gather, Phase::forward, CommPurpose::activation, 1, 64);
  const CommLine missing =
      line(CollectiveKind::all_reduce, Phase::backward, CommPurpose::param_grad, 1, 32);
  CommLine wrong = fwd;
  wrong.count = 3;
  wrong.bytes_sent = 768;
  EXPECT_THAT(
      model_differences(memory, {wrong, extra}, {fwd, missing}),
      ElementsAre(HasSubstr("rank 0: layer 0, term 'softmax output' (attn.core/softmax) 48 B, "
                            "its formula 40 B"),
                  HasSubstr("rank 1: saved activations 104 B, the formula 100 B"),
                  HasSubstr("rank 1: layer 1's saved activations 54 B, the formula 50 B"),
                  HasSubstr("layer 0, all_reduce forward activation 3 calls, 768 B; the model 2 "
                            "calls, 512 B"),
                  HasSubstr("layer 0, all_gather forward activation observed (1 calls, 64 B), not "
                            "in the model"),
                  HasSubstr("layer 0, all_reduce backward param_grad in the model, never "
                            "observed")));
}

}  // namespace
}  // namespace shardscope
