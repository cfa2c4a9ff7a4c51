// StridedCopy: a copy between two index maps over the same dims (Backend::copy_strided). For
// every index i over `dims`, dst's element at dst_offset + sum_d i_d dst_strides[d] takes src's
// at src_offset + sum_d i_d src_strides[d] (all in elements). A permute is one with dst
// contiguous; attention's heads out of the fused qkv columns (head_split) are ones with an
// offset and strides on one side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {

struct StridedCopy {
  std::vector<std::int64_t> dims;
  std::int64_t src_offset = 0, dst_offset = 0;
  std::vector<std::int64_t> src_strides, dst_strides;

  std::int64_t numel() const;
  // Throws ArgumentError naming the field when the strides' counts are not the dims', a dim,
  // stride or offset is negative, or an index reaches past src_numel or dst_numel elements. The
  // destination's map must also be one to one (no two indices on one element): a backend may
  // write in threads. The caller makes sure of that; it is not checked.
  void validate(std::int64_t src_numel, std::int64_t dst_numel) const;
  std::string str() const;
};

}  // namespace shardscope
