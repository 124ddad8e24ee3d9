#include "disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <fmt/format.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "embedded_sources.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/jit.hpp"
#include "warnings.hpp"

namespace fs = std::filesystem;

namespace flash_indexer {
namespace {

constexpr const char* kTempPrefix = ".tmp-";
constexpr const char* kLockPrefix = ".lock-";

// An exclusive flock held for the object's lifetime; not held (and no error) when the file cannot be
// created, e.g. in a read-only directory, where nothing is published anyway.
class EntryLock {
 public:
  explicit EntryLock(const fs::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
  }
  ~EntryLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  int fd_;
};

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

std::string cubin_checksum(const std::string& cubin) { return hex64(XXH3_64bits(cubin.data(), cubin.size())); }

std::string hash_key(const KernelSpec& spec) {
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw Error("XXH3_createState failed (out of memory)");
  XXH3_128bits_reset(state);
  auto add = [&](std::string_view part) {
    XXH3_128bits_update(state, part.data(), part.size());
    XXH3_128bits_update(state, "\0", 1);  // separator: ("ab","c") and ("a","bc") differ
  };
  add(std::to_string(kCacheFormatVersion));
  add(spec.key);
  add(spec.source);
  for (const EmbeddedHeader& h : included_headers(spec.source)) {
    add(h.name);
    add(h.content);
  }
  add(nvrtc_version());
  for (const std::string& option : nvrtc_options(spec.arch)) add(option);
  const XXH128_hash_t digest = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return hex64(digest.high64) + hex64(digest.low64);
}

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return false;
  out = std::move(buffer).str();
  return true;
}

// Writes and fsyncs a file; false on any failure (errno preserved in `error`).
bool write_file(const fs::path& path, std::string_view data, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = fmt::format("open {}: {}", path.string(), std::strerror(errno));
    return false;
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = fmt::format("write {}: {}", path.string(), std::strerror(errno));
      ::close(fd);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    error = fmt::format("fsync {}: {}", path.string(), std::strerror(errno));
    return false;
  }
  return true;
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string random_suffix() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()) << 32};
  std::lock_guard lock(m);
  return hex64(rng());
}

// Removes a directory without letting a reader see it half-deleted: rename it aside first.
void remove_entry_dir(const fs::path& dir) {
  std::error_code ec;
  const fs::path aside = dir.parent_path() / fmt::format("{}trash-{}-{}", kTempPrefix, ::getpid(), random_suffix());
  fs::rename(dir, aside, ec);
  fs::remove_all(ec ? dir : aside, ec);
}

// Reads and verifies an entry; false (with the reason in `problem`) when it is corrupt.
bool load_entry(const fs::path& dir, CachedCubin& out, std::string& problem) {
  std::string meta_text;
  if (!read_file(dir / "meta.json", meta_text)) {
    problem = "meta.json is missing or unreadable";
    return false;
  }
  nlohmann::json meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("cubin_xxh3_64") || !meta.contains("cubin_bytes")) {
    problem = "meta.json is not valid";
    return false;
  }
  std::string cubin;
  if (!read_file(dir / "kernel.cubin", cubin)) {
    problem = "kernel.cubin is missing or unreadable";
    return false;
  }
  if (!meta["cubin_bytes"].is_number_unsigned() || meta["cubin_bytes"].get<std::uint64_t>() != cubin.size()) {
    problem = fmt::format("kernel.cubin has {} bytes, meta.json says {}", cubin.size(), meta["cubin_bytes"].dump());
    return false;
  }
  if (meta["cubin_xxh3_64"] != cubin_checksum(cubin)) {
    problem = "kernel.cubin checksum mismatch";
    return false;
  }
  out.cubin = std::move(cubin);
  out.meta = std::move(meta);
  out.entry_dir = dir;
  return true;
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

nlohmann::json make_meta(const KernelSpec& spec, const CompiledKernel& compiled, const std::string& hash) {
  const PtxasReport& r = compiled.report;
  return {
      {"format_version", kCacheFormatVersion},
      {"key", spec.key},
      {"cache_hash", hash},
      {"entry", spec.entry},
      {"arch", spec.arch.name()},
      {"config", spec.config},
      {"threads", spec.threads},
      {"dynamic_smem_bytes", spec.smem_bytes},
      {"nvrtc_version", nvrtc_version()},
      {"options", nvrtc_options(spec.arch)},
      {"ptxas",
       {{"registers", r.registers},
        {"static_smem_bytes", r.shared_bytes},
        {"stack_frame_bytes", r.stack_frame_bytes},
        {"spill_store_bytes", r.spill_store_bytes},
        {"spill_load_bytes", r.spill_load_bytes},
        {"log", compiled.log}}},
      {"compile_ms", compiled.compile_ms},
      {"cubin_bytes", compiled.cubin.size()},
      {"cubin_xxh3_64", cubin_checksum(compiled.cubin)},
      {"created", utc_now()},
  };
}

// One warning per unwritable directory per process.
void warn_unwritable_once(const fs::path& root, const std::string& why) {
  static std::mutex m;
  static std::set<std::string> warned;
  std::lock_guard lock(m);
  if (!warned.insert(root.string()).second) return;
  warn(fmt::format("kernel cache directory {} is not writable ({}); compiled kernels are kept in memory only", root.string(),
                   why));
}

}  // namespace

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {}

