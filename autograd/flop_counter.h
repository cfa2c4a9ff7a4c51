// GemmFlops: an observer that counts the floating-point operations of the matrix products a
// context's forward ops run, 2 m n k per entry of each GEMM call (the GEMM events: matmul, the
// sequence-parallel linear's gather_matmul, and the pieces of causal_matmul, which leaves out the
// blocks above the diagonal). Forward products are counted apart from those a recomputation runs
// again inside backward (forward ops that run while a backward node is open:
// autograd/checkpoint.h).
#pragma once

#include "autograd/observer.h"

namespace shardscope {

class GemmFlops : public Observer {
 public:
  double forward() const { return forward_; }
  double recomputed() const { return recomputed_; }

  void on_op_begin(const OpEvent& e) override;
  void on_op_end(const OpEvent& e) override;
  void on_gemm(const GemmEvent& e) override;

 private:
  int backward_depth_ = 0;  // backward nodes open (a recomputation runs inside one)
  double forward_ = 0, recomputed_ = 0;
};

}  // namespace shardscope
