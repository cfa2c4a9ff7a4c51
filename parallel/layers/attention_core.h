// The attention core every mode shares, on the heads a rank holds (all of them on one device,
// a/t under TP, TP-SP and Ulysses): split the fused QKV output into heads, scores with the
// 1/sqrt(d) scale, causal softmax, dropout, probabilities x V, and merge the heads back.
#pragma once

#include "autograd/backend.h"
#include "autograd/tensor.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

struct HeadTensors {
  Tensor q, k, v;  // [b, heads, s, d]
};

// qkv [s, b, heads * 3 * d] in the head-grouped column order -> q, k, v [b, heads, s, d].
// Scope: attn.heads's (layer_decl.h).
HeadTensors split_heads(const Tensor& qkv, std::int64_t heads, std::int64_t d);

// The scopes of the declared modules attn.scores, attn.softmax, attn.dropout and attn.context
// (layer_decl.h). `first_head` is the global index of this rank's first head, so its dropout mask
// is the single-device mask's slice. Returns the context [b, heads, s, d].
Tensor attention_core(const LayerConfig& config, const HeadTensors& qkv, std::int64_t first_head);

// [b, heads, s, d] -> [s, b, heads * d]. Scope: attn.context's.
Tensor merge_heads(const Tensor& context);

// The dropout of `site` for a tensor that is the slice at `offset` of a `global` tensor (empty
// offset and shape: the tensor is whole). Scope `scope`.
Tensor layer_dropout(const LayerConfig& config, const char* scope, const Tensor& x, int site,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {});
// The same for a declared dropout module: its scope and its site (ModuleDecl::dropout_site).
Tensor layer_dropout(const LayerConfig& config, const decl::ModuleDecl& module, const Tensor& x,
                     const Shape& global = Shape(), std::vector<std::int64_t> offset = {});

}  // namespace shardscope
