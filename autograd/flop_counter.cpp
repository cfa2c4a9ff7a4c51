// GemmFlops: the matrix products' FLOPs from op events.
#include "autograd/flop_counter.h"

namespace shardscope {

void GemmFlops::on_op_begin(const OpEvent& e) {
  if (e.site.phase == Phase::backward) ++backward_depth_;
}

void GemmFlops::on_op_end(const OpEvent& e) {
  if (e.site.phase == Phase::backward) {
    --backward_depth_;
    return;
  }
  if ((e.site.op != "matmul" && e.site.op != "gather_matmul") || !e.inputs || !e.outputs ||
      e.inputs->empty()) {
    return;
  }
  const Shape& a = e.inputs->front();
  if (a.rank() == 0) return;
  double elements = 0;
  for (const Shape& out : *e.outputs) elements += static_cast<double>(out.numel());
  const double flops = 2.0 * static_cast<double>(a[a.rank() - 1]) * elements;
  (backward_depth_ > 0 ? recomputed_ : forward_) += flops;
}

}  // namespace shardscope
