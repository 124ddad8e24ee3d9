// flash-indexer: warm, list, clear and inspect the kernel cache; check the kernels on the GPU.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "decode_bench.hpp"
#include "disk_cache.hpp"
#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/jit.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "gpu_timer.hpp"
#include "kernel_catalog.hpp"
#include "kernel_key.hpp"
#include "logits_bench.hpp"
#include "logits_check.hpp"
#include "nvrtc_compiler.hpp"
#include "recall.hpp"
#include "topk_bench.hpp"
#include "topk_check.hpp"

namespace fi = flash_indexer;
namespace fs = std::filesystem;

namespace {

constexpr int kUsageError = 2;

const char* const kMainUsage = R"(usage: flash-indexer <command> [options]

The kernel cache and the kernels of FlashIndexer (paged MQA logits and top-k selection of the
DeepSeek Sparse Attention indexer), from the command line.

commands:
  warm    compile and cache a set of kernel configurations (works without a GPU with --arch)
  list    list the cached kernels
  clear   remove every cached kernel
  info    NVRTC and driver versions, GPUs, cache directory and size
  check   run the kernels on the GPU against the CPU reference and print a table
  recall  top-k recall of FP16 / BF16 logits against FP32 logits on synthetic indexer inputs
  bench   benchmark on the GPU: bench logits | bench topk | bench decode

Run 'flash-indexer <command> --help' for the options of a command.
)";

