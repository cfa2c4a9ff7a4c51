// manifest.json: writing, and reading with validation of every field and file.
#include "io/manifest.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/atomic_file.h"
#include "io/npy.h"

namespace shardscope {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ManifestError(where + ": " + message);
}

const json& field(const json& object, const char* key, const std::string& where) {
  if (!object.is_object())
    fail(where, std::string("expected a JSON object, given ") + object.dump());
  const auto it = object.find(key);
  if (it == object.end()) fail(where, std::string("missing field '") + key + "'");
  return *it;
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json& value = field(object, key, where);
  if (!value.is_string()) {
    fail(where, std::string("field '") + key + "' must be a string, given " + value.dump());
  }
  return value.get<std::string>();
}

std::int64_t int_field(const json& object, const char* key, const std::string& where) {
  const json& value = field(object, key, where);
  if (!value.is_number_integer()) {
    fail(where, std::string("field '") + key + "' must be an integer, given " + value.dump());
  }
  return value.get<std::int64_t>();
}

// An integer field in [lo, hi] (a float, or an integer out of range, is refused by name).
int int_in_range(const json& object, const char* key, int lo, int hi, const std::string& where) {
  const json& value = field(object, key, where);
  const bool ok = value.is_number_integer() && !value.is_number_unsigned()
                      ? value.get<std::int64_t>() >= lo && value.get<std::int64_t>() <= hi
                      : value.is_number_unsigned() && lo >= 0 &&
                            value.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi) &&
                            value.get<std::uint64_t>() >= static_cast<std::uint64_t>(lo);
  if (!ok) {
    fail(where, std::string("field '") + key + "' must be an integer in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "], given " + value.dump());
  }
  return static_cast<int>(value.get<std::int64_t>());
}

Shape shape_field(const json& object, const std::string& where) {
  const json& value = field(object, "shape", where);
  std::vector<std::int64_t> dims;
  bool ok = value.is_array();
  for (std::size_t i = 0; ok && i < value.size(); ++i) {
    ok = value[i].is_number_integer() && value[i].get<std::int64_t>() >= 0;
    if (ok) dims.push_back(value[i].get<std::int64_t>());
  }
  if (!ok) {
    fail(where, "field 'shape' must be an array of non-negative integers, given " + value.dump());
  }
  return Shape(std::move(dims));
}

int rank_field(const json& object, int degree, const std::string& where) {
  const json& value = field(object, "rank", where);
  if (value.is_string() && value.get<std::string>() == "full") return kFullRank;
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0 &&
      value.get<std::int64_t>() < degree) {
    return static_cast<int>(value.get<std::int64_t>());
  }
  fail(where, "field 'rank' must be \"full\" or an integer in [0, degree " +
                  std::to_string(degree) + "), given " + value.dump());
}

ManifestTensor tensor_from_json(const json& entry, int degree, const std::string& where) {
  ManifestTensor t;
  t.name = string_field(entry, "name", where);
  const std::string named = where + " ('" + t.name + "')";
  try {
    check_tensor_name(t.name);
  } catch (const ManifestError& e) {
    fail(named, e.what());
  }
  t.file = string_field(entry, "file", named);
  if (t.file.empty() || t.file.find_first_of("/\\") != std::string::npos || t.file[0] == '.') {
    fail(named, "field 'file' must be a file name inside the dump folder, given '" + t.file + "'");
  }
  t.shape = shape_field(entry, named);
  try {
    t.dtype = parse_dtype_name(string_field(entry, "dtype", named));
    t.placement = parse_placement(string_field(entry, "placement", named));
  } catch (const ManifestError& e) {
    fail(named, e.what());
  }
  t.rank = rank_field(entry, degree, named);
  return t;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ManifestError(path + ": cannot open the manifest (is this a dump folder?)");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every entry's file exists and its .npy header agrees with the entry.
void check_files(const std::string& dir, const Manifest& m, const std::string& where) {
  for (const ManifestTensor& t : m.tensors) {
    const std::string path = (std::filesystem::path(dir) / t.file).string();
    std::error_code ec;  // a name too long for the file system is an error here, not a throw
    if (!std::filesystem::is_regular_file(path, ec)) {
      fail(where, "tensor '" + t.label() + "': file " + path + " is missing" +
                      (ec ? " (" + ec.message() + ")" : ""));
    }
    NpyHeader h;
    try {
      h = read_npy_header(path);
    } catch (const NpyError& e) {
      fail(where, "tensor '" + t.label() + "': " + e.what());
    }
    if (h.shape != t.shape || h.dtype != t.dtype) {
      fail(where, "tensor '" + t.label() + "': the manifest says " + dtype_name(t.dtype) +
                      t.shape.str() + ", " + t.file + " holds " + dtype_name(h.dtype) +
                      h.shape.str());
    }
  }
}

}  // namespace

