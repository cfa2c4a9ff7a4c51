// LayerConfig validation and mode names.
#include "parallel/layers/layer_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/errors.h"

namespace shardscope {

const char* mode_name(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::single:
      return "single";
    case ParallelMode::tp:
      return "tp";
    case ParallelMode::tp_sp:
      return "tp-sp";
    case ParallelMode::ulysses:
      return "ulysses";
  }
  return "?";
}

ParallelMode parse_mode(const std::string& name) {
  for (ParallelMode m :
       {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    if (name == mode_name(m)) return m;
  }
  throw ConfigError("mode \"" + name + "\" is not a mode: expected single, tp, tp-sp or ulysses",
                    {"mode"});
}

const char* norm_name(Norm norm) {
  return norm == Norm::rmsnorm ? "rmsnorm" : "layernorm";
}

const char* mlp_name(Mlp mlp) {
  return mlp == Mlp::swiglu ? "swiglu" : "gelu";
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    if (name == recompute_name(r)) return r;
  }
  throw ConfigError(
      "recompute \"" + name + "\" is not a recomputation: expected none, selective or full",
      {"recompute"});
}

Norm parse_norm(const std::string& name) {
  for (Norm n : {Norm::layernorm, Norm::rmsnorm}) {
    if (name == norm_name(n)) return n;
  }
  throw ConfigError("norm \"" + name + "\" is not a norm: expected layernorm or rmsnorm", {"norm"});
}

Mlp parse_mlp(const std::string& name) {
  for (Mlp m : {Mlp::gelu, Mlp::swiglu}) {
    if (name == mlp_name(m)) return m;
  }
  throw ConfigError("mlp \"" + name + "\" is not an MLP: expected gelu or swiglu", {"mlp"});
}

const char* model_names() {
  return "gpt, llama";
}

void apply_model(const std::string& model, LayerConfig& c) {
  const LayerConfig gpt;
  if (model == "gpt") {
    c.norm = gpt.norm;
    c.mlp = gpt.mlp;
    c.ffn = 0;
    c.bias = gpt.bias;
    c.rope = gpt.rope;
    c.dropout = gpt.dropout;
  } else if (model == "llama") {
    c.norm = Norm::rmsnorm;
    c.mlp = Mlp::swiglu;
    const std::int64_t f = (8 * c.hidden + 2) / 3;  // ceil(8h/3)
    c.ffn = (f + 47) / 48 * 48;
    c.bias = false;
    c.rope = true;
    c.dropout = 0.0;
  } else {
    throw ConfigError("model \"" + model + "\" is not a model: expected " + model_names(),
                      {"model"});
  }
}

std::string LayerConfig::shape_text() const {
  std::string text = "s=" + std::to_string(seq) + " b=" + std::to_string(batch) +
                     " h=" + std::to_string(hidden) + " a=" + std::to_string(heads);
  if (kv_heads_count() != heads) text += " g=" + std::to_string(kv_heads_count());
  if (ffn_width() != 4 * hidden) text += " f=" + std::to_string(ffn_width());
  if (layers != 1) text += " L=" + std::to_string(layers);
  if (norm != Norm::layernorm) text += std::string(", ") + norm_name(norm);
  if (mlp != Mlp::gelu) text += std::string(", ") + mlp_name(mlp);
  if (!bias) text += ", no biases";
  if (rope) {
    text += ", rope";
    if (rope_base != LayerConfig().rope_base) {
      char base[32];
      std::snprintf(base, sizeof base, " (base %g)", rope_base);
      text += base;
    }
  }
  if (recompute != Recompute::none) text += std::string(", recompute ") + recompute_name(recompute);
  return text;
}

void require_floating(const char* what, DType dtype, bool two_byte) {
  const bool wide = dtype == DType::f32 || dtype == DType::f64;
  if (!wide && !(two_byte && is_half(dtype))) {
    throw ConfigError(std::string("dtype ") + dtype_name(dtype) + ": " + what + " runs in " +
                          (two_byte ? "f32, f64, bf16 or f16" : "f32 or f64"),
                      {"dtype"});
  }
}

void require_eps(double layernorm_eps) {
  if (!(layernorm_eps > 0.0)) {
    throw ConfigError("layernorm_eps must be > 0, given " + std::to_string(layernorm_eps),
                      {"layernorm_eps"});
  }
}

void require_tensor_limit(double elements,
                          const std::vector<std::pair<const char*, std::int64_t>>& sizes) {
  constexpr double kMaxElements = 1e12;  // 4 TB in f32: far past any machine this runs on
  if (elements <= kMaxElements) return;
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", elements);
  std::string given;
  std::vector<std::string> fields;
  for (const auto& [field, value] : sizes) {
    given += (given.empty() ? "" : ", ") + std::string(field) + " " + std::to_string(value);
    fields.emplace_back(field);
  }
  throw ConfigError(
      given + " need tensors of " + count + " elements, more than the 1e12 this build accepts",
      fields);
}

void require_positive(const char* field, std::int64_t value) {
  if (value <= 0) {
    throw ConfigError(
        std::string(field) + " must be a positive integer, given " + std::to_string(value),
        {field});
  }
}