DiskCache current_disk_cache() { return DiskCache(cache_directory()); }

std::string DiskCache::entry_name(const KernelSpec& spec) const { return spec.key + "." + hash_key(spec); }

fs::path DiskCache::lock_path(const KernelSpec& spec) const { return root_ / (kLockPrefix + entry_name(spec)); }

CachedCubin DiskCache::get_or_compile(const KernelSpec& spec) const {
  const std::string hash = hash_key(spec);
  const std::string entry = spec.key + "." + hash;
  const fs::path final_dir = root_ / entry;

  CachedCubin result;
  std::error_code ec;
  // A valid published entry into `result`; a corrupt one is removed (with a warning) to be rebuilt.
  auto load_published = [&] {
    if (!fs::exists(final_dir, ec)) return false;
    std::string problem;
    if (load_entry(final_dir, result, problem)) {
      result.outcome = CacheOutcome::hit;
      return true;
    }
    warn(fmt::format("corrupt kernel cache entry {} ({}): removed, rebuilding", final_dir.string(), problem));
    remove_entry_dir(final_dir);
    return false;
  };
  if (load_published()) return result;

  if (!jit_enabled())
    throw Error(
        fmt::format("FLASH_INDEXER_JIT=off and kernel {} is not in the cache {} (warm it with: "
                    "flash-indexer warm --arch {} --cache-dir {})",
                    spec.key, root_.string(), spec.arch.name(), root_.string()));

  // One compiler per entry across processes: wait for the lock, then look again.
  fs::create_directories(root_, ec);
  const EntryLock lock(root_ / (kLockPrefix + entry));
  if (load_published()) return result;

  CompiledKernel compiled = compile_kernel(spec);
  result.meta = make_meta(spec, compiled, hash);
  result.cubin = std::move(compiled.cubin);

  // Publish: private directory, fsync, rename. Any failure before the rename leaves nothing behind.
  const fs::path temp = root_ / fmt::format("{}{}-{}-{}", kTempPrefix, spec.key, ::getpid(), random_suffix());
  std::string error;
  fs::create_directories(root_, ec);
  if (ec || !fs::create_directory(temp, ec) || ec) {
    warn_unwritable_once(root_, ec ? ec.message() : "cannot create a directory");
    result.outcome = CacheOutcome::compiled_in_memory;
    return result;
  }
  const bool written = write_file(temp / "kernel.cu", spec.source, error) &&
                       write_file(temp / "kernel.cubin", result.cubin, error) &&
                       write_file(temp / "meta.json", result.meta.dump(2) + "\n", error);
  if (!written) {
    fs::remove_all(temp, ec);
    warn_unwritable_once(root_, error);
    result.outcome = CacheOutcome::compiled_in_memory;
    return result;
  }
  fsync_directory(temp);
  if (::rename(temp.c_str(), final_dir.c_str()) != 0) {
    const int rename_errno = errno;
    fs::remove_all(temp, ec);
    if (rename_errno != EEXIST && rename_errno != ENOTEMPTY) {
      warn_unwritable_once(root_, fmt::format("rename: {}", std::strerror(rename_errno)));
      result.outcome = CacheOutcome::compiled_in_memory;
      return result;
    }
    // Lost the race: the winner's entry holds the same bytes; use it when it reads back valid.
    CachedCubin winner;
    std::string problem;
    if (load_entry(final_dir, winner, problem)) {
      winner.outcome = CacheOutcome::compiled;
      return winner;
    }
  }
  fsync_directory(root_);
  result.outcome = CacheOutcome::compiled;
  result.entry_dir = final_dir;
  return result;
}

void DiskCache::discard(const KernelSpec& spec, const std::string& why) const {
  const fs::path dir = root_ / entry_name(spec);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  warn(fmt::format("corrupt kernel cache entry {} ({}): removed, rebuilding", dir.string(), why));
  remove_entry_dir(dir);
}

std::vector<CacheEntryInfo> DiskCache::entries() const {
  std::vector<CacheEntryInfo> out;
  std::error_code ec;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& dir = it->path();
    if (!it->is_directory(ec) || dir.filename().string().starts_with(kTempPrefix)) continue;
    CacheEntryInfo info;
    info.dir = dir;
    std::string text;
    if (read_file(dir / "meta.json", text)) {
      info.meta = nlohmann::json::parse(text, nullptr, false);
      if (info.meta.is_discarded()) info.meta = nlohmann::json();
    }
    for (fs::directory_iterator f(dir, ec), fend; !ec && f != fend; f.increment(ec))
      if (f->is_regular_file(ec)) info.total_bytes += f->file_size(ec);
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.dir < b.dir; });
  return out;
}

std::size_t DiskCache::clear() const {
  std::size_t removed = 0;
  std::error_code ec;
  std::vector<fs::path> dirs;
  std::vector<fs::path> locks;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) dirs.push_back(it->path());
    else if (it->path().filename().string().starts_with(kLockPrefix)) locks.push_back(it->path());
  }
  // A lock removed while held only costs a second compile of that entry (both publish the same bytes).
  for (const fs::path& lock : locks) fs::remove(lock, ec);
  for (const fs::path& dir : dirs) {
    const bool temp = dir.filename().string().starts_with(kTempPrefix);
    fs::remove_all(dir, ec);
    if (!ec && !temp) ++removed;
  }
  return removed;
}

}  // namespace flash_indexer
