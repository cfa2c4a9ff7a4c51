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
  Tensor q, k, v;  // [b, heads, s, d]
};

// qkv [s, b, heads * 3 * d] in the head-grouped column order -> q, k, v [b, heads, s, d],
// d = config.head_dim(). Scope: attn.heads's (layer_decl.h).
HeadTensors split_heads(const LayerConfig& config, const Tensor& qkv, std::int64_t heads);

// With config.rope, q and k rotated by their positions (attn.rope's scope): `seq_dim` holds the
// positions, the first of them `first_position` (a sequence shard's global offset); else `qkv`.
HeadTensors rotary(const LayerConfig& config, const HeadTensors& qkv, int seq_dim,
                   std::int64_t first_position);

// The scopes of the declared modules attn.scores, attn.softmax, attn.dropout and attn.context
// (layer_decl.h). `first_head` is the global index of this rank's first head, so its dropout mask
// is the single-device mask's slice. Returns the context [b, heads, s, d].
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
// offset and shape: the tensor is whole). Scope `scope`.
Tensor layer_dropout(const LayerConfig& config, const char* scope, const Tensor& x, int site,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {});
// The same for a declared dropout module: its scope and its site (ModuleDecl::dropout_site).
Tensor layer_dropout(const LayerConfig& config, const decl::ModuleDecl& module, const Tensor& x,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {});

}  // namespace shardscope