const std::map<std::string, std::string> kUsages = {
    {"warm", R"(usage: flash-indexer warm [--arch ARCH] [--manifest FILE.json] [--jobs N] [--cache-dir DIR]

Compiles every configuration of the manifest (default: every configuration the library supports) for
ARCH and stores it in the cache. Entries already cached are hits and are not compiled again.

  --arch ARCH        target such as sm_90a (H100/H200), sm_80, sm_86, sm_89; default: the GPU present
  --manifest FILE    JSON {"kernels": ["paged_mqa_logits.portable.n1.h64.d128.bs64.hist0.out-f16.kv-fp8",
                     "topk.split1.in-f16", ...]}
                     (keys without the arch take ARCH; keys ending in an arch keep theirs)
  --jobs N           parallel compiles (default: the number of CPUs)
  --cache-dir DIR    cache directory (default: FLASH_INDEXER_CACHE_DIR, XDG_CACHE_HOME, ~/.cache)
)"},
    {"list", R"(usage: flash-indexer list [--json] [--cache-dir DIR]

Lists the cached kernels: key, arch, size, registers, spill bytes, compile milliseconds.

  --json             one JSON array on stdout (each entry's meta.json, without the ptxas log)
  --cache-dir DIR    cache directory
)"},
    {"clear", R"(usage: flash-indexer clear [--cache-dir DIR]

Removes every cached kernel (and leftover temporary directories).
)"},
    {"info", R"(usage: flash-indexer info [--cache-dir DIR]

Prints the NVRTC and driver versions, the GPUs present, the cache directory, its entry count and size.
)"},
    {"check", R"(usage: flash-indexer check [--quick]

Runs the paged MQA logits kernel (with and without the fused histogram) and the top-k selector on
fresh random inputs on GPU 0, compares each result with the CPU reference and prints one table row
per case. Exits 1 if any case fails.

  --quick            a few small cases instead of the full table
)"},
    {"bench", R"(usage: flash-indexer bench logits [--batch LIST] [--lengths LIST] [--next-n LIST] [--heads LIST]
                               [--hist LIST] [--dtype LIST] [--replays N] [--cold-l2]
                               [--compare portable] [--json FILE]
       flash-indexer bench topk   [--rows LIST] [--lengths LIST] [--k LIST] [--dtype LIST] [--hist LIST]
                               [--ragged LIST] [--split LIST] [--input LIST] [--width W] [--replays N]
                               [--json FILE]
       flash-indexer bench decode [--batch LIST] [--lengths LIST] [--next-n LIST] [--heads LIST]
                               [--hist LIST] [--dtype LIST] [--k K] [--replays N] [--json FILE]

Everything is timed with CUDA events around CUDA-graph replays (the median), next to the read
bandwidth a streaming-read kernel reaches in the same run.

logits: paged_mqa_logits (the kernel the library picks: sm90 on H100/H200 for next_n <= 4), lengths
uniform in [0.7, 1.3] L, KV blocks drawn shuffled from a pool larger than L2. Per cell: microseconds,
bytes moved (KV blocks with scales, logits written, q, weights, block table), GB/s and the fraction of
the read bandwidth, TFLOP/s, and the floor max(bytes / read bandwidth, FLOPs / 1600 TFLOP/s).
  --batch LIST       batch sizes (default 1,8,32,64,128)
  --lengths LIST     context lengths L (default 8192,32768,65536,131072; topk: ...,262144)
  --next-n LIST      default 1,2,3,4 (decode: 1,2,4)
  --heads LIST       default 32,64 (D = 128)
  --hist LIST        0 and/or 1 (default 0,1): the fused histogram / the histogram given to top-k
  --dtype LIST       logits dtypes among f32,f16,bf16 (default f32,f16)
  --replays N        timed replays per cell (default 50; decode 30)
  --cold-l2          overwrite 256 MiB before each replay (outside the timed window)
  --compare portable also time the portable kernel and print the speed-up
  --json FILE        write every row as JSON

topk: the selector on indexer-like rows (ReLU-weighted scores); per cell microseconds and the bytes
(live logits + indices + histogram) per second.
  --rows LIST        default 1,4,8,32,64,128,512
  --k LIST           default 512,1024,2048
  --ragged LIST      0: every row L long; 1: lengths uniform in [L/2, L] (default 0,1)
  --split LIST       CTAs per row: 0 (the automatic choice, default), 1, 2, 4, 8
  --input LIST       relu (indexer-like rows, default) and/or randn (standard normal: the peers' rows)
  --width W          logits width (row stride) for every cell, >= L: one graph captured at the maximum
                     context and replayed with live lengths L (default: the width is L)

decode: DecodePlan::run end to end (histogram zeroed, logits + histogram, top-k), and the logits kernel
alone: the top-k share is the difference; the KV floor is KV bytes / read bandwidth.
  --k K              default 2048
)"},
    {"recall", R"(usage: flash-indexer recall [--k K] [--heads H] [--rows N] [--lengths L1,L2,...] [--seed S]

On synthetic indexer inputs (FP8 q and k from N(0, 4), per-head weights of mixed sign, next_n = 1),
computes the logits as FP32, FP16 and BF16 with the fused histogram, selects the exact top-k of each,
and prints the recall of the FP32 set per context length: mean, median, worst row, and the number of
indices per row that differ.

  --k K              top-k size (default 2048)
  --heads H          16, 32 or 64 (default 64)
  --rows N           requests per length (default 16)
  --lengths LIST     context lengths (default 8192,32768,65536,131072)
  --seed S           input seed (default 1)
)"},
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Options of one command: --flag and --name VALUE.
class Args {
 public:
  Args(std::string command, int argc, char** argv, std::vector<std::string> flags, std::vector<std::string> valued)
      : command_(std::move(command)) {
    for (int i = 0; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        help_ = true;
      } else if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
        values_[a] = "";
      } else if (std::find(valued.begin(), valued.end(), a) != valued.end()) {
        if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", a));
        values_[a] = argv[++i];
      } else {
        throw UsageError(fmt::format("unknown argument '{}'", a));
      }
    }
  }
  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  int int_value(const std::string& name, int fallback, int min) const {
    auto v = value(name);
    if (!v) return fallback;
    try {
      std::size_t used = 0;
      const int n = std::stoi(*v, &used);
      if (used == v->size() && n >= min) return n;
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("{} expects an integer >= {}, got '{}'", name, min, *v));
  }
  void apply_cache_dir() const {
    if (auto dir = value("--cache-dir")) fi::set_cache_directory(*dir);
  }

 private:
  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
};

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

std::vector<fi::KernelSpec> manifest_specs(const std::string& path, const std::optional<fi::Arch>& arch) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("--manifest: cannot read {}", path));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kernels") || !j["kernels"].is_array())
    throw UsageError(fmt::format("--manifest {}: expected a JSON object {{\"kernels\": [\"<kernel key>\", ...]}}", path));
  std::vector<fi::KernelSpec> specs;
  for (const auto& entry : j["kernels"]) {
    if (!entry.is_string()) throw UsageError(fmt::format("--manifest {}: every kernel must be a key string, got {}", path, entry.dump()));
    std::string key = entry.get<std::string>();
    if (key.rfind(".sm_") == std::string::npos) {
      if (!arch) throw UsageError(fmt::format("--manifest {}: key {} has no arch; pass --arch", path, key));
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
    std::printf("%-68s %-7s %9ju %5d %7d %10.1f\n", m["key"].get<std::string>().c_str(),
                m["arch"].get<std::string>().c_str(), e.total_bytes, p.value("registers", -1),
                p.value("spill_store_bytes", 0) + p.value("spill_load_bytes", 0), m.value("compile_ms", 0.0));
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
  std::printf("flash_indexer    0.1.0\n");
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

int cmd_check(const Args& args) {
  namespace ck = fi::check;
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "check needs a GPU: %s\n", why.c_str());
    return 1;
  }
  ck::GpuSession gpu;
  std::vector<ck::LogitsCase> cases;
  std::uint64_t seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  auto add = [&](int next_n, int heads, int dim, fi::LogitsDType out, std::vector<int> lens, bool lens_2d) {
    ck::LogitsCase c;
    c.config = {next_n, heads, dim, 64, false, out, {}};
    c.lengths = std::move(lens);
    c.lens_2d = lens_2d;
    c.seed = seed++;
    cases.push_back(std::move(c));
  };
  using L = fi::LogitsDType;
  add(1, 64, 128, L::f32, {0, 1, 63, 64, 65, 1000}, false);
  add(2, 64, 128, L::f16, {4096, 100, 0, 1, 777, 64, 65, 5}, true);
  add(4, 32, 128, L::bf16, {2000, 70}, false);
  add(2, 64, 128, L::f16, {3000, 2999, 10, 0}, true);
  cases.back().config.histogram = true;  // also checks the counts, doubling and bitwise-equal logits
  if (!args.has("--quick")) {
    add(3, 16, 64, L::f32, {130, 2, 900}, false);
    add(1, 64, 128, L::f16, std::vector<int>(8, 8192), false);
    add(2, 32, 128, L::bf16, {8000, 1, 64, 65}, true);
    add(1, 32, 64, L::bf16, {5000, 64, 1}, false);
    cases.back().config.histogram = true;
    add(3, 64, 128, L::f32, {9000, 100}, false);
    cases.back().config.histogram = true;
  }
  std::printf("flash-indexer check on %s (GPU 0)\n", gpu.device_name().c_str());
  std::printf("%-70s %8s %12s %12s %s\n", "case", "logits", "diff", "worst/mag", "result");
  int failed = 0;
  for (const auto& c : cases) {
    const ck::Comparison r = ck::run_logits_case(gpu, c);
    std::printf("%-70s %8lld %12.3g %12.3g %s\n", ck::describe(c).c_str(), static_cast<long long>(r.checked), r.diff,
                r.worst_error, r.passed ? "ok" : "FAIL");
    if (!r.passed) {
      std::printf("  %s\n", r.failure.c_str());
      ++failed;
    }
  }
  std::vector<ck::TopkCase> topk_cases;
  for (L dtype : {L::f32, L::f16, L::bf16}) {
    for (int k : {512, 2048}) {
      ck::TopkCase c;
      c.dtype = dtype;
      c.k = k;
      c.rows = ck::adversarial_rows(k);
      c.histogram = k == 2048 ? ck::HistogramMode::exact : ck::HistogramMode::none;
      c.sorted = k == 512;
      c.runs = 3;
      c.seed = seed++;
      if (!args.has("--quick") || (dtype == L::f16 && k == 2048)) topk_cases.push_back(std::move(c));
    }
  }
  std::printf("%-70s %8s %12s %12s %s\n", "top-k case", "selected", "", "", "result");
  for (const auto& c : topk_cases) {
    const ck::TopkComparison r = ck::run_topk_case(gpu, c);
    std::printf("%-70s %8lld %12s %12s %s\n", ck::describe(c).c_str(), static_cast<long long>(r.selected), "", "",
                r.passed ? "ok" : "FAIL");
    if (!r.passed) {
      std::printf("  %s\n", r.failure.c_str());
      ++failed;
    }
  }
  std::printf("%zu cases, %d failed\n", cases.size() + topk_cases.size(), failed);
  return failed == 0 ? 0 : 1;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& name, const std::string& text, int minimum = 1) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    try {
      std::size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < minimum) throw std::invalid_argument(item);
      out.push_back(n);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} expects {} integers separated by commas, got '{}'", name,
                                   minimum == 1 ? "positive" : "non-negative", text));
    }
    start = comma + 1;
  }
  return out;
}

