// LayerConfig: the shape and settings of one Transformer layer, with the parallel mode it runs
// in. validate() throws ConfigError naming the fields of each rule it checks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/dtype.h"
#include "parallel/layers/planted_bug.h"

namespace shardscope {

enum class ParallelMode : std::uint8_t { single, tp, tp_sp, ulysses };

// The layer's normalisation: LayerNorm (GPT: centred, a weight and a bias) or RMSNorm (Llama:
// x / rms(x), a weight only).
enum class Norm : std::uint8_t { layernorm, rmsnorm };
// The MLP: fc1 (h -> f), GeLU, fc2 (f -> h) as GPT has it, or SwiGLU as Llama has it: fc1
// (h -> 2f) makes the gate and up values interleaved in pairs, silu(gate) * up (f wide), fc2.
enum class Mlp : std::uint8_t { gelu, swiglu };

// Activation recomputation (Korthikanti et al. 2022): none; selective, the attention core (scores,
// softmax, dropout, probs x V) recomputed in backward from Q, K and V, so its a s^2 b terms are
// not kept; full, the whole layer recomputed from its input, the only tensor it keeps.
enum class Recompute : std::uint8_t { none, selective, full };

const char* norm_name(Norm norm);                 // "layernorm", "rmsnorm"
const char* mlp_name(Mlp mlp);                    // "gelu", "swiglu"
const char* recompute_name(Recompute recompute);  // "none", "selective", "full"
// Throw ConfigError (field "norm", "mlp", "recompute") listing the accepted names.
Norm parse_norm(const std::string& name);
Mlp parse_mlp(const std::string& name);
Recompute parse_recompute(const std::string& name);

const char* mode_name(ParallelMode mode);  // "single", "tp", "tp-sp", "ulysses"
// Throws ConfigError (field "mode") listing the accepted names.
ParallelMode parse_mode(const std::string& name);

// The models the layer can be: "gpt" (the default: LayerNorm, GeLU with f = 4h, biases, dropout
// 0.1, no rotary embedding) and "llama" (RMSNorm, SwiGLU with f = 8h/3 rounded up to a multiple
// of 48 so that degrees 1 to 4 divide it, no biases, rotary embedding, dropout 0). Sets those
// fields of `c` (its shape, heads and key/value heads stay); throws ConfigError (field "model")
// listing the names.
void apply_model(const std::string& model, LayerConfig& c);
const char* model_names();  // "gpt, llama"

// The rules every configuration of a block shares (the layer's, the MLP+LN block's), each a
// ConfigError naming its fields: a floating dtype for `what` ("the layer"): f32 or f64, and with
// `two_byte` bf16 and f16 too; layernorm_eps > 0; the largest tensor, of `elements`, at most 1e12
// elements, naming the sizes that make it.
void require_floating(const char* what, DType dtype, bool two_byte = false);
void require_eps(double layernorm_eps);
void require_tensor_limit(double elements,
                          const std::vector<std::pair<const char*, std::int64_t>>& sizes);

// Throws ConfigError "<field> must be a positive integer, given <value>" when value <= 0.
void require_positive(const char* field, std::int64_t value);

struct LayerConfig {
  std::int64_t seq = 16;      // s
  std::int64_t batch = 2;     // b
  std::int64_t hidden = 32;   // h
  std::int64_t heads = 4;     // a
  std::int64_t kv_heads = 0;  // g, the key/value heads (grouped-query attention); 0: a (MHA)
  double dropout = 0.1;       // p of all three dropouts
  std::uint64_t seed = 1;     // weights, inputs and dropout masks derive from it
  // L, the layers of the stack: each a layer of this configuration with weights of its own, run
  // one after another (layer i's output is layer i + 1's input).
  int layers = 1;
  int layer = 0;  // this layer's index in the stack, 0 to L - 1 (weights, dropout streams, traces)
  bool causal = true;
  double layernorm_eps = 1e-5;  // the eps of either norm
  Norm norm = Norm::layernorm;
  Mlp mlp = Mlp::gelu;
  std::int64_t ffn = 0;  // f, the MLP's inner width; 0: 4h
  bool bias = true;      // the linears' biases (a norm's bias comes with LayerNorm)
  // Rotary position embedding (Su et al. 2021) of the queries and keys, in the rotate-half
  // convention of Megatron-LM and Llama, each position p rotated by p base^(-2i/d).
  bool rope = false;
  double rope_base = 10000.0;
  Recompute recompute = Recompute::none;
  // LayerNorm weights 1 and biases 0 (the usual start, PyTorch's), or, when set, weights
  // 1 + Normal(0, 0.1) and biases Normal(0, 0.1): a mistake in a LayerNorm's scale or shift (a
  // gradient never reduced, a parameter sliced wrong) then shows in the output too.
  bool random_norms = false;
  DType dtype = DType::f32;
  ParallelMode mode = ParallelMode::single;
  int degree = 1;  // t: ranks in the tensor-parallel group
  // A known mistake planted into the parallel layer (parallel/layers/planted_bug.h), for seeing the
  // reference check catch it. The single-device reference never plants one.
  PlantedBug planted_bug = PlantedBug::none;

  // "s=16 b=2 h=32 a=4", then what differs from GPT's layer: " f=96, rmsnorm, swiglu, no biases";
  // a stack's " L=4" after the sizes; ", recompute selective" last.
  std::string shape_text() const;

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t kv_heads_count() const { return kv_heads > 0 ? kv_heads : heads; }  // g
  std::int64_t ffn_width() const { return ffn > 0 ? ffn : 4 * hidden; }            // f
  // Every rule of the configuration, in one place: throws ConfigError naming the fields and the
  // rule (zero sizes, hidden % heads, dropout range, ...; in a parallel mode, what the degree must
  // divide: heads, hidden, f, seq where sequence-sharded, key/value heads or the degree them;
  // Ulysses's degree at most the heads). The command lines call it where they build a
  // configuration; the layers call it again on what they are given.
  void validate() const;
};

}  // namespace shardscope
