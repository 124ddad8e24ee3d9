#include "driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include "flash_indexer/error.hpp"

namespace flash_indexer::driver {
namespace {

#define FI_STRINGIFY_EXPANDED(x) FI_STRINGIFY(x)
#define FI_STRINGIFY(x) #x

struct Loaded {
  Api api;
  std::string failure;  // empty when the driver is usable
};

Loaded load() {
  Loaded loaded;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    loaded.failure = fmt::format("libcuda.so.1 could not be loaded (no NVIDIA driver on this machine?): {}",
                                 reason ? reason : "unknown reason");
    return loaded;
  }
#define FI_RESOLVE_DRIVER_FUNCTION(name)                                                             \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, FI_STRINGIFY_EXPANDED(name))); \
  if (loaded.api.name == nullptr && loaded.failure.empty())                                          \
    loaded.failure = fmt::format("libcuda.so.1 has no symbol {} (driver too old for CUDA 13?)", FI_STRINGIFY_EXPANDED(name));
  FI_DRIVER_FUNCTIONS(FI_RESOLVE_DRIVER_FUNCTION)
#undef FI_RESOLVE_DRIVER_FUNCTION
  if (!loaded.failure.empty()) return loaded;

  if (CUresult r = loaded.api.cuInit(0); r != CUDA_SUCCESS) {
    const char* name = nullptr;
    loaded.api.cuGetErrorName(r, &name);
    loaded.failure = fmt::format("cuInit failed: {}", name ? name : "unknown CUDA error");
    return loaded;
  }
  int count = 0;
  if (loaded.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    loaded.failure = "the NVIDIA driver reports no CUDA device";
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();  // thread-safe, once
  return instance;
}

}  // namespace

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.failure;
  return l.failure.empty();
}

const Api& api() {
  const Loaded& l = loaded();
  if (!l.failure.empty()) throw Error(l.failure);
  return l.api;
}

void check(CUresult result, std::string_view call, std::string_view context) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* description = nullptr;
  const Api& a = loaded().api;
  if (a.cuGetErrorName != nullptr) a.cuGetErrorName(result, &name);
  if (a.cuGetErrorString != nullptr) a.cuGetErrorString(result, &description);
  throw Error(fmt::format("{} failed: {} ({}){}{}", call, name ? name : fmt::format("CUresult {}", int(result)),
                          description ? description : "no description", context.empty() ? "" : " for ", context));
}

std::string version_string() {
  const Loaded& l = loaded();
  if (l.api.cuDriverGetVersion == nullptr) return "none";
  int version = 0;
  if (l.api.cuDriverGetVersion(&version) != CUDA_SUCCESS) return "unknown";
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

}  // namespace flash_indexer::driver
