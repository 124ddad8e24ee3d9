// GPU tests of DecodePlan (logits + histogram -> top-k in one call) and of the top-k physical-slot
// output: against the reference top-k of the reference logits (exact-arithmetic inputs, so the GPU
// logits equal the reference bit for bit), eagerly and under CUDA-graph replay with new lengths and
// block tables; and with programmatic dependent launches (pdl), whose kernels must still read and write
// in stream order.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <random>

#include "decode_plan_launch.hpp"
#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"
#include "plan_reference.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

// Compares set-wise (unsorted plans) or byte-wise (sorted plans).
void require_same(std::vector<std::int32_t> got, std::vector<std::int32_t> want, const DecodePlanConfig& pc) {
  REQUIRE(got.size() == want.size());
  if (!pc.sorted)
    for (std::size_t r = 0; r < got.size() / pc.k; ++r) {
      std::sort(got.begin() + r * pc.k, got.begin() + (r + 1) * pc.k);
      std::sort(want.begin() + r * pc.k, want.begin() + (r + 1) * pc.k);
    }
  REQUIRE(got == want);
}

ck::LogitsCase plan_case(const DecodePlanConfig& pc, std::vector<int> lengths, std::mt19937_64& rng) {
  ck::LogitsCase lc;
  lc.config = {pc.next_n, pc.heads, pc.head_dim, 64, pc.histogram, pc.logits, {}};
  lc.config.kv = pc.kv;
  lc.lengths = std::move(lengths);
  lc.lens_2d = false;
  lc.exact_values = true;
  lc.width = pc.max_context;
  lc.seed = rng();
  return lc;
}

}  // namespace

TEST_CASE("gpu: DecodePlan equals the reference top-k of the reference logits", "[gpu][plan]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  const DecodePlanConfig configs[] = {
      {4, 1, 64, 128, 2048, LogitsDType::f16, 40000, true, false, false},
      {3, 2, 32, 128, 512, LogitsDType::bf16, 20000, true, true, true},
      {2, 4, 64, 128, 1024, LogitsDType::f32, 12000, false, true, false},
      {3, 3, 16, 64, 7, LogitsDType::f16, 5000, true, false, true},
      {3, 3, 32, 128, 2048, LogitsDType::f16, 30000, true, true, true, KvFormat::mxfp4},
      {2, 1, 64, 128, 512, LogitsDType::f32, 9000, false, false, false, KvFormat::mxfp4},
      {3, 2, 64, 128, 4096, LogitsDType::f16, 30000, true, false, false},
      // Speculative decoding with 4-5 draft tokens: groups of 2 rows at H 64, N 160 at H 32.
      {3, 6, 64, 128, 512, LogitsDType::f32, 9000, true, true, false, KvFormat::mxfp4},
      {2, 5, 32, 128, 1024, LogitsDType::bf16, 12000, false, false, true},
  };
  for (const bool pdl : {false, true})
    for (DecodePlanConfig pc : configs) {
      pc.pdl = pdl;
      // With pdl, the plan works in the caller's memory (PlanMemory), which must still be the caller's
      // after the plan is gone (checked at the end of the iteration).
      ck::DeviceBuffer caller(DecodePlan::required_bytes(pc));
      std::optional<DecodePlan> held;
      held.emplace(pdl ? DecodePlan(pc, PlanMemory{caller.data(), caller.bytes()}) : DecodePlan(pc));
      const DecodePlan& plan = *held;
      CHECK(plan.workspace_bytes() == DecodePlan::required_bytes(pc));
      if (pdl) CHECK(plan.logits(1).data == caller.data());
      for (int batch : {pc.max_batch, 1}) {
        std::vector<int> lengths;
        for (int b = 0; b < batch; ++b) lengths.push_back(b == 1 ? 0 : static_cast<int>(rng() % pc.max_context) + 1);
        const ck::LogitsCase lc = plan_case(pc, lengths, rng);
        INFO(ck::describe(lc) << " k " << pc.k << (pc.physical_slots ? " slots" : "") << (pc.sorted ? " sorted" : "")
                              << (pc.pdl ? " pdl" : ""));
        const ck::HostInputs in = ck::make_inputs(lc);
        ck::DeviceInputs d = ck::upload(in, lc);
        const ck::LogitsViews v = ck::views(d, in, lc);
        const std::int64_t rows = static_cast<std::int64_t>(batch) * pc.next_n;
        ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * pc.k * 4);
        indices.fill(0x7d);
        const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});
      // NaN in every logit of the plan's buffer, on the plan's stream: a top-k that read before the logits
      // kernel finished would miss scores (a NaN is never selected).
        const TensorView plan_logits = plan.logits(batch);
        FI_CU(cuMemsetD8Async, "test", reinterpret_cast<CUdeviceptr>(plan_logits.data), 0xff,
              static_cast<std::size_t>(rows * plan.width()) * dtype_size(plan_logits.dtype), test::gpu_session().stream());
        if (pc.kv == KvFormat::mxfp4)
          plan.run(v.q, v.q_scales, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, test::gpu_session().stream());
        else plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, test::gpu_session().stream());
        test::gpu_session().synchronize();
        require_same(indices.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k),
                     test::plan_reference_indices(lc, in, pc, plan.width()), pc);
        if (pc.histogram) {
          std::vector<TopkRowReport> rep(static_cast<std::size_t>(rows));  // after the stream synchronized above
          driver::check(driver::api().cuMemcpyDtoH(rep.data(), reinterpret_cast<CUdeviceptr>(plan.topk_workspace().data),
                                                   rep.size() * sizeof(TopkRowReport)),
                        "cuMemcpyDtoH");
          // The fused histogram adds up (1), or the resident selector counted instead (0), or a long row's
          // threshold bin was too coarse to select from (3); it is never found not to add up (2).
          for (const auto& r : rep) CHECK((r.histogram_use == 1 || r.histogram_use == 0 || r.histogram_use == 3));
        }
      }
      held.reset();
      caller.fill(0x5a);  // fails (CUDA_ERROR_INVALID_VALUE) where the plan freed the caller's memory
      CHECK(caller.to_host<std::uint8_t>(1)[0] == 0x5a);
    }
}

