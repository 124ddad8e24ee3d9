#pragma once
// Helpers shared by the test files.
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::test {

// Registers a Catch2 test case at static-initialization time under a run-time name, so that every
// kernel configuration is its own test case (and its own CTest test).
bool register_test(const std::string& name, const std::string& tags, std::function<void()> body);

// Skips the test, saying why, when no GPU can be used (Catch2 v2: the run exits with code 77; v3: SKIP, exit
// code 4 when every test of the run was skipped; CTest reports "Skipped" either way); otherwise
// makes GPU 0's primary context current (gpu_session()), so a test needs no earlier test.
void require_gpu();
// Ends the test as skipped, visibly, saying why. Catch2 v3: SKIP. v2 has no skip: a run of this one test
// case (CTest's) exits with code 77, which CTest reports as skipped; in a run of several, a warning
// names the skip and only this test case ends, so the ones after it still run (a two-GPU test in a
// `[gpu]` run on one GPU).
[[noreturn]] void skip(const std::string& why);
// Under Catch2 v2, tests/main.cpp tells skip() how many test cases the run selected.
void set_test_cases_selected(std::size_t count);

// A fresh empty directory under the system temp directory, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The flash-indexer executable next to the test binary.
std::filesystem::path cli_path();

// Runs a shell command; returns its exit code, with stdout+stderr in `output`.
int run_command(const std::string& command, std::string* output = nullptr);

// Captures library warnings for the lifetime of the object.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  const std::vector<std::string>& warnings() const { return *warnings_; }

 private:
  std::shared_ptr<std::vector<std::string>> warnings_;
  std::function<void(const std::string&)> previous_;
};

std::string config_name(const PagedMqaLogitsConfig& c);  // key without the arch

// A random seed per call (tests draw fresh inputs every run; failures print the seed).
std::uint64_t fresh_seed();

// A score with many ties, zeros of both signs, infinities and NaN (the selection ops' adversarial rows).
float adversarial_score(std::mt19937_64& rng);
// x as element i of `bytes` in `dtype` (FP32, or rounded to FP16 / BF16 as the GPU stores it).
void store_score(LogitsDType dtype, std::vector<unsigned char>& bytes, std::size_t i, float x);

// GPU 0's primary context and a stream, shared by the GPU tests of one process (call require_gpu first).
check::GpuSession& gpu_session();

}  // namespace flash_indexer::test
