// Rejected calls on the GPU: for each bad call of each entry point, the error names the argument, every
// output buffer keeps its poisoned bytes, the stream and context stay healthy (a synchronize succeeds),
// and a good call afterwards still equals the reference. The CPU side of the same checks (the error
// texts of every argument) is in test_validation.cpp.
#include "catch_compat.hpp"

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"
#include "parallel_reference.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;
using flash_indexer::test::Contains;

namespace {

// A device region an op may write: its bytes are compared before and after each rejected call.
struct Region {
  const char* name;
  const void* data;
  std::size_t bytes;
};

std::vector<std::uint8_t> read_region(const Region& r) {
  std::vector<std::uint8_t> bytes(r.bytes);
  if (r.bytes) {
    // The legacy stream's copy does not wait for the test's non-blocking stream: the context does.
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
    driver::check(driver::api().cuMemcpyDtoH(bytes.data(), reinterpret_cast<CUdeviceptr>(r.data), r.bytes), "cuMemcpyDtoH");
  }
  return bytes;
}

// One bad call: it throws with `text` in the message, and afterwards the stream synchronizes and every
// region holds the bytes it held before.
void expect_rejected(const std::vector<Region>& outputs, const std::string& text, const std::function<void()>& call) {
  INFO("bad call expecting: " << text);
  std::vector<std::vector<std::uint8_t>> before;
  for (const Region& r : outputs) before.push_back(read_region(r));
  CHECK_THROWS_WITH(call(), Contains(text));
  REQUIRE_NOTHROW(test::gpu_session().synchronize());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    INFO("output " << outputs[i].name);
    CHECK(read_region(outputs[i]) == before[i]);
  }
}

constexpr std::int64_t kHuge = std::int64_t{1} << 62;  // products with it overflow int64

ck::LogitsCase small_case(std::uint64_t seed) {
  ck::LogitsCase lc;
  lc.config = {2, 32, 128, 64, true, LogitsDType::f32, {}};
  lc.lengths = {300, 0, 1000};
  lc.lens_2d = false;
  lc.exact_values = true;
  lc.seed = seed;
  return lc;
}

}  // namespace

