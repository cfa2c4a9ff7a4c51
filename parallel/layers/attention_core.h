// The parts of the layer every mode shares: the attention core, on the heads a rank holds (all of
// them on one device, a/t under TP, TP-SP and Ulysses): split the fused QKV output into heads,
// scores with the 1/sqrt(d) scale, causal softmax, dropout, probabilities x V, and merge the heads
// back; the dropouts; the norm and the MLP activation a module's kind selects.
#pragma once

#include "autograd/backend.h"
#include "autograd/tensor.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

struct HeadTensors {
  Tensor q;     // [b, heads, s, d]
  Tensor k, v;  // [b, kv_heads, s, d]: as many heads as q under MHA, fewer under GQA
};

// The attention's projection [s, b, columns] -> q, k, v [b, heads, s, d], d = config.head_dim(),
// for `heads` query heads and `kv_heads` key/value heads (0: `heads`): GPT's fused columns
// grouped by head ([heads, 3, d]), or under grouped-query attention the query columns
// [heads * d] then the key/value columns grouped by head ([kv_heads, 2, d]); one copy each way
// (head_split). Scope: attn.heads's (layer_decl.h).
HeadTensors split_heads(const LayerConfig& config, const Tensor& qkv, std::int64_t heads,
                        std::int64_t kv_heads = 0);
// Grouped-query attention's columns [s, b, heads * d + kv_heads * 2 d] -> q [s, b, heads, d], k
// and v [s, b, kv_heads, d], by position (Ulysses sends them from sequence to head shards).
HeadTensors split_grouped_by_position(const LayerConfig& config, const Tensor& qkv,
                                      std::int64_t heads, std::int64_t kv_heads);

// With config.rope, q and k rotated by their positions (attn.rope's scope): `seq_dim` holds the
// positions, the first of them `first_position` (a sequence shard's global offset); else `qkv`.
HeadTensors rotary(const LayerConfig& config, const HeadTensors& qkv, int seq_dim,
                   std::int64_t first_position);

// The scopes of the declared modules attn.scores, attn.softmax, attn.dropout and attn.context
// (layer_decl.h). `first_head` is the global index of this rank's first head, so its dropout mask
// is the single-device mask's slice. Each key/value head serves heads / kv_heads consecutive query
// heads (grouped-query attention: the queries of a group are stacked along the sequence for one
// product with their key, and nothing is copied). Returns the context [b, heads, s, d].
Tensor attention_core(const LayerConfig& config, const HeadTensors& qkv, std::int64_t first_head);

// [b, heads, s, d] -> [s, b, heads * d]. Scope: attn.context's.
Tensor merge_heads(const LayerConfig& config, const Tensor& context);

// A declared norm module's op on x (no scope of its own): LayerNorm with weight w and bias b, or
// RMSNorm with weight w (b undefined).
Tensor norm_op(const decl::ModuleDecl& norm, const Tensor& x, const Tensor& w, const Tensor& b,
               double eps);
// The declared MLP activation module (GeLU, SwiGLU) on fc1's output, in its scope.
Tensor mlp_activation(const decl::ModuleDecl& act, const Tensor& h);

// The dropout of `site` for a tensor that is the slice at `offset` of a `global` tensor (empty
// offset and shape: the tensor is whole). Scope `scope`. `causal`: x is causal attention's
// probabilities, whose masked keys are dropped without drawing (DropoutSpec::causal).
Tensor layer_dropout(const LayerConfig& config, const char* scope, const Tensor& x, int site,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {},
                     bool causal = false);
// The same for a declared dropout module: its scope and its site (ModuleDecl::dropout_site).
Tensor layer_dropout(const LayerConfig& config, const decl::ModuleDecl& module, const Tensor& x,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {},
                     bool causal = false);

}  // namespace shardscope
