// The disk cache: atomic publish, races, corruption recovery, unwritable directories, JIT off.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "disk_cache.hpp"
#include "flash_indexer/jit.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "topk_kernel.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace fs = std::filesystem;
using flash_indexer::test::Contains;

namespace {

KernelSpec small_spec(LogitsDType out = LogitsDType::f32) {
  return paged_mqa_logits_kernel_spec({1, 16, 64, 64, false, out, Arch{9, 0, true}});
}

// Entry directories and temporary leftovers under a cache root (lock files are not counted).
std::pair<int, int> count_dirs(const fs::path& root) {
  int entries = 0, temps = 0;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) (e.path().filename().string().starts_with(".tmp-") ? temps : entries)++;
  return {entries, temps};
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The number after `label` in a warm summary ("warm: 3 kernels for sm_90a: 1 hits, 2 compiled, ...").
int summary_count(const std::string& text, const std::string& label) {
  const std::size_t at = text.find(" " + label + ",");
  if (at == std::string::npos) return -1;
  const std::size_t start = text.rfind(' ', at - 1) + 1;
  return std::stoi(text.substr(start, at - start));
}

// True while some process holds the flock on `path`.
bool lock_is_held(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

void overwrite(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary | std::ios::trunc) << text; }

}  // namespace

TEST_CASE("a miss compiles and publishes one complete entry and the next lookup is a hit", "[cache]") {
  test::TempDir dir;
  const DiskCache cache(dir.path() / "nested" / "cache");
  const KernelSpec spec = small_spec();
  const CachedCubin first = cache.get_or_compile(spec);
  CHECK(first.outcome == CacheOutcome::compiled);
  const fs::path entry = cache.root() / cache.entry_name(spec);
  CHECK(fs::is_regular_file(entry / "kernel.cubin"));
  CHECK(fs::is_regular_file(entry / "kernel.cu"));
  CHECK(fs::is_regular_file(entry / "meta.json"));
  CHECK(count_dirs(cache.root()) == std::make_pair(1, 0));

  const auto meta = nlohmann::json::parse(std::ifstream(entry / "meta.json"));
  CHECK(meta["key"] == spec.key);
  CHECK(meta["arch"] == "sm_90a");
  CHECK(meta["nvrtc_version"].is_string());
  CHECK(meta["options"].is_array());
  CHECK(meta["ptxas"]["registers"].get<int>() > 0);
  CHECK(meta["ptxas"]["spill_store_bytes"] == 0);
  CHECK(meta["compile_ms"].get<double>() > 0);
  CHECK(meta["cubin_bytes"] == first.cubin.size());
  CHECK(meta["config"]["heads"] == 16);
  CHECK(meta.contains("created"));

  const CachedCubin second = cache.get_or_compile(spec);
  CHECK(second.outcome == CacheOutcome::hit);
  CHECK(second.cubin == first.cubin);
}

TEST_CASE("threads racing on one empty cache all succeed and leave one entry and no temporaries", "[cache]") {
  test::TempDir dir;
  const DiskCache cache(dir.path());
  const KernelSpec spec = small_spec(LogitsDType::f16);
  std::vector<std::string> cubins(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { cubins[t] = cache.get_or_compile(spec).cubin; });
  for (auto& t : threads) t.join();
  for (const auto& c : cubins) CHECK(c == cubins[0]);
  CHECK(count_dirs(dir.path()) == std::make_pair(1, 0));
  CHECK(cache.get_or_compile(spec).outcome == CacheOutcome::hit);
}

TEST_CASE("a corrupt entry is removed with a warning and rebuilt", "[cache]") {
  test::TempDir dir;
  const DiskCache cache(dir.path());
  const KernelSpec spec = small_spec();
  const std::string good = cache.get_or_compile(spec).cubin;
  const fs::path entry = dir.path() / cache.entry_name(spec);

  const std::vector<std::pair<std::string, std::function<void()>>> corruptions = {
      {"kernel.cubin has", [&] { fs::resize_file(entry / "kernel.cubin", good.size() / 2); }},
      {"checksum mismatch",
       [&] {
         std::string bad = good;
         bad[bad.size() / 2] ^= 0x5a;
         overwrite(entry / "kernel.cubin", bad);
       }},
      {"kernel.cubin is missing", [&] { fs::remove(entry / "kernel.cubin"); }},
      {"meta.json is not valid", [&] { overwrite(entry / "meta.json", "{ not json"); }},
      {"meta.json is missing", [&] { fs::remove(entry / "meta.json"); }},
  };
  for (const auto& [expected, corrupt] : corruptions) {
    INFO(expected);
    corrupt();
    test::WarningCapture warnings;
    const CachedCubin rebuilt = cache.get_or_compile(spec);
    CHECK(rebuilt.outcome == CacheOutcome::compiled);
    CHECK(rebuilt.cubin == good);
    REQUIRE(warnings.warnings().size() == 1);
    CHECK_THAT(warnings.warnings()[0], Contains("corrupt kernel cache entry") && Contains(expected));
    CHECK(cache.get_or_compile(spec).outcome == CacheOutcome::hit);
    CHECK(count_dirs(dir.path()) == std::make_pair(1, 0));
  }
}

