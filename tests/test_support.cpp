#include "test_support.hpp"

#include "catch_compat.hpp"
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>

#include "driver.hpp"
#include "flash_indexer/jit.hpp"
#include "flash_indexer/reference.hpp"

namespace flash_indexer::test {
namespace {

// NVRTC (CUDA 12.9+, with a driver present) serves a repeated compile of the same program from its own
// cache, and then its log has no ptxas report: a compile test whose kernel another test had compiled
// reads -1 registers (docs/design/kernel-cache.md, "NVRTC's own cache"). The compile tests check that
// report, so the test processes turn that cache off (unless the caller set CUDA_CACHE_DISABLE); our own
// disk cache is what they test.
const bool nvrtc_cache_off = [] { return ::setenv("CUDA_CACHE_DISABLE", "1", 0) == 0; }();

struct FunctionInvoker : Catch::ITestInvoker {
  explicit FunctionInvoker(std::function<void()> f) : body(std::move(f)) {}
  void invoke() const override { body(); }
  std::function<void()> body;
};

}  // namespace

bool register_test(const std::string& name, const std::string& tags, std::function<void()> body) {
  static std::deque<std::string> storage;  // Catch keeps StringRefs: the text must outlive registration
  const std::string& n = storage.emplace_back(name);
  const std::string& t = storage.emplace_back(tags);
#if FLASH_INDEXER_CATCH2_MAJOR >= 3
  Catch::AutoReg(Catch::Detail::unique_ptr<Catch::ITestInvoker>(new FunctionInvoker(std::move(body))),
                 Catch::SourceLineInfo(__FILE__, __LINE__), Catch::StringRef(),
                 Catch::NameAndTags{Catch::StringRef(n.c_str()), Catch::StringRef(t.c_str())});
#else
  Catch::AutoReg(new FunctionInvoker(std::move(body)), Catch::SourceLineInfo(__FILE__, __LINE__), Catch::StringRef(),
                 Catch::NameAndTags{Catch::StringRef(n.c_str()), Catch::StringRef(t.c_str())});
#endif
  return true;
}

void require_gpu() {
  std::string why;
  if (driver::available(&why)) {
    gpu_session();  // GPU 0's context current on this thread: each test runs on its own
    return;
  }
#if FLASH_INDEXER_CATCH2_MAJOR >= 3
  skip("GPU test needs a CUDA GPU: " + why);
#else
  // No test case of this run can use a GPU: the whole run is skipped, whatever it selected.
  std::printf("SKIPPED: GPU test needs a CUDA GPU: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
#endif
}

namespace {
std::size_t test_cases_selected = 1;
}

void set_test_cases_selected(std::size_t count) { test_cases_selected = count; }

void skip(const std::string& why) {
#if FLASH_INDEXER_CATCH2_MAJOR >= 3
  SKIP(why);  // v3 skips natively: exit code 4 when all were skipped
  std::abort();  // not reached: SKIP throws
#else
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  if (test_cases_selected <= 1) std::_Exit(77);
  WARN("SKIPPED: " << why);
  // Catch2 v2 ends a test case on this exception without counting a failure (it is what a failed
  // REQUIRE throws after recording its failure).
  throw Catch::TestFailureException();
#endif
}

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() / fmt::format("flash_indexer_test_{}_{:08x}", ::getpid(), rd());
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path cli_path() { return std::filesystem::canonical("/proc/self/exe").parent_path() / "flash-indexer"; }

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buffer;
  std::string text;
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  if (output != nullptr) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

WarningCapture::WarningCapture() : warnings_(std::make_shared<std::vector<std::string>>()) {
  auto sink = warnings_;
  previous_ = set_warning_handler([sink](const std::string& m) { sink->push_back(m); });
}

WarningCapture::~WarningCapture() { set_warning_handler(previous_); }

std::string config_name(const PagedMqaLogitsConfig& c) {
  const std::string key = c.key();
  return key.substr(0, key.rfind('.'));
}

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

float adversarial_score(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 11), small(-40, 40);
  switch (pick(rng)) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return -std::numeric_limits<float>::infinity();
    case 2: return std::numeric_limits<float>::infinity();
    case 3: return -0.0f;
    case 4: return 0.0f;
    case 5: return std::ldexp(static_cast<float>(small(rng)) + 0.5f, -10);  // distinct small values
    default: return static_cast<float>(small(rng)) / 8;                     // many ties
  }
}

void store_score(LogitsDType dtype, std::vector<unsigned char>& bytes, std::size_t i, float x) {
  if (dtype == LogitsDType::f32) {
    std::memcpy(bytes.data() + 4 * i, &x, 4);
    return;
  }
  const std::uint16_t h = dtype == LogitsDType::f16 ? reference::float_to_f16_bits(x) : reference::float_to_bf16_bits(x);
  std::memcpy(bytes.data() + 2 * i, &h, 2);
}

check::GpuSession& gpu_session() {
  static check::GpuSession s;
  return s;
}

}  // namespace flash_indexer::test
