// Shape: the extents of a contiguous row-major tensor, with the helpers ops use to check them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace shardscope {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i)]; }
  // dim(-1) is the last dim; throws ShapeError naming the shape when out of range.
  std::int64_t dim(int i) const;
  // Turns a possibly negative dim into 0..rank-1; throws ShapeError naming the shape when out
  // of range.
  int normalize_dim(int i) const;
  std::int64_t numel() const;
  // Row-major strides in elements.
  std::vector<std::int64_t> strides() const;
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::string str() const;  // "[2, 3, 4]"

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace shardscope
