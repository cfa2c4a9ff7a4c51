// The checks of `--load DIR` before any rank starts.
#include "apps/load_check.h"

#include <cmath>
#include <cstdio>

#include "autograd/errors.h"
#include "parallel/layers/layer_stack.h"

namespace shardscope {
namespace {

std::string layer_text(const LayerConfig& c) {
  return c.shape_text() + " " + dtype_name(c.dtype);
}

// The flags that turn `run` into `dump`'s layer: "with --seq 14 --hidden 12", "without --no-bias";
// empty when they agree.
std::string flags_to_match(const LayerConfig& run, const LayerConfig& dump) {
  std::string out;
  auto add = [&out](const char* flag, std::int64_t given, std::int64_t want) {
    if (given != want)
      out += std::string(out.empty() ? "" : " ") + flag + " " + std::to_string(want);
  };
  add("--seq", run.seq, dump.seq);
  add("--batch", run.batch, dump.batch);
  add("--hidden", run.hidden, dump.hidden);
  add("--heads", run.heads, dump.heads);
  add("--layers", run.layers, dump.layers);
  // g follows a unless given.
  add("--kv-heads", run.kv_heads > 0 ? run.kv_heads : dump.heads, dump.kv_heads_count());
  // f follows h unless given: --ffn only when the run's f with the dump's h would still differ.
  add("--ffn", run.ffn > 0 ? run.ffn : 4 * dump.hidden, dump.ffn_width());
  auto add_name = [&out](const char* flag, const char* given, const char* want) {
    if (std::string(given) != want) out += std::string(out.empty() ? "" : " ") + flag + " " + want;
  };
  add_name("--norm", norm_name(run.norm), norm_name(dump.norm));
  add_name("--mlp", mlp_name(run.mlp), mlp_name(dump.mlp));
  if (dump.rope && run.rope_base != dump.rope_base) {  // the base matters only with the rotation
    char base[32];
    std::snprintf(base, sizeof base, "%g", dump.rope_base);
    out += std::string(out.empty() ? "" : " ") + "--rope-base " + base;
  }
  if (run.dtype != dump.dtype) {
    out += std::string(out.empty() ? "" : " ") + "--dtype " + dtype_name(dump.dtype);
  }
  // The switches: a flag to type, or one to leave out.
  std::string without;
  auto add_switch = [&](const char* flag, bool run_on, bool dump_on) {
    if (run_on == dump_on) return;
    std::string& to = dump_on ? out : without;
    to += std::string(to.empty() ? "" : " ") + flag;
  };
  add_switch("--no-bias", !run.bias, !dump.bias);
  add_switch("--rope", run.rope, dump.rope);
  if (!without.empty()) {
    return out.empty() ? "without " + without : "with " + out + " and without " + without;
  }
  return out.empty() ? out : "with " + out;
}

// The tensors a run loads from a dump (every parameter, the input and the target) and their
// shapes.
std::vector<std::pair<std::string, Shape>> loaded_tensors(const LayerConfig& c) {
  Context scratch(0);
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, t] : stack_named(c, make_stack_weights(scratch, c))) {
    out.emplace_back(name, t.shape());
  }
  out.emplace_back("input", Shape{c.seq, c.batch, c.hidden});
  out.emplace_back("target", Shape{c.seq, c.batch, c.hidden});
  return out;
}

// The shapes and dtypes of the tensors the run loads, one by one (all a dump without a usable
// config, such as another implementation's, can be compared by).
void check_shapes(const LoadedDump& dump, const LayerConfig& c,
                  const std::vector<std::pair<std::string, Shape>>& wanted) {
  for (const auto& [name, shape] : wanted) {
    const Tensor& t = dump.at(name);
    if (t.shape() != shape || t.dtype() != c.dtype) {
      throw ArgumentError("--load " + dump.dir + ": tensor '" + name + "' is " +
                          dtype_name(t.dtype()) + t.shape().str() + " in the dump, the flags (" +
                          layer_text(c) + ") need " + dtype_name(c.dtype) + shape.str());
    }
  }
}

}  // namespace

std::string element_index(const Shape& shape, std::int64_t flat) {
  std::string out = "]";
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const std::int64_t n = shape[d] > 0 ? shape[d] : 1;
    out = (d > 0 ? ", " : "") + std::to_string(flat % n) + out;
    flat /= n;
  }
  return "[" + out;
}

void check_loaded_dump(const LoadedDump& dump, const RunOptions& options) {
  const LayerConfig& run = options.spec.layer;
  const nlohmann::json& config = dump.manifest.config;
  if (config.contains("seq") && config.contains("batch") && config.contains("hidden") &&
      config.contains("heads")) {
    LayerConfig from_dump = layer_config_from_json(config, dump.dir + "/" + kManifestFile);
    from_dump.dtype = dump.manifest.dtype;
    const std::string flags = flags_to_match(run, from_dump);
    if (!flags.empty()) {
      throw ArgumentError("--load " + dump.dir + " is a dump of " + layer_text(from_dump) +
                          ", the flags give " + layer_text(run) + ": run " + flags);
    }
  }
  const std::vector<std::pair<std::string, Shape>> wanted = loaded_tensors(run);
  check_shapes(dump, run, wanted);
  for (const auto& [name, shape] : wanted) {
    const Tensor& t = dump.at(name);
    const std::vector<double> values = t.to_vector();
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (std::isfinite(values[i])) continue;
      throw NumericalError("--load " + dump.dir + ": tensor '" + name + "' holds " +
                           std::to_string(values[i]) + " at " +
                           element_index(t.shape(), static_cast<std::int64_t>(i)) +
                           " (a run cannot start from NaN or Inf)");
    }
  }
}

}  // namespace shardscope