std::vector<fi::LogitsDType> parse_dtypes(const std::string& text) {
  std::vector<fi::LogitsDType> out;
  for (const std::string& item : split_list(text)) {
    if (item == "f32") out.push_back(fi::LogitsDType::f32);
    else if (item == "f16") out.push_back(fi::LogitsDType::f16);
    else if (item == "bf16") out.push_back(fi::LogitsDType::bf16);
    else throw UsageError(fmt::format("--dtype expects f32, f16 or bf16, got '{}'", item));
  }
  return out;
}

std::vector<int> parse_flags(const std::string& name, const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    if (item != "0" && item != "1") throw UsageError(fmt::format("{} expects 0 and/or 1, got '{}'", name, text));
    out.push_back(item == "1");
  }
  return out;
}

// GPU 0 and its measured read bandwidth, or nullopt (after saying why) without a GPU.
struct BenchGpu {
  fi::check::GpuSession gpu;
  double bandwidth = 0;
};
std::unique_ptr<BenchGpu> open_bench_gpu(const std::string& what) {
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "bench needs a GPU: %s\n", why.c_str());
    return nullptr;
  }
  auto b = std::make_unique<BenchGpu>();
  b->bandwidth = fi::bench::measure_read_bandwidth(b->gpu);
  std::printf("flash-indexer bench %s on %s: streaming read %.0f GB/s\n", what.c_str(), b->gpu.device_name().c_str(),
              b->bandwidth / 1e9);
  return b;
}

