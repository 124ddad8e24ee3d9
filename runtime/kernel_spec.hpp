#pragma once
// What the JIT needs to build one kernel: its key, the generated translation unit, the entry name and
// how it is launched. Produced by each op's codegen, consumed by the compiler, cache and registry.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "flash_indexer/arch.hpp"

namespace flash_indexer {

struct KernelSpec {
  std::string key;     // canonical kernel key, arch included
  std::string entry;   // extern "C" name of the single __global__ in `source`
  std::string source;  // the generated translation unit
  Arch arch;
  unsigned threads = 0;     // threads per CTA
  unsigned smem_bytes = 0;  // dynamic shared memory per CTA
  int variant = 0;          // which kernel family of the op (op-defined), for its launcher
  nlohmann::json config;    // the configuration, for meta.json
};

// The extern "C" name of a kernel: "fi_" + its key with '.' and '-' made '_'.
inline std::string kernel_entry_name(std::string_view key) {
  std::string entry = "fi_" + std::string(key);
  for (char& ch : entry)
    if (ch == '.' || ch == '-') ch = '_';
  return entry;
}

}  // namespace flash_indexer
