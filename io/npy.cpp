// NumPy .npy encoding and decoding (format spec: numpy.lib.format, versions 1.0 and 2.0).
#include "io/npy.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "autograd/backend.h"
#include "io/atomic_file.h"

namespace shardscope {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kAlign = 64;         // the data starts at a multiple of 64 bytes
constexpr std::size_t kGrowthDigits = 21;  // NumPy's spare room for the first dim to grow

// At most the first 200 bytes, escaped, then "... (N bytes)": a 2.0 header may be 4 GiB long.
std::string quoted(const std::string& text) {
  constexpr std::size_t kMost = 200;
  std::string out;
  for (unsigned char ch : text.substr(0, kMost)) {
    if (std::isprint(ch)) {
      out += static_cast<char>(ch);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    }
  }
  if (text.size() > kMost) return "'" + out + "'... (" + std::to_string(text.size()) + " bytes)";
  return "'" + out + "'";
}

[[noreturn]] void fail(const std::string& what, const std::string& message) {
  throw NpyError(what + ": " + message);
}

bool host_is_little_endian() {
  const std::uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// .npy data is little-endian; host bytes are turned around in place on a big-endian host.
void to_little_endian(char* data, std::size_t count, std::size_t item) {
  if (item == 1 || host_is_little_endian()) return;
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * item, data + (i + 1) * item);
}

std::uint32_t read_le(const std::string& bytes, std::size_t at, std::size_t size) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < size; ++i) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

DType parse_descr(const std::string& descr, const std::string& what) {
  if (descr == "<f4") return DType::f32;
  if (descr == "<f8") return DType::f64;
  if (descr == "|u1" || descr == "<u1") return DType::u8;
  if (descr == "<f2") return DType::f16;
  std::string hint;
  if (!descr.empty() && descr[0] == '>') hint = " (big-endian: convert with arr.astype('<...'))";
  fail(what, "unsupported dtype descr " + quoted(descr) + hint +
                 "; shardscope reads '<f4' (f32), '<f8' (f64), '<f2' (f16) and '|u1' (u8)");
}

// A minimal reader of the Python literal NumPy writes: {'descr': str, 'fortran_order': bool,
// 'shape': tuple of ints}. Anything else is a malformed header, named with its position.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : text_(text), what_(what) {}

  NpyHeader parse() {
    bool have_descr = false, have_order = false, have_shape = false;
    NpyHeader header;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr" && !have_descr) {
        header.dtype = parse_descr(string_literal(), what_);
        have_descr = true;
      } else if (key == "fortran_order" && !have_order) {
        if (boolean())
          fail(what_, "fortran_order is True; write C-order arrays (np.ascontiguousarray)");
        have_order = true;
      } else if (key == "shape" && !have_shape) {
        header.shape = shape();
        have_shape = true;
      } else {
        malformed("unexpected or repeated key " + quoted(key));
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != text_.size()) malformed("text after the closing '}'");
    if (!have_descr || !have_order || !have_shape) {
      malformed(std::string("missing key ") + (!have_descr   ? "'descr'"
                                               : !have_order ? "'fortran_order'"
                                                             : "'shape'"));
    }
    return header;
  }

 private:
  [[noreturn]] void malformed(const std::string& why) const {
    fail(what_, "malformed header dict (" + why + " at character " + std::to_string(pos_) +
                    "): " + quoted(text_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek(char ch) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == ch;
  }
  void expect(char ch) {
    if (!peek(ch)) malformed(std::string("expected '") + ch + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      malformed("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) malformed("unterminated string");
    std::string value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return word[0] == 'T';
      }
    }
    malformed("expected True or False");
  }
  std::int64_t integer() {
    skip_space();
    std::int64_t value = 0;
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (value > (std::numeric_limits<std::int64_t>::max() - 9) / 10) malformed("dim too large");
      value = value * 10 + (text_[pos_++] - '0');
    }
    if (pos_ == start) malformed("expected a non-negative integer");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
    return value;
  }
  Shape shape() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (!peek(')')) {
      dims.push_back(integer());
      if (!peek(')')) expect(',');
    }
    expect(')');
    return Shape(std::move(dims));
  }

  const std::string& text_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

// Bytes of data a header's shape and dtype need; NpyError when the size of its non-zero dims
// does not fit in 63 bits (the rule Tensor::empty checks, so a header read here always makes a
// tensor, wherever a zero dim stands).
std::size_t data_bytes(const NpyHeader& h, const std::string& what) {
  auto bytes = static_cast<std::int64_t>(dtype_size(h.dtype));
  bool empty = false;
  for (std::int64_t d : h.shape.dims()) {
    empty = empty || d == 0;
    if (d != 0 && __builtin_mul_overflow(bytes, d, &bytes)) {
      fail(what, "shape " + h.shape.str() + " of " + dtype_name(h.dtype) +
                     " is too large: its byte size overflows 64 bits");
    }
  }
  return empty ? 0 : static_cast<std::size_t>(bytes);
}

void check_data_size(const NpyHeader& h, std::size_t file_size, const std::string& what) {
  const std::size_t need = data_bytes(h, what);
  const std::size_t have = file_size - h.data_offset;
  if (have == need) return;
  fail(what, std::string(have < need ? "truncated data" : "extra data") + ": shape " +
                 h.shape.str() + " of " + dtype_name(h.dtype) + " needs " + std::to_string(need) +
                 " data bytes, the file has " + std::to_string(have));
}

