// `shardscope check A B [--rtol --atol --shards]`: compares two dump folders tensor by tensor.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace shardscope {

struct CheckOptions {
  std::string a, b;
  std::optional<double> rtol,
      atol;  // unset: the per-dtype defaults (parallel/run/tensor_compare.h)
  bool shards = false;
  std::vector<std::string> only, ignore;  // --only, --ignore: tensor names or patterns
};

CLI::App* add_check_subcommand(CLI::App& app, CheckOptions& options);
// Exit code: 0 when every tensor passes, 3 when one fails or is missing on one side, 1 when a
// folder cannot be read, 2 for a bad tolerance.
int check_main(const CheckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace shardscope
