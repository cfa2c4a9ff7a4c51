// DType and Device: what a tensor's elements are and where its storage lives. bf16 and f16 are
// the 2-byte floating types (autograd/kernels/half.h): stored in 2 bytes, computed in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace shardscope {

enum class DType : std::uint8_t { f32, f64, u8, bf16, f16 };

inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::u8:
      return 1;
    case DType::bf16:
    case DType::f16:
      return 2;
  }
  return 0;
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::u8:
      return "u8";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
  }
  return "?";
}

// The dtype dtype_name calls `name`; none for another name.
inline std::optional<DType> dtype_from_name(const std::string& name) {
  for (const DType d : {DType::f32, DType::f64, DType::u8, DType::bf16, DType::f16}) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

inline bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:
    case DType::f16:
      return true;
    case DType::u8:
      break;
  }
  return false;
}

// bf16 or f16: 2-byte storage whose kernels compute (and accumulate) in f32 or wider.
inline bool is_half(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::f16;
}

// The dtype of the row statistics a norm keeps for backward (LayerNorm's mean and rstd, RMSNorm's
// rstd) over rows of `dtype`: f32 for the 2-byte types, as GPU frameworks keep them (they are
// computed in f32 or wider and a bf16 rstd would cost every dx a relative error of 2^-8), the
// dtype itself otherwise.
inline DType statistics_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

// cpu: the tuned CPU backend; cuda: a GPU; reference: the plain loops of autograd/reference/,
// one thread, on host memory like cpu (a check for the others, and a text to learn an op from).
enum class DeviceKind : std::uint8_t { cpu, cuda, reference };

// "cpu", "cuda" or "reference".
inline const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::reference:
      return "reference";
    case DeviceKind::cuda:
      break;
  }
  return "cuda";
}

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  static Device reference() { return {DeviceKind::reference, 0}; }
  // Whether tensors on this device live in host memory (cpu and reference), readable in place.
  bool host_memory() const { return kind != DeviceKind::cuda; }
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string str() const {
    return kind == DeviceKind::cuda ? "cuda:" + std::to_string(index) : device_kind_name(kind);
  }
};

}  // namespace shardscope
