// Context: per-rank engine state.
#include "autograd/context.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "autograd/backend.h"
#include "autograd/errors.h"
#include "autograd/kernels/half.h"
#include "autograd/storage.h"
#include "autograd/tensor.h"

namespace shardscope {

const char* memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameter:
      return "parameter";
    case MemoryCategory::gradient:
      return "gradient";
    case MemoryCategory::activation:
      return "activation";
    case MemoryCategory::saved_activation:
      return "saved_activation";
    case MemoryCategory::saved_extra:
      return "saved_extra";
    case MemoryCategory::workspace:
      return "workspace";
    case MemoryCategory::communication:
      return "communication";
  }
  return "?";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_to_all:
      return "all_to_all";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "?";
}

const char* comm_purpose_name(CommPurpose purpose) {
  switch (purpose) {
    case CommPurpose::activation:
      return "activation";
    case CommPurpose::param_grad:
      return "param_grad";
    case CommPurpose::loss:
      return "loss";
    case CommPurpose::check:
      return "check";
  }
  return "?";
}

Context::Context(int rank, Device device)
    : rank_(rank), device_(device), backend_(make_backend(device)) {}

Context::~Context() = default;

void Context::add_observer(Observer* observer) {
  if (std::find(observers_.begin(), observers_.end(), observer) == observers_.end()) {
    observers_.push_back(observer);
  }
}

void Context::remove_observer(Observer* observer) {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
}

void Context::push_scope(const std::string& name) {
  scope_lengths_.push_back(scope_.size());
  if (!scope_.empty()) scope_ += '.';
  scope_ += name;
}

void Context::pop_scope() {
  if (scope_lengths_.empty()) return;
  scope_.resize(std::min(scope_.size(), scope_lengths_.back()));
  scope_lengths_.pop_back();
}

std::string Context::exchange_scope(std::string scope) {
  // The guards' stack stays: once the caller puts the previous path back (the engine does after
  // backward), the enclosing ScopeGuards pop exactly what they pushed.
  std::swap(scope_, scope);
  return scope;
}

Site Context::site() const {
  Site s;
  s.op = current_op_;
  s.scope = scope_;
  s.phase = phase_;
  s.layer = layer_;
  s.step = step_;
  s.rank = rank_;
  return s;
}

std::string format_where(std::string_view op, std::string_view scope, int layer, Phase phase,
                         int rank) {
  // Outside any op: setting up (weights, data, buffers) or between ops.
  std::string out = op.empty() ? std::string("no op") : "op '" + std::string(op) + "'";
  if (!scope.empty()) out += " in " + std::string(scope);
  out += " (";
  if (layer >= 0) out += "layer " + std::to_string(layer) + ", ";
  return out + phase_name(phase) + ", rank " + std::to_string(rank) + ")";
}

std::string Context::where(std::string_view op) const {
  return format_where(op, scope_, layer_, phase_, rank_);
}

std::shared_ptr<Storage> Context::allocate(std::size_t bytes, MemoryCategory category,
                                           bool zeroed) {
  try {
    return std::make_shared<Storage>(*this, bytes, category, zeroed);
  } catch (const OutOfMemoryError& e) {  // the backend named the bytes and the device
    throw OutOfMemoryError(std::string(e.what()) + " in " + where(current_op_));
  }
}

namespace {

// True when any element's exponent bits are all ones (NaN or Inf): integer work only, so the
// common all-finite case is one vectorisable pass. Bits is uint32_t for f32, uint64_t for f64,
// uint16_t for bf16 and f16.
template <class Bits>
bool any_non_finite_bits(const unsigned char* bytes, std::size_t n, Bits exponent) {
  Bits bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes + i * sizeof(Bits), sizeof(Bits));
    bad |= static_cast<Bits>((bits & exponent) == exponent);
  }
  return bad != 0;
}

template <class Value>
void count_values(const unsigned char* bytes, std::size_t n, NonFiniteCount& count) {
  for (std::size_t i = 0; i < n; ++i) {
    Value stored;
    std::memcpy(&stored, bytes + i * sizeof(Value), sizeof(Value));
    const double v = static_cast<double>(stored);  // exact for every floating dtype
    if (std::isfinite(v)) continue;
    if (std::isnan(v)) {
      ++count.nan;
    } else {
      ++count.inf;
    }
    if (count.first < 0) {
      count.first = static_cast<std::int64_t>(i);
      count.first_value = v;
    }
  }
}

// "[0, 1, 3]": the row-major multi-index of flat element `flat` of `shape`.
std::string index_of(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const std::int64_t extent = shape[d];
    index[static_cast<std::size_t>(d)] = extent > 0 ? flat % extent : 0;
    flat = extent > 0 ? flat / extent : 0;
  }
  return Shape(std::move(index)).str();
}

}  // namespace

NonFiniteCount count_non_finite(const Tensor& t) {
  NonFiniteCount count;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return count;
  const std::size_t n = static_cast<std::size_t>(t.numel());
  std::vector<unsigned char> host;
  const unsigned char* bytes = static_cast<const unsigned char*>(t.raw_data());
  if (!t.device().host_memory()) {
    host.resize(t.bytes());
    t.ctx().backend().copy_to_host(host.data(), t.raw_data(), host.size());
    bytes = host.data();
  }
  if (t.dtype() == DType::f32) {
    if (any_non_finite_bits<std::uint32_t>(bytes, n, 0x7f800000u)) {
      count_values<float>(bytes, n, count);
    }
  } else if (t.dtype() == DType::bf16) {
    if (any_non_finite_bits<std::uint16_t>(bytes, n, std::uint16_t{0x7f80})) {
      count_values<kernels::BFloat16>(bytes, n, count);
    }
  } else if (t.dtype() == DType::f16) {
    if (any_non_finite_bits<std::uint16_t>(bytes, n, std::uint16_t{0x7c00})) {
      count_values<kernels::Float16>(bytes, n, count);
    }
  } else if (any_non_finite_bits<std::uint64_t>(bytes, n, 0x7ff0000000000000ull)) {
    count_values<double>(bytes, n, count);
  }
  return count;
}

std::string describe_non_finite(const Tensor& t, const NonFiniteCount& count) {
  std::ostringstream out;
  out << t.describe() << " is not finite at step " << t.ctx().step() << ": "
      << count.nan + count.inf << " of " << t.numel() << " elements (" << count.nan << " NaN, "
      << count.inf << " Inf), the first at " << index_of(t.shape(), count.first) << " = "
      << count.first_value;
  return out.str();
}

void check_finite(const Tensor& t, const std::string& where, const std::string& what,
                  const std::string& hint) {
  const NonFiniteCount count = count_non_finite(t);
  if (!count.any()) return;
  std::string message = where + ": " + what + " " + describe_non_finite(t, count);
  if (!hint.empty()) message += "; " + hint;
  throw NumericalError(message);
}

}  // namespace shardscope
