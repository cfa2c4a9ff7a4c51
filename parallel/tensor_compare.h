// The reference comparison every check uses: per tensor, max_abs_err = max |got - want| and
// max_rel_err = max_abs_err / max |want| (normwise), with one tolerance table. A non-finite value
// in `got` makes the errors infinite, so a NaN never passes.
#pragma once

#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

struct TensorCheck {
  std::string name;
  double max_abs_err = 0;
  double max_rel_err = 0;
  bool passed = true;
};

// The two maxima a comparison needs; for a sharded tensor each rank computes them on its slice
// and the group takes the elementwise maximum.
struct ErrorParts {
  double max_abs = 0;  // max |got - want|, +inf when got holds a NaN or an infinity
  double scale = 0;    // max |want|
};

// f32: sums split across ranks or GEMM blocks differ by a few ulp (we measure 3e-8 to 3e-7);
// 1e-4 is far above that and far below a real error (a missing reduction is off by O(1)). f64
// rounding is 1e-16; 1e-10 likewise. docs/derivations.md, "The tolerance of the reference check".
double check_tolerance(DType dtype);

// Throws ShapeError naming `name` when the sizes differ.
ErrorParts error_parts(const std::string& name, const Tensor& got, const Tensor& want);
TensorCheck finish_check(const std::string& name, const ErrorParts& parts, double tolerance);
TensorCheck compare_tensors(const std::string& name, const Tensor& got, const Tensor& want,
                            double tolerance);

// For each name of `got`, the index of the same name in `want`: the check pairs tensors by name,
// never by order. StateError naming the name (and what `want` has) when one is missing on either
// side or appears twice.
std::vector<std::size_t> pair_by_name(const std::vector<std::string>& got,
                                      const std::vector<std::string>& want,
                                      const std::string& what);

}  // namespace shardscope
