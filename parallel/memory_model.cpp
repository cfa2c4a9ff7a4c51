// The single-device activation model, term by term.
#include "parallel/memory_model.h"

#include "autograd/dtype.h"

namespace shardscope {

ActivationModel single_device_activation_model(const LayerConfig& c) {
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double M = 1.0;
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double sbh = s * b * static_cast<double>(c.hidden);
  const double as2b = static_cast<double>(c.heads) * s * s * b;
  const bool drop = c.dropout > 0.0;
  ActivationModel m;
  auto term = [&](std::string what, std::string scope, std::string op, std::string formula,
                  double bytes) {
    m.terms.push_back(
        {std::move(what), std::move(scope), std::move(op), std::move(formula), bytes});
    m.total_bytes += bytes;
  };
  term("LayerNorm 1 input", "ln1", "layernorm", "A sbh", A * sbh);
  term("QKV linear input", "attn.qkv", "matmul", "A sbh", A * sbh);
  term("QK^T: Q and K", "attn.scores", "matmul", "2A sbh", 2 * A * sbh);
  term("softmax output", "attn.softmax", "softmax", "A as^2b", A * as2b);
  if (drop) term("attention dropout mask", "attn.dropout", "dropout", "M as^2b", M * as2b);
  if (drop) {
    term("probs x V: dropout output and V", "attn.context", "matmul", "A as^2b + A sbh",
         A * as2b + A * sbh);
  } else {
    term("probs x V: V (probs are the softmax output)", "attn.context", "matmul", "A sbh", A * sbh);
  }
  term("output linear input", "attn.proj", "matmul", "A sbh", A * sbh);
  if (drop) term("attention output dropout mask", "attn.out_dropout", "dropout", "M sbh", M * sbh);
  term("LayerNorm 2 input", "ln2", "layernorm", "A sbh", A * sbh);
  term("fc1 input", "mlp.fc1", "matmul", "A sbh", A * sbh);
  term("GeLU input", "mlp.gelu", "gelu", "4A sbh", 4 * A * sbh);
  term("fc2 input", "mlp.fc2", "matmul", "4A sbh", 4 * A * sbh);
  if (drop) term("MLP dropout mask", "mlp.dropout", "dropout", "M sbh", M * sbh);
  m.formula = drop ? "sbh(16A + 2M) + as^2b(2A + M)" : "16A sbh + A as^2b";
  // Two LayerNorms, each a mean and an rstd per row of s*b rows.
  m.extras_bytes = 2.0 * 2.0 * A * s * b;
  return m;
}

}  // namespace shardscope
