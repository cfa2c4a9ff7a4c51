// Lab 6, your file: the Ulysses all-to-alls as autograd ops and the communication prediction
// (see lab.h for the contracts and README.md for the layouts and formulas). Replace each
// `not_implemented(...)` with your code.
#include "labs/06-ulysses/lab.h"

#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/common/lab_support.h"

namespace shardscope::labs {

Tensor seq_to_heads(ProcessGroup& /*group*/, const Tensor& /*x*/) {
  // TODO(lab 6, task 1):
  //  - group.all_to_all(send) cuts dim 0 of `send` into t chunks, sends chunk j to rank j and
  //    returns the chunks it receives stacked along dim 0 in rank order (chunk i from rank i).
  //  - So build `send` with the heads meant for rank j as chunk j: view x [s/t, b, a, d] as
  //    [s/t, b, t, a/t, d] (reshape shares storage) and move the t dim to the front (permute
  //    copies): [t, s/t, b, a/t, d].
  //  - What comes back is [t, s/t, b, a/t, d] with chunk i = rank i's positions: which reshape
  //    gives [s, b, a/t, d] with the positions in global order?
  //  - Write the values in a helper, then wrap it: apply_function1("lab_seq_to_heads", {x},
  //    forward, backward). Inside forward and backward, ops record nothing. The backward gets
  //    dy [s, b, a/t, d] and returns {dx [s/t, b, a, d]}: which all-to-all is that? Capture the
  //    group by pointer or reference (it outlives the backward).
  not_implemented("seq_to_heads");
}

Tensor heads_to_seq(ProcessGroup& /*group*/, const Tensor& /*x*/) {
  // TODO(lab 6, task 2): the inverse. x [s, b, a/t, d] viewed as [t, s/t, b, a/t, d] already has
  // the positions for rank j as chunk j. After the all-to-all, chunk i holds rank i's heads:
  // permute [t, s/t, b, a/t, d] -> [s/t, b, t, a/t, d] and reshape to [s/t, b, a, d]. Backward:
  // seq_to_heads's values. Op name "lab_heads_to_seq".
  not_implemented("heads_to_seq");
}

double ulysses_bytes_per_rank(const LayerShape& /*shape*/, Pass /*pass*/) {
  // TODO(lab 6, task 3): how many all-to-alls per pass, each of how many bytes of the rank's own
  // buffer, and which fraction of that buffer leaves the rank? (README: "What a rank sends".)
  not_implemented("ulysses_bytes_per_rank");
}

double tp_sp_bytes_per_rank(const LayerShape& /*shape*/, Pass /*pass*/) {
  // TODO(lab 6, task 4): the all-gathers and reduce-scatters of the [s, b, h] activation in the
  // forward, and in the backward (counting the re-gathers of the saved input shards).
  not_implemented("tp_sp_bytes_per_rank");
}

}  // namespace shardscope::labs
