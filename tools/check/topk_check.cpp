#include "topk_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "../../kernels/topk_params.cuh"
#include "../../kernels/topk_selector_bins.cuh"
#include "kernel_key.hpp"

namespace flash_indexer::check {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::uint8_t kPoisonByte = 0x7d;
// Lengths from here on stand for "past the width" and do not size the logits.
constexpr std::int64_t kPastWidth = std::int64_t{1} << 24;

std::size_t element_bytes(LogitsDType t) { return t == LogitsDType::f32 ? 4 : 2; }

void store(LogitsDType t, std::vector<std::uint8_t>& bytes, std::size_t index, float x) {
  if (t == LogitsDType::f32) {
    std::memcpy(bytes.data() + index * 4, &x, 4);
    return;
  }
  const std::uint16_t h = t == LogitsDType::f16 ? reference::float_to_f16_bits(x) : reference::float_to_bf16_bits(x);
  std::memcpy(bytes.data() + index * 2, &h, 2);
}

// The score of column s of a row of `kind`.
float draw(RowKind kind, std::int64_t s, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  switch (kind) {
    case RowKind::normal: return normal(rng);
    case RowKind::heavy_tailed: return std::tan(3.14159265f * (unit(rng) - 0.5f));
    case RowKind::relu: return unit(rng) < 0.6f ? 0.0f : std::fabs(normal(rng)) * 4.0f;
    case RowKind::all_equal: return 0.75f;
    case RowKind::one_bin: return 1.0f + 0.06f * unit(rng);
    case RowKind::inf_nan: {
      const float u = unit(rng);
      return u < 0.1f ? kInf : u < 0.2f ? -kInf : u < 0.3f ? kNaN : normal(rng);
    }
    case RowKind::signed_zeros: {
      const float u = unit(rng);
      return u < 0.4f ? 0.0f : u < 0.8f ? -0.0f : u < 0.9f ? unit(rng) : -unit(rng);
    }
    case RowKind::unit_bins: return (unit(rng) - 0.5f) * 600.0f;
    case RowKind::wide: {
      const float magnitude = std::pow(10.0f, -9.0f + 15.0f * unit(rng));
      return unit(rng) < 0.5f ? -magnitude : magnitude;
    }
    case RowKind::nan_heavy: return unit(rng) < 0.9f ? kNaN : normal(rng);
    case RowKind::all_nan: return kNaN;
    case RowKind::strided_spikes: return (s % 64 < 4 ? 100.0f : 0.0f) + normal(rng);
    case RowKind::rounded_normal: return std::round(normal(rng) * 1024.0f) / 1024.0f;
    case RowKind::saturated: return normal(rng) * 1000.0f;
  }
  return 0.0f;
}

struct Rows {
  std::int64_t width = 0, stride = 0;
  std::vector<std::uint8_t> bytes;  // as uploaded
  std::vector<float> stored;        // the same values widened to float
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> live;   // lengths clamped to [0, width]
};

Rows make_rows(const TopkCase& c, std::mt19937_64& rng) {
  Rows r;
  for (const RowSpec& spec : c.rows)
    if (spec.length < kPastWidth) r.width = std::max(r.width, spec.length);
  r.width = c.width > 0 ? c.width : r.width + 37;
  r.stride = r.width + c.row_padding;
  if (c.aligned_rows) r.stride = (r.stride + 7) / 8 * 8;
  const std::size_t count = c.rows.size() * static_cast<std::size_t>(r.stride);
  r.bytes.assign(count * element_bytes(c.dtype), 0);
  r.stored.resize(count);
  std::uniform_real_distribution<float> junk(1e3f, 1e4f);
  for (std::size_t row = 0; row < c.rows.size(); ++row) {
    const RowSpec& spec = c.rows[row];
    r.lengths.push_back(spec.length);
    r.live.push_back(std::clamp<std::int64_t>(spec.length, 0, r.width));
    for (std::int64_t s = 0; s < r.stride; ++s) {
      // Past the length: values that would win if they were read (+inf, large, NaN).
      const float x = s < r.live.back() ? draw(spec.kind, s, rng) : (s % 3 == 0 ? kInf : s % 3 == 1 ? junk(rng) : kNaN);
      const std::size_t i = row * r.stride + s;
      store(c.dtype, r.bytes, i, x);
      r.stored[i] = reference::load_logit(c.dtype, r.bytes.data(), i);
    }
  }
  return r;
}

// The selector's own bin of a stored score (kernels/topk_selector_bins.cuh), from its order-preserving key
// as the kernel forms it. A BF16 score is an FP32 value with 16 low zero bits, whose FP32 key has the
// BF16 key's bin.
int selector_bin(LogitsDType t, float x) {
  if (t == LogitsDType::f16) {
    std::uint32_t b = reference::float_to_f16_bits(x);
    if ((b & 0x7fffu) == 0) b = 0;
    return kernels::selector_bin_of_key16(b ^ ((b & 0x8000u) ? 0xffffu : 0x8000u));
  }
  std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  if ((b << 1) == 0) b = 0;
  return kernels::selector_bin_of_key32(b ^ ((b >> 31) ? 0xffffffffu : 0x80000000u));
}

// The resident selector's fine bin (kernels/topk_selector_bins.cuh) of a stored non-NaN score.
int fine_bin(LogitsDType t, float x) {
  if (t == LogitsDType::f16) return kernels::fine_bin_of_bits16(reference::float_to_f16_bits(x));
  return kernels::fine_bin_of_bits32(std::bit_cast<std::uint32_t>(x));
}

std::vector<std::int32_t> exact_histogram(const TopkCase& c, const Rows& r) {
  std::vector<double> stored(r.stored.begin(), r.stored.end());
  std::vector<std::int32_t> hist;
  reference::add_coarse_histogram(stored, r.stride, r.live, c.dtype, hist);
  return hist;
}

std::vector<std::int32_t> histogram_for(const TopkCase& c, const Rows& r, std::mt19937_64& rng) {
  std::vector<std::int32_t> hist = exact_histogram(c, r);
  switch (c.histogram) {
    case HistogramMode::none:
    case HistogramMode::exact: break;
    case HistogramMode::doubled:
      for (auto& h : hist) h *= 2;
      break;
    case HistogramMode::zeroed: std::fill(hist.begin(), hist.end(), 0); break;
    case HistogramMode::other_data: {  // the histogram of other rows of the same kinds
      TopkCase other = c;
      std::mt19937_64 other_rng(rng());
      hist = exact_histogram(other, make_rows(other, other_rng));
      break;
    }
    case HistogramMode::random: {
      std::uniform_int_distribution<std::int32_t> any(std::numeric_limits<std::int32_t>::min(),
                                                      std::numeric_limits<std::int32_t>::max());
      std::uniform_int_distribution<std::int32_t> small(0, 50);
      for (std::size_t i = 0; i < hist.size(); ++i) hist[i] = (i / kCoarseBins) % 2 ? any(rng) : small(rng);
      break;
    }
  }
  return hist;
}

}  // namespace

