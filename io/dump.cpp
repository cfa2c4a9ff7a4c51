// DumpWriter (rank 0 writes every file of a parallel run) and load_dump.
#include "io/dump.h"

#include <algorithm>
#include <filesystem>

#include "autograd/backend.h"
#include "io/atomic_file.h"
#include "io/npy.h"
#include "parallel/layers/collective_ops.h"

namespace shardscope {
namespace {

namespace fs = std::filesystem;

// "out/dump/" as "out/dump", so its parent is "out" and its name "dump".
fs::path without_trailing_slash(const std::string& dir) {
  fs::path p(dir);
  return p.has_filename() || !p.has_parent_path() ? p : p.parent_path();
}

// Every rank's `local` on rank 0, in rank order (Partial parts cannot be sliced from a sum).
std::vector<Tensor> gather_parts(ProcessGroup& g, const Tensor& local) {
  Context& ctx = local.ctx();
  Tensor flat = Tensor::empty(ctx, Shape{local.numel()}, local.dtype());
  ctx.backend().copy(local, flat);
  const Tensor all = g.all_gather(flat, CommPurpose::check);  // [t * numel]
  std::vector<Tensor> parts;
  if (g.rank() != 0) return parts;
  std::vector<unsigned char> host(all.bytes());
  if (!host.empty()) ctx.backend().copy_to_host(host.data(), all.raw_data(), host.size());
  for (int r = 0; r < g.size(); ++r) {
    Tensor part = Tensor::empty(ctx, local.shape(), local.dtype());
    if (part.bytes() > 0) {
      ctx.backend().copy_from_host(part.raw_data(), host.data() + r * part.bytes(), part.bytes());
    }
    parts.push_back(part);
  }
  return parts;
}

Tensor summed(ProcessGroup& g, const Tensor& local) {
  Tensor sum = local.clone();
  g.all_reduce(sum, ReduceOp::sum, CommPurpose::check);
  return sum;
}

}  // namespace

Manifest manifest_header(const LayerConfig& config) {
  Manifest m;
  m.config = layer_config_json(config);
  m.mode = mode_name(config.mode);
  m.degree = config.degree;
  m.dtype = config.dtype;
  return m;
}

DumpWriter::DumpWriter(std::string dir, ProcessGroup& group, Manifest header)
    : dir_(std::move(dir)), group_(group), manifest_(std::move(header)) {
  manifest_.degree = group.size();
  manifest_.tensors.clear();
  if (group.rank() != 0) return;
  const fs::path target = without_trailing_slash(dir_);
  std::error_code ec;
  if (!target.parent_path().empty()) fs::create_directories(target.parent_path(), ec);
  staging_ = temporary_name_beside(target.string());
  if (!ec) fs::create_directory(staging_, ec);
  if (ec) {
    staging_.clear();
    throw ManifestError(dir_ + ": cannot create the dump folder (" + ec.message() + ")");
  }
}

DumpWriter::~DumpWriter() {
  std::error_code ec;  // an unfinished dump leaves nothing behind
  if (!staging_.empty()) fs::remove_all(staging_, ec);
}

void DumpWriter::write(const std::string& name, int rank, const Tensor& t, Placement placement) {
  const std::string file = dump_file_name(name, rank);
  try {
    write_npy((fs::path(staging_) / file).string(), t);
  } catch (const NpyError& e) {
    throw NpyError(naming_the_dump(e.what()));
  }
  manifest_.tensors.push_back({name, file, t.shape(), t.dtype(), rank, placement});
}

std::string DumpWriter::naming_the_dump(std::string message) const {
  for (std::size_t at = message.find(staging_); at != std::string::npos;
       at = message.find(staging_, at + dir_.size())) {
    message.replace(at, staging_.size(), dir_);
  }
  return message;
}

// The staging folder becomes `dir`; a dump already there is replaced (moved aside, then removed).
void DumpWriter::install() {
  const fs::path target = without_trailing_slash(dir_);
  std::error_code ec;
  fs::rename(staging_, target, ec);  // replaces an empty folder
  if (ec && fs::is_directory(target)) {
    const std::string old = temporary_name_beside(target.string());
    ec.clear();
    fs::rename(target, old, ec);
    if (!ec) fs::rename(staging_, target, ec);
    std::error_code ignored;
    if (!ec) fs::remove_all(old, ignored);
  }
  if (ec)
    throw ManifestError(dir_ + ": cannot move the finished dump into place (" + ec.message() + ")");
  staging_.clear();
}

void DumpWriter::add(const std::string& name, const Tensor& local, Placement placement) {
  check_tensor_name(name);
  if (!local.defined()) {
    throw ArgumentError("DumpWriter: tensor '" + name + "' is undefined on rank " +
                        std::to_string(group_.rank()) + " (a gradient before backward?)");
  }
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
    throw ArgumentError("DumpWriter: tensor '" + name + "' was added twice");
  }
  names_.push_back(name);
  Context& ctx = local.ctx();
  NoGradGuard no_grad(ctx);
  ScopeGuard scope(ctx, "dump");
  const int t = group_.size();
  if (placement.kind == Placement::Kind::partial) {
    const std::vector<Tensor> parts = gather_parts(group_, local);
    const Tensor full = summed(group_, local);
    if (group_.rank() != 0) return;
    write(name, kFullRank, full, placement);
    for (int r = 0; r < t; ++r) write(name, r, parts[static_cast<std::size_t>(r)], placement);
    return;
  }
  const Tensor full = gather_to_full(group_, local, placement, CommPurpose::check);
  if (group_.rank() != 0) return;
  write(name, kFullRank, full, placement);
  if (!placement.is_shard()) return;
  for (int r = 0; r < t; ++r) write(name, r, slice_of_full(full, placement, r, t), placement);
}

const Manifest& DumpWriter::finish() {
  if (group_.rank() != 0) return manifest_;
  try {
    write_manifest(staging_, manifest_);
  } catch (const ManifestError& e) {
    throw ManifestError(naming_the_dump(e.what()));
  }
  install();
  return manifest_;
}

const Tensor& LoadedDump::at(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it != tensors.end()) return it->second;
  std::string names;
  for (const auto& [n, t] : tensors) names += (names.empty() ? "" : ", ") + n;
  throw ManifestError(dir + ": the dump has no full tensor '" + name + "' (it has: " + names + ")");
}

void LoadedDump::copy_into(const std::string& name, const Tensor& dst) const {
  const Tensor& src = at(name);
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    throw ManifestError(dir + ": tensor '" + name + "' is " + dtype_name(src.dtype()) +
                        src.shape().str() + " in the dump, the run needs " +
                        dtype_name(dst.dtype()) + dst.shape().str() +
                        " (run with the dump's config: " + manifest.config.dump() + ")");
  }
  if (src.bytes() == 0) return;
  std::vector<unsigned char> host(src.bytes());
  src.ctx().backend().copy_to_host(host.data(), src.raw_data(), host.size());
  dst.ctx().backend().copy_from_host(dst.raw_data(), host.data(), host.size());
}

LoadedDump load_dump(const std::string& dir) {
  LoadedDump dump;
  dump.context = std::make_shared<Context>(0);
  Context& ctx = *dump.context;
  dump.dir = dir;
  dump.manifest = read_manifest(dir);
  for (const ManifestTensor& entry : dump.manifest.tensors) {
    if (!entry.full()) continue;
    Tensor t = read_npy((std::filesystem::path(dir) / entry.file).string(), ctx);
    t.set_name(entry.name);
    dump.tensors.emplace(entry.name, t);
  }
  return dump;
}

}  // namespace shardscope
