// Context: per-rank engine state.
#include "autograd/context.h"

#include <algorithm>

#include "autograd/backend.h"
#include "autograd/storage.h"

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
  std::string out = "op '" + std::string(op) + "'";
  if (!scope.empty()) out += " in " + std::string(scope);
  out += " (";
  if (layer >= 0) out += "layer " + std::to_string(layer) + ", ";
  return out + phase_name(phase) + ", rank " + std::to_string(rank) + ")";
}

std::string Context::where(std::string_view op) const {
  return format_where(op, scope_, layer_, phase_, rank_);
}

std::shared_ptr<Storage> Context::allocate(std::size_t bytes, MemoryCategory category) {
  return std::make_shared<Storage>(*this, bytes, category);
}

}  // namespace shardscope