std::string ManifestTensor::label() const {
  return full() ? name : name + " (rank " + std::to_string(rank) + ")";
}

const ManifestTensor* Manifest::find(const std::string& name, int rank) const {
  for (const ManifestTensor& t : tensors) {
    if (t.name == name && t.rank == rank) return &t;
  }
  return nullptr;
}

std::string dump_file_name(const std::string& name, int rank) {
  return rank == kFullRank ? name + ".npy" : name + ".rank" + std::to_string(rank) + ".npy";
}

void check_tensor_name(const std::string& name) {
  if (name.empty() || name.find_first_of("/\\") != std::string::npos || name[0] == '.') {
    throw ManifestError("tensor name '" + name +
                        "' cannot be a file name (empty, a '/' or '\\', or a leading '.')");
  }
}

Placement parse_placement(const std::string& text) {
  if (text == "Replicate") return Placement::replicate();
  if (text == "Partial") return Placement::partial();
  int dim = -1;
  std::size_t used = 0;
  if (text.size() > 7 && text.compare(0, 6, "Shard(") == 0 && text.back() == ')') {
    try {
      dim = std::stoi(text.substr(6, text.size() - 7), &used);
    } catch (const std::exception&) {
      dim = -1;
    }
  }
  if (dim < 0 || used != text.size() - 7) {
    throw ManifestError("placement '" + text +
                        "' is not one of \"Replicate\", \"Shard(d)\" (d >= 0), \"Partial\"");
  }
  return Placement::shard(dim);
}

DType parse_dtype_name(const std::string& text) {
  if (const std::optional<DType> d = dtype_from_name(text)) return *d;
  throw ManifestError("dtype '" + text +
                      "' is not one of \"f32\", \"f64\", \"u8\", \"bf16\", \"f16\"");
}

json layer_config_json(const LayerConfig& c) {
  return {{"seq", c.seq},
          {"batch", c.batch},
          {"hidden", c.hidden},
          {"heads", c.heads},
          {"kv_heads", c.kv_heads_count()},
          {"dropout", c.dropout},
          {"seed", c.seed},
          {"layers", c.layers},
          {"layer", c.layer},
          {"causal", c.causal},
          {"layernorm_eps", c.layernorm_eps},
          {"random_norms", c.random_norms},
          {"norm", norm_name(c.norm)},
          {"mlp", mlp_name(c.mlp)},
          {"ffn", c.ffn_width()},
          {"bias", c.bias},
          {"rope", c.rope},
          {"rope_base", c.rope_base},
          {"recompute", recompute_name(c.recompute)},
          {"dtype", dtype_name(c.dtype)},
          {"mode", mode_name(c.mode)},
          {"degree", c.degree}};
}

LayerConfig layer_config_from_json(const json& j, const std::string& what) {
  const std::string where = what + ": config";
  LayerConfig c;
  c.seq = int_field(j, "seq", where);
  c.batch = int_field(j, "batch", where);
  c.hidden = int_field(j, "hidden", where);
  c.heads = int_field(j, "heads", where);
  // Integers are taken only as integers in range: nlohmann converts a float (1e300, 2.9) to an
  // int with a cast, which is undefined out of range and silently truncates in range.
  if (j.contains("seed")) {
    const json& v = j.at("seed");
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      fail(where, "field 'seed' must be an integer >= 0, given " + v.dump());
    }
    c.seed = v.get<std::uint64_t>();
  }
  if (j.contains("layers")) c.layers = int_in_range(j, "layers", 1, INT_MAX, where);
  if (j.contains("layer")) c.layer = int_in_range(j, "layer", 0, INT_MAX, where);
  if (j.contains("degree")) c.degree = int_in_range(j, "degree", 1, INT_MAX, where);
  if (j.contains("ffn")) c.ffn = int_in_range(j, "ffn", 1, INT_MAX, where);
  if (j.contains("kv_heads")) c.kv_heads = int_in_range(j, "kv_heads", 1, INT_MAX, where);
  try {
    if (j.contains("dropout")) c.dropout = j.at("dropout").get<double>();
    if (j.contains("causal")) c.causal = j.at("causal").get<bool>();
    if (j.contains("layernorm_eps")) c.layernorm_eps = j.at("layernorm_eps").get<double>();
    if (j.contains("random_norms")) c.random_norms = j.at("random_norms").get<bool>();
    if (j.contains("norm")) c.norm = parse_norm(j.at("norm").get<std::string>());
    if (j.contains("mlp")) c.mlp = parse_mlp(j.at("mlp").get<std::string>());
    if (j.contains("bias")) c.bias = j.at("bias").get<bool>();
    if (j.contains("rope")) c.rope = j.at("rope").get<bool>();
    if (j.contains("rope_base")) c.rope_base = j.at("rope_base").get<double>();
    if (j.contains("recompute"))
      c.recompute = parse_recompute(j.at("recompute").get<std::string>());
    if (j.contains("dtype")) c.dtype = parse_dtype_name(j.at("dtype").get<std::string>());
    if (j.contains("mode")) c.mode = parse_mode(j.at("mode").get<std::string>());
  } catch (const json::exception& e) {
    fail(where, std::string("a field has the wrong type: ") + e.what());
  } catch (const Error& e) {
    fail(where, e.what());
  }
  return c;
}

