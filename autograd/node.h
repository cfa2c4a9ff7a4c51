// Node: one recorded forward op on the define-by-run tape. It keeps the edges to its inputs'
// producers, the tensors its backward needs (saved through save(), so their bytes are counted) and
// the backward function, written next to the forward in the op's source file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

class Node;

// Where an input's gradient goes: the node that produced it, or the leaf to accumulate into.
// Neither is set for an input that does not require grad.
struct Edge {
  std::shared_ptr<Node> node;
  int output_index = 0;
  std::shared_ptr<TensorImpl> leaf;
  bool active() const { return node != nullptr || leaf != nullptr; }
};

class Node {
 public:
  // Receives one gradient per forward output (zeros where an output got none) and returns one
  // gradient per forward input (an undefined Tensor where the input needs none).
  using BackwardFn = std::function<std::vector<Tensor>(Node&, const std::vector<Tensor>&)>;

  // seq: the forward op's number (Context::next_seq), shared by its events and this node.
  Node(Context& ctx, std::string op, std::uint64_t seq, BackwardFn backward);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& op() const { return op_; }
  const std::string& scope() const { return scope_; }
  int layer() const { return layer_; }
  std::uint64_t seq() const { return seq_; }
  Context& ctx() const { return ctx_; }
  // "op 'matmul' in attn.qkv (layer 0, backward, rank 0)"
  std::string where() const;
  Site site(Phase phase) const;

  // Keeps `t` alive for backward and reports it; parameters are kept but not counted. An
  // undefined `t` holds the slot of a tensor this backward will not need (no bytes kept).
  void save(const Tensor& t, SaveRole role = SaveRole::activation);
  // The i-th saved tensor; throws StateError once backward has released it.
  const Tensor& saved(std::size_t i) const;
  std::size_t saved_count() const { return saved_.size(); }
  bool released() const { return released_; }
  void release_saved();

  bool needs_input_grad(std::size_t i) const { return edges_.at(i).active(); }
  const std::vector<Edge>& edges() const { return edges_; }
  void add_edge(Edge edge) { edges_.push_back(std::move(edge)); }
  std::vector<Shape> input_shapes;  // set by OpRecord, one per input (and edge)
  std::vector<DType> input_dtypes;
  std::vector<Shape> output_shapes;  // set by OpRecord::finish, one per output
  std::vector<DType> output_dtypes;

  // Runs the backward function and checks that each gradient has its input's shape, dtype and
  // context.
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs);

 private:
  SaveEvent save_event(const Tensor& t, SaveRole role, Phase phase) const;

  Context& ctx_;
  std::string op_;
  std::string scope_;
  int layer_;
  std::uint64_t seq_;
  BackwardFn backward_;
  std::vector<Edge> edges_;
  std::vector<Tensor> saved_;
  std::vector<SaveRole> roles_;
  bool released_ = false;
};

}  // namespace shardscope
