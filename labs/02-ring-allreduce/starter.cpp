// Lab 2, your file: the ring reduce-scatter, all-gather and all-reduce (see lab.h for the
// contracts and README.md for the algorithm). Replace each `not_implemented(...)` with your code.
#include "labs/02-ring-allreduce/lab.h"

#include "labs/common/lab_support.h"

namespace shardscope::labs {

std::vector<double> ring_reduce_scatter(Communicator& /*comm*/,
                                        const std::vector<double>& /*input*/) {
  // TODO(lab 2, task 1):
  //  - t = comm.size(), r = comm.rank(), n = input.size() / t; right = (r + 1) % t,
  //    left = (r - 1 + t) % t.
  //  - Keep a copy of `input`: it holds your running sums.
  //  - For each of the t - 1 steps: send one chunk of the running sums to `right`
  //    (n * sizeof(double) bytes from &sums[c * n]), receive n elements from `left` into a
  //    temporary and add them into the chunk they belong to. Which chunk at which step: rank r
  //    must end with chunk r complete, so work backwards from the last step (README, figure 1).
  //    Write "x mod t" as ((x % t) + t) % t: in C++, -1 % 4 is -1.
  //  - Return chunk r (n elements).
  not_implemented("ring_reduce_scatter");
}

std::vector<double> ring_all_gather(Communicator& /*comm*/, const std::vector<double>& /*chunk*/) {
  // TODO(lab 2, task 2):
  //  - n = chunk.size(); the output has t * n elements; put your own chunk at [r * n, (r + 1) * n).
  //  - For each of the t - 1 steps: send to `right` the chunk you got in the step before (your
  //    own at the first step), receive one from `left` and copy it into its slot. Which rank's
  //    chunk arrives at step k? (README, figure 1.) Copy, do not add: every chunk is complete.
  not_implemented("ring_all_gather");
}

std::vector<double> ring_all_reduce(Communicator& /*comm*/, const std::vector<double>& /*input*/) {
  // TODO(lab 2, task 3): the reduce-scatter, then the all-gather of its result (two lines).
  not_implemented("ring_all_reduce");
}

}  // namespace shardscope::labs
