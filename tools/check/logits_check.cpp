#include "logits_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "parallel_reference.hpp"
#include "paged_mqa_logits_call.hpp"

namespace flash_indexer::check {
namespace {

std::size_t logit_bytes(LogitsDType t) { return t == LogitsDType::f32 ? 4 : 2; }

// The finite E4M3 values in ascending order with their bytes, for nearest-value quantization.
struct Fp8Table {
  std::vector<std::pair<float, std::uint8_t>> values;
  Fp8Table() {
    for (int b = 0; b < 256; ++b) {
      const float v = reference::fp8_e4m3_to_float(static_cast<std::uint8_t>(b));
      if (!std::isnan(v) && b != 0x80) values.emplace_back(v, static_cast<std::uint8_t>(b));  // 0x80: -0
    }
    std::sort(values.begin(), values.end());
  }
  std::uint8_t quantize(float x) const {
    auto it = std::lower_bound(values.begin(), values.end(), std::make_pair(x, std::uint8_t{0}));
    if (it == values.end()) return values.back().second;
    if (it == values.begin()) return it->second;
    auto below = std::prev(it);
    return (x - below->first <= it->first - x) ? below->second : it->second;
  }
};

const Fp8Table& fp8_table() {
  static const Fp8Table t;
  return t;
}

double read_logit(const std::vector<std::uint8_t>& bytes, std::size_t index, LogitsDType t) {
  return reference::load_logit(t, bytes.data(), index);
}

bool is_poison(const std::vector<std::uint8_t>& bytes, std::size_t index, LogitsDType t) {
  const std::size_t size = logit_bytes(t);
  for (std::size_t i = 0; i < size; ++i)
    if (bytes[index * size + i] != kPoison) return false;
  return true;
}

}  // namespace

std::string describe(const LogitsCase& c) {
  std::string lens;
  for (std::size_t i = 0; i < c.lengths.size() && i < 12; ++i) lens += (i ? "," : "") + std::to_string(c.lengths[i]);
  if (c.lengths.size() > 12) lens += ",...";
  return fmt::format("{}{}n{} h{} d{} out-{} lens{}=[{}]{}{}{}{}{}{} seed {}",
                     c.config.variant == PagedMqaLogitsVariant::portable ? "portable "
                     : c.config.variant == PagedMqaLogitsVariant::sm90   ? "sm90 "
                                                                         : "",
                     c.config.kv == KvFormat::mxfp4 ? "mxfp4 " : "", c.config.next_n, c.config.heads, c.config.head_dim,
                     logits_name(c.config.logits), c.lens_2d ? "2d" : "1d", lens, c.fill_masked ? " fill_masked" : "",
                     c.wide_values    ? " wide"
                     : c.exact_values ? " exact"
                                      : "",
                     c.nan_weight_row >= 0 ? " nan-weight"
                     : c.wide_weights      ? " wide-weights"
                                           : "",
                     c.blocks_per_split > 0 ? fmt::format(" {} blocks per CTA", c.blocks_per_split) : "",
                     c.fill_before_barrier == 0   ? " filled after the barrier"
                     : c.fill_before_barrier == 1 ? " filled before the barrier"
                                                  : "",
                     c.ranges_ctas > 0 ? fmt::format(" ranges over {} CTAs", c.ranges_ctas) : "", c.seed);
}

reference::PagedMqaLogitsInputs HostInputs::reference_view(const LogitsCase& c) const {
  reference::PagedMqaLogitsInputs r;
  r.kv = c.config.kv;
  r.q_scales = q_scales.empty() ? nullptr : q_scales.data();
  r.batch = batch;
  r.next_n = c.config.next_n;
  r.heads = c.config.heads;
  r.head_dim = c.config.head_dim;
  r.block_size = c.config.block_size;
  r.num_blocks = num_blocks;
  r.kv_block_stride = block_stride;
  r.q = q.data();
  r.kv_cache = kv_cache.data();
  r.weights = weights.data();
  r.context_lens = context_lens.data();
  r.lens_2d = c.lens_2d;
  r.block_table = block_table.data();
  r.block_table_stride = max_blocks;
  r.max_blocks = max_blocks;
  r.width = width;
  return r;
}

std::uint8_t fp8_e4m3_nearest(float x) { return fp8_table().quantize(x); }

HostInputs make_inputs(const LogitsCase& c) {
  const auto& cfg = c.config;
  const int next_n = cfg.next_n, heads = cfg.heads, dim = cfg.head_dim, bs = cfg.block_size;
  HostInputs in;
  in.batch = static_cast<int>(c.lens_2d ? c.lengths.size() / next_n : c.lengths.size());
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Keys each request needs (the longest of its rows).
  std::vector<std::int64_t> need(in.batch, 0);
  for (int b = 0; b < in.batch; ++b)
    for (int j = 0; j < next_n; ++j) {
      const std::int64_t len = c.lens_2d ? c.lengths[b * next_n + j] : std::int64_t{c.lengths[b]} - next_n + j + 1;
      need[b] = std::max(need[b], len);
    }
  const std::int64_t longest = *std::max_element(need.begin(), need.end());
  in.width = c.width > 0 ? c.width : (longest + bs - 1) / bs * bs + 64;
  in.logits_stride = in.width + c.row_padding;
  in.max_blocks = static_cast<int>((in.width + bs - 1) / bs + 1);

  std::int64_t used_blocks = 0;
  for (auto n : need) used_blocks += (std::min(n, in.width) + bs - 1) / bs;
  in.num_blocks = static_cast<int>(used_blocks + c.spare_blocks);
  const bool mxfp4 = cfg.kv == KvFormat::mxfp4;
  const int value_bytes = mxfp4 ? dim / 2 : dim;  // a token's values in a block
  in.block_stride = bs * (value_bytes + 4) + c.block_stride_padding;

  in.context_lens.assign(c.lengths.begin(), c.lengths.end());
  std::vector<std::int32_t> pool(in.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  // Slots past a request's live blocks hold ids that fault if dereferenced (the kernel never reads them).
  in.block_table.assign(static_cast<std::size_t>(in.batch) * in.max_blocks, std::numeric_limits<std::int32_t>::max());
  std::size_t next = 0;
  for (int b = 0; b < in.batch; ++b)
    for (std::int64_t i = 0; i < (std::min(need[b], in.width) + bs - 1) / bs; ++i)
      in.block_table[b * in.max_blocks + i] = pool[next++];

  const Fp8Table& fp8 = fp8_table();
  std::uniform_int_distribution<int> small_int(-4, 4);
  // N(0, 2^2) quantized to FP8, drawn from a table of 2^16 fresh samples: 16 random bits per value
  // instead of a normal draw and a search (long contexts need hundreds of millions of values).
  std::vector<std::uint8_t> normal_fp8(1 << 16);
  for (auto& v : normal_fp8) v = fp8.quantize(normal(rng) * 2.0f);
  std::uint64_t bits = 0;
  int bits_left = 0;
  auto draw_fp8 = [&]() -> std::uint8_t {
    if (c.exact_values) return fp8.quantize(static_cast<float>(small_int(rng)));
    if (!c.wide_values) {
      if (bits_left == 0) {
        bits = rng();
        bits_left = 4;
      }
      --bits_left;
      const std::uint8_t v = normal_fp8[bits & 0xffff];
      bits >>= 16;
      return v;
    }
    std::uint8_t byte;
    do byte = static_cast<std::uint8_t>(rng());
    while ((byte & 0x7f) == 0x7f);
    return byte;
  };
  if (mxfp4) {
    // Random E2M1 nibbles; exponents around 2^0 (2^-7..2^7 per group; 2^-30..2^30 for wide_values, where
    // products stay finite in FP32; 0xFF never). exact_values: one exponent in 2^-2..2^2 for all four
    // groups of a vector, so that every logit is exact on the tensor core too: the sm90 kernel folds the
    // groups' exponents into the E4M3 operands, and groups of different exponents in one dot put addends
    // of different binades in one accumulation, which the tensor core cuts to 13 bits below the largest.
    // Other cases are checked against that cut's bound (mxfp4_tensor_core_bound).
    auto exponents = [&] {
      std::uint32_t e = 0;
      const int shared = 125 + static_cast<int>(rng() % 5);
      for (int g = 0; g < 4; ++g) {
        const int x = c.exact_values  ? shared
                      : c.wide_values ? 97 + static_cast<int>(rng() % 61)
                                      : 120 + static_cast<int>(rng() % 15);
        e |= static_cast<std::uint32_t>(x) << (8 * g);
      }
      return static_cast<std::int32_t>(e);
    };
    in.q.resize(static_cast<std::size_t>(in.batch) * next_n * heads * dim / 2);
    for (auto& v : in.q) v = static_cast<std::uint8_t>(rng());
    in.q_scales.resize(static_cast<std::size_t>(in.batch) * next_n * heads);
    for (auto& e : in.q_scales) e = exponents();
    in.kv_cache.resize(static_cast<std::size_t>(in.num_blocks) * in.block_stride);
    for (int blk = 0; blk < in.num_blocks; ++blk) {
      std::uint8_t* base = in.kv_cache.data() + blk * in.block_stride;
      for (int i = 0; i < bs * dim / 2; ++i) base[i] = static_cast<std::uint8_t>(rng());
      for (int t = 0; t < bs; ++t) {
        const std::int32_t e = exponents();
        std::memcpy(base + bs * dim / 2 + 4 * t, &e, 4);
      }
      for (std::int64_t i = bs * (dim / 2 + 4); i < in.block_stride; ++i) base[i] = static_cast<std::uint8_t>(rng());
    }
  } else {
    in.q.resize(static_cast<std::size_t>(in.batch) * next_n * heads * dim);
    for (auto& v : in.q) v = draw_fp8();
    in.kv_cache.resize(static_cast<std::size_t>(in.num_blocks) * in.block_stride);
    std::uniform_real_distribution<float> scale(0.005f, 0.05f);
    for (int blk = 0; blk < in.num_blocks; ++blk) {
      std::uint8_t* base = in.kv_cache.data() + blk * in.block_stride;
      for (int i = 0; i < bs * dim; ++i) base[i] = draw_fp8();
      for (int t = 0; t < bs; ++t) {
        const float s = c.exact_values ? std::ldexp(1.0f, -static_cast<int>(rng() % 8) - 4) : scale(rng);
        std::memcpy(base + bs * dim + 4 * t, &s, 4);
      }
      for (std::int64_t i = bs * (dim + 4); i < in.block_stride; ++i) base[i] = static_cast<std::uint8_t>(rng());
    }
  }
  in.weights.resize(static_cast<std::size_t>(in.batch) * next_n * heads);
  std::uniform_real_distribution<float> unit(1.0f, 2.0f);
  for (auto& w : in.weights)
    w = c.exact_values   ? static_cast<float>(static_cast<int>(rng() % 33) - 16) / 8.0f
        : c.wide_weights ? (rng() % 2 ? -1.0f : 1.0f) * std::ldexp(unit(rng), static_cast<int>(rng() % 11) - 4)
                         : normal(rng) / std::sqrt(static_cast<float>(heads));
  if (c.nan_weight_row >= 0 && c.nan_weight_row < in.batch * next_n)
    in.weights[static_cast<std::size_t>(c.nan_weight_row) * heads] = std::numeric_limits<float>::quiet_NaN();
  return in;
}

void reshuffle_block_table(HostInputs& in, std::uint64_t seed, int live_blocks, std::int32_t past) {
  std::vector<std::int32_t> pool(in.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::size_t next = 0;
  for (int b = 0; b < in.batch; ++b)
    for (int i = 0; i < in.max_blocks; ++i)
      in.block_table[static_cast<std::size_t>(b) * in.max_blocks + i] = i < live_blocks ? pool[next++ % pool.size()] : past;
}

DeviceInputs upload(const HostInputs& in, const LogitsCase& c) {
  DeviceInputs d;
  d.q = DeviceBuffer::from(in.q);
  if (!in.q_scales.empty()) d.q_scales = DeviceBuffer::from(in.q_scales);
  d.kv_cache = DeviceBuffer::from(in.kv_cache);
  d.weights = DeviceBuffer::from(in.weights);
  d.context_lens = DeviceBuffer::from(in.context_lens);
  d.block_table = DeviceBuffer::from(in.block_table);
  d.logits = DeviceBuffer(static_cast<std::size_t>(in.batch) * c.config.next_n * in.logits_stride * logit_bytes(c.config.logits));
  return d;
}

LogitsViews views(const DeviceInputs& d, const HostInputs& in, const LogitsCase& c) {
  const auto& cfg = c.config;
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * cfg.next_n;
  const bool mxfp4 = cfg.kv == KvFormat::mxfp4;
  const std::int64_t token = (mxfp4 ? cfg.head_dim / 2 : cfg.head_dim) + 4;
  LogitsViews v;
  if (mxfp4) {
    v.q = TensorView::contiguous(d.q.data(), DType::u8, {in.batch, cfg.next_n, cfg.heads, cfg.head_dim / 2});
    v.q_scales = TensorView::contiguous(d.q_scales.data(), DType::i32, {in.batch, cfg.next_n, cfg.heads});
  } else {
    v.q = TensorView::contiguous(d.q.data(), DType::fp8_e4m3, {in.batch, cfg.next_n, cfg.heads, cfg.head_dim});
  }
  v.kv_cache = TensorView::contiguous(d.kv_cache.data(), DType::u8, {in.num_blocks, cfg.block_size, 1, token})
                   .with_strides({in.block_stride, token, token, 1});
  v.weights = TensorView::contiguous(d.weights.data(), DType::f32, {rows, cfg.heads});
  v.context_lens = c.lens_2d ? TensorView::contiguous(d.context_lens.data(), DType::i32, {in.batch, cfg.next_n})
                             : TensorView::contiguous(d.context_lens.data(), DType::i32, {in.batch});
  v.block_table = TensorView::contiguous(d.block_table.data(), DType::i32, {in.batch, in.max_blocks});
  v.logits =
      TensorView::contiguous(d.logits.data(), tensor_dtype(cfg.logits), {rows, in.width}).with_strides({in.logits_stride, 1});
  return v;
}

namespace {

// The sm90 kernel's MXFP4 operands (kernels/mxfp4_e4m3.cuh): value i of a vector (packed, exponents)
// is exact in E4M3 after the shift by its group's 2^(e_g - M + 6) unless the group lies more than 14
// binades below the vector's largest, where it is rounded to a multiple of 2^-9 (times the vector's
// factor 2^(M - 133)): at most half of that away. Returns that bound (0 where exact).
double mxfp4_fold_error(std::int32_t exponents, int i) {
  const auto e = static_cast<std::uint32_t>(exponents);
  int largest = 0;
  for (int g = 0; g < 4; ++g) largest = std::max(largest, static_cast<int>((e >> (8 * g)) & 0xffu));
  const int own = static_cast<int>((e >> (8 * (i / 32))) & 0xffu);
  return largest - own > 14 ? std::ldexp(1.0, -10 + largest - 133) : 0.0;
}

// tensor_core_bound for the MXFP4 cache: the same model on the exact values (the shifts by powers of two
// commute with it), plus what the conversion to E4M3 may move each product by.
double mxfp4_tensor_core_bound(const LogitsCase& c, const HostInputs& in, std::int64_t r, const std::uint8_t* block,
                               std::int64_t token) {
  const auto& cfg = c.config;
  const int values = cfg.head_dim / 2;
  const std::uint8_t* key = block + token * values;
  std::int32_t key_exponents;
  std::memcpy(&key_exponents, block + cfg.block_size * values + token * 4, sizeof key_exponents);
  const double unit = kMmaSliceAddends * std::ldexp(1.0, -kMmaKeptBits);
  double total = 0.0;
  for (int h = 0; h < cfg.heads; ++h) {
    const std::uint8_t* q = in.q.data() + (r * cfg.heads + h) * values;
    const std::int32_t q_exponents = in.q_scales[static_cast<std::size_t>(r * cfg.heads + h)];
    double acc = 0.0, err = 0.0;
    for (int slice = 0; slice < cfg.head_dim; slice += 32) {
      double largest = std::fabs(acc) + err;
      for (int d = slice; d < slice + 32; ++d) {
        const double qd = reference::mxfp4_value(q, q_exponents, d), kd = reference::mxfp4_value(key, key_exponents, d);
        const double dq = mxfp4_fold_error(q_exponents, d), dk = mxfp4_fold_error(key_exponents, d);
        const double product = qd * kd;
        largest = std::max(largest, std::fabs(product) + std::fabs(qd) * dk + std::fabs(kd) * dq + dq * dk);
        err += std::fabs(qd) * dk + std::fabs(kd) * dq + dq * dk;
        acc += product;
      }
      err += unit * largest;
    }
    total += std::fabs(in.weights[r * cfg.heads + h]) * err;
  }
  return total;
}

}  // namespace

double tensor_core_bound(const LogitsCase& c, const HostInputs& in, std::int64_t r, std::int64_t s) {
  const auto& cfg = c.config;
  const std::int64_t b = r / cfg.next_n;
  const std::int64_t slot = s / cfg.block_size;
  if (slot >= in.max_blocks) return 0.0;
  const std::int64_t block_id = in.block_table[b * in.max_blocks + slot];
  if (block_id < 0 || block_id >= in.num_blocks) return 0.0;
  const std::uint8_t* block = in.kv_cache.data() + block_id * in.block_stride;
  if (cfg.kv == KvFormat::mxfp4) return mxfp4_tensor_core_bound(c, in, r, block, s % cfg.block_size);
  const std::uint8_t* key = block + (s % cfg.block_size) * cfg.head_dim;
  float scale;
  std::memcpy(&scale, block + cfg.block_size * cfg.head_dim + (s % cfg.block_size) * 4, sizeof scale);
  const double unit = kMmaSliceAddends * std::ldexp(1.0, -kMmaKeptBits);
  double total = 0.0;
  for (int h = 0; h < cfg.heads; ++h) {
    const std::uint8_t* q = in.q.data() + (r * cfg.heads + h) * cfg.head_dim;
    double acc = 0.0, err = 0.0;
    for (int slice = 0; slice < cfg.head_dim; slice += 32) {
      double largest = std::fabs(acc) + err;  // the hardware accumulator, at most this far from acc
      for (int d = slice; d < slice + 32; ++d) {
        const double product = static_cast<double>(reference::fp8_e4m3_to_float(q[d])) * reference::fp8_e4m3_to_float(key[d]);
        largest = std::max(largest, std::fabs(product));
        acc += product;
      }
      err += unit * largest;
    }
    total += std::fabs(in.weights[r * cfg.heads + h]) * err;
  }
  return total * scale;
}

Comparison compare_logits(const LogitsCase& c, const HostInputs& in, const std::vector<std::uint8_t>& gpu) {
  Comparison out;
  std::vector<double> magnitude;
  const std::vector<double> ref = paged_mqa_logits_reference(in.reference_view(c), &magnitude);
  const auto& cfg = c.config;
  // FP32 rounding of any summation order: (H + D + 4) * 2^-24 of the magnitude. The sm90 kernel's dot
  // products come from FP8 tensor cores, whose accumulation is narrower than FP32: where FP32 rounding
  // alone does not cover a logit, the bound of the probed tensor-core model (tensor_core_bound) is added.
  PagedMqaLogitsConfig ran = cfg;
  ran.arch = current_device_arch();  // automatic resolves against the GPU the case ran on
  const bool tensor_core = ran.resolved().variant == PagedMqaLogitsVariant::sm90;
  const double gamma = (cfg.heads + cfg.head_dim + 4) * std::ldexp(1.0, -24);
  double sxy = 0.0, sxx_yy = 0.0;
  auto fail = [&](std::int64_t r, std::int64_t s, const std::string& what) {
    if (out.passed) out.failure = fmt::format("{} (row {}, column {}) in case {}", what, r, s, describe(c));
    out.passed = false;
  };
  const auto ref_view = in.reference_view(c);
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(in.batch) * cfg.next_n; ++r) {
    const std::int64_t len = reference::row_length(ref_view, static_cast<int>(r / cfg.next_n), static_cast<int>(r % cfg.next_n));
    for (std::int64_t s = 0; s < in.logits_stride; ++s) {
      const std::size_t gi = static_cast<std::size_t>(r * in.logits_stride + s);
      if (s >= in.width) {  // row padding: never written
        if (!is_poison(gpu, gi, cfg.logits)) fail(r, s, "the kernel wrote into the row padding");
        continue;
      }
      const double got = read_logit(gpu, gi, cfg.logits);
      if (s >= len) {
        if (c.fill_masked ? !(std::isinf(got) && got < 0) : !is_poison(gpu, gi, cfg.logits))
          fail(r, s, fmt::format("masked column holds {} (expected {})", got, c.fill_masked ? "-inf" : "the poison"));
        continue;
      }
      const double want = ref[static_cast<std::size_t>(r * in.width + s)];
      ++out.checked;
      if (std::isnan(want) || std::isnan(got)) {
        if (std::isnan(want) != std::isnan(got)) fail(r, s, fmt::format("got {}, reference {}", got, want));
        continue;
      }
      // FP32 rounding moves the score by at most err; rounding to the stored dtype is monotone, so the
      // stored value lies between the rounded ends of [want - err, want + err].
      const double mag = magnitude[static_cast<std::size_t>(r * in.width + s)];
      double err = gamma * mag;
      if (mag > 0 && std::isfinite(got) && std::isfinite(want))
        out.worst_error =
            std::max(out.worst_error, std::fabs(got - reference::round_to(cfg.logits, static_cast<float>(want))) / mag);
      double lo = reference::round_to(cfg.logits, static_cast<float>(want - err));
      double hi = reference::round_to(cfg.logits, static_cast<float>(want + err));
      if (tensor_core && !(got >= lo && got <= hi)) {
        err += tensor_core_bound(c, in, r, s);
        lo = reference::round_to(cfg.logits, static_cast<float>(want - err));
        hi = reference::round_to(cfg.logits, static_cast<float>(want + err));
        if (cfg.logits == LogitsDType::f32 && std::isfinite(got) && std::isfinite(want))
          out.worst_bound_fraction = std::max(out.worst_bound_fraction, std::fabs(got - want) / err);
      }
      if (!(got >= lo && got <= hi))
        fail(r, s, fmt::format("got {:.9g}, reference {:.9g}, allowed [{:.9g}, {:.9g}]", got, want, lo, hi));
      if (std::isfinite(got) && std::isfinite(want)) {
        sxy += got * want;
        sxx_yy += got * got + want * want;
      }
    }
  }
  out.diff = sxx_yy > 0 ? 1.0 - 2.0 * sxy / sxx_yy : 0.0;
  if (cfg.logits == LogitsDType::f32 && out.diff >= 5e-6) fail(-1, -1, fmt::format("diff metric {:.3g} >= 5e-6", out.diff));
  return out;
}

std::vector<std::int32_t> histogram_of(const LogitsCase& c, const HostInputs& in, const std::vector<std::uint8_t>& gpu) {
  const auto ref_view = in.reference_view(c);
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * c.config.next_n;
  std::vector<double> stored(static_cast<std::size_t>(rows * in.logits_stride));
  for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = read_logit(gpu, i, c.config.logits);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    lengths[r] = reference::row_length(ref_view, static_cast<int>(r / c.config.next_n), static_cast<int>(r % c.config.next_n));
  std::vector<std::int32_t> hist;
  reference::add_coarse_histogram(stored, in.logits_stride, lengths, c.config.logits, hist);
  return hist;
}

namespace {

std::vector<std::uint8_t> launch_and_download(GpuSession& gpu, const LogitsCase& c, DeviceInputs& d, const LogitsViews& v,
                                              const TensorView& histogram) {
  d.logits.fill(kPoison);
  PagedMqaLogitsOptions options;
  options.fill_masked = c.fill_masked;
  options.histogram = histogram;
  options.variant = c.config.variant;
  options.q_scales = v.q_scales;
  if (c.blocks_per_split > 0 || c.ranges_ctas > 0) {
    // The op's own steps (runtime/paged_mqa_logits_call.hpp) with the split replaced, on the call's own
    // next_n kernel (not flattened into next_n = 1 rows where the op may choose: the cases without a
    // forced split test that, sm90_flattened; a configuration without a kernel of its own,
    // kernels::sm90_n_wide, is always those rows).
    const PagedMqaLogitsCall call =
        check_paged_mqa_logits("paged_mqa_logits", v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, options);
    PagedMqaLogitsLaunch launch = prepare_paged_mqa_logits("paged_mqa_logits", call, gpu.stream(), false);
    if (c.blocks_per_split > 0) {
      if (!launch.sm90 || c.blocks_per_split > kernels::kSm90MaxBlocksPerSplit)
        throw Error(fmt::format("LogitsCase::blocks_per_split {}: the sm90 kernel with at most {} blocks per CTA only",
                                c.blocks_per_split, kernels::kSm90MaxBlocksPerSplit));
      set_blocks_per_split(launch, call, c.blocks_per_split);
      if (c.fill_before_barrier >= 0) launch.sm90_params.fill_before_barrier = c.fill_before_barrier;
    }
    if (c.ranges_ctas > 0) {
      if (!takes_ranges(launch, call))
        throw Error(fmt::format("LogitsCase::ranges_ctas {}: only for the kernels that take ranges", c.ranges_ctas));
      set_ranges(launch, static_cast<unsigned>(c.ranges_ctas));
    }
    enqueue(launch, gpu.stream());
  } else {
    paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, gpu.stream(), options);
  }
  gpu.synchronize();
  return d.logits.to_host<std::uint8_t>(d.logits.bytes());
}

}  // namespace

std::vector<std::uint8_t> logits_bytes(GpuSession& gpu, const LogitsCase& c, DeviceInputs& d, const LogitsViews& v) {
  return launch_and_download(gpu, c, d, v, {});
}

Comparison run_logits_case(GpuSession& gpu, const LogitsCase& c) {
  const HostInputs in = make_inputs(c);
  DeviceInputs d = upload(in, c);
  const LogitsViews v = views(d, in, c);
  if (!c.config.histogram) return compare_logits(c, in, launch_and_download(gpu, c, d, v, {}));

  // Histogram kernel: the logits as without it, bitwise; the counts those of the stored logits; a
  // second call adds the same counts again.
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * c.config.next_n;
  DeviceBuffer hist_buffer(static_cast<std::size_t>(rows) * kCoarseBins * 4);
  hist_buffer.fill(0);
  const TensorView hist = TensorView::contiguous(hist_buffer.data(), DType::i32, {rows, kCoarseBins});
  const std::vector<std::uint8_t> with = launch_and_download(gpu, c, d, v, hist);
  Comparison out = compare_logits(c, in, with);
  auto fail = [&](const std::string& what) {
    if (out.passed) out.failure = fmt::format("{} in case {}", what, describe(c));
    out.passed = false;
  };
  const std::vector<std::int32_t> want = histogram_of(c, in, with);
  const auto once = hist_buffer.to_host<std::int32_t>(want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    if (once[i] != want[i]) {
      fail(fmt::format("histogram row {} bin {}: GPU {}, reference {}", i / kCoarseBins, i % kCoarseBins, once[i], want[i]));
      break;
    }
  if (launch_and_download(gpu, c, d, v, hist) != with) fail("a second call with the histogram changed the logits");
  const auto twice = hist_buffer.to_host<std::int32_t>(want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    if (twice[i] != 2 * want[i]) {
      fail(fmt::format("histogram row {} bin {} after two calls: {}, expected {}", i / kCoarseBins, i % kCoarseBins, twice[i],
                       2 * want[i]));
      break;
    }
  LogitsCase without = c;
  without.config.histogram = false;
  if (launch_and_download(gpu, without, d, v, {}) != with) fail("the logits differ with and without the histogram");
  return out;
}

}  // namespace flash_indexer::check
