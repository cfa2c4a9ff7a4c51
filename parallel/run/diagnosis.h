// What a difference between two tensors looks like, for a check that failed: a constant ratio
// (named when it is the group size t or 1/t), a sign flip, zeros where values were expected, an
// offset repeated at every position (an extra bias), blocks permuted along a dim (which), one block
// wrong (one rank's slice: which), or none of these. A single value (a loss) is only compared. The
// element rule is the checks' own: a matches b when |a - b| <= atol + rtol |b|. Each shape is tried
// in that order and the first that explains every element is the diagnosis.
#pragma once

#include <string>
#include <vector>

#include "autograd/shape.h"

namespace shardscope {

struct Diagnosis {
  enum class Kind {
    none,
    ratio,
    sign_flip,
    zeros,
    offset,  // a = b + the same vector (over the last dim) at every position: an extra bias
    blocks_permuted,
    one_block_wrong,
    unstructured
  };
  Kind kind = Kind::none;        // none: a and b match
  double ratio = 0;              // ratio: a = ratio * b
  int dim = -1;                  // blocks_permuted, one_block_wrong: the dim cut into blocks
  int blocks = 0;                // how many blocks
  int block = -1;                // one_block_wrong: the block that differs
  std::vector<int> permutation;  // blocks_permuted: a's block i is b's block permutation[i]
  std::string text;              // one line for a person, e.g. "a = 4 x b: a factor of t = 4"
};

// `t` is the group size of the run (1 when unknown): it names a ratio of t or 1/t and is the first
// number of blocks tried along each dim (then 2 to 8). a and b hold shape's elements, row-major.
Diagnosis diagnose(const std::vector<double>& a, const std::vector<double>& b, const Shape& shape,
                   int t, double rtol, double atol);

}  // namespace shardscope
