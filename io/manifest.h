// manifest.json of a dump folder: what the run was (config, mode, degree, dtype) and, for each
// tensor, its name, .npy file, shape, dtype, rank (an int, or "full" for the gathered tensor) and
// placement. Reading validates every field and checks each file's .npy header against its entry;
// a problem is a ManifestError naming the file, the tensor and the field (docs/dump-format.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/errors.h"
#include "autograd/tensor.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"

namespace shardscope {

class ManifestError : public Error {
 public:
  using Error::Error;
};

constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kDumpFormat = "shardscope-dump";
constexpr int kDumpVersion = 1;
constexpr int kFullRank = -1;  // "rank": "full": the whole (gathered) tensor

struct ManifestTensor {
  std::string name;  // "attn.qkv.weight.grad"
  std::string file;  // relative to the dump folder: "attn.qkv.weight.grad.rank1.npy"
  Shape shape;
  DType dtype = DType::f32;
  int rank = kFullRank;
  Placement placement;  // of the tensor in the run ("Shard(1)" for both its shards and its full)

  bool full() const { return rank == kFullRank; }
  std::string label() const;  // "input.grad" or "input.grad (rank 1)"
};

struct Manifest {
  nlohmann::json config = nlohmann::json::object();  // layer_config_json for our dumps
  std::string mode = "single";
  int degree = 1;
  DType dtype = DType::f32;
  std::vector<ManifestTensor> tensors;

  // The entry of `name` at `rank`, or nullptr.
  const ManifestTensor* find(const std::string& name, int rank = kFullRank) const;
};

// "x.npy" for the full tensor, "x.rank2.npy" for rank 2's shard.
std::string dump_file_name(const std::string& name, int rank);
// Throws ManifestError unless `name` can be a file name: non-empty, no '/', '\\', no leading '.'.
void check_tensor_name(const std::string& name);

// "Replicate", "Shard(d)" or "Partial" (Placement::str()); ManifestError otherwise.
Placement parse_placement(const std::string& text);
// "f32", "f64" or "u8"; ManifestError otherwise.
DType parse_dtype_name(const std::string& text);

nlohmann::json layer_config_json(const LayerConfig& config);
// The inverse of layer_config_json: seq, batch, hidden and heads are required, the other fields
// keep LayerConfig's defaults when absent. `what` names the source in errors.
LayerConfig layer_config_from_json(const nlohmann::json& config, const std::string& what);

nlohmann::json manifest_json(const Manifest& manifest);
// Validates the fields and their types (not the files); `what` names the source in errors.
Manifest manifest_from_json(const nlohmann::json& json, const std::string& what);

// Parses the text of a manifest.json (no field checks): a ManifestError naming `what` for bad JSON,
// a number out of range, or nesting deeper than 64 levels (a manifest nests 4).
nlohmann::json parse_manifest_text(const std::string& text, const std::string& what);

// Writes dir/manifest.json (ManifestError naming the path when it cannot).
void write_manifest(const std::string& dir, const Manifest& manifest);
// Reads and validates dir/manifest.json, then checks that every tensor's file exists and that its
// .npy header has the manifest's shape and dtype.
Manifest read_manifest(const std::string& dir);

}  // namespace shardscope
