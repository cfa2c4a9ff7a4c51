// Dump folders for reference checks: DumpWriter, which the ranks of a run call together to write
// one .npy file per tensor (the full, gathered tensor as "<name>.npy" and, for a sharded or
// partial tensor, each rank's part as "<name>.rank<r>.npy") and manifest.json; and load_dump,
// which reads a dump's full tensors back so a run can start from them (`shardscope run --load`).
// Format: docs/dump-format.md.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/manifest.h"
#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"

namespace shardscope {

// The manifest fields of a layer run (config, mode, degree, dtype), with no tensors yet.
Manifest manifest_header(const LayerConfig& config);

// Every rank of the group makes one DumpWriter and calls add() for the same names in the same
// order: add() runs collectives (CommPurpose::check, scope "dump") to bring every rank's part to
// rank 0, and rank 0 writes every file, so the folder is complete on rank 0's machine whether the
// ranks are threads or MPI processes. finish() writes manifest.json on rank 0.
//
// The dump appears whole or not at all: rank 0 writes into a hidden staging folder beside `dir`
// (temporary_name_beside), and finish() renames it to `dir`, replacing what `dir` held (an empty
// folder, or an earlier dump: the command line refuses that unless asked, apps/output_paths.h).
// A writer destroyed before finish() (an error part-way) removes its staging folder. Errors name
// `dir`, never the staging folder.
class DumpWriter {
 public:
  // Rank 0 creates the parents of `dir` if needed, and the staging folder.
  DumpWriter(std::string dir, ProcessGroup& group, Manifest header);
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;

  // `local` is this rank's part of the tensor under `placement`: the whole tensor (Replicate),
  // the rank's slice along dim d (Shard(d)), or a summand of it (Partial). Files: "<name>.npy"
  // (rank "full": gathered, or summed for Partial) and, unless Replicate, "<name>.rank<r>.npy"
  // for every rank r. Throws ArgumentError for an undefined tensor or a repeated name.
  void add(const std::string& name, const Tensor& local, Placement placement);

  // Writes manifest.json on rank 0 and returns the manifest (its tensors are listed on rank 0
  // only; other ranks return the header).
  const Manifest& finish();

  const std::string& dir() const { return dir_; }

 private:
  void write(const std::string& name, int rank, const Tensor& t, Placement placement);
  std::string naming_the_dump(std::string message) const;  // the staging folder's name -> dir_
  void install();

  std::string dir_;
  std::string staging_;  // rank 0, until finish(): where the files are written
  ProcessGroup& group_;
  Manifest manifest_;
  std::vector<std::string> names_;
};

// The full tensors of a dump, by name, for starting a run from them. It owns the (CPU) Context
// its tensors live in, so it may outlive any other context, e.g. inside a LayerRunSpec hook.
struct LoadedDump {
  std::shared_ptr<Context> context;  // first: destroyed after the tensors
  std::string dir;
  Manifest manifest;
  std::map<std::string, Tensor> tensors;  // the entries with rank "full"

  // ManifestError naming the dump and the names it holds when `name` is absent.
  const Tensor& at(const std::string& name) const;
  // Copies tensor `name` into `dst` (same shape and dtype; any context, any device). Only reads
  // the dump, so rank threads may share one LoadedDump. ManifestError on a mismatch.
  void copy_into(const std::string& name, const Tensor& dst) const;
};

// Reads dir/manifest.json (validated, every file checked) and the full tensors.
LoadedDump load_dump(const std::string& dir);

}  // namespace shardscope
