// Memory bandwidth of the elementwise kernels beside a device-to-device copy, through the Backend
// interface only (autograd/backend.h), so it builds without CUDA headers and runs on any backend:
//   copy             dst = src                       reads 1, writes 1 tensor
//   gelu_forward     y = gelu(x)                     reads 1, writes 1
//   dropout_forward  y = x * mask / (1 - p), mask    reads 1, writes 1 and a u8 mask
//   add              out = a + b                     reads 2, writes 1
//   permute          [s, b, a, d] -> [b, a, s, d]    reads 1, writes 1 (about --mib each)
// Each op runs --reps times back to back after two untimed runs; a host clock times the reps and
// one synchronising copy_to_host of a single element after them (the CUDA backend runs its work
// on one stream, so that copy waits for every rep). Bandwidth = (bytes read + bytes written) per
// rep / seconds per rep, in GB/s (1e9), and each op's fraction of copy's.
//   backend_bandwidth [--backend cpu|cuda] [--mib 256] [--reps 20] [--dtype f32|f64] [--json FILE]
// --mib is the size of one tensor (x, y, src, dst, a, b, out). Exit 2 names a bad flag or a
// missing device.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/tensor.h"

namespace shardscope {
namespace {

struct Options {
  std::string backend = "cpu";
  std::string dtype = "f32";
  double mib = 256;
  int reps = 20;
  std::string json_path;
};

struct Measurement {
  std::string op;
  double bytes_per_rep = 0;
  double ms_per_rep = 0;
  double gb_per_s() const { return bytes_per_rep / (ms_per_rep * 1e6); }
};

// Runs `op` twice untimed, then `reps` times timed, each timing ended by a one-element copy to
// the host that waits for the device.
double ms_per_rep(Backend& backend, const Tensor& last_written, int reps,
                  const std::function<void()>& op) {
  double sink = 0;
  const std::size_t one = dtype_size(last_written.dtype());
  op();
  op();
  backend.copy_to_host(&sink, last_written.raw_data(), one);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) op();
  backend.copy_to_host(&sink, last_written.raw_data(), one);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::milli>(elapsed).count() / reps;
}

std::vector<Measurement> measure(Context& ctx, const Options& o) {
  const DType dtype = o.dtype == "f64" ? DType::f64 : DType::f32;
  const double elem = static_cast<double>(dtype_size(dtype));
  const auto n = static_cast<std::int64_t>(o.mib * 1024 * 1024 / elem);
  const Shape shape{n};
  Backend& backend = ctx.backend();
  Tensor x = Tensor::randn(ctx, shape, 1, 1.0, dtype);
  Tensor b = Tensor::randn(ctx, shape, 2, 1.0, dtype);
  Tensor y = Tensor::empty(ctx, shape, dtype);
  Tensor mask = Tensor::empty(ctx, shape, DType::u8);
  DropoutSpec spec;
  spec.p = 0.1;
  spec.seed = 7;
  const double tensor_bytes = static_cast<double>(n) * elem;
  std::vector<Measurement> out;
  out.push_back(
      {"copy", 2 * tensor_bytes, ms_per_rep(backend, y, o.reps, [&] { backend.copy(x, y); })});
  out.push_back({"gelu_forward", 2 * tensor_bytes,
                 ms_per_rep(backend, y, o.reps, [&] { backend.gelu_forward(x, y); })});
  out.push_back(
      {"dropout_forward", 2 * tensor_bytes + static_cast<double>(n),
       ms_per_rep(backend, y, o.reps, [&] { backend.dropout_forward(x, spec, mask, y); })});
  out.push_back({"add", 3 * tensor_bytes,
                 ms_per_rep(backend, y, o.reps, [&] { backend.add(x, b, 1.0, 1.0, y); })});
  // Attention's change of layout, [s, b, a, d] -> [b, a, s, d] with b = 4, a = 8, d = 32 and s
  // from --mib: rows of d elements, each written far from the one before it in the input.
  const std::int64_t s = std::max<std::int64_t>(n / (4 * 8 * 32), 1);
  const Tensor heads = Tensor::randn(ctx, {s, 4, 8, 32}, 3, 1.0, dtype);
  Tensor by_head = Tensor::empty(ctx, {4, 8, s, 32}, dtype);
  out.push_back(
      {"permute", 2 * static_cast<double>(heads.bytes()), ms_per_rep(backend, by_head, o.reps, [&] {
         backend.permute(heads, {1, 2, 0, 3}, by_head);
       })});
  return out;
}

void print_table(const Options& o, const Device& device, const std::vector<Measurement>& m,
                 std::ostream& out) {
  out << "backend_bandwidth: " << device.str() << ", " << o.dtype << ", " << o.mib
      << " MiB per tensor, " << o.reps
      << " reps per op (host clock, synchronising copy at the end)\n";
  out << "op                 MB/rep    ms/rep     GB/s  of copy\n";
  const double copy = m.front().gb_per_s();
  for (const Measurement& r : m) {
    char line[128];
    std::snprintf(line, sizeof line, "%-16s %8.1f %9.3f %8.1f %7.1f%%\n", r.op.c_str(),
                  r.bytes_per_rep / 1e6, r.ms_per_rep, r.gb_per_s(), 100.0 * r.gb_per_s() / copy);
    out << line;
  }
}

void write_json(const Options& o, const Device& device, const std::vector<Measurement>& m) {
  std::ofstream f(o.json_path);
  if (!f) throw Error("backend_bandwidth: cannot write --json " + o.json_path);
  f << "{\"device\": \"" << device.str() << "\", \"dtype\": \"" << o.dtype
    << "\", \"mib_per_tensor\": " << o.mib << ", \"reps\": " << o.reps << ", \"ops\": [";
  for (std::size_t i = 0; i < m.size(); ++i) {
    f << (i ? ", " : "") << "{\"op\": \"" << m[i].op
      << "\", \"bytes_per_rep\": " << m[i].bytes_per_rep << ", \"ms_per_rep\": " << m[i].ms_per_rep
      << ", \"gb_per_s\": " << m[i].gb_per_s()
      << ", \"fraction_of_copy\": " << m[i].gb_per_s() / m.front().gb_per_s() << "}";
  }
  f << "]}\n";
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{"memory bandwidth of elementwise kernels beside a device-to-device copy"};
  app.add_option("--backend", o.backend, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "f32 or f64")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  app.add_option("--mib", o.mib, "MiB per tensor")
      ->check(CLI::Range(0.001, 65536.0))
      ->capture_default_str();
  app.add_option("--reps", o.reps, "timed runs per op")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--json", o.json_path, "also write the figures to this JSON file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints --help, or the flag's error
    return code == 0 ? 0 : 2;
  }
  const Device device = o.backend == "cuda" ? Device::cuda(0) : Device::cpu();
  try {
    Context ctx(0, device);
    const std::vector<Measurement> m = measure(ctx, o);
    print_table(o, device, m, std::cout);
    if (!o.json_path.empty()) write_json(o, device, m);
  } catch (const ArgumentError& e) {
    std::cerr << "backend_bandwidth: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::cerr << "backend_bandwidth: " << what << "\n";
    return what.rfind("no CUDA device", 0) == 0 ? 2 : 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  return shardscope::run(argc, argv);
}