const char* row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::normal: return "normal";
    case RowKind::heavy_tailed: return "heavy_tailed";
    case RowKind::relu: return "relu";
    case RowKind::all_equal: return "all_equal";
    case RowKind::one_bin: return "one_bin";
    case RowKind::inf_nan: return "inf_nan";
    case RowKind::signed_zeros: return "signed_zeros";
    case RowKind::unit_bins: return "unit_bins";
    case RowKind::wide: return "wide";
    case RowKind::nan_heavy: return "nan_heavy";
    case RowKind::all_nan: return "all_nan";
    case RowKind::strided_spikes: return "strided_spikes";
    case RowKind::rounded_normal: return "rounded_normal";
    case RowKind::saturated: return "saturated";
  }
  return "?";
}

const char* histogram_mode_name(HistogramMode mode) {
  switch (mode) {
    case HistogramMode::none: return "none";
    case HistogramMode::exact: return "exact";
    case HistogramMode::doubled: return "doubled";
    case HistogramMode::zeroed: return "zeroed";
    case HistogramMode::other_data: return "other_data";
    case HistogramMode::random: return "random";
  }
  return "?";
}

std::vector<RowSpec> adversarial_rows(int k) {
  return {
      {RowKind::normal, 0},
      {RowKind::normal, 1},
      {RowKind::normal, k - 1},
      {RowKind::normal, k},
      {RowKind::normal, k + 1},
      {RowKind::normal, 65537},
      {RowKind::normal, -5},
      {RowKind::normal, 1 << 30},
      {RowKind::all_equal, 5001},
      {RowKind::one_bin, 100000},
      {RowKind::inf_nan, 3001},
      {RowKind::signed_zeros, 4003},
      {RowKind::unit_bins, 10007},
      {RowKind::heavy_tailed, 20011},
      {RowKind::relu, 30001},
      {RowKind::wide, 9005},
      {RowKind::nan_heavy, 2 * k + 5},
      {RowKind::all_nan, 777},
      {RowKind::relu, k + 9},
      {RowKind::signed_zeros, 2 * k + 1},
      {RowKind::strided_spikes, 65536},
      {RowKind::rounded_normal, 8190},
  };
}

