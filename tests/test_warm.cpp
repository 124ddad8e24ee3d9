// The warm functions: for an explicit arch they compile into the disk cache with no GPU and no context;
// without one they load into the current context, or device 0's primary context where the thread has
// none (a fresh process or thread, as a server warms before it touches the GPU).
#include <filesystem>
#include <string>
#include <thread>

#include "catch_compat.hpp"
#include "disk_cache.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/jit.hpp"
#include "flash_indexer/mqa_logits.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "mqa_logits_kernel.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "test_support.hpp"
#include "topk_kernel.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;
namespace fs = std::filesystem;

namespace {

// The cache directory of this process, pointed at `dir` for the scope of a test.
struct CacheDirectoryFor {
  explicit CacheDirectoryFor(const fs::path& dir) { set_cache_directory(dir); }
  ~CacheDirectoryFor() { set_cache_directory({}); }
};

bool cached(const KernelSpec& spec) {
  return fs::is_regular_file(current_disk_cache().root() / current_disk_cache().entry_name(spec) / "kernel.cubin");
}

}  // namespace

TEST_CASE("warming for an explicit arch compiles into the disk cache without a GPU", "[cache][warm]") {
  test::TempDir dir;
  const CacheDirectoryFor scope(dir.path());
  const Arch hopper = Arch::parse("sm_90a");

  TopkConfig topk{LogitsDType::f32, hopper, 1};
  REQUIRE_FALSE(cached(topk_kernel_spec(topk)));
  warm_topk(topk);
  CHECK(cached(topk_kernel_spec(topk)));

  PagedMqaLogitsConfig paged;  // automatic: the sm90 kernel on sm_90a
  paged.next_n = 2;
  paged.heads = 64;
  paged.arch = hopper;
  warm_paged_mqa_logits(paged);
  CHECK(cached(paged_mqa_logits_kernel_spec(paged.resolved())));
  CHECK(paged.resolved().variant == PagedMqaLogitsVariant::sm90);

  MqaLogitsConfig prefill;
  prefill.heads = 32;
  prefill.arch = Arch::parse("sm_80");
  warm_mqa_logits(prefill);
  CHECK(cached(mqa_logits_kernel_spec(prefill.resolved())));

  // A second warm is a hit: nothing new in the cache.
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.is_directory();
  warm_topk(topk);
  std::size_t again = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) again += e.is_directory();
  CHECK(again == entries);
}

TEST_CASE("warming rejects a bad arch and a configuration the arch does not build, naming them", "[cache][warm]") {
  CHECK_THROWS_AS(Arch::parse("sm_70", "warm_topk: arch"), ArgumentError);
  CHECK_THROWS_WITH(Arch::parse("hopper", "warm_topk: arch"), Contains("warm_topk: arch"));
  PagedMqaLogitsConfig sm90_on_ampere;
  sm90_on_ampere.variant = PagedMqaLogitsVariant::sm90;
  sm90_on_ampere.arch = Arch::parse("sm_80");
  CHECK_THROWS_AS(warm_paged_mqa_logits(sm90_on_ampere), Error);
}

TEST_CASE("gpu: warming in a thread with no current context uses device 0's primary context", "[gpu][warm]") {
  test::require_gpu();
  std::string failure;
  std::thread fresh([&] {  // a new thread has no current context
    try {
      warm_topk(LogitsDType::f32);
      PagedMqaLogitsConfig paged;
      paged.heads = 64;
      warm_paged_mqa_logits(paged);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  fresh.join();
  INFO(failure);
  CHECK(failure.empty());
}
