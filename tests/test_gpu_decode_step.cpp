// GPU tests of the one-pass decode step (DecodeStep::one_pass, kernels/decode_step.cuh): its indices
// are the two-kernel plan's bytes on the same inputs, and the reference top-k of the reference logits
// where the reference is affordable; across next_n, heads, dtypes, key caches, k from 1 to 4096, rows
// shorter than k, empty rows, ties (exact-arithmetic inputs), infinities (FP16 overflow), NaN rows,
// grids of several waves, flattened draft rows, physical slots (the CUDA-graph replays with new lengths:
// test_gpu_decode_plan.cpp).
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "decode_plan_launch.hpp"
#include "decode_step.hpp"
#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"
#include "plan_reference.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

struct StepCase {
  DecodePlanConfig pc;
  std::vector<int> lengths;
  bool reference = true;  // also against the CPU reference (small shapes with exact inputs only)
  bool exact = true;      // exact-arithmetic inputs (frequent ties); else random FP8 values, whose GPU
                          // logits may differ from the reference's in the last bit
  bool wide = false;      // raw random FP8 bytes: FP16 overflow (infinities) included
  int nan_row = -1;       // this row's weight is NaN (its live logits are NaN)
};

std::string describe(const StepCase& c) {
  return fmt::format("B {} next_n {} H {} {} k {} width {}{}{}{}{}", c.lengths.size(), c.pc.next_n, c.pc.heads,
                     c.pc.logits == LogitsDType::f32   ? "f32"
                     : c.pc.logits == LogitsDType::f16 ? "f16"
                                                       : "bf16",
                     c.pc.k, c.pc.max_context, c.pc.kv == KvFormat::mxfp4 ? " mxfp4" : "", c.pc.physical_slots ? " slots" : "",
                     c.exact ? " exact" : "", c.wide ? " wide" : "");
}

// Runs both plans on the same inputs (indices poisoned first) and compares. Returns whether the one pass
// ran in its spread form (StepForm::spread: a grid the device runs at once).
bool check_step(const StepCase& c, std::mt19937_64& rng) {
  INFO(describe(c));
  DecodePlanConfig one = c.pc, two = c.pc;
  one.step = DecodeStep::one_pass;
  two.step = DecodeStep::two_kernels;
  // The one pass in a caller's buffer full of garbage: the plan zeroes its counters and histogram once,
  // and every run leaves them zero for the next.
  ck::DeviceBuffer one_memory(DecodePlan::required_bytes(one));
  one_memory.fill(0xa5);
  const DecodePlan plan_one(one, PlanMemory{one_memory.data(), DecodePlan::required_bytes(one)}), plan_two(two);
  REQUIRE(plan_one.one_pass());
  REQUIRE(!plan_two.one_pass());
  ck::LogitsCase lc;
  lc.config = {c.pc.next_n, c.pc.heads, c.pc.head_dim, 64, true, c.pc.logits, {}};
  lc.config.kv = c.pc.kv;
  lc.lengths = c.lengths;
  lc.lens_2d = false;
  lc.exact_values = c.exact;
  lc.wide_values = c.wide;
  lc.nan_weight_row = c.nan_row;
  lc.width = c.pc.max_context;
  lc.seed = rng();
  const ck::HostInputs in = ck::make_inputs(lc);
  ck::DeviceInputs d = ck::upload(in, lc);
  const ck::LogitsViews v = ck::views(d, in, lc);
  const std::int64_t rows = static_cast<std::int64_t>(c.lengths.size()) * c.pc.next_n;
  const std::size_t n = static_cast<std::size_t>(rows) * c.pc.k;
  ck::DeviceBuffer got_one(n * 4), got_two(n * 4);
  got_one.fill(0x7d);
  got_two.fill(0x3c);
  CUstream stream = test::gpu_session().stream();
  ck::DeviceBuffer probe(n * 4);
  const DecodeLaunch prepared =
      prepare_decode("check_step", plan_one, v.q, c.pc.kv == KvFormat::mxfp4 ? v.q_scales : TensorView{}, v.kv_cache, v.weights,
                     v.context_lens, v.block_table, TensorView::contiguous(probe.data(), DType::i32, {rows, c.pc.k}), {}, stream);
  REQUIRE(prepared.one_pass);
  const bool spread = prepared.step.form == kernels::StepForm::spread;
  INFO((spread ? "spread form" : "last-CTA form"));
  for (int run = 0; run < 2; ++run) {  // twice: the second run starts from the first one's counters and bins
    const auto launch = [&](const DecodePlan& plan, ck::DeviceBuffer& out) {
      const TensorView iv = TensorView::contiguous(out.data(), DType::i32, {rows, c.pc.k});
      if (c.pc.kv == KvFormat::mxfp4) plan.run(v.q, v.q_scales, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, stream);
      else plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, stream);
    };
    launch(plan_one, got_one);
    launch(plan_two, got_two);
    test::gpu_session().synchronize();
    const std::vector<std::int32_t> a = got_one.to_host<std::int32_t>(n), b = got_two.to_host<std::int32_t>(n);
    REQUIRE(a == b);  // ascending columns in both: the same bytes
    // The step's own histogram always holds: no row is counted again.
    std::vector<TopkRowReport> rep(static_cast<std::size_t>(rows));
    driver::check(driver::api().cuMemcpyDtoH(rep.data(), reinterpret_cast<CUdeviceptr>(plan_one.topk_workspace().data),
                                             rep.size() * sizeof(TopkRowReport)),
                  "cuMemcpyDtoH");
    for (const TopkRowReport& r : rep) CHECK(r.histogram_use == 1);
    const TensorView histogram = plan_one.histogram(one.max_batch);
    const std::size_t counters = (static_cast<std::size_t>(one.max_batch) * one.next_n * kDecodeStepCountersPerRow + 3) / 4 * 4;
    std::vector<std::int32_t> left(static_cast<std::size_t>(histogram.numel()) + counters);
    driver::check(
        driver::api().cuMemcpyDtoH(left.data(), reinterpret_cast<CUdeviceptr>(histogram.data) - counters * 4, left.size() * 4),
        "cuMemcpyDtoH");
    CHECK(std::count(left.begin(), left.end(), 0) == static_cast<std::ptrdiff_t>(left.size()));  // counters, histogram
    got_one.fill(0x11);
  }
  if (c.reference && c.exact) {
    std::vector<std::int32_t> want = test::plan_reference_indices(lc, in, c.pc, plan_one.width());
    std::vector<std::int32_t> got = got_two.to_host<std::int32_t>(n);
    if (!c.pc.sorted)
      for (std::int64_t r = 0; r < rows; ++r) {
        std::sort(got.begin() + r * c.pc.k, got.begin() + (r + 1) * c.pc.k);
        std::sort(want.begin() + r * c.pc.k, want.begin() + (r + 1) * c.pc.k);
      }
    REQUIRE(got == want);
  }
  return spread;
}