TEST_CASE("gpu: rejected paged_mqa_logits calls change no byte and leave the context usable", "[gpu][validation]") {
  test::require_gpu();
  const ck::LogitsCase lc = small_case(test::fresh_seed());
  const ck::HostInputs in = ck::make_inputs(lc);
  ck::DeviceInputs d = ck::upload(in, lc);
  ck::LogitsViews v = ck::views(d, in, lc);
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * lc.config.next_n;
  ck::DeviceBuffer histogram(static_cast<std::size_t>(rows) * kCoarseBins * 4);
  d.logits.fill(ck::kPoison);
  histogram.fill(0x5a);
  PagedMqaLogitsOptions good;
  good.histogram = TensorView::contiguous(histogram.data(), DType::i32, {rows, kCoarseBins});
  const std::vector<Region> outputs = {{"logits", d.logits.data(), d.logits.bytes()},
                                       {"histogram", histogram.data(), histogram.bytes()}};
  CUstream stream = test::gpu_session().stream();

  using Change = std::function<void(ck::LogitsViews&, PagedMqaLogitsOptions&)>;
  const std::vector<std::pair<std::string, Change>> table = {
      {"q: expected shape[0] >= 0", [](auto& a, auto&) { a.q.shape[0] = -1; }},
      {"q: expected dtype float8_e4m3 or uint8", [](auto& a, auto&) { a.q.dtype = DType::f32; }},
      // A uint8 query means the MXFP4 cache: its packed head_dim / 2 bytes are checked, not FP8's.
      {"q: expected q.shape[3] = head_dim / 2 = 64", [](auto& a, auto&) { a.q.dtype = DType::u8; }},
      {"q: expected a device pointer", [](auto& a, auto&) { a.q.data = nullptr; }},
      {"q: expected 4 dimensions", [](auto& a, auto&) { a.q.rank = 7; }},
      {"kv_cache: expected shape[0] >= 0", [](auto& a, auto&) { a.kv_cache.shape[0] = -5; }},
      {"kv_cache: expected a block stride", [](auto& a, auto&) { a.kv_cache.strides[0] += 8; }},
      {"kv_cache: expected a tensor of at most 2^48 bytes", [](auto& a, auto&) { a.kv_cache.strides[0] = kHuge; }},
      {"weights: expected shape[1] = 32", [](auto& a, auto&) { a.weights.shape[1] = 64; }},
      {"weights: expected strides[1] >= 0", [](auto& a, auto&) { a.weights.strides[1] = -1; }},
      {"context_lens: expected shape[0] >= 0", [](auto& a, auto&) { a.context_lens.shape[0] = -3; }},
      {"context_lens: expected dtype int32", [](auto& a, auto&) { a.context_lens.dtype = DType::f32; }},
      {"block_table: expected strides[0] >= 0", [](auto& a, auto&) { a.block_table.strides[0] = -10; }},
      {"block_table: expected a tensor of at most 2^48 bytes", [](auto& a, auto&) { a.block_table.strides[0] = kHuge; }},
      {"logits: expected shape[1] >= 0", [](auto& a, auto&) { a.logits.shape[1] = -64; }},
      {"logits: expected a tensor of at most 2^48 bytes", [](auto& a, auto&) { a.logits.strides[0] = kHuge; }},
      {"logits: expected a 16-byte aligned", [](auto& a, auto&) { a.logits.data = static_cast<char*>(a.logits.data) + 4; }},
      {"logits: expected shape[0] = 6", [](auto& a, auto&) { a.logits.shape[0] = 5; }},
      {"histogram: expected shape[1] = 1024", [](auto&, auto& o) { o.histogram.shape[1] = 512; }},
      {"histogram: expected shape[0] >= 0", [](auto&, auto& o) { o.histogram.shape[0] = -6; }},
      {"options.variant: expected automatic, portable or sm90",
       [](auto&, auto& o) { o.variant = static_cast<PagedMqaLogitsVariant>(7); }},
  };
  for (const auto& [text, change] : table) {
    ck::LogitsViews bad = v;
    PagedMqaLogitsOptions options = good;
    change(bad, options);
    expect_rejected(outputs, "paged_mqa_logits: " + text, [&] {
      paged_mqa_logits(bad.q, bad.kv_cache, bad.weights, bad.context_lens, bad.block_table, bad.logits, stream, options);
    });
  }

  // The good call still gives the reference.
  paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, stream);
  test::gpu_session().synchronize();
  const ck::Comparison cmp = ck::compare_logits(lc, in, d.logits.to_host<std::uint8_t>(d.logits.bytes()));
  INFO(cmp.failure);
  CHECK(cmp.passed);
}