int cmd_bench_topk(const Args& args) {
  namespace bn = fi::bench;
  bn::TopkBenchOptions o;
  if (auto v = args.value("--rows")) o.rows = parse_int_list("--rows", *v);
  if (auto v = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *v);
  if (auto v = args.value("--k")) o.ks = parse_int_list("--k", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  if (auto v = args.value("--hist")) o.histogram = parse_flags("--hist", *v);
  if (auto v = args.value("--ragged")) o.ragged = parse_flags("--ragged", *v);
  if (auto v = args.value("--split")) o.splits = parse_int_list("--split", *v, 0);
  if (auto v = args.value("--input")) {
    o.inputs.clear();
    for (std::size_t start = 0; start <= v->size();) {
      const std::size_t comma = std::min(v->find(',', start), v->size());
      const std::string name = v->substr(start, comma - start);
      if (name != "relu" && name != "randn") throw UsageError(fmt::format("--input expects relu and/or randn, got '{}'", name));
      o.inputs.push_back(name);
      start = comma + 1;
    }
  }
  o.width = args.int_value("--width", 0, 0);
  for (int split : o.splits)
    if (split != 0 && split != 1 && split != 2 && split != 4 && split != 8)
      throw UsageError(fmt::format("--split expects 0, 1, 2, 4 or 8, got {}", split));
  o.replays = args.int_value("--replays", o.replays, 1);
  for (int k : o.ks)
    if (k > fi::kMaxTopk) throw UsageError(fmt::format("--k expects values in 1..{}, got {}", fi::kMaxTopk, k));
  const auto bench_gpu = open_bench_gpu("topk");
  if (!bench_gpu) return 1;
  auto& gpu = bench_gpu->gpu;
  const double bandwidth = bench_gpu->bandwidth;
  std::printf("%5s %7s %7s %5s %5s %4s %4s %6s %5s %9s %8s %6s\n", "rows", "L", "width", "input", "k", "in", "hist",
              "ragged", "split", "us", "GB/s", "BW%");
  nlohmann::json json = nlohmann::json::array();
  bn::run_topk_bench(gpu, o, bandwidth, [&](const bn::TopkBenchRow& r) {
    std::printf("%5d %7d %7d %5s %5d %4s %4d %6d %5s %9.2f %8.0f %5.1f%%\n", r.rows, r.length, r.width, r.input.c_str(), r.k,
                fi::logits_name(r.dtype), r.histogram ? 1 : 0, r.ragged ? 1 : 0, r.split_name.c_str(), r.us, r.gbps,
                100 * r.bandwidth_fraction);
    std::fflush(stdout);
    json.push_back({{"rows", r.rows}, {"length", r.length}, {"width", r.width}, {"input", r.input}, {"k", r.k},
                    {"logits", fi::logits_name(r.dtype)},
                    {"histogram", r.histogram}, {"ragged", r.ragged}, {"split", r.split}, {"us", r.us}, {"bytes", r.bytes},
                    {"gbps", r.gbps}, {"bandwidth_fraction", r.bandwidth_fraction}, {"read_bandwidth", bandwidth}});
  });
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

int cmd_bench_decode(const Args& args) {
  namespace bn = fi::bench;
  bn::DecodeBenchOptions o;
  if (auto v = args.value("--batch")) o.batches = parse_int_list("--batch", *v);
  if (auto v = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *v);
  if (auto v = args.value("--next-n")) o.next_ns = parse_int_list("--next-n", *v);
  if (auto v = args.value("--heads")) o.heads = parse_int_list("--heads", *v);
  if (auto v = args.value("--hist")) o.histogram = parse_flags("--hist", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  o.k = args.int_value("--k", o.k, 1);
  if (o.k > fi::kMaxTopk) throw UsageError(fmt::format("--k expects 1..{}, got {}", fi::kMaxTopk, o.k));
  o.replays = args.int_value("--replays", o.replays, 1);
  const auto bench_gpu = open_bench_gpu("decode");
  if (!bench_gpu) return 1;
  auto& gpu = bench_gpu->gpu;
  const double bandwidth = bench_gpu->bandwidth;
  std::printf("%3s %3s %5s %7s %4s %4s %9s %9s %9s %9s %6s\n", "H", "n", "B", "L", "out", "hist", "us", "logits_us",
              "topk_us", "kv_floor", "x_kv");
  nlohmann::json json = nlohmann::json::array();
  bn::run_decode_bench(gpu, o, bandwidth, [&](const bn::DecodeBenchRow& r) {
    std::printf("%3d %3d %5d %7d %4s %4d %9.2f %9.2f %9.2f %9.2f %6.2f\n", r.heads, r.next_n, r.batch, r.length,
                fi::logits_name(r.dtype), r.histogram ? 1 : 0, r.us, r.logits_us, r.us - r.logits_us, r.kv_floor_us,
                r.us / r.kv_floor_us);
    std::fflush(stdout);
    json.push_back({{"heads", r.heads}, {"next_n", r.next_n}, {"batch", r.batch}, {"length", r.length}, {"k", r.k},
                    {"logits", fi::logits_name(r.dtype)}, {"histogram", r.histogram}, {"us", r.us},
                    {"logits_us", r.logits_us}, {"kv_bytes", r.kv_bytes}, {"kv_floor_us", r.kv_floor_us},
                    {"read_bandwidth", bandwidth}});
  });
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

int cmd_bench(const std::string& what, const Args& args) {
  namespace bn = fi::bench;
  if (what != "logits" && what != "topk" && what != "decode")
    throw UsageError(fmt::format("expected 'bench logits', 'bench topk' or 'bench decode', got '{}'", what));
  if (what == "topk") return cmd_bench_topk(args);
  if (what == "decode") return cmd_bench_decode(args);
  bn::LogitsBenchOptions o;
  if (auto v = args.value("--batch")) o.batches = parse_int_list("--batch", *v);
  if (auto v = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *v);
  if (auto v = args.value("--next-n")) o.next_ns = parse_int_list("--next-n", *v);
  if (auto v = args.value("--heads")) o.heads = parse_int_list("--heads", *v);
  if (auto v = args.value("--hist")) o.histogram = parse_flags("--hist", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  o.replays = args.int_value("--replays", o.replays, 1);
  o.cold_l2 = args.has("--cold-l2");
  if (auto v = args.value("--compare")) {
    if (*v != "portable") throw UsageError(fmt::format("--compare expects 'portable', got '{}'", *v));
    o.compare_portable = true;
  }
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "bench needs a GPU: %s\n", why.c_str());
    return 1;
  }
  fi::check::GpuSession gpu;
  const double bandwidth = bn::measure_read_bandwidth(gpu);
  std::printf("flash-indexer bench logits on %s: streaming read %.0f GB/s; %d replays per cell%s\n",
              gpu.device_name().c_str(), bandwidth / 1e9, o.replays, o.cold_l2 ? ", cold L2" : "");
  std::printf("%5s %7s %3s %3s %4s %4s %9s %9s %8s %6s %7s %8s %6s%s\n", "B", "L", "n", "H", "hist", "out", "us",
              "floor_us", "GB/s", "BW%", "TFLOP/s", "MB", "x_flr", o.compare_portable ? "  portable_us speedup" : "");
  nlohmann::json json = nlohmann::json::array();
  bn::run_logits_bench(gpu, o, bandwidth, [&](const bn::LogitsBenchRow& r) {
    const char* out = fi::logits_name(r.dtype);
    std::printf("%5d %7d %3d %3d %4d %4s %9.2f %9.2f %8.0f %5.1f%% %7.0f %8.1f %6.2f", r.batch, r.length, r.next_n,
                r.heads, r.histogram ? 1 : 0, out, r.us, r.floor_us, r.gbps, 100 * r.bandwidth_fraction, r.tflops,
                r.bytes / 1e6, r.us / r.floor_us);
    if (o.compare_portable) std::printf(" %12.2f %7.1fx", r.portable_us, r.portable_us / r.us);
    std::printf("\n");
    std::fflush(stdout);
    json.push_back({{"batch", r.batch}, {"length", r.length}, {"next_n", r.next_n}, {"heads", r.heads},
                    {"head_dim", r.head_dim}, {"histogram", r.histogram}, {"logits", out}, {"kernel", r.kernel},
                    {"us", r.us}, {"bytes", r.bytes}, {"flops", r.flops}, {"gbps", r.gbps},
                    {"bandwidth_fraction", r.bandwidth_fraction}, {"tflops", r.tflops}, {"floor_us", r.floor_us},
                    {"portable_us", r.portable_us}, {"read_bandwidth", bandwidth}});
  });
  if (auto path = args.value("--json")) {
    std::ofstream(*path) << json.dump(2) << "\n";
    std::printf("wrote %s\n", path->c_str());
  }
  return 0;
}

int cmd_recall(const Args& args) {
  namespace ck = fi::check;
  ck::RecallOptions o;
  o.k = args.int_value("--k", o.k, 1);
  if (o.k > fi::kMaxTopk) throw UsageError(fmt::format("--k expects 1..{}, got {}", fi::kMaxTopk, o.k));
  o.heads = args.int_value("--heads", o.heads, 1);
  if (o.heads != 16 && o.heads != 32 && o.heads != 64) throw UsageError(fmt::format("--heads expects 16, 32 or 64, got {}", o.heads));
  o.rows = args.int_value("--rows", o.rows, 1);
  o.seed = static_cast<std::uint64_t>(args.int_value("--seed", 1, 0));
  if (auto l = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *l);
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "recall needs a GPU: %s\n", why.c_str());
    return 1;
  }
  ck::GpuSession gpu;
  std::printf("flash-indexer recall on %s: k = %d, H = %d, D = %d, %d rows per length, seed %llu\n",
              gpu.device_name().c_str(), o.k, o.heads, o.head_dim, o.rows, static_cast<unsigned long long>(o.seed));
  std::printf("%-8s %-6s %10s %10s %10s %14s %12s\n", "length", "logits", "mean", "median", "worst", "changed/row", "max changed");
  for (const auto& s : ck::measure_recall(gpu, o))
    std::printf("%-8d %-6s %9.3f%% %9.3f%% %9.3f%% %14.2f %12d\n", s.length, s.dtype == fi::LogitsDType::f16 ? "FP16" : "BF16",
                100 * s.mean, 100 * s.median, 100 * s.worst, s.mean_changed, s.max_changed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kMainUsage, stderr);
    return kUsageError;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kMainUsage, stdout);
    return 0;
  }
  const auto usage = kUsages.find(command);
  if (usage == kUsages.end()) {
    std::fprintf(stderr, "flash-indexer: unknown command '%s'\n\n%s", command.c_str(), kMainUsage);
    return kUsageError;
  }
  try {
    // `bench` takes what to benchmark as its first argument.
    std::string what;
    int first = 2;
    if (command == "bench" && argc > 2 && std::string(argv[2]).rfind("--", 0) != 0) what = argv[first++];
    std::vector<std::string> flags, valued = {"--cache-dir"};
    if (command == "warm") valued = {"--arch", "--manifest", "--jobs", "--cache-dir"};
    if (command == "list") flags = {"--json"};
    if (command == "check") flags = {"--quick"}, valued = {};
    if (command == "recall") valued = {"--k", "--heads", "--rows", "--lengths", "--seed"};
    if (command == "bench")
      flags = {"--cold-l2"}, valued = {"--batch", "--lengths", "--next-n", "--heads", "--hist", "--dtype", "--replays",
                                       "--compare", "--json", "--rows", "--k", "--ragged", "--split", "--input", "--width"};
    const Args args(command, argc - first, argv + first, flags, valued);
    if (args.help()) {
      std::fputs(usage->second.c_str(), stdout);
      return 0;
    }
    if (command == "warm") return cmd_warm(args);
    if (command == "list") return cmd_list(args);
    if (command == "clear") return cmd_clear(args);
    if (command == "info") return cmd_info(args);
    if (command == "recall") return cmd_recall(args);
    if (command == "bench") return cmd_bench(what, args);
    return cmd_check(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flash-indexer %s: %s\n\n%s", command.c_str(), e.what(), usage->second.c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash-indexer %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
