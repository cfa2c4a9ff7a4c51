// Fuzz target: the dump manifest reader (io/manifest.h) on any bytes, as the text of
// manifest.json: parsed (parse_manifest_text), validated field by field (manifest_from_json, and
// layer_config_from_json on its config), then read from a folder with read_manifest, which also
// opens each tensor's .npy file. The folder holds x.npy ([2, 3] f32) and bad.npy (not a .npy file)
// for entries to name. Properties: bad input is a ManifestError (any other exception, a crash, a
// leak or undefined behaviour is a bug); an accepted manifest reads back the same after
// manifest_json; read_manifest accepts only what manifest_from_json accepts.
#include <cstddef>
#include <cstdint>

#include "autograd/context.h"
#include "autograd/tensor.h"
#include "fuzz/fuzz_support.h"
#include "io/manifest.h"
#include "io/npy.h"

namespace shardscope::fuzz {
namespace {

using nlohmann::json;

// The dump folder, with its .npy files written once.
const std::filesystem::path& dump_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = scratch_dir() / "dump";
    std::filesystem::create_directories(d);
    Context ctx;
    write_npy((d / "x.npy").string(),
              Tensor::from_vector(ctx, Shape{2, 3}, {1, 2, 3, 4, 5, 6}, DType::f32));
    write_file(d / "bad.npy", "not a numpy file");
    return d;
  }();
  return dir;
}

void check_config(const json& j) {
  if (!j.is_object() || !j.contains("config")) return;
  try {
    layer_config_from_json(j.at("config"), "fuzz/manifest.json");
  } catch (const ManifestError&) {
  }
}

void check_round_trip(const Manifest& m) {
  const json written = manifest_json(m);
  Manifest again;
  try {
    again = manifest_from_json(written, "rewritten");
  } catch (const ManifestError& e) {
    broken(std::string("an accepted manifest does not read back after manifest_json: ") + e.what());
  }
  if (manifest_json(again) != written) {
    broken("the manifest changed in the round trip: " + written.dump() + " became " +
           manifest_json(again).dump());
  }
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardscope;
  const std::string text = fuzz::as_text(data, size);
  bool valid = false;
  try {
    const nlohmann::json j = parse_manifest_text(text, "fuzz/manifest.json");
    fuzz::check_config(j);
    const Manifest m = manifest_from_json(j, "fuzz/manifest.json");
    valid = true;
    fuzz::check_round_trip(m);
  } catch (const ManifestError&) {
  }
  fuzz::write_file(fuzz::dump_dir() / kManifestFile, text);
  try {
    read_manifest(fuzz::dump_dir().string());
    if (!valid) fuzz::broken("read_manifest accepted a manifest that manifest_from_json refuses");
  } catch (const ManifestError&) {
  }
  return 0;
}
