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
#include "prefill_check.hpp"
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
  CHECK(configs.size() == 90);  // portable (D 32, 64, 128) and sm90 (D 64, 128)
  CHECK(supported_mqa_logits_configs(Arch{8, 0, false}).size() == 54);
  MqaLogitsConfig d32;
  d32.head_dim = 32;
  CHECK(d32.resolved().key() == "mqa_logits.portable.h64.d32.hist0.out-f32.kv-fp8.sm_90a");  // no sm90 form
  CHECK_THROWS_WITH(MqaLogitsConfig::parse_key("mqa_logits.sm90.h64.d32.hist0.out-f32.kv-fp8.sm_90a"),
                    Contains("head_dim 64 or 128 for the sm90 kernel"));
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
  if (!driver::available()) {  // the compressed form: any width W of logits, here narrower and wider than N
    for (std::int64_t width : {333, 900}) {
      Args c;
      c.options.compressed = true;
      c.logits.shape[1] = width;
      c.logits.strides[0] = width;
      CHECK_THROWS_WITH(c.call(), Contains("libcuda.so.1"));
    }
  }
}

TEST_CASE("mqa_logits rejects bad arguments, naming them", "[mqa][validation]") {
  expect_error([](Args& a) { a.q.dtype = DType::u8; }, "q: expected dtype float8_e4m3, got uint8");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {37, 48, 128}); },
               "q: expected heads = q.shape[1] in {16, 32, 64}, got 48");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {37, 64, 96}); },
               "q: expected head_dim = q.shape[2] in {32, 64, 128}, got 96");
  expect_error([](Args& a) { a.q.data = fake(0x10008); }, "q: expected a 16-byte aligned data pointer");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::fp8_e4m3, {700, 64}); },
               "kv: expected shape[1] = 128 (head_dim)");
  expect_error([](Args& a) { a.kv.strides[0] = 136; },
               "kv: expected a row stride >= head_dim = 128 bytes and a multiple of 16, got 136");
  expect_error([](Args& a) { a.kv.dtype = DType::f16; }, "kv: expected dtype");
  expect_error([](Args& a) { a.scales.shape[0] = 699; }, "kv_scales: expected shape[0] = 700 (N = kv.shape[0])");
  expect_error([](Args& a) { a.w.shape[1] = 32; }, "weights: expected shape[1] = 64 (heads)");
  expect_error([](Args& a) { a.ks.dtype = DType::f32; }, "ks: expected dtype int32");
  expect_error([](Args& a) { a.ke.shape[0] = 36; }, "ke: expected shape[0] = 37 (T = q.shape[0])");
  expect_error([](Args& a) { a.logits.shape[1] = 640; }, "logits: expected shape[1] = 700 (N = kv.shape[0])");
  expect_error([](Args& a) { a.logits.strides[0] = 600; }, "logits: expected a row stride >= N = 700, got 600");
  expect_error([](Args& a) { a.logits.dtype = DType::i32; }, "logits: expected dtype");
  expect_error(
      [](Args& a) {
        a.options.compressed = true;
        a.logits.shape[1] = 333;
        a.logits.strides[0] = 300;
      },
      "logits: expected a row stride >= W = 333, got 300");
  expect_error(
      [](Args& a) {
        a.options.compressed = true;
        a.options.fill_masked = true;
      },
      "options.fill_masked: expected false with options.compressed");
  expect_error([](Args& a) { a.options.histogram = TensorView::contiguous(fake(0x60000), DType::i32, {37, 512}); },
               "histogram: expected shape[1] = 1024 (coarse bins)");
}

namespace {

// T and N not multiples of the tiles; the larger N spans several key splits of the sm90 kernel.
void check_against_reference(const MqaLogitsConfig& c, bool fill_masked, std::uint64_t seed, int T = 37, int N = 700,
                             int scales_misalignment = 0, int compressed_width = 0) {
  ck::PrefillCase pc;
  pc.config = c;
  pc.tokens = T;
  pc.keys = N;
  pc.fill_masked = fill_masked;
  pc.compressed_width = compressed_width;
  pc.seed = seed;
  pc.scales_misalignment = scales_misalignment;
  INFO(ck::describe(pc));
  const ck::PrefillComparison r = ck::run_prefill_case(test::gpu_session(), pc);
  INFO(r.failure);
  CHECK(r.checked > 0);
  REQUIRE(r.passed);
}

const bool registered = [] {
  for (const MqaLogitsConfig& c : supported_mqa_logits_configs(Arch{9, 0, true})) {
    test::register_test("gpu " + c.key().substr(0, c.key().rfind('.')), "[gpu][prefill]", [c] {
      test::require_gpu();
      check_against_reference(c, false, test::fresh_seed());
      check_against_reference(c, true, test::fresh_seed());
      if (c.variant == MqaLogitsVariant::sm90) check_against_reference(c, c.histogram, test::fresh_seed(), 9, 9000);
      for (int misalignment : {4, 8, 12}) check_against_reference(c, c.histogram, test::fresh_seed(), 37, 700, misalignment);
      // DeepGEMM's compressed rows: as wide as the longest possible window, and narrower (windows truncated).
      for (int width : {700, 333}) check_against_reference(c, false, test::fresh_seed(), 37, 700, 0, width);
    });
  }
  return true;
}();

}  // namespace
