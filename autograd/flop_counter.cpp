// GemmFlops: the matrix products' FLOPs from GEMM events.
#include "autograd/flop_counter.h"

#include "autograd/gemm.h"

namespace shardscope {

void GemmFlops::on_op_begin(const OpEvent& e) {
  if (e.site.phase == Phase::backward) ++backward_depth_;
}

void GemmFlops::on_op_end(const OpEvent& e) {
  if (e.site.phase == Phase::backward) --backward_depth_;
}

void GemmFlops::on_gemm(const GemmEvent& e) {
  if (e.site.phase == Phase::backward || !e.desc) return;
  const GemmDesc& d = *e.desc;
  const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) *
                       static_cast<double>(d.k) * static_cast<double>(d.batch);
  (backward_depth_ > 0 ? recomputed_ : forward_) += flops;
}

}  // namespace shardscope