std::string describe(const TopkCase& c) {
  std::string splits;
  for (int s : c.splits) splits += fmt::format("{}{}", splits.empty() ? "" : ",", s);
  return fmt::format("in-{} k {} {} histogram {} {} rows width {}{} splits [{}]{} seed {}", logits_name(c.dtype), c.k,
                     c.sorted ? "sorted" : "unsorted", histogram_mode_name(c.histogram), c.rows.size(), c.width,
                     c.aligned_rows ? " aligned" : "", splits.empty() ? "auto" : splits,
                     c.starts.empty() ? ""
                     : c.relative     ? " windows (relative)"
                                      : " windows",
                     c.seed);
}

TopkComparison run_topk_case(GpuSession& gpu, const TopkCase& c) {
  std::mt19937_64 rng(c.seed);
  const Rows r = make_rows(c, rng);
  const std::int64_t rows = static_cast<std::int64_t>(c.rows.size());
  const int k = c.k;
  const std::size_t out_count = static_cast<std::size_t>(rows) * k;

  DeviceBuffer logits = DeviceBuffer::from(r.bytes);
  std::vector<std::int32_t> lengths_arg;
  if (c.next_n > 0) lengths_arg = c.request_lengths;
  else
    for (auto l : r.lengths)
      lengths_arg.push_back(static_cast<std::int32_t>(
          std::clamp<std::int64_t>(l, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max())));
  DeviceBuffer lengths = DeviceBuffer::from(lengths_arg);
  DeviceBuffer indices(out_count * 4), values(out_count * 4), workspace(topk_workspace_bytes(rows));
  const std::vector<std::int32_t> hist = histogram_for(c, r, rng);
  DeviceBuffer hist_buffer = DeviceBuffer::from(hist);
  // Each row's window start as the op clamps it (to [0, its live length]).
  std::vector<std::int64_t> window(static_cast<std::size_t>(rows), 0);
  for (std::int64_t row = 0; row < rows && !c.starts.empty(); ++row)
    window[row] = std::clamp<std::int64_t>(c.starts[row], 0, r.live[row]);
  DeviceBuffer starts_buffer = DeviceBuffer::from(c.starts.empty() ? std::vector<std::int32_t>{0} : c.starts);

  TopkOptions options;
  options.sorted = c.sorted;
  TensorView lengths_view = TensorView::contiguous(lengths.data(), DType::i32, {static_cast<std::int64_t>(lengths_arg.size())});
  if (c.next_n > 0) options.next_n = c.next_n;
  if (c.lengths_2d)
    lengths_view = TensorView::contiguous(lengths.data(), DType::i32, {rows / std::max(c.next_n, 1), std::max(c.next_n, 1)});
  if (c.lengths_2d) options.next_n = 0;
  if (c.histogram != HistogramMode::none)
    options.histogram = TensorView::contiguous(hist_buffer.data(), DType::i32, {rows, kCoarseBins});
  if (c.values) options.values = TensorView::contiguous(values.data(), DType::f32, {rows, k});
  if (!c.starts.empty()) options.row_starts = TensorView::contiguous(starts_buffer.data(), DType::i32, {rows});
  options.relative = c.relative;
  const TensorView logits_view =
      TensorView::contiguous(logits.data(), tensor_dtype(c.dtype), {rows, r.width}).with_strides({r.stride, 1});
  const TensorView indices_view = TensorView::contiguous(indices.data(), DType::i32, {rows, k});
  const TensorView workspace_view =
      TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});

  TopkComparison out;
  auto fail = [&](std::int64_t row, const std::string& what) {
    if (out.passed)
      out.failure = fmt::format("row {} ({} length {}): {} in case {}", row, row >= 0 ? row_kind_name(c.rows[row].kind) : "-",
                                row >= 0 ? c.rows[row].length : 0, what, describe(c));
    out.passed = false;
  };

  std::vector<std::int32_t> got_indices;
  std::vector<float> got_values;
  const int runs = std::max({c.runs, 1, static_cast<int>(c.splits.size())});
  for (int run = 0; run < runs; ++run) {
    options.split = c.splits.empty() ? 0 : c.splits[static_cast<std::size_t>(run) % c.splits.size()];
    indices.fill(kPoisonByte);
    values.fill(kPoisonByte);
    workspace.fill(kPoisonByte);
    topk(logits_view, lengths_view, indices_view, workspace_view, gpu.stream(), options);
    gpu.synchronize();
    auto idx = indices.to_host<std::int32_t>(out_count);
    auto val = values.to_host<float>(out_count);
    if (run == 0) {
      got_indices = std::move(idx);
      got_values = std::move(val);
      out.reports = workspace.to_host<TopkRowReport>(static_cast<std::size_t>(rows));
    } else if (idx != got_indices || std::memcmp(val.data(), got_values.data(), out_count * 4) != 0) {
      fail(-1, fmt::format("launch {} (split {}) gave different bytes than launch 0", run, options.split));
    }
  }

  std::vector<std::int64_t> starts(window);
  for (std::int64_t row = 0; row < rows && !c.starts.empty(); ++row) starts[row] = c.starts[row];
  const reference::TopkResult want =
      reference::topk_windows(r.stored, r.stride, r.width, starts, r.lengths, k, c.relative, c.sorted);
  const reference::TopkResult ranked =
      c.sorted ? reference::topk_windows(r.stored, r.stride, r.width, starts, r.lengths, k, c.relative, false) : want;
  // The absolute column of an output index of row `row`.
  auto column_of = [&](std::int64_t row, std::int32_t index) { return index + (c.relative ? window[row] : 0); };
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::size_t base = static_cast<std::size_t>(row) * k;
    std::int64_t valid = 0;
    for (std::int64_t s = window[row]; s < r.live[row]; ++s) valid += !std::isnan(r.stored[row * r.stride + s]);
    const int selected = static_cast<int>(std::min<std::int64_t>(valid, k));
    out.selected += selected;
    std::vector<std::int32_t> g(got_indices.begin() + base, got_indices.begin() + base + k);
    std::vector<std::int32_t> w(want.indices.begin() + base, want.indices.begin() + base + k);
    if (c.sorted) {
      if (g != w) {
        const auto at = std::mismatch(g.begin(), g.end(), w.begin()).first - g.begin();
        fail(row, fmt::format("sorted indices differ at slot {}: GPU {}, reference {}", at, g[at], w[at]));
        continue;
      }
    } else {
      for (int i = selected; i < k; ++i)
        if (g[i] != -1) {
          fail(row, fmt::format("slot {} holds {} (expected -1: only {} selectable columns)", i, g[i], selected));
          break;
        }
      std::sort(g.begin(), g.begin() + selected);
      std::sort(w.begin(), w.begin() + selected);
      if (!std::equal(g.begin(), g.begin() + selected, w.begin())) {
        const auto at = std::mismatch(g.begin(), g.begin() + selected, w.begin()).first - g.begin();
        fail(row,
             fmt::format("index set differs (first difference in sorted order at {}: GPU {}, reference {})", at, g[at], w[at]));
        continue;
      }
    }
    if (c.values)
      for (int i = 0; i < k; ++i) {
        const std::int32_t column = got_indices[base + i];
        const float expected = column >= 0 ? r.stored[row * r.stride + column_of(row, column)] : -kInf;
        if (std::bit_cast<std::uint32_t>(got_values[base + i]) != std::bit_cast<std::uint32_t>(expected)) {
          fail(row, fmt::format("values slot {} (column {}): {} instead of {}", i, column, got_values[base + i], expected));
          break;
        }
      }
    // The row report: how the histogram was used, and the threshold bin the reference implies: a contract
    // §3 bin when the given histogram was used, else a selector bin.
    const TopkRowReport& rep = out.reports[row];
    std::int64_t given_total = 0, given_threshold_count = -1;
    for (int b = 0; b < kCoarseBins; ++b) {
      const std::int64_t n = hist[row * kCoarseBins + b];
      if (given_threshold_count < 0 && given_total < k && given_total + n >= k) given_threshold_count = n;
      given_total += n;
    }
    // A row held on chip is counted whatever was given (0); a streamed one uses an exact histogram (1)
    // and detects a stale one that does not add up (2); a long one whose given threshold bin outgrows the
    // candidate buffer may be selected as without it (3: histogram_bin_too_coarse).
    const bool too_coarse_ok = rep.histogram_use == 3 && given_threshold_count > kernels::kTopkCandidates;
    const bool use_ok = c.histogram == HistogramMode::none ? rep.histogram_use == 0
                        : c.histogram == HistogramMode::exact
                            ? rep.histogram_use == 0 || rep.histogram_use == 1 || too_coarse_ok
                            : rep.histogram_use == 0 || rep.histogram_use == 2 || too_coarse_ok ||
                                  (rep.histogram_use == 1 && given_total == valid);
    if (!use_ok)
      fail(row, fmt::format("report histogram_use {} (histogram {}, given total {}, live non-NaN {})", rep.histogram_use,
                            histogram_mode_name(c.histogram), given_total, valid));
    const bool contract_bins = rep.histogram_use == 1;
    auto bin_of = [&](float v) { return contract_bins ? coarse_bin(v) : selector_bin(c.dtype, v); };
    static_assert(kernels::kTopkSelectorBins == kCoarseBins, "1024 means every column was taken, in both");
    const std::int64_t kth = valid < k ? -1 : column_of(row, ranked.indices[base + k - 1]);
    const int want_bin = valid < k ? kCoarseBins : bin_of(r.stored[row * r.stride + kth]);
    int want_count = 0;
    if (want_bin < kCoarseBins)
      for (std::int64_t s = window[row]; s < r.live[row]; ++s) {
        const float v = r.stored[row * r.stride + s];
        want_count += !std::isnan(v) && bin_of(v) == want_bin;
      }
    // A long row with no histogram (or one too coarse) may be selected from a sampled cutoff in one pass:
    // its threshold bin is not counted (-1), and it makes no extra passes.
    const bool sampled = rep.threshold_count == -1;
    if (sampled && ((rep.histogram_use != 0 && rep.histogram_use != 3) || rep.row_passes != 0 || valid < k))
      fail(row, fmt::format("report count -1 (sampled) with histogram_use {}, row_passes {}, {} selectable", rep.histogram_use,
                            rep.row_passes, valid));
    if (rep.threshold_bin != want_bin || (!sampled && rep.threshold_count != want_count))
      fail(row, fmt::format("report threshold bin {} count {}, expected bin {} count {}", rep.threshold_bin, rep.threshold_count,
                            want_bin, want_count));
    // Extra passes exactly when the threshold bin outgrows the candidate buffer, unless the bin holds a
    // single value (then the first candidates by column are the winners, and no pass is needed).
    bool one_value = true;
    if (want_bin < kCoarseBins) {
      const double first = r.stored[row * r.stride + kth];
      for (std::int64_t s = window[row]; s < r.live[row] && one_value; ++s) {
        const double v = r.stored[row * r.stride + s];
        if (!std::isnan(v) && bin_of(static_cast<float>(v)) == want_bin && v != first) one_value = false;
      }
    }
    // The streaming selector narrows a selector bin of more than kTopkCandidates (unless it holds one
    // value); the resident one a fine bin of more than kTopkResidentCandidates. Which one ran is not
    // reported, so passes need one of the reasons, and no passes need that both selectors would skip.
    int fine_count = 0;
    if (!contract_bins && want_bin < kCoarseBins) {
      const int want_fine = fine_bin(c.dtype, r.stored[row * r.stride + kth]);
      for (std::int64_t s = window[row]; s < r.live[row]; ++s) {
        const float v = r.stored[row * r.stride + s];
        fine_count += !std::isnan(v) && fine_bin(c.dtype, v) == want_fine;
      }
    }
    const bool overflow = want_count > kernels::kTopkCandidates;
    const bool fine_overflow = fine_count > kernels::kTopkResidentCandidates;
    if (!sampled &&
        (rep.row_passes > 0 ? !overflow && !fine_overflow : overflow && !one_value && (contract_bins || fine_overflow)))
      fail(row, fmt::format("report row_passes {} with a threshold bin of {}{}", rep.row_passes, want_count,
                            one_value ? " (one value)" : ""));
  }
  return out;
}

}  // namespace flash_indexer::check