TEST_CASE("gpu: rejected topk calls change no byte and leave the context usable", "[gpu][validation]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  const std::int64_t rows = 5, width = 3000, k = 512;
  std::vector<float> host(static_cast<std::size_t>(rows * width));
  std::normal_distribution<float> normal;
  for (float& x : host) x = normal(rng);
  const std::vector<std::int32_t> lengths = {3000, 0, 100, 2999, 513};
  ck::DeviceBuffer logits = ck::DeviceBuffer::from(host), lens = ck::DeviceBuffer::from(lengths);
  ck::DeviceBuffer indices(static_cast<std::size_t>(rows * k) * 4), values(static_cast<std::size_t>(rows * k) * 4);
  ck::DeviceBuffer workspace(topk_workspace_bytes(rows));
  indices.fill(0x7d);
  values.fill(0x7e);
  workspace.fill(0x7f);
  const std::vector<Region> outputs = {{"indices", indices.data(), indices.bytes()},
                                       {"values", values.data(), values.bytes()},
                                       {"workspace", workspace.data(), workspace.bytes()}};
  struct Args {
    TensorView logits, lengths, indices, workspace;
    TopkOptions options;
  };
  Args good{TensorView::contiguous(logits.data(), DType::f32, {rows, width}),
            TensorView::contiguous(lens.data(), DType::i32, {rows}),
            TensorView::contiguous(indices.data(), DType::i32, {rows, k}),
            TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())}),
            {}};
  good.options.values = TensorView::contiguous(values.data(), DType::f32, {rows, k});
  CUstream stream = test::gpu_session().stream();

  const std::vector<std::pair<std::string, std::function<void(Args&)>>> table = {
      {"logits: expected shape[0] >= 0", [](Args& a) { a.logits.shape[0] = -5; }},
      {"logits: expected a tensor of at most 2^48 bytes", [](Args& a) { a.logits.strides[0] = kHuge; }},
      {"logits: expected dtype float32 or float16 or bfloat16", [](Args& a) { a.logits.dtype = DType::i32; }},
      {"lengths: expected shape[0] >= 0",
       [](Args& a) { a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {-1, -5}); }},
      {"lengths: expected shape[0] = 5 (rows)", [](Args& a) { a.lengths.shape[0] = 4; }},
      {"indices: expected k = indices.shape[1] in 1..4096", [](Args& a) { a.indices.shape[1] = 0; }},
      {"indices: expected shape[0] >= 0", [](Args& a) { a.indices.shape[0] = -5; }},
      {"indices: expected a contiguous tensor", [](Args& a) { a.indices.strides[0] = 1024; }},
      {"workspace: expected shape[0] >= 0", [](Args& a) { a.workspace.shape[0] = -1; }},
      {"workspace: expected at least topk_workspace_bytes(5)", [](Args& a) { a.workspace.shape[0] = 16; }},
      {"values: expected shape[1] = 512 (k)", [](Args& a) { a.options.values.shape[1] = 256; }},
      {"histogram: expected shape[1] = 1024",
       [](Args& a) {
         a.options.histogram = a.lengths;
         a.options.histogram.rank = 2;
         a.options.histogram.shape = {5, 3};
         a.options.histogram.strides = {3, 1};
       }},
      {"block_table: expected shape[0] = B dividing rows = 5",
       [](Args& a) { a.options.block_table = TensorView::contiguous(a.lengths.data, DType::i32, {2, 1}); }},
      {"options.split: expected 0 (automatic) or 1, 2, 4, 8, 16", [](Args& a) { a.options.split = 3; }},
      // Known only once the device is (the choice), still before anything is enqueued.
      {"options.split = 16: a cluster of 16 runs only rows whose segment per CTA stays resident",
       [](Args& a) {
         a.logits.shape[1] = 300000;
         a.logits.strides[0] = 300000;
         a.options.split = 16;
       }},
      {"options.next_n: expected 0 (per-row lengths) or 1..64", [](Args& a) { a.options.next_n = -2; }},
  };
  for (const auto& [text, change] : table) {
    Args bad = good;
    change(bad);
    expect_rejected(outputs, "topk: " + text,
                    [&] { topk(bad.logits, bad.lengths, bad.indices, bad.workspace, stream, bad.options); });
  }

  topk(good.logits, good.lengths, good.indices, good.workspace, stream, good.options);
  test::gpu_session().synchronize();
  std::vector<std::int64_t> lengths64(lengths.begin(), lengths.end());
  const reference::TopkResult want = reference::topk(host, width, width, lengths64, static_cast<int>(k), false);
  std::vector<std::int32_t> got = indices.to_host<std::int32_t>(static_cast<std::size_t>(rows * k));
  std::vector<std::int32_t> expected = want.indices;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::sort(got.begin() + r * k, got.begin() + (r + 1) * k);
    std::sort(expected.begin() + r * k, expected.begin() + (r + 1) * k);
  }
  CHECK(got == expected);
}

