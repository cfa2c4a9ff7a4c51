// The differentiable ops. Each records a Node when a gradient is needed and saves exactly what
// its backward uses. Shapes follow the conventions of DESIGN.md: activations [s, b, h], weights
// [in, out]. Every op throws ShapeError / DTypeError naming itself, its scope, layer and rank.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/backend.h"
#include "autograd/tensor.h"

namespace shardscope {

// a [..., m, k] x b [k, n] (b shared, e.g. a weight) or a [B..., m, k] x b [B..., k, n] (batched).
// transpose_b reads b as [.., n, k] and multiplies by its transpose (Q K^T). alpha scales the
// product inside the GEMM (attention's 1/sqrt(d), as Megatron-LM's baddbmm): no separate pass.
// Saves a when b takes a gradient and b when a does (a parameter is kept but not counted).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b = false, double alpha = 1.0);
// Attention's batched products under softmax(x, true)'s causal mask, on score-shaped
// [.., r s_q, s_k] matrices whose rows hold the s_q = `queries` queries of r heads one after the
// other (r > 1 for grouped-query attention): key j is visible to query i when j <= i + s_k - s_q.
// With transpose_b, a [.., r s_q, d] (queries) times b [.., s_k, d] transposed (keys): the
// scores, 0 above the diagonal. Without, a [.., r s_q, s_k] (probabilities) times b [.., s_k, d]
// (values), a read as 0 above the diagonal. Rows go in blocks and the products above each block's
// diagonal are not computed: about half of the dense products, forward and backward. Saves what
// matmul saves. alpha as matmul's.
Tensor causal_matmul(const Tensor& a, const Tensor& b, bool transpose_b, std::int64_t queries,
                     double alpha = 1.0);

// a + b, where b has a's shape or a suffix of it (a bias [h] on [s, b, h]). Saves nothing.
Tensor add(const Tensor& a, const Tensor& b);
// a * b elementwise, same shapes or b a suffix. Saves each operand the other's gradient needs.
Tensor mul(const Tensor& a, const Tensor& b);
// alpha * x. Saves nothing.
Tensor scale(const Tensor& x, double alpha);
// GeLU, tanh form. Saves its input.
Tensor gelu(const Tensor& x);
// SwiGLU over the last dim, whose 2f values are f (gate, up) pairs interleaved: y [.., f],
// y[.., j] = silu(x[.., 2j]) x[.., 2j + 1], silu(a) = a sigmoid(a). Interleaved, a column shard
// of whole pairs holds matching gates and up values. Saves its input.
Tensor swiglu(const Tensor& x);
// Rotary position embedding (RoFormer) over the last dim d (even), in the rotate-half convention
// of Megatron-LM and Llama: pair i < d/2 is (x[i], x[i + d/2]), rotated by angle = p theta_i,
// theta_i = base^(-2i/d), at position p = first_position + the element's index along seq_dim
// (0 <= seq_dim < rank - 1): y[i] = x[i] cos - x[i + d/2] sin, y[i + d/2] = x[i + d/2] cos +
// x[i] sin. A shard of the sequence starting at global position P passes first_position = P.
// Saves nothing: its backward is the rotation by -angle.
Tensor rope(const Tensor& x, int seq_dim, std::int64_t first_position, double base = 10000.0);
// Inverted dropout with Philox masks (see DropoutSpec). Saves the u8 mask; p == 0 is the
// identity and saves nothing. p must be in [0, 1).
Tensor dropout(const Tensor& x, const DropoutSpec& spec);
// The dropout stream of (layer, site): sites number the dropouts inside one layer.
std::uint32_t dropout_stream(int layer, int site);

// LayerNorm over the last dim: (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps),
// biased variance. Saves x, and mean and rstd per row as extras.
Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
// RMSNorm over the last dim (Zhang & Sennrich 2019): x * rstd * gamma, rstd = 1/sqrt(mean(x^2) +
// eps); no centering, no bias. Saves x, and rstd per row as an extra.
Tensor rmsnorm(const Tensor& x, const Tensor& gamma, double eps = 1e-5);
// Softmax over the last dim; causal masks key j > query i on [.., s_q, s_k]. Saves its output.
Tensor softmax(const Tensor& x, bool causal = false);

// Views and copies. reshape shares storage (one dim may be -1); the others copy.
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int>& perm);
Tensor transpose(const Tensor& x, int dim0, int dim1);
std::vector<Tensor> split(const Tensor& x, int dim, const std::vector<std::int64_t>& sizes);
std::vector<Tensor> chunk(const Tensor& x, int dim, int chunks);  // equal parts
Tensor concat(const std::vector<Tensor>& xs, int dim);
// Attention's heads out of x [s, b, W], whose last dim holds heads of d columns (the fused qkv
// product's output): part i is `heads` heads, the first starting at column `first`, each `stride`
// columns after the one before, copied out as [b, heads, s, d]. The parts must cover each of the W
// columns once. Backward writes their gradients back into one [s, b, W]. One copy each way, where
// a permute and a split (or a split and permutes) made two.
struct HeadColumns {
  std::int64_t first = 0;
  std::int64_t heads = 0;
  std::int64_t stride = 0;
};
std::vector<Tensor> head_split(const Tensor& x, std::int64_t d,
                               const std::vector<HeadColumns>& parts);

// Reductions to a one-element tensor of shape [].
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// mean((pred - target)^2); both take gradients. Saves pred and target.
Tensor mse_loss(const Tensor& pred, const Tensor& target);
// Mean cross-entropy of logits [N, C] against N class indices. Saves the softmax probabilities.
Tensor cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& targets);

}  // namespace shardscope
