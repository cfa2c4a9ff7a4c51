// .npy files: round trips of every dtype and several shapes (0-d and empty included), the exact
// bytes NumPy writes, and bad files, each an NpyError that names the file and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/npy.h"
#include "tests/temp_path.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = shardscope::testing_files::temp_path("npy_" + std::string(info->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }
  static std::string read_bytes(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The message of the NpyError that reading `bytes` as a file throws (empty when none).
  std::string read_error(const std::string& bytes) {
    const std::string file = write_bytes("bad.npy", bytes);
    try {
      read_npy(file, ctx_);
    } catch (const NpyError& e) {
      EXPECT_THAT(e.what(), HasSubstr(file)) << "the error names the file";
      try {  // the header-only reader agrees
        read_npy_header(file);
        ADD_FAILURE() << "read_npy_header accepted what read_npy rejected: " << e.what();
      } catch (const NpyError&) {
      }
      return e.what();
    }
    return "";
  }

  Context ctx_;
  std::filesystem::path dir_;
};

// A version 1.0 file with `dict` as its header, padded to 64 bytes as the spec asks.
std::string npy_file(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

std::vector<double> ramp(std::int64_t n, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = dtype == DType::u8 ? static_cast<double>((i * 37) % 256)
                              : (static_cast<double>(i) - 3.25) / 7.0;
  }
  return v;
}

TEST_F(NpyTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<Shape> shapes{Shape{},        Shape{0},          Shape{5}, Shape{2, 3},
                                  Shape{2, 0, 4}, Shape{1, 2, 3, 4}, Shape{70}};
  for (DType dtype : {DType::f32, DType::f64, DType::u8, DType::f16}) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + shape.str());
      const Tensor t = Tensor::from_vector(ctx_, shape, ramp(shape.numel(), dtype), dtype);
      const std::string file = path("t.npy");
      write_npy(file, t);
      EXPECT_EQ(std::filesystem::file_size(file) % 64, t.bytes() % 64) << "data starts at 64k";
      const NpyHeader h = read_npy_header(file);
      EXPECT_EQ(h.shape, shape);
      EXPECT_EQ(h.dtype, dtype);
      EXPECT_EQ(h.data_offset % 64, 0u);
      const Tensor back = read_npy(file, ctx_);
      EXPECT_EQ(back.shape(), shape);
      EXPECT_EQ(back.dtype(), dtype);
      EXPECT_EQ(back.to_vector(), t.to_vector());
      EXPECT_EQ(back.name(), "t");
    }
  }
}

// f16 is NumPy's float16, '<f2' (1.0 = 0x3c00, -2.0 = 0xc000); NumPy has no bfloat16, so a bf16
// tensor is refused with the way out (f32 holds every bf16 value exactly).
TEST_F(NpyTest, WritesF16AsFloat16AndRefusesBf16) {
  const Tensor h = Tensor::from_vector(ctx_, {2}, {1.0, -2.0}, DType::f16);
  const std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }";
  EXPECT_EQ(encode_npy(h), std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict +
                               std::string(20 + 40, ' ') + "\n" +
                               std::string("\x00\x3c\x00\xc0", 4));
  const Tensor b = Tensor::from_vector(ctx_, {2}, {1.0, -2.0}, DType::bf16);
  try {
    encode_npy(b);
    ADD_FAILURE() << "a bf16 tensor was written";
  } catch (const NpyError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("bf16[2]"), HasSubstr("no bfloat16"), HasSubstr("f32")));
  }
}

// The bytes np.save writes (NumPy 1.24 and later): magic, version 1.0, the little-endian header
// length, the header dict, 21 - len(str(shape[0])) spaces of room for the first dim to grow (none
// for 0-d), then spaces up to a '\n' that ends at a multiple of 64 bytes, then the data.
TEST_F(NpyTest, WritesTheBytesNumPyWrites) {
  const std::string magic("\x93NUMPY\x01\x00\x76\x00", 10);  // header length 118: data at 128
  {
    const Tensor t = Tensor::from_vector(ctx_, {2, 3}, {0, 1, 2, 3, 4, 5}, DType::f32);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    const std::string data(
        "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"
        "\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40",
        24);  // 0.0f .. 5.0f, little-endian
    EXPECT_EQ(encode_npy(t), magic + dict + std::string(20 + 38, ' ') + "\n" + data);
    write_npy(path("a.npy"), t);
    EXPECT_EQ(read_bytes(path("a.npy")), encode_npy(t));
  }
  {
    const Tensor t = Tensor::from_vector(ctx_, {}, {1.5}, DType::f64);
    const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
    const std::string data("\x00\x00\x00\x00\x00\x00\xf8\x3f", 8);
    EXPECT_EQ(encode_npy(t), magic + dict + std::string(62, ' ') + "\n" + data);
  }
  {
    const Tensor t = Tensor::zeros(ctx_, {0}, DType::u8);
    const std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (0,), }";
    EXPECT_EQ(encode_npy(t), magic + dict + std::string(20 + 40, ' ') + "\n");
  }
}