json manifest_json(const Manifest& m) {
  json tensors = json::array();
  for (const ManifestTensor& t : m.tensors) {
    tensors.push_back({{"name", t.name},
                       {"file", t.file},
                       {"shape", t.shape.dims()},
                       {"dtype", dtype_name(t.dtype)},
                       {"rank", t.full() ? json("full") : json(t.rank)},
                       {"placement", t.placement.str()}});
  }
  return {{"format", kDumpFormat}, {"version", kDumpVersion}, {"config", m.config},
          {"mode", m.mode},        {"degree", m.degree},      {"dtype", dtype_name(m.dtype)},
          {"tensors", tensors}};
}

Manifest manifest_from_json(const json& j, const std::string& what) {
  const std::string format = string_field(j, "format", what);
  if (format != kDumpFormat) {
    fail(what, "field 'format' is '" + format + "', expected '" + kDumpFormat + "'");
  }
  const std::int64_t version = int_field(j, "version", what);
  if (version != kDumpVersion) {
    fail(what, "version " + std::to_string(version) + " is not supported (this build reads " +
                   std::to_string(kDumpVersion) + ")");
  }
  Manifest m;
  m.config = field(j, "config", what);
  if (!m.config.is_object())
    fail(what, "field 'config' must be an object, given " + m.config.dump());
  m.mode = string_field(j, "mode", what);
  const std::int64_t degree = int_field(j, "degree", what);
  if (degree < 1 || degree > 1 << 20)
    fail(what, "field 'degree' must be >= 1, given " + std::to_string(degree));
  m.degree = static_cast<int>(degree);
  try {
    m.dtype = parse_dtype_name(string_field(j, "dtype", what));
  } catch (const ManifestError& e) {
    fail(what, std::string("field 'dtype': ") + e.what());
  }
  const json& tensors = field(j, "tensors", what);
  if (!tensors.is_array()) fail(what, "field 'tensors' must be an array, given " + tensors.dump());
  std::set<std::pair<std::string, int>> seen;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string where = what + ": tensors[" + std::to_string(i) + "]";
    m.tensors.push_back(tensor_from_json(tensors[i], m.degree, where));
    if (!seen.insert({m.tensors.back().name, m.tensors.back().rank}).second) {
      fail(where, "tensor '" + m.tensors.back().label() + "' appears twice");
    }
  }
  return m;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  const std::string path = (std::filesystem::path(dir) / kManifestFile).string();
  const std::string text = manifest_json(m).dump(2) + "\n";
  try {
    write_file_atomically(path, [&](std::ostream& out) { out << text; });
  } catch (const FileWriteError& e) {
    throw ManifestError(path + ": " + e.failure());
  }
}

json parse_manifest_text(const std::string& text, const std::string& what) {
  // Deeper input is refused while it is parsed: printing a JSON value (as error messages do)
  // recurses, so a file of 100k '[' would otherwise overflow the stack.
  constexpr int kMaxNesting = 64;
  const auto limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxNesting) {
      fail(what,
           "JSON nested more than " + std::to_string(kMaxNesting) + " levels deep: not a manifest");
    }
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1e400)
    throw ManifestError(what + ": not valid JSON: " + e.what());
  }
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestFile).string();
  Manifest m = manifest_from_json(parse_manifest_text(read_text(path), path), path);
  check_files(dir, m, path);
  return m;
}

}  // namespace shardscope