TEST_CASE("gpu: rejected DecodePlan::run calls enqueue nothing: no byte of the outputs or the plan changes",
          "[gpu][validation][plan]") {
  test::require_gpu();
  const ck::LogitsCase lc = small_case(test::fresh_seed());
  const DecodePlanConfig pc{4, lc.config.next_n, lc.config.heads, lc.config.head_dim, 256, LogitsDType::f16, 4096, true};
  const DecodePlan plan(pc);
  ck::LogitsCase sized = lc;
  sized.width = plan.width();
  const ck::HostInputs in = ck::make_inputs(sized);
  ck::DeviceInputs d = ck::upload(in, sized);
  const ck::LogitsViews v = ck::views(d, in, sized);
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * pc.next_n;
  ck::DeviceBuffer indices(static_cast<std::size_t>(pc.max_batch * pc.next_n * pc.k) * 4);
  indices.fill(0x7d);
  // The plan's own buffers, poisoned through their views.
  const TensorView plan_logits = plan.logits(pc.max_batch), plan_hist = plan.histogram(pc.max_batch),
                   plan_ws = plan.topk_workspace();
  const std::size_t logits_bytes = static_cast<std::size_t>(plan_logits.numel()) * 2;
  const std::size_t hist_bytes = static_cast<std::size_t>(plan_hist.numel()) * 4;
  const std::size_t ws_bytes = static_cast<std::size_t>(plan_ws.numel());
  for (const auto& [data, bytes] :
       {std::pair{plan_logits.data, logits_bytes}, std::pair{plan_hist.data, hist_bytes}, std::pair{plan_ws.data, ws_bytes}})
    driver::check(driver::api().cuMemsetD8(reinterpret_cast<CUdeviceptr>(data), 0x6b, bytes), "cuMemsetD8");
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");  // the memsets finished before any call
  const std::vector<Region> outputs = {{"indices", indices.data(), indices.bytes()},
                                       {"plan logits", plan_logits.data, logits_bytes},
                                       {"plan histogram", plan_hist.data, hist_bytes},
                                       {"plan top-k workspace", plan_ws.data, ws_bytes}};
  CUstream stream = test::gpu_session().stream();
  struct Args {
    ck::LogitsViews v;
    TensorView indices;
  };
  const Args good{v, TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k})};

  const std::vector<std::pair<std::string, std::function<void(Args&)>>> table = {
      // A negative batch must be rejected before the histogram's memset: (size_t)-1 * 1024 ints kill the context.
      {"q: expected shape[0] >= 0",
       [](Args& a) {
         a.v.q.shape[0] = -1;
         a.v.weights.shape[0] = -2;
       }},
      {"q: expected shape[0] = B <= max_batch = 4", [](Args& a) { a.v.q.shape[0] = 5; }},
      {"q: expected shape[2] = 32 (config.heads)", [](Args& a) { a.v.q.shape[2] = 64; }},
      // A wrong indices shape must be rejected before the memset and the logits launch.
      {"indices: expected shape[1] = 256 (config.k)", [](Args& a) { a.indices.shape[1] = 255; }},
      {"indices: expected shape[0] = 6 (rows)", [](Args& a) { a.indices.shape[0] = 4; }},
      {"indices: expected a contiguous tensor", [](Args& a) { a.indices.strides[0] = 512; }},
      {"weights: expected shape[0] = 6 (B * next_n)", [](Args& a) { a.v.weights.shape[0] = 4; }},
      {"block_table: expected strides[0] >= 0", [](Args& a) { a.v.block_table.strides[0] = -1; }},
      {"kv_cache: expected a tensor of at most 2^48 bytes", [](Args& a) { a.v.kv_cache.strides[0] = kHuge; }},
      {"context_lens: expected shape[0] = 3 (B)", [](Args& a) { a.v.context_lens.shape[0] = 2; }},
  };
  for (const auto& [text, change] : table) {
    Args bad = good;
    change(bad);
    expect_rejected(outputs, "DecodePlan::run: " + text, [&] {
      plan.run(bad.v.q, bad.v.kv_cache, bad.v.weights, bad.v.context_lens, bad.v.block_table, bad.indices, stream);
    });
  }
  // The MXFP4 form on an FP8 plan: a packed query, or exponents for an FP8 one.
  expect_rejected(outputs, "DecodePlan::run: q: expected dtype float8_e4m3", [&] {
    TensorView packed = v.q;
    packed.dtype = DType::u8;
    plan.run(packed, v.kv_cache, v.weights, v.context_lens, v.block_table, good.indices, stream);
  });
  expect_rejected(outputs, "DecodePlan::run: options.q_scales: expected none for an FP8 query", [&] {
    const TensorView exponents = TensorView::contiguous(indices.data(), DType::i32, {in.batch, pc.next_n, pc.heads});
    plan.run(v.q, exponents, v.kv_cache, v.weights, v.context_lens, v.block_table, good.indices, stream);
  });

  // The good run: the reference top-k of the reference logits (exact-arithmetic inputs).
  plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, good.indices, stream);
  test::gpu_session().synchronize();
  const auto ref_view = in.reference_view(sized);
  const std::vector<double> ref = ck::paged_mqa_logits_reference(ref_view);
  std::vector<float> rounded(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) rounded[i] = reference::round_to(pc.logits, static_cast<float>(ref[i]));
  std::vector<std::int64_t> lengths;
  for (std::int64_t r = 0; r < rows; ++r)
    lengths.push_back(reference::row_length(ref_view, static_cast<int>(r / pc.next_n), static_cast<int>(r % pc.next_n)));
  std::vector<std::int32_t> expected = reference::topk(rounded, plan.width(), plan.width(), lengths, pc.k, false).indices;
  std::vector<std::int32_t> got = indices.to_host<std::int32_t>(static_cast<std::size_t>(rows * pc.k));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::sort(got.begin() + r * pc.k, got.begin() + (r + 1) * pc.k);
    std::sort(expected.begin() + r * pc.k, expected.begin() + (r + 1) * pc.k);
  }
  CHECK(got == expected);
}
