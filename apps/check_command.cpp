// `shardscope check`.
#include "apps/check_command.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "io/check.h"

namespace shardscope {
namespace {

std::string g(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

CLI::App* add_check_subcommand(CLI::App& app, CheckOptions& o) {
  const Tolerance f32 = default_tolerance(DType::f32), f64 = default_tolerance(DType::f64);
  CLI::App* check = app.add_subcommand(
      "check",
      "compare two dump folders tensor by tensor: an element passes when |a - b| <= atol max|b| "
      "+ rtol |b| (max|b| over the tensor, B the reference); exits 3 on any failure or any "
      "tensor missing on one side");
  check->add_option("a", o.a, "the dump folder to check")->required();
  check->add_option("b", o.b, "the reference dump folder")->required();
  check->add_option(
      "--rtol", o.rtol,
      "relative tolerance (default per dtype: f32 " + g(f32.rtol) + ", f64 " + g(f64.rtol) + ")");
  check->add_option("--atol", o.atol,
                    "absolute tolerance in units of the tensor's largest |b| (default per dtype: "
                    "f32 " +
                        g(f32.atol) + ", f64 " + g(f64.atol) + ")");
  check->add_flag("--shards", o.shards,
                  "also compare the per-rank shard files (both dumps of the same degree)");
  check->add_option("--only", o.only,
                    "compare only these tensors: names or shell patterns ('attn.*.grad'), e.g. "
                    "to check a partial dump");
  check->add_option("--ignore", o.ignore, "leave these tensors out: names or shell patterns");
  return check;
}

int check_main(const CheckOptions& o, std::ostream& out, std::ostream& err) {
  auto bad = [](const std::optional<double>& v) { return v && !(*v >= 0 && std::isfinite(*v)); };
  if (bad(o.rtol) || bad(o.atol)) {
    err << "shardscope: --rtol and --atol must be finite numbers >= 0\n";
    return 2;
  }
  CompareOptions options;
  options.rtol = o.rtol;
  options.atol = o.atol;
  options.shards = o.shards;
  options.only = o.only;
  options.ignore = o.ignore;
  try {
    const DumpComparison c = compare_dumps(o.a, o.b, options);
    print_comparison(c, out);
    return c.passed() ? 0 : 3;
  } catch (const DegreeMismatchError& e) {
    err << "shardscope: --shards: " << e.what() << " (drop --shards)\n";
    return 2;
  } catch (const UnmatchedNameError& e) {
    err << "shardscope: --" << e.field << " entry '" << e.pattern
        << "' matches no tensor of either dump\n";
    return 2;
  } catch (const std::exception& e) {
    err << "shardscope: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace shardscope