TEST_CASE("gpu: a captured DecodePlan::run replays with new lengths and block tables", "[gpu][plan]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  // Two kernels with and without programmatic launches, and in one pass (DecodeStep::one_pass).
  for (const int form : {0, 1, 2}) {
    const bool pdl = form == 1;
    INFO((form == 0 ? "two kernels" : form == 1 ? "two kernels, pdl" : "one pass"));
    DecodePlanConfig pc{6, 2, 64, 128, 2048, LogitsDType::f16, 30000, true, true, false};
    pc.pdl = pdl;
    pc.step = form == 2 ? DecodeStep::one_pass : DecodeStep::two_kernels;
    DecodePlan plan(pc);
    ck::LogitsCase lc = plan_case(pc, {20000, 30000, 5, 0, 12345, 2049}, rng);
    lc.spare_blocks = 500;
    ck::HostInputs in = ck::make_inputs(lc);
    ck::DeviceInputs d = ck::upload(in, lc);
    const ck::LogitsViews v = ck::views(d, in, lc);
    const std::int64_t rows = 6 * 2;
    ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * pc.k * 4);
    const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});
    CUstream stream = test::gpu_session().stream();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, stream);
    FI_CU(cuStreamEndCapture, "test", stream, &graph);
    FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);
    for (int replay = 0; replay < 3; ++replay) {
      INFO("replay " << replay);
      for (auto& len : in.context_lens) len = static_cast<std::int32_t>(rng() % (pc.max_context + 1));
      in.context_lens[replay] = 0;  // a padding request
      ck::reshuffle_block_table(in, rng(), (pc.max_context + 63) / 64, -1);
      d.context_lens.upload(in.context_lens.data(), in.context_lens.size() * 4);
      d.block_table.upload(in.block_table.data(), in.block_table.size() * 4);
      indices.fill(0x7d);
      FI_CU(cuGraphLaunch, "test", exec, stream);
      test::gpu_session().synchronize();
      lc.lengths.assign(in.context_lens.begin(), in.context_lens.end());
      require_same(indices.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k),
                   test::plan_reference_indices(lc, in, pc, plan.width()), pc);
    }
    driver::api().cuGraphExecDestroy(exec);
    driver::api().cuGraphDestroy(graph);
  }
}

