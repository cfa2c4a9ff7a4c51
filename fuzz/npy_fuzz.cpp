// Fuzz target: the .npy reader (io/npy.h) on any bytes, both from memory (decode_npy_header,
// decode_npy) and from a file (read_npy_header, read_npy, which read the header in pieces).
// Properties: bad input is an NpyError (any other exception, a crash, a leak or undefined
// behaviour is a bug); the file readers accept exactly what the memory readers accept, with the
// same header and values; an accepted file encodes back to the same tensor.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "fuzz/fuzz_support.h"
#include "io/npy.h"

namespace shardscope::fuzz {
namespace {

std::string describe(const NpyHeader& h) {
  return std::string(dtype_name(h.dtype)) + h.shape.str() + " at " + std::to_string(h.data_offset);
}

bool same(const NpyHeader& a, const NpyHeader& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.data_offset == b.data_offset;
}

// The tensor's bytes on the host.
std::string bytes_of(const Tensor& t) {
  std::string out(t.bytes(), '\0');
  if (!out.empty()) t.ctx().backend().copy_to_host(out.data(), t.raw_data(), out.size());
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && bytes_of(a) == bytes_of(b);
}

template <class F>
auto npy_or_nothing(F&& read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const NpyError&) {
    return std::nullopt;
  }
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardscope;
  using fuzz::broken;
  using fuzz::npy_or_nothing;
  const std::string bytes = fuzz::as_text(data, size);
  Context ctx;
  const auto header = npy_or_nothing([&] { return decode_npy_header(bytes, "fuzz.npy"); });
  const auto tensor = npy_or_nothing([&] { return decode_npy(bytes, ctx, "fuzz.npy"); });
  if (tensor && !header)
    broken("decode_npy accepted a file whose header decode_npy_header refuses");

  const std::filesystem::path path = fuzz::scratch_dir() / "fuzz.npy";
  fuzz::write_file(path, bytes);
  const auto file_header = npy_or_nothing([&] { return read_npy_header(path.string()); });
  const auto file_tensor = npy_or_nothing([&] { return read_npy(path.string(), ctx); });
  if (file_header.has_value() != tensor.has_value()) {
    broken(std::string("read_npy_header ") + (file_header ? "accepts" : "refuses") +
           " a file that decode_npy " + (tensor ? "accepts" : "refuses"));
  }
  if (file_header && !fuzz::same(*file_header, *header)) {
    broken("read_npy_header says " + fuzz::describe(*file_header) + ", decode_npy_header " +
           fuzz::describe(*header));
  }
  if (file_tensor.has_value() != tensor.has_value()) {
    broken(std::string("read_npy ") + (file_tensor ? "accepts" : "refuses") +
           " a file that decode_npy " + (tensor ? "accepts" : "refuses"));
  }
  if (!tensor) return 0;
  if (!fuzz::same(*file_tensor, *tensor)) broken("read_npy and decode_npy read different tensors");
  const auto again = npy_or_nothing([&] { return decode_npy(encode_npy(*tensor), ctx, "again"); });
  if (!again || !fuzz::same(*again, *tensor)) {
    broken("a tensor read from a .npy file does not read back the same after encode_npy");
  }
  return 0;
}
