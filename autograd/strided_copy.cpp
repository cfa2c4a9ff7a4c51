// StridedCopy's checks.
#include "autograd/strided_copy.h"

#include "autograd/errors.h"
#include "autograd/shape.h"

namespace shardscope {
namespace {

// The largest offset the map reaches (0 for an empty copy, where it reaches none).
std::int64_t last_offset(const std::vector<std::int64_t>& dims, std::int64_t offset,
                         const std::vector<std::int64_t>& strides) {
  for (std::size_t d = 0; d < dims.size(); ++d) offset += (dims[d] - 1) * strides[d];
  return offset;
}

}  // namespace

std::int64_t StridedCopy::numel() const {
  return Shape(dims).numel();
}

std::string StridedCopy::str() const {
  // Shape::str lists any integers, "[a, b]", whatever their signs.
  return "strided copy(dims=" + Shape(dims).str() + ", src_offset=" + std::to_string(src_offset) +
         ", src_strides=" + Shape(src_strides).str() +
         ", dst_offset=" + std::to_string(dst_offset) +
         ", dst_strides=" + Shape(dst_strides).str() + ")";
}

void StridedCopy::validate(std::int64_t src_numel, std::int64_t dst_numel) const {
  auto fail = [&](const std::string& what) { throw ArgumentError(str() + ": " + what); };
  if (src_strides.size() != dims.size()) fail("src_strides must have one stride per dim");
  if (dst_strides.size() != dims.size()) fail("dst_strides must have one stride per dim");
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0) fail("dims must be >= 0");
    if (src_strides[d] < 0 || dst_strides[d] < 0) fail("strides must be >= 0");
  }
  if (src_offset < 0 || dst_offset < 0) fail("offsets must be >= 0");
  if (numel() == 0) return;
  const std::int64_t src_last = last_offset(dims, src_offset, src_strides);
  const std::int64_t dst_last = last_offset(dims, dst_offset, dst_strides);
  if (src_last >= src_numel) {
    fail("src_offset and src_strides reach element " + std::to_string(src_last) +
         " of a source of " + std::to_string(src_numel));
  }
  if (dst_last >= dst_numel) {
    fail("dst_offset and dst_strides reach element " + std::to_string(dst_last) +
         " of a destination of " + std::to_string(dst_numel));
  }
}

}  // namespace shardscope
