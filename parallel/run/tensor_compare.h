// The one comparison rule of every check (the run's reference check and `shardscope check`):
// element i of `got` matches `want` when
//
//   |got_i - want_i| <= atol * scale + rtol * |want_i|,    scale = max |want| over the tensor,
//
// numpy.isclose's rule with atol stated in units of the tensor's own scale, so that one number
// serves outputs of order 1 and gradients of order 1/(s b h). A tensor passes when no element
// fails; a NaN or an infinity in `got` that `want` does not hold never passes. What a check
// reports first is the count of elements out of tolerance, then the largest |got - want| over its
// bound ("worst": the tensor passes when it is <= 1). docs/derivations.md, "The tolerance of the
// reference check", justifies the defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

struct Tolerance {
  double rtol = 0;
  double atol = 0;  // in units of the tensor's scale, max |want|
};

// The defaults per dtype, for a run against the single-device layer in its own dtype.
Tolerance default_tolerance(DType dtype);
// A 2-byte run (bf16, f16) against the single-device layer in f32 from the same weights and data
// (docs/derivations.md, "The 2-byte types"). ConfigError for another dtype.
Tolerance f32_reference_tolerance(DType dtype);

// The largest |got - want| an element may show: atol * scale + rtol * |want|.
inline double element_bound(double want, double scale, const Tolerance& tolerance) {
  return tolerance.atol * scale + tolerance.rtol * (want < 0 ? -want : want);
}

// The comparison of one slice of a tensor, and of the whole once the slices are merged.
struct ElementStats {
  std::int64_t elements = 0;
  std::int64_t failed = 0;  // elements out of tolerance
  double max_abs = 0;       // max |got - want|: +inf with a NaN or an unmatched infinity
  double worst = 0;  // max |got - want| / bound: +inf where the bound is 0 or got is not finite
};

// max |v| over the finite elements (0 for none): an infinity in the reference must not make every
// bound infinite.
double scale_of(const std::vector<double>& values);

// `got` against `want` element by element under `tolerance`, `scale` being the whole tensor's max
// |want| (the slice's own when it is the whole tensor). Throws ShapeError naming `name` when the
// element counts differ.
ElementStats compare_elements(const std::string& name, const std::vector<double>& got,
                              const std::vector<double>& want, double scale,
                              const Tolerance& tolerance);

// Merges the statistics of two slices of one tensor (counts add, maxima take the larger).
ElementStats merge(const ElementStats& a, const ElementStats& b);

struct TensorCheck {
  std::string name;
  std::int64_t failed = 0;  // elements out of tolerance: the first number a check shows
  std::int64_t elements = 0;
  double max_abs_err = 0;
  double max_rel_err = 0;  // max_abs_err / scale: normwise, what the visualizer's heat shows
  double worst = 0;        // the largest |got - want| over its bound; passes when <= 1
  bool passed = true;
  std::string
      diagnosis;  // a failed tensor: what the difference looks like (parallel/run/diagnosis.h)
};

TensorCheck finish_check(const std::string& name, const ElementStats& stats, double scale);
// Whole tensors: ShapeError naming `name` when their sizes differ.
TensorCheck check_tensor(const std::string& name, const Tensor& got, const Tensor& want,
                         const Tolerance& tolerance);

// For each name of `got`, the index of the same name in `want`: the check pairs tensors by name,
// never by order. StateError naming the name (and what `want` has) when one is missing on either
// side or appears twice.
std::vector<std::size_t> pair_by_name(const std::vector<std::string>& got,
                                      const std::vector<std::string>& want,
                                      const std::string& what);

}  // namespace shardscope
