// PrefillPlan: configuration errors (no GPU needed), and on a GPU the whole prefill indexer in chunks
// against the CPU reference (reference::mqa_logits, then reference::topk_windows on the logits as
// stored), a rejected run that changes no byte.
#include "catch_compat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/prefill_plan.hpp"
#include "flash_indexer/reference.hpp"
#include "parallel_reference.hpp"
#include "prefill_inputs.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;
namespace ck = flash_indexer::check;

TEST_CASE("PrefillPlan names a bad configuration field", "[prefill][cpu]") {
  auto expect = [](const std::function<void(PrefillPlanConfig&)>& change, const std::string& text) {
    PrefillPlanConfig c;
    change(c);
    CHECK_THROWS_WITH(PrefillPlan(c), Contains("PrefillPlan: ") && Contains(text));
    CHECK_THROWS_AS(PrefillPlan(c), ArgumentError);
  };
  expect([](PrefillPlanConfig& c) { c.k = 0; }, "config.k: expected 1..4096, got 0");
  expect([](PrefillPlanConfig& c) { c.max_tokens = 0; }, "config.max_tokens: expected 1..524280, got 0");
  expect([](PrefillPlanConfig& c) { c.max_keys = 0; }, "config.max_keys: expected 1..2^30, got 0");
  expect([](PrefillPlanConfig& c) { c.heads = 48; }, "heads in {16, 32, 64}, got 48");
  expect([](PrefillPlanConfig& c) { c.logits_bytes = 1000; },
         "config.logits_bytes: expected at least one row of max_keys logits (262144 bytes), got 1000");
  // The caller's memory is checked before any CUDA call.
  const std::size_t need = PrefillPlan::required_bytes(PrefillPlanConfig{});
  CHECK(need % 256 == 0);
  CHECK_THROWS_WITH(PrefillPlan(PrefillPlanConfig{}, PlanMemory{reinterpret_cast<void*>(0x100010), need}),
                    Contains("PrefillPlan: memory.data: expected a 256-byte aligned device address"));
  CHECK_THROWS_WITH(PrefillPlan(PrefillPlanConfig{}, PlanMemory{reinterpret_cast<void*>(0x100000), need - 1}),
                    Contains(fmt::format("PrefillPlan: memory.bytes: expected at least {}", need)));
  // A valid configuration passes every field check (without a GPU the driver is what fails next).
  try {
    const PrefillPlan plan(PrefillPlanConfig{});
  } catch (const ArgumentError& e) {
    FAIL(e.what());
  } catch (const Error&) {
  }
}

TEST_CASE("PrefillPlan takes a logits buffer of exactly one unpadded row of max_keys", "[prefill][cpu]") {
  // The rows' stride is max_keys rounded up to 64 (1024 here), but one row needs only max_keys logits.
  for (const auto& [logits, size] :
       {std::pair{LogitsDType::f32, 4}, std::pair{LogitsDType::f16, 2}, std::pair{LogitsDType::bf16, 2}}) {
    PrefillPlanConfig c;
    c.logits = logits;
    c.max_keys = 1000;
    c.logits_bytes = 1000 * size - 1;
    INFO(fmt::format("logits {}", static_cast<int>(logits)));
    CHECK_THROWS_WITH(PrefillPlan(c),
                      Contains(fmt::format("PrefillPlan: config.logits_bytes: expected at least one row of max_keys logits "
                                           "({} bytes), got {}",
                                           1000 * size, 1000 * size - 1)));
    CHECK_THROWS_AS(PrefillPlan(c), ArgumentError);
    c.logits_bytes = 1000 * size;  // accepted: without a GPU the driver is what fails next
    try {
      const PrefillPlan plan(c);
      CHECK(plan.chunk_tokens() == 1);
    } catch (const ArgumentError& e) {
      FAIL(e.what());
    } catch (const Error&) {
    }
  }
}

