// NumPy .npy files (format versions 1.0 and 2.0): write a Tensor as NumPy's np.save would, read one
// back into a Context. Supported dtypes: '<f4' (f32), '<f8' (f64), '<f2' (f16) and '|u1' (u8), C
// order only; bf16, which NumPy lacks, is refused (widen it to f32, exactly, first).
// The header is padded with spaces to a '\n' so the data starts at a multiple of 64 bytes, with
// the spare room NumPy leaves for growing the first dim, so our files are byte for byte NumPy's.
// Bad files (wrong magic, truncated header or data, a malformed header dict, an unsupported dtype,
// Fortran order, extra data) are an NpyError naming the file and what is wrong.
#pragma once

#include <cstddef>
#include <string>

#include "autograd/errors.h"
#include "autograd/tensor.h"

namespace shardscope {

class NpyError : public Error {
 public:
  using Error::Error;
};

struct NpyHeader {
  DType dtype = DType::f32;
  Shape shape;
  std::size_t data_offset = 0;  // bytes before the data: magic, version, length, header dict
};

// The header dict NumPy writes for a C-order array, without padding:
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
std::string npy_header_dict(DType dtype, const Shape& shape);
// The numpy descr of a dtype: "<f4", "<f8", "<f2" or "|u1" ("?" for bf16).
const char* npy_descr(DType dtype);

// The whole file as bytes (version 1.0). Reads the tensor's values from its device.
std::string encode_npy(const Tensor& tensor);
// Parses the header of `bytes`; `what` names the source (a path) in errors.
NpyHeader decode_npy_header(const std::string& bytes, const std::string& what);
// A new tensor in `ctx` from a whole file's bytes; checks the data size against the shape.
Tensor decode_npy(const std::string& bytes, Context& ctx, const std::string& what);

// Writes `tensor` to `path` (NpyError naming the path when it cannot be written).
void write_npy(const std::string& path, const Tensor& tensor);
// Reads only the header of the file at `path` and checks that the file size matches it.
NpyHeader read_npy_header(const std::string& path);
// Reads the file at `path` into a new tensor in `ctx`, named after the file's stem.
Tensor read_npy(const std::string& path, Context& ctx);

}  // namespace shardscope
