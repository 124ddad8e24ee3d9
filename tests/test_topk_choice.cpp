// Which top-k selector topk() launches (choose_topk_kernel, runtime/topk.cpp): the choices the H200
// measurements behind its order picked (docs/benchmarks/topk.md), computed here without a GPU.
#include "catch_compat.hpp"

#include "flash_indexer/topk.hpp"
#include "topk_kernel.hpp"

using namespace flash_indexer;

namespace {

const Arch h200_arch{9, 0, true};
constexpr int kSms = 132;
// The H200's cluster capacities as cuOccupancyMaxActiveClusters gives them (`bench topk` prints them):
// clusters of 2, 4, 8 at two CTAs per SM and at one.
const TopkDevice h200{h200_arch, kSms, {0, 132, 62, 30}, {0, 66, 30, 15}};

TopkDevice device_of(const Arch& arch) { return arch.major >= 9 ? TopkDevice{arch, kSms} : TopkDevice{arch, 108}; }

// The automatic choice for rows x width, as topk() makes it.
TopkChoice automatic(std::int64_t rows, std::int64_t width, LogitsDType logits) {
  return choose_topk_kernel(rows, width, logits, h200, 0);
}
TopkChoice automatic(std::int64_t rows, std::int64_t width, LogitsDType logits, const Arch& arch) {
  return choose_topk_kernel(rows, width, logits, device_of(arch), 0);
}

void check(const TopkChoice& c, int split, bool resident, bool wide, bool registers = false) {
  CHECK(c.split == split);
  CHECK(c.resident == resident);
  CHECK(c.wide == wide);
  CHECK(c.registers == registers);
}

}  // namespace

TEST_CASE("topk kernel choice: an FP32 row on one CTA takes the register selector, 16-bit rows the resident one",
          "[topk_choice]") {
  for (std::int64_t rows : {1, 8, 64, 128, 512}) {
    INFO(rows << " rows");
    check(automatic(rows, 2048, LogitsDType::f32), 1, false, false, true);
    check(automatic(rows, 8192, LogitsDType::f32), 1, false, false, true);
    check(automatic(rows, 8193, LogitsDType::f32), 1, false, true, true);
    check(automatic(rows, 16384, LogitsDType::f32), 1, false, true, true);
    for (LogitsDType dtype : {LogitsDType::f16, LogitsDType::bf16}) {
      check(automatic(rows, 8192, dtype), 1, true, false);
      check(automatic(rows, 16384, dtype), 1, true, false);
    }
  }
  check(automatic(1, 8192, LogitsDType::f32, Arch{8, 0, false}), 1, false, false, true);
  // A forced split of 1 too; a row past 16K stays resident or streams.
  check(choose_topk_kernel(64, 12000, LogitsDType::f32, h200, 1), 1, false, true, true);
  check(choose_topk_kernel(1, 32768, LogitsDType::f16, h200, 1), 1, true, false);
  check(choose_topk_kernel(1, 16385, LogitsDType::f32, h200, 1), 1, true, true);
  check(choose_topk_kernel(1, 8192, LogitsDType::f32, h200, 2), 2, true, false);
}

TEST_CASE("topk kernel choice: rows that fit 16K FP32 / 32K FP16 per CTA of a cluster take the resident form", "[topk_choice]") {
  check(automatic(1, 131072, LogitsDType::f32), 16, true, false);  // 16K per CTA at 8 fills the buffer: 16
  check(automatic(8, 131072, LogitsDType::f32), 8, true, false);   // not for 8 rows (128 CTAs)
  check(automatic(4, 131072, LogitsDType::f16), 16, true, false);  // 16K FP16 per CTA at 8: half the buffer
  check(automatic(4, 65536, LogitsDType::f16), 8, true, false);    // a quarter
  check(automatic(64, 32768, LogitsDType::f32), 2, true, false);
  check(automatic(32, 65536, LogitsDType::f32), 4, true, false);   // grown from 2: one CTA per SM
  check(automatic(16, 131072, LogitsDType::f32), 8, true, false);  // grown from 4: one CTA per SM
  check(automatic(24, 262144, LogitsDType::f16), 4, true, true);   // 24 clusters of 4 at one CTA per SM
}

