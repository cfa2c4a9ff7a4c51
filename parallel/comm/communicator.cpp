// CollectiveCall formatting and checks, and the shared reduction loop.
#include "parallel/comm/communicator.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "autograd/kernels/half.h"

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

void Communicator::send(const void* /*data*/, std::size_t bytes, int peer) {
  throw ArgumentError("rank " + std::to_string(rank()) + ": send of " + std::to_string(bytes) +
                      " bytes to rank " + std::to_string(peer) + ": the " + backend_name() +
                      " communicator has no point-to-point send (ranks as threads have one)");
}

void Communicator::recv(void* /*data*/, std::size_t bytes, int peer) {
  throw ArgumentError("rank " + std::to_string(rank()) + ": recv of " + std::to_string(bytes) +
                      " bytes from rank " + std::to_string(peer) + ": the " + backend_name() +
                      " communicator has no point-to-point recv (ranks as threads have one)");
}

std::int64_t send_elements(const CollectiveCall& call, int /*size*/) {
  return call.kind == CollectiveKind::barrier ? 0 : call.count;
}

std::int64_t recv_elements(const CollectiveCall& call, int size) {
  switch (call.kind) {
    case CollectiveKind::all_gather:
      return call.count * size;
    case CollectiveKind::reduce_scatter:
      return call.count / size;
    case CollectiveKind::barrier:
      return 0;
    case CollectiveKind::all_reduce:
    case CollectiveKind::all_to_all:
    case CollectiveKind::broadcast:
      break;
  }
  return call.count;
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

// What every rank tells the others before a collective: the fields CollectiveCall::same_as
// compares, and the call as text (truncated) so a mismatch message can name each rank's call site.
constexpr std::size_t kCallTextBytes = 160;
struct CallDescriptor {
  std::int64_t kind;
  std::int64_t reduce;
  std::int64_t count;
  std::int64_t dtype;
  std::int64_t root;
  char text[kCallTextBytes];  // NUL-terminated
};
static_assert(std::is_trivially_copyable<CallDescriptor>::value, "sent as raw bytes");

CallDescriptor describe(const CollectiveCall& call) {
  CallDescriptor d{};
  d.kind = static_cast<std::int64_t>(call.kind);
  d.reduce = static_cast<std::int64_t>(call.reduce);
  d.count = call.count;
  d.dtype = static_cast<std::int64_t>(call.dtype);
  d.root = call.root;
  std::string text = call.str();
  if (text.size() >= kCallTextBytes) text = text.substr(0, kCallTextBytes - 4) + "...";
  std::memcpy(d.text, text.data(), text.size());
  return d;
}

CollectiveCall call_of(const CallDescriptor& d) {
  CollectiveCall call;
  call.kind = static_cast<CollectiveKind>(d.kind);
  call.reduce = static_cast<ReduceOp>(d.reduce);
  call.count = d.count;
  call.dtype = static_cast<DType>(d.dtype);
  call.root = static_cast<int>(d.root);
  return call;
}

template <class T>
void reduce_typed(T* out, const T* in, std::int64_t count, ReduceOp op) {
  // In the type's compute precision (f32 for the 2-byte types), each result rounded once.
  using C = kernels::compute_t<T>;
  for (std::int64_t i = 0; i < count; ++i) {
    const C a = static_cast<C>(out[i]), b = static_cast<C>(in[i]);
    out[i] = T(op == ReduceOp::sum ? a + b : std::max(a, b));
  }
}

}  // namespace

void check_same_call(const CollectiveCall& call, int size, const AllGatherBytes& all_gather_bytes) {
  const CallDescriptor mine = describe(call);
  std::vector<CallDescriptor> all(static_cast<std::size_t>(size));
  all_gather_bytes(&mine, all.data(), sizeof(CallDescriptor));
  const CollectiveCall first = call_of(all[0]);
  bool same = true;
  for (const CallDescriptor& d : all) same = same && call_of(d).same_as(first);
  if (same) return;
  std::string message = "collective mismatch: the ranks of a group of " + std::to_string(size) +
                        " issued different calls:";
  for (int r = 0; r < size; ++r) {
    message += "\n  rank " + std::to_string(r) + " calls " + all[static_cast<std::size_t>(r)].text;
  }
  throw CommError(message);
}

void reduce_into(void* out, const void* in, std::int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      reduce_typed(static_cast<float*>(out), static_cast<const float*>(in), count, op);
      return;
    case DType::f64:
      reduce_typed(static_cast<double*>(out), static_cast<const double*>(in), count, op);
      return;
    case DType::bf16:
      reduce_typed(static_cast<kernels::BFloat16*>(out), static_cast<const kernels::BFloat16*>(in),
                   count, op);
      return;
    case DType::f16:
      reduce_typed(static_cast<kernels::Float16*>(out), static_cast<const kernels::Float16*>(in),
                   count, op);
      return;
    case DType::u8:
      break;
  }
  throw ArgumentError(std::string("reduction of ") + dtype_name(dtype) + " is not supported");
}

}  // namespace shardscope