std::vector<int> random_lengths(int batch, int max_len, std::mt19937_64& rng, int zero_at = 1) {
  std::vector<int> lengths;
  for (int b = 0; b < batch; ++b) lengths.push_back(b == zero_at ? 0 : 1 + static_cast<int>(rng() % max_len));
  return lengths;
}

}  // namespace

TEST_CASE("gpu: the one-pass step writes the two-kernel bytes and the reference", "[gpu][plan][step]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  // {max_batch, next_n, heads, head_dim, k, logits, max_context, histogram, physical_slots, sorted, kv}
  std::vector<StepCase> cases;
  const auto add = [&](DecodePlanConfig pc, std::vector<int> lengths, bool exact = true) {
    cases.push_back({pc, std::move(lengths), true, exact});
  };
  add({3, 1, 64, 128, 2048, LogitsDType::f32, 20000}, random_lengths(3, 20000, rng));
  add({3, 1, 64, 128, 2048, LogitsDType::f16, 20000, false}, random_lengths(3, 20000, rng), false);
  add({2, 1, 32, 128, 512, LogitsDType::bf16, 9000, true, true, true}, random_lengths(2, 9000, rng));
  add({2, 2, 64, 128, 1024, LogitsDType::f32, 12000}, random_lengths(2, 12000, rng));
  add({2, 2, 32, 128, 1, LogitsDType::f16, 3000}, {2999, 1});
  add({2, 3, 64, 128, 2048, LogitsDType::f16, 5000}, {1500, 5000});  // rows shorter than k
  add({2, 3, 32, 128, 7, LogitsDType::f32, 4000}, random_lengths(2, 4000, rng, 0));
  add({2, 4, 64, 128, 4096, LogitsDType::f32, 16000}, random_lengths(2, 16000, rng));
  add({2, 4, 32, 128, 2048, LogitsDType::bf16, 12000, true, false, true}, random_lengths(2, 12000, rng));
  add({2, 1, 64, 128, 2048, LogitsDType::f32, 16384, true, false, false, KvFormat::mxfp4}, random_lengths(2, 16384, rng));
  add({2, 3, 32, 128, 512, LogitsDType::f16, 8000, true, false, false, KvFormat::mxfp4}, random_lengths(2, 8000, rng));
  // Infinities (FP16 overflow of wide FP8 values) and a NaN row.
  cases.push_back({{2, 1, 64, 128, 2048, LogitsDType::f16, 12000}, {12000, 9000}, true, false, true});
  cases.push_back({{2, 2, 32, 128, 512, LogitsDType::f32, 6000}, {6000, 5000}, true, true, false, 1});
  int spread = 0;
  for (const StepCase& c : cases) spread += check_step(c, rng) ? 1 : 0;
  CHECK(spread > 0);  // small grids: one wave, the spread form
}

