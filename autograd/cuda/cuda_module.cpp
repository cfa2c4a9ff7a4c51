// The CUDA module's loader: where the module is, dlopen / dlsym, and the one load per process.
#include "autograd/cuda/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "autograd/errors.h"

namespace shardscope {
namespace {

// An object of this library, for dladdr to name the file it was loaded from.
const char kThisLibrary = 0;

// The folder of the file holding this code ("/build/lib/"), or "" when dladdr cannot say.
std::string folder_of_this_library() {
  Dl_info info{};
  if (dladdr(&kThisLibrary, &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string file = info.dli_fname;
  const std::size_t slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash + 1);
}

std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "no error text from the dynamic loader";
}

Error load_error(const std::string& path, const std::string& why) {
  return Error("cannot load the CUDA module " + path + ": " + why +
               " (the module holds the CUDA backend and NCCL; " + kCudaModuleVariable +
               " names another file to load)");
}

// The module opened once: its handle, or why it could not be opened.
struct LoadedModule {
  std::string path;
  void* handle = nullptr;
  std::string error;  // the whole message of the load error, when handle is null
};

const LoadedModule& loaded_module() {
  static const LoadedModule module = [] {
    LoadedModule m;
    m.path = cuda_module_path();
    m.handle = dlopen(m.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!m.handle) m.error = load_error(m.path, last_dl_error()).what();
    return m;
  }();
  return module;
}

void* find_entry(void* handle, const std::string& path, const char* entry) {
  dlerror();  // clear an older error: a null symbol is an error only if dlerror says so
  void* symbol = dlsym(handle, entry);
  if (!symbol)
    throw load_error(path, std::string("it has no entry ") + entry + ": " + last_dl_error());
  return symbol;
}

}  // namespace

std::string cuda_module_path() {
  const char* given = std::getenv(kCudaModuleVariable);
  if (given != nullptr && given[0] != '\0') return given;
  return folder_of_this_library() + kCudaModuleFile;
}

void* open_cuda_module_entry(const std::string& path, const char* entry) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw load_error(path, last_dl_error());
  return find_entry(handle, path, entry);
}

void* cuda_module_entry(const char* entry) {
  const LoadedModule& module = loaded_module();
  if (!module.handle) throw Error(module.error);
  return find_entry(module.handle, module.path, entry);
}

void check_cuda_module_version(int found, const char* entry) {
  if (found == kCudaModuleVersion) return;
  throw Error("the CUDA module " + loaded_module().path + " is from another build: its " + entry +
              " has version " + std::to_string(found) + ", this library expects " +
              std::to_string(kCudaModuleVersion) + " (rebuild both, or unset " +
              kCudaModuleVariable + ")");
}

}  // namespace shardscope
