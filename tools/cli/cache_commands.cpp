// flash-indexer warm, list, clear and info: the kernel cache from the command line.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.hpp"
#include "flash_indexer/version.hpp"
#include "disk_cache.hpp"
#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_catalog.hpp"
#include "nvrtc_compiler.hpp"

namespace flash_indexer::cli {
namespace {

fi::Arch arch_of_gpu0() {
  std::string why;
  if (!fi::driver::available(&why))
    throw UsageError(fmt::format("no GPU to take the arch from ({}); pass --arch, e.g. --arch sm_90a", why));
  CUdevice device = 0;
  FI_CU(cuDeviceGet, "warm", &device, 0);
  int major = 0, minor = 0;
  FI_CU(cuDeviceGetAttribute, "warm", &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  FI_CU(cuDeviceGetAttribute, "warm", &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  return fi::Arch::for_compute_capability(major, minor);
}

// Keys without an arch take `arch`: --arch, else the GPU's (as for the default manifest), looked up only
// where a key needs it, so a manifest of keys with their arch compiles without a GPU.
std::vector<fi::KernelSpec> manifest_specs(const std::string& path, std::optional<fi::Arch> arch) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("--manifest: cannot read {}", path));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kernels") || !j["kernels"].is_array())
    throw UsageError(fmt::format("--manifest {}: expected a JSON object {{\"kernels\": [\"<kernel key>\", ...]}}", path));
  std::vector<fi::KernelSpec> specs;
  for (const auto& entry : j["kernels"]) {
    if (!entry.is_string())
      throw UsageError(fmt::format("--manifest {}: every kernel must be a key string, got {}", path, entry.dump()));
    std::string key = entry.get<std::string>();
    if (key.rfind(".sm_") == std::string::npos) {
      if (!arch) {
        try {
          arch = arch_of_gpu0();
        } catch (const UsageError& e) {
          throw UsageError(fmt::format("--manifest {}: key {} has no arch and {}", path, key, e.what()));
        }
      }
      key += "." + arch->name();
    }
    try {
      specs.push_back(fi::kernel_spec_for_key(key));
    } catch (const fi::Error& e) {
      throw UsageError(fmt::format("--manifest {}: {}", path, e.what()));
    }
  }
  return specs;
}

class Progress {
 public:
  explicit Progress(std::size_t total) : total_(total), tty_(isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  void step(const std::string& key, const char* outcome) {
    std::lock_guard lock(mutex_);
    ++done_;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done_ / std::max<std::size_t>(total_, 1));
      std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %6.1fs %s", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), done_, total_, seconds(), key.c_str());
      if (done_ == total_) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "[%zu/%zu] %6.1fs %-9s %s\n", done_, total_, seconds(), outcome, key.c_str());
    }
    std::fflush(stderr);
  }