namespace {

// Which launches of two_decode_steps are programmatic.
struct PdlLaunches {
  bool logits;
  bool topk;
};

// Two decode steps through one logits buffer: step A's top-k must read A's logits (not the poison before
// them: read after write), and step B's logits kernel must not write while A's top-k still reads (write
// after read). The first launch follows a memset on the stream.
void two_decode_steps(LogitsDType dtype, PdlLaunches pdl) {
  std::mt19937_64 rng(test::fresh_seed());
  // 16 requests of 8K..16K keys: kernels long enough to overlap, a reference of about a second per step
  // (at H = 64, D = 128 and 40K keys the reference takes about 20 s per step).
  DecodePlanConfig pc{16, 1, 32, 64, 2048, dtype, 16384, false, false, false};
  std::vector<int> lengths_a, lengths_b;
  for (int b = 0; b < pc.max_batch; ++b) {
    lengths_a.push_back(b == 3 ? 0 : 8192 + static_cast<int>(rng() % 8193));
    lengths_b.push_back(b == 5 ? 0 : 8192 + static_cast<int>(rng() % 8193));
  }
  const ck::LogitsCase a = plan_case(pc, lengths_a, rng), b = plan_case(pc, lengths_b, rng);
  INFO(ck::describe(a) << (pdl.logits ? " pdl logits" : "") << (pdl.topk ? " pdl topk" : ""));
  const ck::HostInputs in_a = ck::make_inputs(a), in_b = ck::make_inputs(b);
  ck::DeviceInputs da = ck::upload(in_a, a), db = ck::upload(in_b, b);
  const ck::LogitsViews va = ck::views(da, in_a, a), vb = ck::views(db, in_b, b);
  REQUIRE(in_a.logits_stride == in_b.logits_stride);
  const std::int64_t rows = pc.max_batch;
  ck::DeviceBuffer indices_a(static_cast<std::size_t>(rows) * pc.k * 4), indices_b(indices_a.bytes());
  ck::DeviceBuffer workspace(topk_workspace_bytes(rows));
  indices_a.fill(0x7d);
  indices_b.fill(0x7d);
  const TensorView ia = TensorView::contiguous(indices_a.data(), DType::i32, {rows, pc.k});
  const TensorView ib = TensorView::contiguous(indices_b.data(), DType::i32, {rows, pc.k});
  const TensorView ws = TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});
  PagedMqaLogitsOptions lo;
  lo.pdl = pdl.logits;
  TopkOptions to;
  to.next_n = 1;
  to.pdl = pdl.topk;
  CUstream stream = test::gpu_session().stream();
  FI_CU(cuMemsetD8Async, "test", reinterpret_cast<CUdeviceptr>(da.logits.data()), 0xff, da.logits.bytes(), stream);
  paged_mqa_logits(va.q, va.kv_cache, va.weights, va.context_lens, va.block_table, va.logits, stream, lo);
  topk(va.logits, va.context_lens, ia, ws, stream, to);
  // Step B writes into step A's logits buffer.
  paged_mqa_logits(vb.q, vb.kv_cache, vb.weights, vb.context_lens, vb.block_table, va.logits, stream, lo);
  topk(va.logits, vb.context_lens, ib, ws, stream, to);
  test::gpu_session().synchronize();
  require_same(indices_a.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k),
               test::plan_reference_indices(a, in_a, pc, in_a.width), pc);
  require_same(indices_b.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k),
               test::plan_reference_indices(b, in_b, pc, in_b.width), pc);
}

}  // namespace

// One test case per combination, so that a hang names its launches.
TEST_CASE("gpu: programmatic top-k launches after paged_mqa_logits keep stream order (FP32)", "[gpu][plan][pdl]") {
  test::require_gpu();
  two_decode_steps(LogitsDType::f32, {false, true});
}
TEST_CASE("gpu: programmatic paged_mqa_logits launches keep stream order (FP32)", "[gpu][plan][pdl]") {
  test::require_gpu();
  two_decode_steps(LogitsDType::f32, {true, false});
}
TEST_CASE("gpu: programmatic launches of paged_mqa_logits and topk keep stream order (FP32)", "[gpu][plan][pdl]") {
  test::require_gpu();
  two_decode_steps(LogitsDType::f32, {true, true});
}
TEST_CASE("gpu: programmatic launches of paged_mqa_logits and topk keep stream order (FP16)", "[gpu][plan][pdl]") {
  test::require_gpu();
  two_decode_steps(LogitsDType::f16, {true, true});
}

