// pair_by_name: the reference check pairs the parallel layer's tensors with the single-device
// layer's by name, not by their order; a name missing on either side or given twice is a
// StateError naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autograd/errors.h"
#include "parallel/run/tensor_compare.h"

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(PairByName, PairsByNameWhateverTheOrder) {
  EXPECT_THAT(pair_by_name({"output", "ln1.weight.grad", "input.grad"},
                           {"input.grad", "output", "ln1.weight.grad"}, "check"),
              ElementsAre(1u, 2u, 0u));
}

TEST(PairByName, AMissingOrRepeatedNameIsNamed) {
  EXPECT_THAT(
      [] {
        pair_by_name({"output", "attn.qkv.grad"}, {"output", "ln1.weight.grad"}, "check");
      },
      ThrowsMessage<StateError>(
          HasSubstr("check: 'attn.qkv.grad' has no tensor of that name to compare with "
                    "(there: output, ln1.weight.grad)")));
  EXPECT_THAT(
      [] {
        pair_by_name({"output"}, {"output", "input.grad"}, "check");
      },
      ThrowsMessage<StateError>(HasSubstr("'input.grad' has no tensor of that name to be "
                                          "compared with (compared: output)")));
  EXPECT_THAT(
      [] {
        pair_by_name({"output", "output"}, {"output", "input.grad"}, "check");
      },
      ThrowsMessage<StateError>(HasSubstr("'output' is named twice")));
}

}  // namespace
}  // namespace shardscope