 private:
  std::mutex mutex_;
  std::size_t total_, done_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

int cmd_warm(const Args& args) {
  args.apply_cache_dir();
  std::optional<fi::Arch> arch;
  if (auto a = args.value("--arch")) {
    try {
      arch = fi::Arch::parse(*a, "--arch");
    } catch (const fi::Error& e) {
      throw UsageError(e.what());
    }
  }
  const auto manifest = args.value("--manifest");
  if (!arch && !manifest) arch = arch_of_gpu0();
  const std::vector<fi::KernelSpec> specs = manifest ? manifest_specs(*manifest, arch) : fi::supported_kernel_specs(*arch);
  const int jobs = args.int_value("--jobs", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1);

  const fi::DiskCache cache = fi::current_disk_cache();
  Progress progress(specs.size());
  std::atomic<std::size_t> next{0}, hits{0}, compiled{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < specs.size();) {
      const std::string& key = specs[i].key;
      try {
        const fi::CachedCubin c = cache.get_or_compile(specs[i]);
        (c.outcome == fi::CacheOutcome::hit ? hits : compiled)++;
        if (c.outcome == fi::CacheOutcome::compiled_in_memory) {
          std::lock_guard lock(failures_mutex);
          failures.push_back(fmt::format("{}: compiled but not stored (cache directory not writable)", key));
        }
        progress.step(key, c.outcome == fi::CacheOutcome::hit ? "hit" : "compiled");
      } catch (const std::exception& e) {
        std::lock_guard lock(failures_mutex);
        failures.push_back(fmt::format("{}: {}", key, e.what()));
        progress.step(key, "FAILED");
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int>(jobs, static_cast<int>(specs.size())); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  for (const auto& f : failures) std::fprintf(stderr, "failed: %s\n", f.c_str());
  std::printf("warm: %zu kernels%s: %zu hits, %zu compiled, %zu failed in %.1f s (cache %s)\n", specs.size(),
              arch ? fmt::format(" for {}", arch->name()).c_str() : "", hits.load(), compiled.load(), failures.size(),
              progress.seconds(), cache.root().string().c_str());
  return failures.empty() ? 0 : 1;
}

int cmd_list(const Args& args) {
  args.apply_cache_dir();
  const fi::DiskCache cache = fi::current_disk_cache();
  const auto entries = cache.entries();
  if (args.has("--json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
      nlohmann::json m = e.meta.is_object() ? e.meta : nlohmann::json::object();
      if (m.contains("ptxas")) m["ptxas"].erase("log");
      m["dir"] = e.dir.string();
      m["total_bytes"] = e.total_bytes;
      out.push_back(std::move(m));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-68s %-7s %9s %5s %7s %10s\n", "KEY", "ARCH", "BYTES", "REGS", "SPILLS", "COMPILE_MS");
  for (const auto& e : entries) {
    const auto& m = e.meta;
    if (!m.is_object() || !m.contains("key")) {
      std::printf("%-68s (unreadable meta.json)\n", e.dir.filename().string().c_str());
      continue;
    }
    const auto& p = m["ptxas"];
    std::printf("%-68s %-7s %9ju %5d %7d %10.1f\n", m["key"].get<std::string>().c_str(), m["arch"].get<std::string>().c_str(),
                e.total_bytes, p.value("registers", -1), p.value("spill_store_bytes", 0) + p.value("spill_load_bytes", 0),
                m.value("compile_ms", 0.0));
  }
  std::printf("%zu entries in %s\n", entries.size(), cache.root().string().c_str());
  return 0;
}

int cmd_clear(const Args& args) {
  args.apply_cache_dir();
  const fi::DiskCache cache = fi::current_disk_cache();
  std::printf("removed %zu entries from %s\n", cache.clear(), cache.root().string().c_str());
  return 0;
}

int cmd_info(const Args& args) {
  args.apply_cache_dir();
  std::printf("flash_indexer    %s\n", FLASH_INDEXER_VERSION);
  std::printf("NVRTC            %s\n", fi::nvrtc_version().c_str());
  std::string why;
  const bool gpu = fi::driver::available(&why);
  std::printf("CUDA driver      %s\n", gpu ? fi::driver::version_string().c_str() : fmt::format("none ({})", why).c_str());
  if (gpu) {
    int count = 0;
    FI_CU(cuDeviceGetCount, "info", &count);
    for (int i = 0; i < count; ++i) {
      CUdevice d = 0;
      FI_CU(cuDeviceGet, "info", &d, i);
      char name[256] = {};
      FI_CU(cuDeviceGetName, "info", name, sizeof name, d);
      int major = 0, minor = 0, sms = 0;
      FI_CU(cuDeviceGetAttribute, "info", &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      FI_CU(cuDeviceGetAttribute, "info", &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
      FI_CU(cuDeviceGetAttribute, "info", &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
      std::size_t bytes = 0;
      FI_CU(cuDeviceTotalMem, "info", &bytes, d);
      std::printf("GPU %d            %s, compute capability %d.%d (%s), %d SMs, %.1f GiB\n", i, name, major, minor,
                  fi::Arch::for_compute_capability(major, minor).name().c_str(), sms, bytes / 1073741824.0);
    }
  }
  const fi::DiskCache cache = fi::current_disk_cache();
  std::uintmax_t total = 0;
  const auto entries = cache.entries();
  for (const auto& e : entries) total += e.total_bytes;
  std::printf("cache directory  %s\n", cache.root().string().c_str());
  std::printf("cache entries    %zu (%.2f MiB)\n", entries.size(), total / 1048576.0);
  std::printf("JIT              %s\n", fi::jit_enabled() ? "on" : "off (FLASH_INDEXER_JIT=off: cache misses are errors)");
  return 0;
}

}  // namespace flash_indexer::cli