namespace {

void require(bool ok, const std::string& message, std::vector<std::string> fields) {
  if (!ok) throw ConfigError(message, std::move(fields));
}

// The rules of running in a parallel mode on c.degree ranks.
void validate_mode(const LayerConfig& c) {
  if (c.mode == ParallelMode::single) return;
  const std::string t = std::to_string(c.degree);
  const std::string mode = std::string("mode ") + mode_name(c.mode);
  if (c.mode == ParallelMode::ulysses) {
    require(c.degree <= c.heads,
            mode + ": degree " + t + " is above heads " + std::to_string(c.heads) +
                " (Ulysses gives each rank whole heads)",
            {"degree", "heads"});
  }
  require(c.heads % c.degree == 0,
          mode + ": heads " + std::to_string(c.heads) + " must be divisible by degree " + t,
          {"heads", "degree"});
  require(c.hidden % c.degree == 0,
          mode + ": hidden " + std::to_string(c.hidden) + " must be divisible by degree " + t,
          {"hidden", "degree"});
  const std::int64_t g = c.kv_heads_count();
  require(g % c.degree == 0 || c.degree % g == 0,
          mode + ": kv_heads " + std::to_string(g) + " and degree " + t +
              ": one must divide the other (each rank holds kv_heads/degree whole key/value " +
              "heads, or shares one with degree/kv_heads ranks)",
          {"kv_heads", "degree"});
  if (c.mode != ParallelMode::ulysses) {
    require(c.ffn_width() % c.degree == 0,
            mode + ": ffn " + std::to_string(c.ffn_width()) + " must be divisible by degree " + t +
                " (fc1's columns and fc2's rows are split)",
            {"ffn", "degree"});
  }
  if (c.mode == ParallelMode::tp_sp || c.mode == ParallelMode::ulysses) {
    require(c.seq % c.degree == 0,
            mode + ": seq " + std::to_string(c.seq) + " must be divisible by degree " + t +
                " (each rank holds s/t positions)",
            {"seq", "degree"});
  }
}

}  // namespace

void LayerConfig::validate() const {
  require_positive("seq", seq);
  require_positive("batch", batch);
  require_positive("hidden", hidden);
  require_positive("heads", heads);
  require_positive("degree", degree);
  if (kv_heads < 0) {
    throw ConfigError(
        "kv_heads must be a positive integer (or 0 for heads), given " + std::to_string(kv_heads),
        {"kv_heads"});
  }
  if (kv_heads_count() > heads || heads % kv_heads_count() != 0) {
    throw ConfigError("kv_heads " + std::to_string(kv_heads_count()) + " must divide heads " +
                          std::to_string(heads) +
                          " (each key/value head serves heads/kv_heads query heads)",
                      {"kv_heads", "heads"});
  }
  if (ffn < 0) {
    throw ConfigError("ffn must be a positive integer (or 0 for 4h), given " + std::to_string(ffn),
                      {"ffn"});
  }
  if (hidden % heads != 0) {
    throw ConfigError("hidden " + std::to_string(hidden) + " must be divisible by heads " +
                          std::to_string(heads) + " (each head gets hidden/heads features)",
                      {"hidden", "heads"});
  }
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    throw ConfigError("dropout must be in [0, 1), given " + std::to_string(dropout), {"dropout"});
  }
  require_floating("the layer", dtype, /*two_byte=*/true);
  if (!(rope_base > 1.0) || !std::isfinite(rope_base)) {
    throw ConfigError("rope_base must be a finite number > 1, given " + std::to_string(rope_base),
                      {"rope_base"});
  }
  if (rope && head_dim() % 2 != 0) {
    throw ConfigError("rope rotates pairs of a head's features: hidden / heads = " +
                          std::to_string(head_dim()) + " must be even",
                      {"rope", "hidden", "heads"});
  }
  require_eps(layernorm_eps);
  constexpr int kMaxLayers = 1 << 16;  // each layer keys 64 weight streams and its dropout's
  if (layers < 1 || layers > kMaxLayers) {
    throw ConfigError("layers must be in [1, 65536], given " + std::to_string(layers), {"layers"});
  }
  if (layer < 0 || layer >= layers) {
    throw ConfigError("layer must be in [0, layers - 1] = [0, " + std::to_string(layers - 1) +
                          "] (its index in the stack), given " + std::to_string(layer),
                      {"layer", "layers"});
  }
  // The largest tensors are the scores [b, a, s, s] and the MLP's fc1 output [s, b, f] (SwiGLU:
  // [s, b, 2f]).
  const double scores = static_cast<double>(batch) * static_cast<double>(heads) *
                        static_cast<double>(seq) * static_cast<double>(seq);
  const double fc1_out = (this->mlp == Mlp::swiglu ? 2.0 : 1.0) * static_cast<double>(ffn_width()) *
                         static_cast<double>(seq) * static_cast<double>(batch);
  require_tensor_limit(
      std::max(scores, fc1_out),
      {{"seq", seq}, {"batch", batch}, {"heads", heads}, {"hidden", hidden}, {"ffn", ffn_width()}});
  validate_planted_bug(planted_bug, *this);
  if (mode == ParallelMode::single && degree != 1) {
    throw ConfigError(
        "mode single runs on one rank: degree must be 1, given " + std::to_string(degree),
        {"mode", "degree"});
  }
  validate_mode(*this);
}

}  // namespace shardscope
