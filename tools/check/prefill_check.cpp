#include "prefill_check.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/reference.hpp"
#include "parallel_reference.hpp"
#include "prefill_inputs.hpp"

namespace flash_indexer::check {

std::string describe(const PrefillCase& c) {
  return fmt::format("{} T {} N {}{}{}{} seed {}", c.config.key().substr(0, c.config.key().rfind('.')), c.tokens, c.keys,
                     c.fill_masked ? " fill_masked" : "",
                     c.compressed_width > 0 ? fmt::format(" compressed W {}", c.compressed_width) : "",
                     c.scales_misalignment ? fmt::format(" kv_scales {} bytes past 16", c.scales_misalignment) : "", c.seed);
}

PrefillComparison run_prefill_case(GpuSession& gpu, const PrefillCase& c) {
  constexpr std::uint8_t kPoisonByte = 0x7d;
  std::mt19937_64 rng(c.seed);
  const int T = c.tokens, N = c.keys;
  const PrefillProblem pb = make_prefill_problem(T, c.config.heads, c.config.head_dim, N, rng);
  const reference::MqaLogitsInputs in = pb.reference_inputs();
  const std::vector<double> full = mqa_logits_reference(in);

  const std::size_t elem = c.config.logits == LogitsDType::f32 ? 4 : 2;
  const bool compressed = c.compressed_width > 0;
  const std::int64_t width = compressed ? c.compressed_width : N;
  const std::int64_t stride = width + 8;  // the row padding must stay poisoned
  const std::vector<double> ref = compressed ? reference::compressed_mqa_logits(in, full, width) : full;
  auto q = DeviceBuffer::from(pb.q), kv = DeviceBuffer::from(pb.kv), w = DeviceBuffer::from(pb.w), ks = DeviceBuffer::from(pb.ks),
       ke = DeviceBuffer::from(pb.ke);
  const std::size_t scales_at = static_cast<std::size_t>(c.scales_misalignment);  // the allocation is 256-byte aligned
  DeviceBuffer scales(scales_at + pb.scales.size() * sizeof(float) + 16);
  scales.fill(0xff);  // NaN around the scales: a scale read from the wrong place shows
  if (!pb.scales.empty()) scales.upload(pb.scales.data(), pb.scales.size() * sizeof(float), scales_at);
  void* const scales_data = static_cast<unsigned char*>(scales.data()) + scales_at;
  DeviceBuffer logits(static_cast<std::size_t>(T) * stride * elem), hist(static_cast<std::size_t>(T) * kCoarseBins * 4);
  logits.fill(kPoisonByte);
  hist.fill(0);
  MqaLogitsOptions o;
  o.fill_masked = c.fill_masked;
  o.compressed = compressed;
  o.variant = c.config.variant;
  if (c.config.histogram) o.histogram = TensorView::contiguous(hist.data(), DType::i32, {T, kCoarseBins});
  TensorView kv_view = TensorView::contiguous(kv.data(), DType::fp8_e4m3, {N, c.config.head_dim});
  kv_view.strides[0] = pb.kv_stride;
  TensorView out = TensorView::contiguous(logits.data(), tensor_dtype(c.config.logits), {T, width});
  out.strides[0] = stride;
  mqa_logits(TensorView::contiguous(q.data(), DType::fp8_e4m3, {T, c.config.heads, c.config.head_dim}), kv_view,
             TensorView::contiguous(scales_data, DType::f32, {N}),
             TensorView::contiguous(w.data(), DType::f32, {T, c.config.heads}),
             TensorView::contiguous(ks.data(), DType::i32, {T}), TensorView::contiguous(ke.data(), DType::i32, {T}), out,
             gpu.stream(), o);
  gpu.synchronize();

  const auto bytes = logits.to_host<std::uint8_t>(static_cast<std::size_t>(T) * stride * elem);
  auto poisoned = [&](std::size_t index) {
    for (std::size_t i = 0; i < elem; ++i)
      if (bytes[index * elem + i] != kPoisonByte) return false;
    return true;
  };
  PrefillComparison r;
  auto fail = [&](std::string what) {
    if (r.passed) r.failure = std::move(what);
    r.passed = false;
  };
  std::vector<std::int32_t> want_hist(static_cast<std::size_t>(T) * kCoarseBins, 0);
  for (int t = 0; t < T && r.passed; ++t) {
    const reference::KeyWindow win = reference::key_window(in, t);
    for (std::int64_t s = 0; s < stride && r.passed; ++s) {
      const std::size_t gi = static_cast<std::size_t>(t * stride + s);
      const std::int64_t key = compressed ? win.start + s : s;
      const auto where = [&] {
        return fmt::format("token {} column {} key {} (window [{}, {}))", t, s, key, win.start, win.end);
      };
      if (s >= width) {
        if (!poisoned(gi)) fail("row padding written at " + where());
        continue;
      }
      const float got = reference::load_logit(c.config.logits, bytes.data(), gi);
      if (key < win.start || key >= win.end) {
        if (c.fill_masked ? !(std::isinf(got) && got < 0) : !poisoned(gi))
          fail(fmt::format("{} outside the window at {}", c.fill_masked ? "not -inf" : "written", where()));
        continue;
      }
      const float want = reference::round_to(c.config.logits, static_cast<float>(ref[static_cast<std::size_t>(t * width + s)]));
      if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want))
        fail(fmt::format("logit {} instead of {} at {}", got, want, where()));
      ++r.checked;
      if (!std::isnan(want)) ++want_hist[static_cast<std::size_t>(t) * kCoarseBins + coarse_bin(want)];
    }
  }
  if (r.passed && r.checked == 0) fail("no live logit: a case that checks nothing");
  if (r.passed && c.config.histogram && hist.to_host<std::int32_t>(want_hist.size()) != want_hist)
    fail("the histogram's counts differ from the stored logits'");
  return r;
}

}  // namespace flash_indexer::check