std::string read_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file for reading");
  std::string bytes(max_bytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(max_bytes));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

std::size_t file_size(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read the file size (" + ec.message() + ")");
  return static_cast<std::size_t>(size);
}

}  // namespace

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::u8:
      return "|u1";
    case DType::f16:
      return "<f2";
    case DType::bf16:
      break;  // NumPy has no bfloat16 (encode_npy refuses it)
  }
  return "?";
}

std::string npy_header_dict(DType dtype, const Shape& shape) {
  std::ostringstream s;
  s << "{'descr': '" << npy_descr(dtype) << "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < shape.rank(); ++i) s << (i ? ", " : "") << shape[i];
  s << (shape.rank() == 1 ? ",), }" : "), }");
  return s.str();
}

std::string encode_npy(const Tensor& tensor) {
  if (tensor.dtype() == DType::bf16) {
    throw NpyError("cannot write " + tensor.describe() +
                   " as .npy: NumPy has no bfloat16 dtype; widen it to f32 (exact) first");
  }
  std::string header = npy_header_dict(tensor.dtype(), tensor.shape());
  if (tensor.rank() > 0) {
    header.append(kGrowthDigits - std::to_string(tensor.shape()[0]).size(), ' ');
  }
  const bool v2 = header.size() + kAlign > 65535;  // 1.0 stores the padded length in 16 bits
  const std::size_t prefix = v2 ? 12 : 10;
  // NumPy pads with 1 to 64 spaces (64, not 0, when the length is already a multiple).
  header.append(kAlign - (prefix + header.size() + 1) % kAlign, ' ');
  header += '\n';
  std::string out(kMagic, kMagicSize);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const std::size_t length_bytes = v2 ? 4 : 2;
  for (std::size_t i = 0; i < length_bytes; ++i) {
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  out += header;
  const std::size_t start = out.size();
  out.resize(start + tensor.bytes());
  if (tensor.bytes() > 0) {
    tensor.ctx().backend().copy_to_host(out.data() + start, tensor.raw_data(), tensor.bytes());
  }
  to_little_endian(out.data() + start, static_cast<std::size_t>(tensor.numel()),
                   dtype_size(tensor.dtype()));
  return out;
}

NpyHeader decode_npy_header(const std::string& bytes, const std::string& what) {
  if (bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    fail(what, "not a .npy file: wrong magic (expected '\\x93NUMPY', found " +
                   quoted(bytes.substr(0, kMagicSize)) + ")");
  }
  if (bytes.size() < kMagicSize + 2) fail(what, "truncated header: no format version");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2) || minor != 0) {
    fail(what, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (shardscope reads 1.0 and 2.0)");
  }
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) fail(what, "truncated header: no header length");
  const std::size_t length = read_le(bytes, 8, length_bytes);
  NpyHeader header;
  header.data_offset = 8 + length_bytes + length;
  if (bytes.size() < header.data_offset) {
    fail(what, "truncated header: the header length says " + std::to_string(length) +
                   " bytes, the file has " + std::to_string(bytes.size() - 8 - length_bytes));
  }
  const std::string dict = bytes.substr(8 + length_bytes, length);
  const NpyHeader parsed = HeaderParser(dict, what).parse();
  header.dtype = parsed.dtype;
  header.shape = parsed.shape;
  return header;
}

Tensor decode_npy(const std::string& bytes, Context& ctx, const std::string& what) {
  const NpyHeader h = decode_npy_header(bytes, what);
  check_data_size(h, bytes.size(), what);
  Tensor t = Tensor::empty(ctx, h.shape, h.dtype);
  std::string data = bytes.substr(h.data_offset);
  to_little_endian(data.data(), static_cast<std::size_t>(t.numel()), dtype_size(h.dtype));
  if (!data.empty()) ctx.backend().copy_from_host(t.raw_data(), data.data(), data.size());
  return t;
}

void write_npy(const std::string& path, const Tensor& tensor) {
  const std::string bytes = encode_npy(tensor);
  try {
    write_file_atomically(path, [&](std::ostream& out) {
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    });
  } catch (const FileWriteError& e) {
    fail(path, e.failure());
  }
}

NpyHeader read_npy_header(const std::string& path) {
  const std::size_t size = file_size(path);
  std::string prefix = read_file(path, 12);
  if (prefix.size() >= 10 && prefix.compare(0, kMagicSize, kMagic, kMagicSize) == 0) {
    const std::size_t length_bytes = prefix[6] == 2 ? 4 : 2;
    if (prefix.size() >= 8 + length_bytes) {
      // Never more than the file holds: a corrupt 2.0 header length can say 4 GiB.
      const std::size_t header_end = 8 + length_bytes + read_le(prefix, 8, length_bytes);
      prefix = read_file(path, std::min(header_end, size));
    }
  }
  const NpyHeader h = decode_npy_header(prefix, path);
  check_data_size(h, size, path);
  return h;
}

Tensor read_npy(const std::string& path, Context& ctx) {
  // The header first: a file whose size is not what its header says is an NpyError before the
  // whole file is read.
  const NpyHeader h = read_npy_header(path);
  const std::string bytes = read_file(path, h.data_offset + data_bytes(h, path));
  Tensor t = decode_npy(bytes, ctx, path);
  t.set_name(std::filesystem::path(path).stem().string());
  return t;
}

}  // namespace shardscope