namespace {

struct Device {
  ck::DeviceBuffer q, kv, scales, w, ks, ke;
  TensorView qv, kvv, sv, wv, ksv, kev;
  explicit Device(const check::PrefillProblem& p)
      : q(ck::DeviceBuffer::from(p.q)),
        kv(ck::DeviceBuffer::from(p.kv)),
        scales(ck::DeviceBuffer::from(p.scales)),
        w(ck::DeviceBuffer::from(p.w)),
        ks(ck::DeviceBuffer::from(p.ks)),
        ke(ck::DeviceBuffer::from(p.ke)) {
    qv = TensorView::contiguous(q.data(), DType::fp8_e4m3, {p.T, p.H, p.D});
    kvv = TensorView::contiguous(kv.data(), DType::fp8_e4m3, {p.N, p.D});
    kvv.strides[0] = p.kv_stride;
    sv = TensorView::contiguous(scales.data(), DType::f32, {p.N});
    wv = TensorView::contiguous(w.data(), DType::f32, {p.T, p.H});
    ksv = TensorView::contiguous(ks.data(), DType::i32, {p.T});
    kev = TensorView::contiguous(ke.data(), DType::i32, {p.T});
  }
};

// `tight`: max_keys = N, not a multiple of 64, and a buffer of 6 padded rows and one unpadded: the last
// row of each chunk ends the logits buffer.
void check_plan(LogitsDType logits, bool relative, std::uint64_t seed, bool tight = false) {
  std::mt19937_64 rng(seed);
  const int T = 45, H = 32, D = 64, N = 3000, k = 128;
  const check::PrefillProblem p = check::make_prefill_problem(T, H, D, N, rng);
  PrefillPlanConfig c;
  c.heads = H;
  c.head_dim = D;
  c.k = k;
  c.logits = logits;
  c.max_tokens = 64;
  c.max_keys = 4000;
  c.logits_bytes = 7 * 4032 * (logits == LogitsDType::f32 ? 4 : 2);  // 7 tokens per chunk: 7 chunks
  if (tight) {
    c.max_keys = N;
    c.logits_bytes = (6 * 3008 + N) * (logits == LogitsDType::f32 ? 4 : 2);
  }
  c.relative = relative;
  INFO(fmt::format("logits {} relative {} tight {} seed {}", static_cast<int>(logits), relative, tight, seed));
  const PrefillPlan plan(c);
  CHECK(plan.chunk_tokens() == 7);

  const std::vector<double> ref = ck::mqa_logits_reference(p.reference_inputs());
  std::vector<float> stored(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) stored[i] = reference::round_to(logits, static_cast<float>(ref[i]));
  std::vector<std::int64_t> starts(p.ks.begin(), p.ks.end()), ends(p.ke.begin(), p.ke.end());
  const reference::TopkResult want = reference::topk_windows(stored, N, N, starts, ends, k, relative, true);

  Device d(p);
  auto& gpu = test::gpu_session();
  ck::DeviceBuffer indices(static_cast<std::size_t>(T) * k * 4);
  for (int run = 0; run < 2; ++run) {  // the same bytes each run
    indices.fill(0x7d);
    plan.run(d.qv, d.kvv, d.sv, d.wv, d.ksv, d.kev, TensorView::contiguous(indices.data(), DType::i32, {T, k}), gpu.stream());
    gpu.synchronize();
    const auto got = indices.to_host<std::int32_t>(static_cast<std::size_t>(T) * k);
    for (int t = 0; t < T; ++t) {
      INFO(fmt::format("token {} window [{}, {})", t, p.ks[t], p.ke[t]));
      const std::vector<std::int32_t> g(got.begin() + t * k, got.begin() + (t + 1) * k);
      const std::vector<std::int32_t> w(want.indices.begin() + t * k, want.indices.begin() + (t + 1) * k);
      REQUIRE(g == w);  // ascending keys, ties to the lower key, -1 padding
    }
  }
}

}  // namespace

TEST_CASE("gpu: PrefillPlan in chunks equals the reference", "[gpu][prefill]") {
  test::require_gpu();
  for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
    for (bool relative : {false, true}) check_plan(logits, relative, test::fresh_seed());
}

TEST_CASE("gpu: PrefillPlan with the last row of each chunk ending its buffer equals the reference", "[gpu][prefill]") {
  test::require_gpu();
  for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16}) check_plan(logits, false, test::fresh_seed(), true);
}

TEST_CASE("gpu: a rejected PrefillPlan::run changes no byte", "[gpu][prefill]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  const check::PrefillProblem p = check::make_prefill_problem(20, 16, 64, 500, rng);
  PrefillPlanConfig c;
  c.heads = 16;
  c.head_dim = 64;
  c.k = 64;
  c.max_tokens = 20;
  c.max_keys = 500;
  const PrefillPlan plan(c);
  Device d(p);
  auto& gpu = test::gpu_session();
  ck::DeviceBuffer indices(20 * 64 * 4);
  indices.fill(0x7d);
  // A bad ke, or indices of the wrong k: rejected before any chunk launches.
  TensorView bad_ke = d.kev;
  bad_ke.dtype = DType::f32;
  CHECK_THROWS_WITH(plan.run(d.qv, d.kvv, d.sv, d.wv, d.ksv, bad_ke, TensorView::contiguous(indices.data(), DType::i32, {20, 64}),
                             gpu.stream()),
                    Contains("PrefillPlan::run: ke: expected dtype int32"));
  CHECK_THROWS_WITH(
      plan.run(d.qv, d.kvv, d.sv, d.wv, d.ksv, d.kev, TensorView::contiguous(indices.data(), DType::i32, {20, 32}), gpu.stream()),
      Contains("indices: expected shape[1] = 64 (config.k)"));
  gpu.synchronize();
  const auto after = indices.to_host<std::uint8_t>(20 * 64 * 4);
  CHECK(std::all_of(after.begin(), after.end(), [](std::uint8_t b) { return b == 0x7d; }));
}
