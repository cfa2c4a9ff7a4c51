// The loader of the CUDA module: libshardscope_cuda.so holds all code that needs the CUDA
// runtime, cuBLAS and NCCL (the CUDA backend, NcclComm, the NCCL launcher), so that a process
// that never asks for them never loads those libraries (cuBLAS alone adds about 200 MB of
// resident memory). The entry points of cuda_backend.h, and parallel's gpu_info.h and
// run_spmd_nccl, forward through here: on first use the module is opened with dlopen and each
// library level looks up one extern "C" entry returning its table of function pointers
// (cuda_backend.h's in CudaAutogradEntries below; parallel/comm/nccl_module.h has parallel's, so
// autograd never names parallel types). Plain C++: built in every configuration.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "autograd/backend.h"
#include "autograd/caching_allocator.h"
#include "autograd/cuda/cuda_backend.h"

namespace shardscope {

// The version of the entry tables: the module checks nothing, the loader refuses a table whose
// version differs from the one it was compiled with (a module from another build). Change it
// whenever an entry of CudaAutogradEntries or CudaParallelEntries changes.
constexpr int kCudaModuleVersion = 1;

// The module's file name, and the environment variable that names another file to load.
constexpr const char* kCudaModuleFile = "libshardscope_cuda.so";
constexpr const char* kCudaModuleVariable = "SHARDSCOPE_CUDA_MODULE";

// cuda_backend.h's entry points as the module implements them.
struct CudaAutogradEntries {
  int version;
  int (*device_count)(std::string* why_none);
  std::string (*device_report)();
  std::unique_ptr<Backend> (*make_backend)(int index, const CudaOptions& options);
  AllocatorStats (*memory_stats)(const Backend& backend);
  void* (*backend_stream)(const Backend& backend);
};

// The extern "C" entry of the module that returns its CudaAutogradEntries (defined in the module
// by cuda_module_entry.cpp; the loader finds it with dlsym, nothing links to it).
constexpr const char* kCudaAutogradEntry = "shardscope_cuda_autograd_entries";
extern "C" const CudaAutogradEntries* shardscope_cuda_autograd_entries();

// The file the module is loaded from: $SHARDSCOPE_CUDA_MODULE when set and not empty, otherwise
// libshardscope_cuda.so in the folder of libshardscope_autograd.so (where the build puts both).
std::string cuda_module_path();

// Opens the module at `path` (or finds it already open) and returns its symbol `entry`, with no
// caching. Throws Error "cannot load the CUDA module PATH: <dlerror's text>" when the file or a
// library it needs is missing ("libcublas.so.13: cannot open shared object file: ..."), and
// "cannot load the CUDA module PATH: it has no entry ENTRY: ..." when the symbol is not there.
void* open_cuda_module_entry(const std::string& path, const char* entry);

// The symbol `entry` of the module at cuda_module_path(), loading the module on first use. The
// load happens once per process (thread-safe); a failure is remembered and thrown again.
void* cuda_module_entry(const char* entry);

// Checks an entry table's version; Error naming the module's path and both versions otherwise.
void check_cuda_module_version(int found, const char* entry);

// The table that the module's entry `entry` returns (CudaAutogradEntries, CudaParallelEntries:
// one entry per table type, looked up once), loading the module on first use; throws as
// cuda_module_entry does, and Error when the table's version is not kCudaModuleVersion.
template <typename Table>
const Table& cuda_module_table(const char* entry) {
  static const Table* const table = [entry] {
    using Entry = const Table* (*)();
    const Table* found = reinterpret_cast<Entry>(cuda_module_entry(entry))();
    check_cuda_module_version(found->version, entry);
    return found;
  }();
  return *table;
}

// The same, or null with `why` set to the error.
template <typename Table>
const Table* cuda_module_table_or_why(const char* entry, std::string& why) {
  try {
    return &cuda_module_table<Table>(entry);
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace shardscope
