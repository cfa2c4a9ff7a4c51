// `shardscope check`: compares two dump folders tensor by tensor (same names; the full tensors by
// default, the per-rank shards too on request) under the rule of every check
// (parallel/run/tensor_compare.h): an element passes when |a - b| <= atol max|b| + rtol |b|, B
// being the reference and max|b| taken over the tensor; a NaN never passes. A tensor passes when
// every element does and the shapes agree; a tensor missing on one side fails.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"
#include "io/manifest.h"
#include "parallel/run/tensor_compare.h"

namespace shardscope {

struct TensorComparison {
  std::string name;
  int rank = kFullRank;
  bool in_a = false, in_b = false;
  Shape shape_a, shape_b;
  double max_abs = 0;                     // max |a - b|
  double max_rel = 0;                     // max |a - b| / |b| (inf where b = 0 and a != 0)
  std::vector<std::int64_t> worst_index;  // the element with the largest |a-b| - atol - rtol*|b|
  double worst_a = 0, worst_b = 0;        // the values there
  std::int64_t failed_elements = 0;
  std::int64_t elements = 0;
  bool passed = false;
  std::string note;       // why it failed, or a remark ("dtype f32 in A, f64 in B")
  std::string diagnosis;  // a failed tensor of equal shapes: what the difference looks like

  std::string label() const;  // "input.grad" or "input.grad (rank 1)"
};

// Two dumps made at different degrees, or sharding a tensor differently (modes such as tp and
// tp-sp), compared shard by shard: their ranks do not pair up.
class DegreeMismatchError : public Error {
 public:
  using Error::Error;
};

// An entry of CompareOptions::only or ::ignore (`field`) that matches no tensor of either dump.
class UnmatchedNameError : public ArgumentError {
 public:
  UnmatchedNameError(std::string field_name, std::string pattern_text)
      : ArgumentError("compare_dumps: " + field_name + " entry '" + pattern_text +
                      "' matches no tensor of either dump"),
        field(std::move(field_name)),
        pattern(std::move(pattern_text)) {}
  std::string field;    // "only" or "ignore"
  std::string pattern;  // the entry as given
};

// What compare_dumps compares. `only` and `ignore` hold tensor names or shell patterns
// ("attn.*.grad", fnmatch): with `only`, a tensor is compared when it matches one of them; a
// tensor matching an `ignore` entry is left out. A partial dump (another implementation's output
// and input gradient, say) is checked with `only`. An entry that matches no tensor of either dump
// is an UnmatchedNameError naming it, so a misspelt name cannot pass unnoticed.
struct CompareOptions {
  // Unset: default_tolerance of the narrower dtype of the two tensors (f32's for f32 against f64).
  std::optional<double> rtol, atol;
  bool shards = false;  // also the per-rank shard files; both dumps must have the same degree
  std::vector<std::string> only, ignore;
};

struct DumpComparison {
  std::string dir_a, dir_b;
  std::optional<double> rtol, atol;    // as asked (unset: per dtype)
  std::vector<TensorComparison> rows;  // A's order, then the names only B has
  std::int64_t left_out = 0;           // entries left out by CompareOptions::only / ignore

  // True when there is at least one row and every row passed.
  bool passed() const;
};

// Compares two tensors of any dtype and device element by element; a failure of equal shapes is
// diagnosed (parallel/run/diagnosis.h), `t` being the larger group size of the two runs.
TensorComparison compare_tensors(const std::string& name, const Tensor& a, const Tensor& b,
                                 const Tolerance& tolerance, int t = 1);

// Reads both manifests (validated; ManifestError or NpyError on a bad dump) and compares the
// tensors of the same name (and rank, with `shards`). DegreeMismatchError when `shards` is asked
// of dumps of different degrees, or of a tensor placed differently in the two.
DumpComparison compare_dumps(const std::string& dir_a, const std::string& dir_b,
                             const CompareOptions& options);
DumpComparison compare_dumps(const std::string& dir_a, const std::string& dir_b,
                             std::optional<double> rtol = {}, std::optional<double> atol = {},
                             bool shards = false);

// The table: tensor, shape, max_abs, max_rel, worst index (with a and b there), result; then
// "N of M tensors passed", and for every failed tensor of equal shapes what the difference looks
// like (a ratio such as t or 1/t, a sign flip, zeros, blocks permuted, one rank's block wrong). The
// worst index is the element furthest past its bound
// (|a - b| - atol - rtol |b| largest; a NaN or an unmatched infinity first), in the tensor's own
// dims ([s, b, h] for activations, [in, out] for weights), with its two values.
void print_comparison(const DumpComparison& comparison, std::ostream& out);

}  // namespace shardscope
