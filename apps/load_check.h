// The checks of `--load DIR` that come before any rank starts: the dump must be of the layer the
// flags describe (shape and dtype), and the tensors the run starts from must be finite.
#pragma once

#include <string>
#include <vector>

#include "apps/run.h"
#include "io/dump.h"

namespace shardscope {

// ArgumentError (exit 2) when the dump's config (seq, batch, hidden, heads, dtype) differs from
// the run's, naming the flags to type instead; a foreign dump without a config is compared by the
// shapes of the tensors the run loads. Mode and degree may differ: any run starts from the full
// tensors. NumericalError when one of those tensors holds NaN or Inf, naming it and the first bad
// element.
void check_loaded_dump(const LoadedDump& dump, const RunOptions& options);

// "[3, 7]" for the element at flat index 43 of a [6, 12] tensor.
std::string element_index(const Shape& shape, std::int64_t flat);

}  // namespace shardscope
