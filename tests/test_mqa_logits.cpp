// The ragged (prefill) mqa_logits op: configuration keys, every argument check (no GPU needed), and on
// a GPU every configuration against the CPU reference (reference::mqa_logits) with windows of every
// kind, poisoned outputs, the fused histogram, and T and N that are not multiples of the tiles.
#include "catch_compat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/mqa_logits.hpp"
#include "flash_indexer/reference.hpp"
#include "kernel_catalog.hpp"
#include "prefill_inputs.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;
namespace ck = flash_indexer::check;

namespace {

void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct Args {
  int T = 37, H = 64, D = 128, N = 700;
  TensorView q = TensorView::contiguous(fake(0x10000), DType::fp8_e4m3, {T, H, D});
  TensorView kv = TensorView::contiguous(fake(0x200000), DType::fp8_e4m3, {N, D});
  TensorView scales = TensorView::contiguous(fake(0x300000), DType::f32, {N});
  TensorView w = TensorView::contiguous(fake(0x30000), DType::f32, {T, H});
  TensorView ks = TensorView::contiguous(fake(0x40000), DType::i32, {T});
  TensorView ke = TensorView::contiguous(fake(0x50000), DType::i32, {T});
  TensorView logits = TensorView::contiguous(fake(0x1000000), DType::f32, {T, N});
  MqaLogitsOptions options{};

  void call() const { mqa_logits(q, kv, scales, w, ks, ke, logits, nullptr, options); }
};

void expect_error(const std::function<void(Args&)>& change, const std::string& text) {
  Args a;
  change(a);
  CHECK_THROWS_WITH(a.call(), Contains("mqa_logits: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);
}

}  // namespace

TEST_CASE("mqa_logits keys round-trip and name what is out of range", "[mqa][cpu]") {
  const auto configs = supported_mqa_logits_configs(Arch{9, 0, true});
  CHECK(configs.size() == 72);  // portable and sm90
  CHECK(supported_mqa_logits_configs(Arch{8, 0, false}).size() == 36);
  for (const auto& c : configs) CHECK(MqaLogitsConfig::parse_key(c.key()) == c);
  CHECK(MqaLogitsConfig{}.key() == "mqa_logits.auto.h64.d128.hist0.out-f32.kv-fp8.sm_90a");
  CHECK(MqaLogitsConfig{}.resolved().key() == "mqa_logits.sm90.h64.d128.hist0.out-f32.kv-fp8.sm_90a");
  MqaLogitsConfig ampere;
  ampere.arch = Arch{8, 0, false};
  CHECK(ampere.resolved().key() == "mqa_logits.portable.h64.d128.hist0.out-f32.kv-fp8.sm_80");
  CHECK_THROWS_WITH(MqaLogitsConfig::parse_key("mqa_logits.portable.h48.d128.hist0.out-f32.kv-fp8.sm_90a"),
                    Contains("heads in {16, 32, 64}, got 48"));
  CHECK_THROWS_WITH(MqaLogitsConfig::parse_key("mqa_logits.wgmma.h64.d128.hist0.out-f32.kv-fp8.sm_90a"),
                    Contains("expected mqa_logits.<portable|sm90>."));
  CHECK_THROWS_WITH(MqaLogitsConfig::parse_key("mqa_logits.sm90.h64.d128.hist0.out-f32.kv-fp8.sm_80"),
                    Contains("the sm90 kernel needs sm_90a"));
  CHECK(kernel_spec_for_key("mqa_logits.portable.h16.d64.hist1.out-bf16.kv-fp8.sm_80").key ==
        "mqa_logits.portable.h16.d64.hist1.out-bf16.kv-fp8.sm_80");
}

TEST_CASE("mqa_logits accepts valid arguments up to the driver, and an empty call launches nothing", "[mqa][validation]") {
  if (!driver::available()) {
    Args a;
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));  // validation passed; the driver was needed next
  }
  Args e;
  e.q.shape[0] = e.w.shape[0] = e.ks.shape[0] = e.ke.shape[0] = e.logits.shape[0] = 0;
  CHECK_NOTHROW(e.call());
  Args n;
  n.kv.shape[0] = n.scales.shape[0] = n.logits.shape[1] = 0;
  CHECK_NOTHROW(n.call());
}

TEST_CASE("mqa_logits rejects bad arguments, naming them", "[mqa][validation]") {
  expect_error([](Args& a) { a.q.dtype = DType::u8; }, "q: expected dtype float8_e4m3, got uint8");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {37, 48, 128}); },
               "q: expected heads = q.shape[1] in {16, 32, 64}, got 48");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {37, 64, 96}); },
               "q: expected head_dim = q.shape[2] in {64, 128}, got 96");
  expect_error([](Args& a) { a.q.data = fake(0x10008); }, "q: expected a 16-byte aligned data pointer");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::fp8_e4m3, {700, 64}); },
               "kv: expected shape[1] = 128 (head_dim)");
  expect_error([](Args& a) { a.kv.strides[0] = 136; }, "kv: expected a row stride >= head_dim = 128 bytes and a multiple of 16, got 136");
  expect_error([](Args& a) { a.kv.dtype = DType::f16; }, "kv: expected dtype");
  expect_error([](Args& a) { a.scales.shape[0] = 699; }, "kv_scales: expected shape[0] = 700 (N = kv.shape[0])");
  expect_error([](Args& a) { a.w.shape[1] = 32; }, "weights: expected shape[1] = 64 (heads)");
  expect_error([](Args& a) { a.ks.dtype = DType::f32; }, "ks: expected dtype int32");
  expect_error([](Args& a) { a.ke.shape[0] = 36; }, "ke: expected shape[0] = 37 (T = q.shape[0])");
  expect_error([](Args& a) { a.logits.shape[1] = 640; }, "logits: expected shape[1] = 700 (N = kv.shape[0])");
  expect_error([](Args& a) { a.logits.strides[0] = 600; }, "logits: expected a row stride >= N = 700, got 600");
  expect_error([](Args& a) { a.logits.dtype = DType::i32; }, "logits: expected dtype");
  expect_error([](Args& a) { a.options.histogram = TensorView::contiguous(fake(0x60000), DType::i32, {37, 512}); },
               "histogram: expected shape[1] = 1024 (coarse bins)");
}

