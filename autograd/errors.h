// The exception types of shardscope. Messages say what was expected, what was given and where
// (op, scope, layer, rank); Context::where (forward) and Node::where (backward) build the "where"
// part: "op 'matmul' in attn.qkv (layer 0, forward, rank 0)".
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor of the wrong shape reached an op.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A tensor of the wrong dtype or device reached an op.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// The graph or a tensor is in the wrong state (backward twice, no grad_fn, released buffers).
class StateError : public Error {
 public:
  using Error::Error;
};

// A caller passed a bad argument (bad flag, bad probability, zero size).
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// A configuration that breaks one of its own rules. The message names the configuration's fields
// ("hidden 30 must be divisible by heads 4") and fields() lists them, so that a command line can
// say which of its flags set them: the library knows no flags.
class ConfigError : public ArgumentError {
 public:
  ConfigError(const std::string& message, std::vector<std::string> fields)
      : ArgumentError(message), fields_(std::move(fields)) {}
  const std::vector<std::string>& fields() const { return fields_; }

 private:
  std::vector<std::string> fields_;
};

// A device had no memory left for an allocation: the message names the bytes asked for and the
// device, and Context::allocate adds the op that asked ("... in op 'matmul' in attn.qkv (layer 0,
// forward, rank 1)"; "in no op" while setting up); run_spmd names the op for any other
// std::bad_alloc (a host container's).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// The numerical guard (Context::set_check_finite) found NaN or Inf in an op's output (forward) or
// in a gradient (backward); the message names the op, the tensor and the first bad element.
class NumericalError : public Error {
 public:
  using Error::Error;
};

}  // namespace shardscope
