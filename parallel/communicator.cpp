// CollectiveCall formatting and checks, and the shared reduction loop.
#include "parallel/communicator.h"

#include <algorithm>

namespace shardscope {

std::string CallSite::str() const {
  std::string out = op.empty() ? std::string("(no op)") : op;
  if (!scope.empty()) out += " in " + scope;
  out += " (";
  if (layer >= 0) out += "layer " + std::to_string(layer) + ", ";
  return out + phase_name(phase) + ", step " + std::to_string(step) + ")";
}

bool CollectiveCall::same_as(const CollectiveCall& o) const {
  if (kind != o.kind || count != o.count || dtype != o.dtype) return false;
  if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter) {
    if (reduce != o.reduce) return false;
  }
  return kind != CollectiveKind::broadcast || root == o.root;
}

std::string CollectiveCall::str() const {
  std::string out = std::string(collective_name(kind)) + "(count " + std::to_string(count) + ", " +
                    dtype_name(dtype);
  if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter) {
    out += reduce == ReduceOp::sum ? ", sum" : ", max";
  }
  if (kind == CollectiveKind::broadcast) out += ", root " + std::to_string(root);
  return out + ") from " + site.str();
}

void validate_call(const CollectiveCall& call, int size, int rank) {
  auto fail = [&](const std::string& why) {
    throw ArgumentError("rank " + std::to_string(rank) + ": " + call.str() + ": " + why);
  };
  if (call.count < 0) fail("count must be >= 0");
  const bool chunked =
      call.kind == CollectiveKind::reduce_scatter || call.kind == CollectiveKind::all_to_all;
  if (chunked && call.count % size != 0) {
    fail("count must divide into " + std::to_string(size) + " equal chunks");
  }
  const bool reduces =
      call.kind == CollectiveKind::all_reduce || call.kind == CollectiveKind::reduce_scatter;
  if (reduces && !is_floating(call.dtype)) fail("reductions need f32 or f64");
  if (call.kind == CollectiveKind::broadcast && (call.root < 0 || call.root >= size)) {
    fail("root must be in [0, " + std::to_string(size) + ")");
  }
}

namespace {

template <class T>
void reduce_typed(T* out, const T* in, std::int64_t count, ReduceOp op) {
  if (op == ReduceOp::sum) {
    for (std::int64_t i = 0; i < count; ++i) out[i] += in[i];
  } else {
    for (std::int64_t i = 0; i < count; ++i) out[i] = std::max(out[i], in[i]);
  }
}

}  // namespace

void reduce_into(void* out, const void* in, std::int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      reduce_typed(static_cast<float*>(out), static_cast<const float*>(in), count, op);
      return;
    case DType::f64:
      reduce_typed(static_cast<double*>(out), static_cast<const double*>(in), count, op);
      return;
    case DType::u8:
      break;
  }
  throw ArgumentError(std::string("reduction of ") + dtype_name(dtype) + " is not supported");
}

}  // namespace shardscope