TEST_CASE("an unwritable cache directory gives one warning and in-memory compiles", "[cache]") {
  test::TempDir dir;
  overwrite(dir.path() / "a_file", "x");
  const DiskCache cache(dir.path() / "a_file" / "cache");  // a path under a regular file: never creatable
  test::WarningCapture warnings;
  CHECK(cache.get_or_compile(small_spec(LogitsDType::f32)).outcome == CacheOutcome::compiled_in_memory);
  CHECK(cache.get_or_compile(small_spec(LogitsDType::f16)).outcome == CacheOutcome::compiled_in_memory);
  REQUIRE(warnings.warnings().size() == 1);
  CHECK_THAT(warnings.warnings()[0], Contains("not writable") && Contains("a_file"));
}

TEST_CASE("FLASH_INDEXER_JIT=off turns a miss into an error naming the configuration", "[cache]") {
  test::TempDir dir;
  const DiskCache cache(dir.path());
  const KernelSpec cached = small_spec(LogitsDType::f32);
  cache.get_or_compile(cached);
  ::setenv("FLASH_INDEXER_JIT", "off", 1);
  CHECK_FALSE(jit_enabled());
  CHECK(cache.get_or_compile(cached).outcome == CacheOutcome::hit);  // hits still load
  const KernelSpec missing = small_spec(LogitsDType::bf16);
  CHECK_THROWS_WITH(cache.get_or_compile(missing),
                    Contains("FLASH_INDEXER_JIT=off") && Contains(missing.key) && Contains("flash-indexer warm"));
  ::unsetenv("FLASH_INDEXER_JIT");
  CHECK(jit_enabled());
  CHECK(count_dirs(dir.path()) == std::make_pair(1, 0));
}

TEST_CASE("the cache directory comes from the override then FLASH_INDEXER_CACHE_DIR then XDG_CACHE_HOME then HOME", "[cache]") {
  ::setenv("FLASH_INDEXER_CACHE_DIR", "/tmp/fi-explicit", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  CHECK(cache_directory() == "/tmp/fi-explicit");
  ::unsetenv("FLASH_INDEXER_CACHE_DIR");
  CHECK(cache_directory() == "/tmp/xdg/flash_indexer");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  CHECK(cache_directory() == "/home/someone/.cache/flash_indexer");
  set_cache_directory("/tmp/override");
  CHECK(cache_directory() == "/tmp/override");
  set_cache_directory({});
}

TEST_CASE("clear removes entries, leftover temporaries and lock files", "[cache]") {
  test::TempDir dir;
  const DiskCache cache(dir.path());
  cache.get_or_compile(small_spec());
  CHECK(fs::exists(cache.lock_path(small_spec())));
  fs::create_directory(dir.path() / ".tmp-leftover");
  CHECK(cache.entries().size() == 1);
  CHECK(cache.clear() == 1);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("four processes warming one empty directory at once all succeed with identical valid entries", "[cache][cli]") {
  test::TempDir dir;
  const fs::path manifest = dir.path() / "manifest.json";
  overwrite(manifest, R"({"kernels": ["paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f32.kv-fp8",
                                      "paged_mqa_logits.portable.n2.h32.d128.bs64.hist0.out-f16.kv-fp8",
                                      "paged_mqa_logits.portable.n4.h64.d128.bs64.hist0.out-bf16.kv-fp8"]})");
  const fs::path cache_dir = dir.path() / "cache";
  std::string script;
  for (int i = 0; i < 4; ++i)
    script += fmt::format("{} warm --arch sm_90a --jobs 2 --manifest {} --cache-dir {} > {}/out{} 2>&1 & ",
                          test::cli_path().string(), manifest.string(), cache_dir.string(), dir.path().string(), i);
  script += "fail=0; for p in $(jobs -p); do wait $p || fail=1; done; exit $fail";
  CHECK(test::run_command("bash -c '" + script + "'") == 0);
  int compiles = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string text = read_text(dir.path() / fmt::format("out{}", i));
    INFO(text);
    CHECK_THAT(text, Contains("3 kernels for sm_90a") && Contains("0 failed"));
    compiles += summary_count(text, "compiled");
  }
  CHECK(compiles == 3);  // each kernel compiled once; the other processes waited and loaded it
  CHECK(count_dirs(cache_dir) == std::make_pair(3, 0));
  // Every entry reads back valid: a fresh lookup of each is a hit.
  const DiskCache cache(cache_dir);
  for (const auto& e : cache.entries()) {
    const auto config = PagedMqaLogitsConfig::parse_key(e.meta["key"].get<std::string>());
    CHECK(cache.get_or_compile(paged_mqa_logits_kernel_spec(config)).outcome == CacheOutcome::hit);
  }
}