TEST_F(NpyTest, ReadsVersion2AndOtherSpacing) {
  const std::string dict = "{\"descr\":'<f8','shape':(2,),'fortran_order':False}";
  std::string header = dict;
  header.append(64 - (12 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) bytes += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const Tensor want = Tensor::from_vector(ctx_, {2}, {1.0, -2.0}, DType::f64);
  bytes += header + encode_npy(want).substr(128);
  const Tensor t = read_npy(write_bytes("v2.npy", bytes), ctx_);
  EXPECT_EQ(t.shape(), Shape{2});
  EXPECT_EQ(t.to_vector(), want.to_vector());
}

TEST_F(NpyTest, RejectsBadFiles) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string data(24, '\0');
  const std::string good = npy_file(good_dict, data);
  ASSERT_EQ(read_error(good), "");

  std::string wrong_magic = good;
  wrong_magic[5] = 'X';
  EXPECT_THAT(read_error(wrong_magic), AllOf(HasSubstr("wrong magic"), HasSubstr("NUMPX")));
  EXPECT_THAT(read_error(""), HasSubstr("wrong magic"));
  EXPECT_THAT(read_error("\x93NUMPY"), HasSubstr("truncated header"));
  EXPECT_THAT(read_error(good.substr(0, 40)),
              AllOf(HasSubstr("truncated header"), HasSubstr("118 bytes")));
  std::string v3 = good;
  v3[6] = 3;
  EXPECT_THAT(read_error(v3), HasSubstr("unsupported .npy format version 3.0"));

  EXPECT_THAT(
      read_error(good.substr(0, good.size() - 4)),
      AllOf(HasSubstr("truncated data"), HasSubstr("needs 24 data bytes, the file has 20")));
  EXPECT_THAT(read_error(good + "abcd"),
              AllOf(HasSubstr("extra data"), HasSubstr("needs 24 data bytes, the file has 28")));
  // Shape and size disagree: (4,) of f8 needs 32 bytes, the file holds 3 elements.
  EXPECT_THAT(read_error(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }",
                                  std::string(24, '\0'))),
              AllOf(HasSubstr("truncated data"), HasSubstr("[4] of f64 needs 32")));

  EXPECT_THAT(
      read_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", data)),
      AllOf(HasSubstr("unsupported dtype descr '<i8'"), HasSubstr("'<f4' (f32)")));
  EXPECT_THAT(
      read_error(npy_file("{'descr': '<i2', 'fortran_order': False, 'shape': (12,), }", data)),
      AllOf(HasSubstr("unsupported dtype descr '<i2'"), HasSubstr("'<f2' (f16)")));
  EXPECT_THAT(
      read_error(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", data)),
      HasSubstr("big-endian"));
  EXPECT_THAT(
      read_error(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data)),
      HasSubstr("fortran_order is True"));

  EXPECT_THAT(read_error(npy_file("{'descr': '<f4', 'fortran_order': False}", data)),
              AllOf(HasSubstr("malformed header dict"), HasSubstr("missing key 'shape'")));
  EXPECT_THAT(
      read_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", data)),
      AllOf(HasSubstr("malformed header dict"), HasSubstr("non-negative integer")));
  EXPECT_THAT(read_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), "
                                  "'extra': 1}",
                                  data)),
              HasSubstr("unexpected or repeated key 'extra'"));
  EXPECT_THAT(read_error(npy_file("not a dict", data)), HasSubstr("expected '{'"));
}

// Found by fuzz/npy_fuzz.cpp (seeds tests/fuzz_corpus/npy/regression_*): a shape whose byte
// size overflows 64 bits only after an empty dim was a ShapeError from the tensor, not an
// NpyError; a 2.0 header length of 4 GiB made read_npy_header allocate that much.
TEST_F(NpyTest, RejectsShapesTooLargeAndHeaderLengthsPastTheFile) {
  const std::string huge = npy_file(
      "{'descr': '|u1', 'fortran_order': False, 'shape': (4611686018427387904, 2, 0), }", "");
  EXPECT_THAT(read_error(huge), AllOf(HasSubstr("shape [4611686018427387904, 2, 0] of u8"),
                                      HasSubstr("its byte size overflows 64 bits")));
  EXPECT_THROW(decode_npy(huge, ctx_, "huge.npy"), NpyError);
  // The same with the zero dim first: the rule counts the non-zero dims wherever the zero stands
  // (an empty tensor's strides are products of its other dims).
  const std::string zero_first = npy_file(
      "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 4611686018427387904, 2), }", "");
  EXPECT_THAT(read_error(zero_first), HasSubstr("its byte size overflows 64 bits"));

  std::string v2("\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr'", 20);
  EXPECT_THAT(read_error(v2), AllOf(HasSubstr("truncated header"),
                                    HasSubstr("the header length says 4294967295 bytes, the "
                                              "file has 8")));
}

TEST_F(NpyTest, WriteFailureNamesThePath) {
  const Tensor t = Tensor::zeros(ctx_, {2});
  const std::string file = path("no/such/folder/t.npy");
  try {
    write_npy(file, t);
    FAIL() << "expected NpyError";
  } catch (const NpyError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file),
                                HasSubstr("cannot create the file (No such file or directory)")));
  }
}

}  // namespace
}  // namespace shardscope