namespace {

// T and N not multiples of the tiles; the larger N spans several key splits of the sm90 kernel.
void check_against_reference(const MqaLogitsConfig& c, bool fill_masked, std::uint64_t seed, int T = 37, int N = 700) {
  std::mt19937_64 rng(seed);
  const test::PrefillProblem pb = test::make_prefill_problem(T, c.heads, c.head_dim, N, rng);
  const std::string what = fmt::format("{} fill_masked {} seed {}", c.key(), fill_masked, seed);
  INFO(what);
  const reference::MqaLogitsInputs in = pb.reference_inputs();
  const std::vector<double> ref = reference::mqa_logits(in);

  auto& gpu = test::gpu_session();
  const std::size_t elem = c.logits == LogitsDType::f32 ? 4 : 2;
  const std::int64_t stride = N + 8;  // the row padding must stay poisoned
  auto q = ck::DeviceBuffer::from(pb.q), kv = ck::DeviceBuffer::from(pb.kv), scales = ck::DeviceBuffer::from(pb.scales),
       w = ck::DeviceBuffer::from(pb.w), ks = ck::DeviceBuffer::from(pb.ks), ke = ck::DeviceBuffer::from(pb.ke);
  ck::DeviceBuffer logits(static_cast<std::size_t>(T) * stride * elem), hist(static_cast<std::size_t>(T) * kCoarseBins * 4);
  logits.fill(0x7d);
  hist.fill(0);
  MqaLogitsOptions o;
  o.fill_masked = fill_masked;
  o.variant = c.variant;
  if (c.histogram) o.histogram = TensorView::contiguous(hist.data(), DType::i32, {T, kCoarseBins});
  TensorView kv_view = TensorView::contiguous(kv.data(), DType::fp8_e4m3, {N, c.head_dim});
  kv_view.strides[0] = pb.kv_stride;
  TensorView out = TensorView::contiguous(logits.data(), tensor_dtype(c.logits), {T, N});
  out.strides[0] = stride;
  mqa_logits(TensorView::contiguous(q.data(), DType::fp8_e4m3, {T, c.heads, c.head_dim}), kv_view,
             TensorView::contiguous(scales.data(), DType::f32, {N}), TensorView::contiguous(w.data(), DType::f32, {T, c.heads}),
             TensorView::contiguous(ks.data(), DType::i32, {T}), TensorView::contiguous(ke.data(), DType::i32, {T}), out,
             gpu.stream(), o);
  gpu.synchronize();
  const auto bytes = logits.to_host<std::uint8_t>(static_cast<std::size_t>(T) * stride * elem);
  auto poisoned = [&](std::size_t index) {
    for (std::size_t i = 0; i < elem; ++i)
      if (bytes[index * elem + i] != 0x7d) return false;
    return true;
  };
  std::vector<std::int32_t> want_hist(static_cast<std::size_t>(T) * kCoarseBins, 0);
  int checked = 0;
  for (int t = 0; t < T; ++t) {
    const reference::KeyWindow win = reference::key_window(in, t);
    for (std::int64_t s = 0; s < stride; ++s) {
      const std::size_t gi = static_cast<std::size_t>(t * stride + s);
      INFO(fmt::format("token {} column {} window [{}, {})", t, s, win.start, win.end));
      if (s >= N) {
        REQUIRE(poisoned(gi));
        continue;
      }
      const float got = reference::load_logit(c.logits, bytes.data(), gi);
      if (s < win.start || s >= win.end) {
        if (fill_masked) REQUIRE((std::isinf(got) && got < 0));
        else REQUIRE(poisoned(gi));
        continue;
      }
      const float want = reference::round_to(c.logits, static_cast<float>(ref[static_cast<std::size_t>(t) * N + s]));
      REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
      ++checked;
      if (!std::isnan(want)) ++want_hist[static_cast<std::size_t>(t) * kCoarseBins + coarse_bin(want)];
    }
  }
  CHECK(checked > 0);
  if (c.histogram) CHECK(hist.to_host<std::int32_t>(want_hist.size()) == want_hist);
}

const bool registered = [] {
  for (const MqaLogitsConfig& c : supported_mqa_logits_configs(Arch{9, 0, true})) {
    test::register_test("gpu " + c.key().substr(0, c.key().rfind('.')), "[gpu][prefill]", [c] {
      test::require_gpu();
      check_against_reference(c, false, test::fresh_seed());
      check_against_reference(c, true, test::fresh_seed());
      if (c.variant == MqaLogitsVariant::sm90) check_against_reference(c, c.histogram, test::fresh_seed(), 9, 9000);
    });
  }
  return true;
}();

}  // namespace