TEST_CASE("gpu: the one-pass step at scale (several waves, long rows) writes the two-kernel bytes", "[gpu][plan][step]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<StepCase> cases;
  // Several waves of CTAs per grid; rows of up to the step's widest (256K columns); flattened draft rows.
  cases.push_back({{48, 1, 64, 128, 2048, LogitsDType::f32, 65536}, random_lengths(48, 65536, rng), false});
  cases.push_back({{16, 2, 64, 128, 2048, LogitsDType::f16, 131072}, random_lengths(16, 131072, rng), false, false});
  cases.push_back({{4, 1, 64, 128, 512, LogitsDType::f32, 262144}, {262144, 200000, 0, 70000}, false, false});
  cases.push_back({{2, 4, 64, 128, 1024, LogitsDType::bf16, 40000}, {40000, 31000}, false});
  cases.push_back({{8, 4, 32, 128, 2048, LogitsDType::f32, 50000, true, true}, random_lengths(8, 50000, rng), false});
  // One long row at the largest k: a long candidate list, and many columns per CTA.
  cases.push_back({{1, 1, 64, 128, 4096, LogitsDType::f32, 262144}, {250000}, false, false});
  int spread = 0;
  for (const StepCase& c : cases) spread += check_step(c, rng) ? 1 : 0;
  CHECK(spread > 0);                                  // one wave: the 256K rows
  CHECK(spread < static_cast<int>(cases.size()));     // several waves: the last CTA of a row selects it
}

TEST_CASE("DecodePlan: config.step one_pass is refused where it does not apply, naming it", "[plan][step]") {
  DecodePlanConfig pc{1, 1, 16, 128, 2048, LogitsDType::f16, 1000};
  pc.step = DecodeStep::one_pass;
  CHECK_THROWS_WITH(DecodePlan::required_bytes(pc), flash_indexer::test::Contains("config.step: one_pass applies to"));
  pc.heads = 64;
  pc.max_context = 300000;
  CHECK_THROWS_WITH(DecodePlan::required_bytes(pc), flash_indexer::test::Contains("config.step"));
  pc.max_context = 1000;
  pc.dcp = {2, 0, 1};
  CHECK_THROWS_AS(DecodePlan::required_bytes(pc), ArgumentError);
  pc.dcp = {};
  CHECK(DecodePlan::required_bytes(pc) > 0);
  pc.step = static_cast<DecodeStep>(7);
  CHECK_THROWS_WITH(DecodePlan::required_bytes(pc), flash_indexer::test::Contains("config.step: expected automatic"));
}

TEST_CASE("the step's coarse-bin key table bounds every bin", "[step]") {
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
    INFO(static_cast<int>(dtype));
    const bool f32 = dtype == LogitsDType::f32;
    const auto value_of = [&](unsigned int k) {
      if (f32) return float_from_bits((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
      const auto h = static_cast<std::uint16_t>(((k & 0x8000u) ? (k ^ 0x8000u) : ~k) & 0xffffu);
      return dtype == LogitsDType::f16 ? reference::f16_bits_to_float(h) : reference::bf16_bits_to_float(h);
    };
    const unsigned int min_key = f32 ? 0x007fffffu : ~((dtype == LogitsDType::f16 ? 0x7c00u : 0x7f80u) | 0x8000u) & 0xffffu;
    const auto& keys = decode_step_coarse_lowest_keys(dtype);
    for (int b = 0; b < kCoarseBins; ++b) {
      CHECK(coarse_bin(value_of(keys[b])) <= b);  // the key's value is in bin b or better
      if (keys[b] > min_key) CHECK(coarse_bin(value_of(keys[b] - 1)) > b);  // and the key below it is not
      if (b > 0) CHECK(keys[b] <= keys[b - 1]);
    }
  }
  CHECK(decode_step_coarse_lowest_keys(LogitsDType::f32)[0] == (float_bits(223.0f) ^ 0x80000000u));  // 223 opens bin 0
}