TEST_CASE("DecodePlan rejects bad configurations and shapes, naming them", "[plan]") {
  CHECK_THROWS_WITH(DecodePlan({0, 1, 64, 128, 2048, LogitsDType::f16, 1000}), flash_indexer::test::Contains("config.max_batch"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 4097, LogitsDType::f16, 1000}), flash_indexer::test::Contains("config.k"));
  CHECK_THROWS_WITH(DecodePlan({1, 9, 64, 128, 2048, LogitsDType::f16, 1000}), flash_indexer::test::Contains("next_n in 1..8"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 48, 128, 2048, LogitsDType::f16, 1000}), flash_indexer::test::Contains("heads"));
  DecodePlanConfig dcp{1, 1, 64, 128, 2048, LogitsDType::f16, 1000};
  dcp.dcp = {2, 2, 1};
  CHECK_THROWS_WITH(DecodePlan(dcp), flash_indexer::test::Contains("config.dcp.rank: expected 0..1 (ranks - 1), got 2"));
  dcp.dcp = {2, 1, 64};
  dcp.physical_slots = true;
  CHECK_THROWS_WITH(DecodePlan(dcp), flash_indexer::test::Contains("config.physical_slots: expected false with config.dcp"));
  // The caller's memory is checked before any CUDA call: 256-byte aligned, at least required_bytes.
  const DecodePlanConfig ok{2, 1, 64, 128, 2048, LogitsDType::f16, 1000};
  const std::size_t need = DecodePlan::required_bytes(ok);
  CHECK(need % 256 == 0);
  CHECK(DecodePlan::required_bytes({4, 1, 64, 128, 2048, LogitsDType::f16, 1000}) > need);
  CHECK_THROWS_WITH(DecodePlan::required_bytes({1, 1, 64, 128, 0, LogitsDType::f16, 1000}),
                    flash_indexer::test::Contains("config.k"));
  CHECK_THROWS_WITH(DecodePlan(ok, PlanMemory{reinterpret_cast<void*>(0x100080), need}),
                    flash_indexer::test::Contains("DecodePlan: memory.data: expected a 256-byte aligned device address"));
  CHECK_THROWS_WITH(DecodePlan(ok, PlanMemory{reinterpret_cast<void*>(0x100000), need - 256}),
                    flash_indexer::test::Contains(fmt::format("DecodePlan: memory.bytes: expected at least {}", need)));
  CHECK_THROWS_AS(DecodePlan(ok, PlanMemory{reinterpret_cast<void*>(0x100000), need - 256}), ArgumentError);
}

TEST_CASE("DecodePlan's second level (config.candidates) rejects what it does not run, naming it", "[plan]") {
  DecodePlanConfig c{2, 1, 64, 128, 512, LogitsDType::f32, 1 << 20};
  c.candidates = 2048;
  // Its logits are the candidates' columns, whatever max_context.
  const std::size_t need = DecodePlan::required_bytes(c);
  c.max_context = 1000;
  CHECK(DecodePlan::required_bytes(c) == need);
  CHECK(need >= 2 * 2048 * 8 * 4);
  // No histogram in its layout, whatever config.histogram says (the rows stay resident in the top-k).
  DecodePlanConfig without = c;
  without.histogram = false;
  CHECK(DecodePlan::required_bytes(without) == need);
  auto rejects = [](DecodePlanConfig bad, const char* what) {
    CHECK_THROWS_WITH(DecodePlan::required_bytes(bad), flash_indexer::test::Contains(what));
    CHECK_THROWS_AS(DecodePlan::required_bytes(bad), ArgumentError);
  };
  DecodePlanConfig bad = c;
  bad.candidate_block = 4;
  rejects(bad, "config.candidate_block: expected 8 or 16, got 4");
  bad = c;
  bad.candidates = -1;
  rejects(bad, "config.candidates: expected 0..65536, got -1");
  bad = c;
  bad.physical_slots = true;
  rejects(bad, "config.physical_slots: expected false with config.candidates");
  bad = c;
  bad.step = DecodeStep::one_pass;  // the sparse decode step holds rows of up to 8 x 16K columns
  bad.candidates = 16385;
  rejects(bad, "config.step: one_pass with config.candidates holds rows of up to 131072 columns");
  bad = c;
  bad.dcp = {2, 0, 1};
  rejects(bad, "config.dcp.ranks: expected 1 with config.candidates");
  bad = c;
  bad.heads = 16;
  rejects(bad, "DecodePlan (config.candidates)");
}

// The plan fuses the histogram only where it pays (decode_histogram_used; docs/benchmarks/decode.md,
// "The histogram by next_n"): asked for, rows streamed by the top-k, next_n at most 2.
TEST_CASE("DecodePlan fuses the histogram for streamed rows at next_n 1-2 only", "[plan]") {
  DecodePlanConfig c;
  for (int next_n = 1; next_n <= 8; ++next_n) {
    c.next_n = next_n;
    c.histogram = true;
    CHECK(decode_histogram_used(c, false) == (next_n <= 2));
    CHECK_FALSE(decode_histogram_used(c, true));
    c.histogram = false;
    CHECK_FALSE(decode_histogram_used(c, false));
  }
}
