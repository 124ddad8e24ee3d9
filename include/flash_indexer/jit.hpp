#pragma once
// The JIT's settings and its on-disk kernel cache, as the library and the flash-indexer CLI see them.
//
// Environment:
//   FLASH_INDEXER_CACHE_DIR  cache directory (else $XDG_CACHE_HOME/flash_indexer, else ~/.cache/flash_indexer,
//                            else <temp>/flash_indexer; docs/design/kernel-cache.md)
//   FLASH_INDEXER_JIT=off    never compile: a kernel missing from the cache is an Error naming it
#include <filesystem>
#include <functional>
#include <string>

namespace flash_indexer {

// The cache directory the library uses now (from the environment, or the override below).
std::filesystem::path cache_directory();
// Overrides the environment for this process (empty path: back to the environment).
void set_cache_directory(const std::filesystem::path& dir);

// False when FLASH_INDEXER_JIT=off.
bool jit_enabled();

// Where warnings go (a corrupt cache entry rebuilt, an unwritable cache directory). Default: stderr.
// Returns the previous handler.
using WarningHandler = std::function<void(const std::string&)>;
WarningHandler set_warning_handler(WarningHandler handler);

}  // namespace flash_indexer