TEST_CASE("topk kernel choice: a cluster grid the device cannot run at once streams instead", "[topk_choice]") {
  // 32 clusters of 8 at two CTAs per SM: the H200 runs 30 at once (31.6 µs against 27.9 on the filter
  // selector at split 2); 16 of 8 at one per SM, 15 (42.3 against 26.3 at split 4).
  CHECK(automatic(32, 131072, LogitsDType::f32).filter);
  CHECK(automatic(32, 262144, LogitsDType::f16).filter);
  check(automatic(16, 262144, LogitsDType::f32), 4, false, false);
  CHECK(automatic(16, 262144, LogitsDType::f32).filter);
  check(automatic(32, 262144, LogitsDType::f32), 4, false, false);  // one CTA per SM at 4 beats two at 2
  // Without the device's numbers a cluster is taken to fill every SM slot.
  const TopkDevice uniform{h200_arch, kSms};
  check(choose_topk_kernel(32, 131072, LogitsDType::f32, uniform, 0), 8, true, false);
  check(choose_topk_kernel(16, 262144, LogitsDType::f32, uniform, 0), 8, true, true);
}

TEST_CASE("topk kernel choice: the wide form where only it keeps the row on chip", "[topk_choice]") {
  check(automatic(1, 262144, LogitsDType::f32), 16, true, false);  // 16K FP32 per CTA, not 32K on the wide form
  check(automatic(4, 262144, LogitsDType::f16), 16, true, false);
  check(automatic(5, 262144, LogitsDType::f32), 8, true, true);     // 32K FP32 per CTA
  check(automatic(8, 262144, LogitsDType::f32), 8, true, true);
  check(automatic(64, 65536, LogitsDType::f32), 2, true, true);    // one CTA per SM beats 512 threads at split 4
  check(automatic(64, 131072, LogitsDType::f16), 2, true, true);
  check(automatic(128, 32768, LogitsDType::f32), 1, true, true);
  // Not on sm_80 (no room for 128 KiB next to the rest), nor past one CTA per SM.
  check(automatic(1, 32768, LogitsDType::f32, Arch{8, 0, false}), 1, false, false);
  check(automatic(256, 32768, LogitsDType::f32), 1, false, false);
}

TEST_CASE("topk kernel choice: long rows in large batches stream, a forced split stays", "[topk_choice]") {
  check(automatic(512, 32768, LogitsDType::f32), 1, false, false);
  check(automatic(512, 131072, LogitsDType::f16), 1, false, false);
  check(automatic(64, 131072, LogitsDType::f32), 2, false, false);
  check(automatic(128, 131072, LogitsDType::f32), 2, false, false);
  check(choose_topk_kernel(32, 131072, LogitsDType::f32, h200, 2), 2, false, false);
  check(choose_topk_kernel(1, 131072, LogitsDType::f32, h200, 4), 4, true, true);  // 32K per CTA
  check(choose_topk_kernel(1, 131072, LogitsDType::f32, h200, 1), 1, false, false);
}

TEST_CASE("topk kernel choice: streamed rows take the filter selector where its bitmaps hold the segment", "[topk_choice]") {
  CHECK(automatic(512, 32768, LogitsDType::f32).filter);
  CHECK(automatic(512, 131072, LogitsDType::f16).filter);
  CHECK(automatic(64, 131072, LogitsDType::f32).filter);
  CHECK(choose_topk_kernel(1, 262144, LogitsDType::f32, h200, 1).filter);  // 256K columns: the largest segment
  CHECK(automatic(512, 131072, LogitsDType::f32, Arch{8, 0, false}).filter);
  // Not past 256K columns per CTA, nor where a CTA has no 163 KiB of shared memory, nor for on-chip rows.
  CHECK_FALSE(choose_topk_kernel(1, 262148, LogitsDType::f32, h200, 1).filter);
  CHECK_FALSE(automatic(512, 131072, LogitsDType::f32, Arch{8, 6, false}).filter);
  CHECK_FALSE(automatic(1, 131072, LogitsDType::f32).filter);
  CHECK_FALSE(automatic(512, 8192, LogitsDType::f32).filter);
}
