#pragma once
// The on-disk kernel cache: one directory per compiled kernel, published atomically.
//
//   <root>/<kernel key>.<32 hex digits>/kernel.cubin   the CUBIN
//                                       kernel.cu      the generated translation unit
//                                       meta.json      key, config, NVRTC version, options, ptxas
//                                                      report, compile ms, cubin checksum, creation time
//
// The hex digits are XXH3-128 of (cache format version, kernel key, generated source, the content of
// every embedded header it includes, NVRTC version, every NVRTC option). An entry is built in a private
// <root>/.tmp-* directory and renamed into place; the loser of a race discards its copy and uses the
// winner's. A corrupt entry is removed (with a warning) and rebuilt.
//
// Concurrent first use (the ranks of one server starting together): a miss takes an exclusive flock on
// <root>/.lock-<entry name> before compiling, and looks again once it holds it, so each kernel is
// compiled once and the others load it. The kernel drops a flock when its holder exits or is killed,
// so a dead compiler never blocks the others.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernel_spec.hpp"
#include "nvrtc_compiler.hpp"

namespace flash_indexer {

inline constexpr int kCacheFormatVersion = 1;

enum class CacheOutcome {
  hit,                 // loaded from disk
  compiled,            // compiled now and published (or a concurrent process published it first)
  compiled_in_memory,  // compiled now; the directory was not writable
};

struct CachedCubin {
  std::string cubin;
  CacheOutcome outcome = CacheOutcome::hit;
  std::filesystem::path entry_dir;
  nlohmann::json meta;
};

struct CacheEntryInfo {
  std::filesystem::path dir;
  nlohmann::json meta;             // empty when meta.json is missing or unreadable
  std::uintmax_t total_bytes = 0;  // all files of the entry
};

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }

  // "<key>.<hash>": the entry directory's name for `spec` with this NVRTC.
  std::string entry_name(const KernelSpec& spec) const;

  // The CUBIN for spec: from disk, or compiled (and published when the directory is writable).
  // With FLASH_INDEXER_JIT=off a miss throws Error naming the configuration.
  CachedCubin get_or_compile(const KernelSpec& spec) const;

  // The lock file a miss of `spec` holds while it compiles.
  std::filesystem::path lock_path(const KernelSpec& spec) const;

  // Removes spec's entry (a CUBIN the driver refused to load) with a warning saying why.
  void discard(const KernelSpec& spec, const std::string& why) const;

  std::vector<CacheEntryInfo> entries() const;
  // Removes every entry, leftover temporary directory and lock file; returns how many entries were
  // removed.
  std::size_t clear() const;

 private:
  std::filesystem::path root_;
};

// The cache at cache_directory().
DiskCache current_disk_cache();

}  // namespace flash_indexer
