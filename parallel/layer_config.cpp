// LayerConfig validation and mode names.
#include "parallel/layer_config.h"

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
  throw ArgumentError("--mode " + name + " is not a mode: expected single, tp, tp-sp or ulysses");
}

void LayerConfig::validate() const {
  auto positive = [](const char* flag, std::int64_t v) {
    if (v <= 0) {
      throw ArgumentError(std::string(flag) + " must be a positive integer, given " +
                          std::to_string(v));
    }
  };
  positive("--seq", seq);
  positive("--batch", batch);
  positive("--hidden", hidden);
  positive("--heads", heads);
  positive("--degree", degree);
  if (hidden % heads != 0) {
    throw ArgumentError("--hidden " + std::to_string(hidden) + " must be divisible by --heads " +
                        std::to_string(heads) + " (each head gets hidden/heads features)");
  }
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    throw ArgumentError("--dropout must be in [0, 1), given " + std::to_string(dropout));
  }
  if (!is_floating(dtype)) throw ArgumentError("the layer runs in f32 or f64");
  if (mode == ParallelMode::single && degree != 1) {
    throw ArgumentError("--mode single runs on one rank: --degree must be 1, given " +
                        std::to_string(degree));
  }
}

}  // namespace shardscope
