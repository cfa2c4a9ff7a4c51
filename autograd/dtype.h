// DType and Device: what a tensor's elements are and where its storage lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardscope {

enum class DType : std::uint8_t { f32, f64, u8 };

inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::u8:
      return 1;
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
  }
  return "?";
}

inline bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64;
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
