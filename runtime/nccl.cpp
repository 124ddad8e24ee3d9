#include "nccl.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <type_traits>

#include "flash_indexer/error.hpp"

namespace flash_indexer::nccl {
namespace {

struct Loaded {
  Api api;
  std::string failure;  // empty when NCCL is usable
};

Loaded load(const std::string& file) {
  Loaded loaded;
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    loaded.failure = fmt::format(
        "{} could not be loaded (NCCL is needed for the DCP decode plan: install it, or set FLASH_INDEXER_NCCL "
        "to the library's path): {}",
        file, reason ? reason : "unknown reason");
    return loaded;
  }
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr && loaded.failure.empty()) loaded.failure = fmt::format("{} has no symbol {}", file, name);
  };
  resolve(loaded.api.ncclGetVersion, "ncclGetVersion");
  resolve(loaded.api.ncclGetErrorString, "ncclGetErrorString");
  resolve(loaded.api.ncclCommCount, "ncclCommCount");
  resolve(loaded.api.ncclCommUserRank, "ncclCommUserRank");
  resolve(loaded.api.ncclCommCuDevice, "ncclCommCuDevice");
  resolve(loaded.api.ncclAllGather, "ncclAllGather");
  resolve(loaded.api.ncclGroupStart, "ncclGroupStart");
  resolve(loaded.api.ncclGroupEnd, "ncclGroupEnd");
  resolve(loaded.api.ncclGetUniqueId, "ncclGetUniqueId");
  resolve(loaded.api.ncclCommInitRank, "ncclCommInitRank");
  resolve(loaded.api.ncclCommDestroy, "ncclCommDestroy");
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = [] {  // thread-safe, once
    const char* path = std::getenv("FLASH_INDEXER_NCCL");
    return load(path != nullptr && *path != '\0' ? path : "libnccl.so.2");
  }();
  return instance;
}

}  // namespace

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.failure;
  return l.failure.empty();
}

std::string load_failure(const std::string& file) { return load(file).failure; }

const Api& api() {
  const Loaded& l = loaded();
  if (!l.failure.empty()) throw Error(l.failure);
  return l.api;
}

void check(Result result, std::string_view call, std::string_view context) {
  if (result == 0) return;
  const Api& a = loaded().api;
  const char* message = a.ncclGetErrorString != nullptr ? a.ncclGetErrorString(result) : nullptr;
  throw Error(fmt::format("{} failed: {} (ncclResult_t {}){}{}", call, message ? message : "no description", result,
                          context.empty() ? "" : " for ", context));
}

}  // namespace flash_indexer::nccl
