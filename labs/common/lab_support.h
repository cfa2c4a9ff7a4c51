// What a lab's starter and solution files include: the "not implemented yet" error every TODO
// throws, and the framework headers the labs build on.
#pragma once

#include <string>

#include "autograd/errors.h"

namespace shardscope::labs {

// A lab function the student has not written yet. The lab's tests fail with this message, so a
// fresh starter says exactly what is left to do.
class NotImplemented : public Error {
 public:
  explicit NotImplemented(const std::string& function)
      : Error("not implemented yet: " + function) {}
};

// The body of every TODO in a starter file: `not_implemented("ring_all_reduce");`.
[[noreturn]] inline void not_implemented(const std::string& function) {
  throw NotImplemented(function);
}

}  // namespace shardscope::labs