TEST_CASE("eight processes warming one manifest into one empty directory compile each kernel once", "[cache][cli]") {
  test::TempDir dir;
  const fs::path manifest = dir.path() / "manifest.json";
  overwrite(manifest, R"({"kernels": ["paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f32.kv-fp8",
                                      "paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f16.kv-fp8",
                                      "paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-bf16.kv-fp8",
                                      "paged_mqa_logits.portable.n2.h16.d64.bs64.hist1.out-f32.kv-fp8"]})");
  const fs::path cache_dir = dir.path() / "cache";
  std::string script;
  for (int i = 0; i < 8; ++i)
    script += fmt::format("{} warm --arch sm_90a --jobs 1 --manifest {} --cache-dir {} > {}/out{} 2>&1 & ",
                          test::cli_path().string(), manifest.string(), cache_dir.string(), dir.path().string(), i);
  script += "fail=0; for p in $(jobs -p); do wait $p || fail=1; done; exit $fail";
  CHECK(test::run_command("bash -c '" + script + "'") == 0);
  int compiles = 0, hits = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string text = read_text(dir.path() / fmt::format("out{}", i));
    INFO(text);
    CHECK_THAT(text, Contains("4 kernels for sm_90a") && Contains("0 failed"));
    compiles += summary_count(text, "compiled");
    hits += summary_count(text, "hits");
  }
  CHECK(compiles == 4);
  CHECK(hits == 8 * 4 - 4);
  CHECK(count_dirs(cache_dir) == std::make_pair(4, 0));
}

TEST_CASE("a compiler killed while it holds an entry's lock does not block the process waiting for it", "[cache][cli]") {
  test::TempDir dir;
  const KernelSpec spec = topk_kernel_spec({LogitsDType::f32, Arch{9, 0, true}, 8});  // a compile of seconds
  const fs::path manifest = dir.path() / "manifest.json";
  overwrite(manifest, fmt::format(R"({{"kernels": ["{}"]}})", spec.key));
  const fs::path cache_dir = dir.path() / "cache";
  const DiskCache cache(cache_dir);
  const std::string cli = test::cli_path().string();
  // The first process (the CLI itself, no shell between) takes the lock and compiles.
  const pid_t first = ::fork();
  REQUIRE(first >= 0);
  if (first == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(cli.c_str(), cli.c_str(), "warm", "--jobs", "1", "--manifest", manifest.c_str(), "--cache-dir", cache_dir.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!lock_is_held(cache.lock_path(spec)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(lock_is_held(cache.lock_path(spec)));
  // A second process starts and waits on the lock; the first is killed mid-compile.
  std::string text;
  std::thread second([&] {
    test::run_command(fmt::format("{} warm --jobs 1 --manifest {} --cache-dir {}", cli, manifest.string(), cache_dir.string()),
                      &text);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(first, SIGKILL);
  int status = 0;
  ::waitpid(first, &status, 0);
  CHECK(WIFSIGNALED(status));  // killed, not finished
  second.join();
  INFO(text);
  CHECK_THAT(text, Contains("0 hits, 1 compiled, 0 failed"));  // the waiter compiled it itself
  CHECK(cache.get_or_compile(spec).outcome == CacheOutcome::hit);
  CHECK(count_dirs(cache_dir).first == 1);
}
