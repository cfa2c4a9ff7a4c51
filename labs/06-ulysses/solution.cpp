// Lab 6, the instructor's solution: the two all-to-alls of Ulysses as one autograd op each, whose
// backward is the other's values, and the per-rank bytes of Ulysses and TP-SP by the ring
// formulas.
#include "labs/06-ulysses/lab.h"

#include "autograd/function.h"
#include "autograd/ops.h"

namespace shardscope::labs {
namespace {

// [s/t, b, a, d] -> [s, b, a/t, d]. Chunk j of the send buffer holds heads j a/t .. for every
// local position; chunk i of what comes back holds rank i's positions of our heads, so stacking
// the chunks in rank order puts the positions in global order.
Tensor seq_to_heads_values(ProcessGroup& g, const Tensor& x) {
  const std::int64_t t = g.size();
  const Shape& s = x.shape();                                               // [s/t, b, a, d]
  const Tensor send = permute(reshape(x, {s[0], s[1], t, s[2] / t, s[3]}),  // [s/t, b, t, a/t, d]
                              {2, 0, 1, 3, 4});                             // [t, s/t, b, a/t, d]
  return reshape(g.all_to_all(send), {t * s[0], s[1], s[2] / t, s[3]});     // [s, b, a/t, d]
}

// [s, b, a/t, d] -> [s/t, b, a, d]. Chunk j of the input along the sequence is rank j's
// positions already; chunk i of what comes back holds rank i's heads of our positions.
Tensor heads_to_seq_values(ProcessGroup& g, const Tensor& x) {
  const std::int64_t t = g.size();
  const Shape& s = x.shape();                                                    // [s, b, a/t, d]
  const Tensor got = g.all_to_all(reshape(x, {t, s[0] / t, s[1], s[2], s[3]}));  // [t, s/t, ...]
  return reshape(permute(got, {1, 2, 0, 3, 4}),  // [s/t, b, t, a/t, d]
                 {s[0] / t, s[1], t * s[2], s[3]});
}

}  // namespace

Tensor seq_to_heads(ProcessGroup& group, const Tensor& x) {
  ProcessGroup* g = &group;
  return apply_function1(
      "lab_seq_to_heads", {x},
      [g](const std::vector<Tensor>& in, std::vector<Tensor>&) {
        return std::vector<Tensor>{seq_to_heads_values(*g, in[0])};
      },
      [g](const std::vector<Tensor>&, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{heads_to_seq_values(*g, dy[0])};
      });
}

Tensor heads_to_seq(ProcessGroup& group, const Tensor& x) {
  ProcessGroup* g = &group;
  return apply_function1(
      "lab_heads_to_seq", {x},
      [g](const std::vector<Tensor>& in, std::vector<Tensor>&) {
        return std::vector<Tensor>{heads_to_seq_values(*g, in[0])};
      },
      [g](const std::vector<Tensor>&, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{seq_to_heads_values(*g, dy[0])};
      });
}

// N = s b h A, the bytes of the full activation. An all-to-all keeps 1 of its t chunks and sends
// the rest, (t - 1)/t of the rank's own buffer; each of Ulysses' buffers is a sequence shard (or
// head shard) of one [s, b, h] tensor: N/t. Four per pass (q, k, v; the attention output).
double ulysses_bytes_per_rank(const LayerShape& c, Pass pass) {
  const double t = c.degree;
  const double n = static_cast<double>(c.seq) * static_cast<double>(c.batch) *
                   static_cast<double>(c.hidden) * c.element_bytes;
  const double per_pass = 4 * (t - 1) / t * (n / t);
  return pass == Pass::forward ? per_pass : 2 * per_pass;
}

// Forward: all-gathers before QKV and fc1, reduce-scatters after proj and fc2, each (t - 1)/t N.
// Backward: their conjugates (2 reduce-scatters, 2 all-gathers) and the 2 all-gathers that
// re-gather the column-parallel linears' saved input shards for their weight gradients.
double tp_sp_bytes_per_rank(const LayerShape& c, Pass pass) {
  const double t = c.degree;
  const double n = static_cast<double>(c.seq) * static_cast<double>(c.batch) *
                   static_cast<double>(c.hidden) * c.element_bytes;
  const double one = (t - 1) / t * n;
  return pass == Pass::forward ? 4 * one : (4 + 6) * one;
}

}  // namespace shardscope::labs
