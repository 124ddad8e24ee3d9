#pragma once
// Plain CPU references of the kernels, for our tests and for users who check their integration.
// Header-only and free of CUDA: everything here runs on the host, on host memory.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/dcp.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"

namespace flash_indexer::reference {

// ---- number formats -------------------------------------------------------------------------

// FP8 E4M3 (OCP E4M3FN: no infinities; 0x7f / 0xff are NaN), exact.
inline float fp8_e4m3_to_float(std::uint8_t byte) {
  const int exponent = (byte >> 3) & 0xf;
  const int mantissa = byte & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  else magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return (byte & 0x80) ? -magnitude : magnitude;
}

// FP4 E2M1 (OCP MX: no infinities, no NaN), the low 4 bits of `nibble`, exact: 0, 0.5, 1, 1.5, 2, 3, 4,
// 6 and their negatives.
inline float fp4_e2m1_to_float(std::uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[nibble & 7u];
  return (nibble & 8u) ? -m : m;
}

// UE8M0 (OCP MX scale): 2^(byte - 127), exact in double; 0xFF is NaN.
inline double ue8m0_to_double(std::uint8_t byte) {
  return byte == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(byte) - 127);
}

// Element i of an MXFP4 vector (contract §2.2): `packed` holds two E2M1 values a byte, low nibble first;
// `scales` packs the UE8M0 exponent of each 32 consecutive elements, byte 0 (the lowest) for 0..31.
inline double mxfp4_value(const std::uint8_t* packed, std::int32_t scales, int i) {
  const std::uint8_t nibble = static_cast<std::uint8_t>(packed[i / 2] >> (4 * (i % 2)));
  const std::uint8_t exponent = static_cast<std::uint8_t>(static_cast<std::uint32_t>(scales) >> (8 * (i / 32)));
  return static_cast<double>(fp4_e2m1_to_float(nibble)) * ue8m0_to_double(exponent);
}

// The E2M1 nibble nearest to x (ties to the even code; beyond 6 saturates to +-6; NaN is not expected).
inline std::uint8_t e2m1_nibble_of(float x) {
  const float a = std::fabs(x);
  std::uint8_t best = 0;
  for (std::uint8_t code = 1; code < 8; ++code) {
    const float d = std::fabs(fp4_e2m1_to_float(code) - a), best_d = std::fabs(fp4_e2m1_to_float(best) - a);
    if (d < best_d || (d == best_d && (code & 1u) == 0)) best = code;
  }
  return static_cast<std::uint8_t>(best | (std::signbit(x) && best != 0 ? 8u : 0u));
}

// Quantizes n (a multiple of 32, at most 128) values to MXFP4 the usual way (OCP MX): per 32 values the
// exponent 2^e with e = ceil(log2(amax / 6)) (so the largest fits E2M1's 6), clamped to UE8M0's
// -127..127, each value the nearest E2M1 of x / 2^e. `packed` gets n / 2 bytes, low nibble first;
// the result packs the exponent bytes, group 0 in the lowest (contract §2.2).
inline std::int32_t mxfp4_quantize(const float* x, int n, std::uint8_t* packed) {
  std::uint32_t scales = 0;
  for (int g = 0; g * 32 < n; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[g * 32 + i]));
    int e = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / 6.0))) : -127;
    e = std::clamp(e, -127, 127);
    scales |= static_cast<std::uint32_t>(e + 127) << (8 * g);
    for (int i = 0; i < 32; i += 2) {
      const std::uint8_t lo = e2m1_nibble_of(static_cast<float>(std::ldexp(static_cast<double>(x[g * 32 + i]), -e)));
      const std::uint8_t hi = e2m1_nibble_of(static_cast<float>(std::ldexp(static_cast<double>(x[g * 32 + i + 1]), -e)));
      packed[(g * 32 + i) / 2] = static_cast<std::uint8_t>(lo | hi << 4);
    }
  }
  return static_cast<std::int32_t>(scales);
}

// FP32 -> FP16 bits, round to nearest even (the one definition lives in coarse_bins.hpp).
inline std::uint16_t float_to_f16_bits(float x) { return flash_indexer::float_to_f16_bits(x); }

inline float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const int exponent = (h >> 10) & 0x1f;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(exponent + 112) << 23) | (mantissa << 13));
}

// FP32 -> BF16 bits, round to nearest even; NaN stays NaN.
inline std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// The value a logit of dtype `t` holds after the FP32 score is stored (round to nearest even).
inline float round_to(LogitsDType t, float x) {
  switch (t) {
    case LogitsDType::f16: return f16_bits_to_float(float_to_f16_bits(x));
    case LogitsDType::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case LogitsDType::f32: return x;
  }
  return x;
}

// Logit `index` of a buffer of dtype `t`, widened to float (the value as stored).
inline float load_logit(LogitsDType t, const void* data, std::size_t index) {
  if (t == LogitsDType::f32) {
    float v;
    std::memcpy(&v, static_cast<const unsigned char*>(data) + index * 4, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, static_cast<const unsigned char*>(data) + index * 2, 2);
  return t == LogitsDType::f16 ? f16_bits_to_float(h) : bf16_bits_to_float(h);
}

// ---- the score (contract §1) -------------------------------------------------------------------

// sum_h w[h] * max(0, sum_d query[h, d] * key[d]) in double precision, before the key scale; `bound`
// receives sum_h |w[h]| * sum_d |query[h, d] * key[d]|. A NaN dot (NaN in q or k) counts as 0, as
// fmaxf does in the kernels.
// `key(d)` is the key's element d, dequantized.
template <class Key>
inline double head_sum_of(const std::vector<double>& query, const Key& key, const float* weights, int heads, int head_dim,
                          double& bound) {
  double sum = 0.0;
  bound = 0.0;
  for (int h = 0; h < heads; ++h) {
    double dot = 0.0, dot_bound = 0.0;
    for (int d = 0; d < head_dim; ++d) {
      const double product = query[h * head_dim + d] * key(d);
      dot += product;
      dot_bound += std::fabs(product);
    }
    const double w = weights[h];
    sum += w * std::fmax(dot, 0.0);
    bound += std::fabs(w) * dot_bound;
  }
  return sum;
}

// The same for an FP8 E4M3 key.
inline double head_sum(const std::vector<double>& query, const std::uint8_t* key, const float* weights, int heads, int head_dim,
                       double& bound) {
  return head_sum_of(
      query, [key](int d) { return static_cast<double>(fp8_e4m3_to_float(key[d])); }, weights, heads, head_dim, bound);
}

// ---- paged MQA logits (contract §1, §2, §5) ------------------------------------------------------

// Host copies of the op's inputs, laid out exactly as on the device.
using KvFormat = flash_indexer::KvFormat;  // FP8 with FP32 token scales, or MXFP4 (contract §2.2)

struct PagedMqaLogitsInputs {
  KvFormat kv = KvFormat::fp8;
  int batch = 0;
  int next_n = 1;
  int heads = 0;
  int head_dim = 0;
  int block_size = 64;
  int num_blocks = 0;
  std::int64_t kv_block_stride = 0;  // bytes
  const std::uint8_t* q = nullptr;   // FP8 [B, next_n, H, D]; MXFP4: packed [B, next_n, H, D / 2]
  const std::int32_t* q_scales = nullptr;  // MXFP4 only: [B, next_n, H], four UE8M0 exponents each
  const std::uint8_t* kv_cache = nullptr;
  const float* weights = nullptr;        // [B * next_n, H]
  const std::int32_t* context_lens = nullptr;
  bool lens_2d = true;                   // [B, next_n] or [B]
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_stride = 0;   // elements
  int max_blocks = 0;
  std::int64_t width = 0;
};

// Number of keys row r = b * next_n + j sees (contract §1), clamped to [0, width] as the kernel does.
inline std::int64_t row_length(const PagedMqaLogitsInputs& in, int b, int j) {
  std::int64_t len = in.lens_2d ? in.context_lens[static_cast<std::int64_t>(b) * in.next_n + j]
                                : static_cast<std::int64_t>(in.context_lens[b]) - in.next_n + j + 1;
  if (len < 0) len = 0;
  if (len > in.width) len = in.width;
  return len;
}

// Query row r (= b * next_n + j) dequantized, [H, D].
inline void paged_query(const PagedMqaLogitsInputs& in, std::int64_t r, std::vector<double>& query) {
  const bool mxfp4 = in.kv == KvFormat::mxfp4;
  const std::int64_t token_bytes = mxfp4 ? in.head_dim / 2 : in.head_dim;
  query.assign(static_cast<std::size_t>(in.heads) * in.head_dim, 0.0);
  for (int h = 0; h < in.heads; ++h)
    for (int d = 0; d < in.head_dim; ++d) {
      const std::int64_t row = r * in.heads + h;
      query[static_cast<std::size_t>(h) * in.head_dim + d] =
          mxfp4 ? mxfp4_value(in.q + row * token_bytes, in.q_scales[row], d)
                : static_cast<double>(fp8_e4m3_to_float(in.q[row * in.head_dim + d]));
    }
}

// The score of position s (0 <= s, below the row's length) for query row b * next_n + j, whose
// dequantized query is `query` (paged_query): NaN where the position has no valid block (slot past
// max_blocks, id outside the cache). `bound` receives kv_scale * sum_h |w| * sum_d |q * k|.
inline double paged_logit(const PagedMqaLogitsInputs& in, int b, int j, const std::vector<double>& query, std::int64_t s,
                          double& bound) {
  const bool mxfp4 = in.kv == KvFormat::mxfp4;
  const std::int64_t token_bytes = mxfp4 ? in.head_dim / 2 : in.head_dim;  // a token's values in a block
  const std::int64_t r = static_cast<std::int64_t>(b) * in.next_n + j;
  const std::int64_t slot = s / in.block_size;
  const std::int64_t block_id = slot < in.max_blocks ? in.block_table[b * in.block_table_stride + slot] : -1;
  bound = 0.0;
  if (block_id < 0 || block_id >= in.num_blocks) return std::numeric_limits<double>::quiet_NaN();
  const std::uint8_t* block = in.kv_cache + block_id * in.kv_block_stride;
  const std::uint8_t* key = block + (s % in.block_size) * token_bytes;
  const std::uint8_t* tail = block + in.block_size * token_bytes + (s % in.block_size) * 4;  // FP32 scale / exponents
  double sum;
  float scale = 1.0f;  // an MXFP4 key has no FP32 scale
  if (mxfp4) {
    std::int32_t exponents;
    std::memcpy(&exponents, tail, sizeof exponents);
    sum = head_sum_of(
        query, [&](int d) { return mxfp4_value(key, exponents, d); }, in.weights + r * in.heads, in.heads, in.head_dim, bound);
  } else {
    std::memcpy(&scale, tail, sizeof scale);
    sum = head_sum(query, key, in.weights + r * in.heads, in.heads, in.head_dim, bound);
  }
  bound *= scale;
  return sum * scale;
}

// logits[r * width + s] in double precision from the dequantized inputs. Columns s >= len(r) hold -inf
// (what fill_masked writes); a key without a valid block (slot past max_blocks, id outside the cache)
// is NaN, as the kernel writes it. With in.kv = mxfp4 the query and the keys are MXFP4, dequantized
// exactly (E2M1 times the element's UE8M0 exponent; an 0xFF exponent makes the value NaN, and so the
// head's dot NaN, which counts as 0), and there is no FP32 key scale.
// `magnitude`, when given, receives kv_scale * sum_h |w| * sum_d |q * k| per logit: a bound on every
// partial sum, so FP32 rounding error of any summation order is at most (H + D) * 2^-24 times it.
inline std::vector<double> paged_mqa_logits(const PagedMqaLogitsInputs& in, std::vector<double>* magnitude = nullptr) {
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * in.next_n;
  std::vector<double> out(static_cast<std::size_t>(rows * in.width), -std::numeric_limits<double>::infinity());
  std::vector<double> query;
  if (magnitude != nullptr) magnitude->assign(out.size(), 0.0);
  for (int b = 0; b < in.batch; ++b) {
    for (int j = 0; j < in.next_n; ++j) {
      const std::int64_t r = static_cast<std::int64_t>(b) * in.next_n + j;
      paged_query(in, r, query);
      const std::int64_t len = row_length(in, b, j);
      for (std::int64_t s = 0; s < len; ++s) {
        double bound;
        out[static_cast<std::size_t>(r * in.width + s)] = paged_logit(in, b, j, query, s, bound);
        if (magnitude != nullptr) (*magnitude)[static_cast<std::size_t>(r * in.width + s)] = bound;
      }
    }
  }
  return out;
}

// ---- ragged (prefill) MQA logits (contract §1.4) -----------------------------------------------

// Host copies of the prefill op's inputs: T query tokens against one contiguous FP8 key buffer.
struct MqaLogitsInputs {
  int tokens = 0;  // T
  int heads = 0;
  int head_dim = 0;
  std::int64_t keys = 0;                // N
  const std::uint8_t* q = nullptr;      // FP8 E4M3 [T, H, D]
  const std::uint8_t* kv = nullptr;     // FP8 E4M3 [N, D], row stride kv_stride bytes
  std::int64_t kv_stride = 0;           // bytes; 0: head_dim
  const float* kv_scales = nullptr;     // [N]
  const float* weights = nullptr;       // [T, H]
  const std::int32_t* ks = nullptr;     // [T]: token t scores keys [ks[t], ke[t])
  const std::int32_t* ke = nullptr;     // [T]
};

// Token t's window [start, end), clamped to [0, N]; empty when end <= start.
struct KeyWindow {
  std::int64_t start = 0, end = 0;
};
inline KeyWindow key_window(const MqaLogitsInputs& in, int t) {
  const std::int64_t start = std::clamp<std::int64_t>(in.ks[t], 0, in.keys);
  const std::int64_t end = std::clamp<std::int64_t>(in.ke[t], 0, in.keys);
  return {start, std::max(start, end)};
}

// logits[t * N + s] in double precision, the score of contract §1 (the same sum, ReLU and NaN rules as
// paged_mqa_logits) for s in token t's window, -inf elsewhere (what fill_masked writes). `magnitude`,
// when given, receives kv_scale * sum_h |w| * sum_d |q * k| per logit, as for the paged op.
inline std::vector<double> mqa_logits(const MqaLogitsInputs& in, std::vector<double>* magnitude = nullptr) {
  const std::int64_t n = in.keys;
  const std::int64_t stride = in.kv_stride != 0 ? in.kv_stride : in.head_dim;
  std::vector<double> out(static_cast<std::size_t>(in.tokens * n), -std::numeric_limits<double>::infinity());
  std::vector<double> query(static_cast<std::size_t>(in.heads) * in.head_dim);
  if (magnitude != nullptr) magnitude->assign(out.size(), 0.0);
  for (int t = 0; t < in.tokens; ++t) {
    for (std::size_t i = 0; i < query.size(); ++i) query[i] = fp8_e4m3_to_float(in.q[t * query.size() + i]);
    const KeyWindow window = key_window(in, t);
    for (std::int64_t s = window.start; s < window.end; ++s) {
      double bound;
      const double sum =
          head_sum(query, in.kv + s * stride, in.weights + static_cast<std::int64_t>(t) * in.heads, in.heads, in.head_dim, bound);
      out[static_cast<std::size_t>(t * n + s)] = sum * in.kv_scales[s];
      if (magnitude != nullptr) (*magnitude)[static_cast<std::size_t>(t * n + s)] = bound * in.kv_scales[s];
    }
  }
  return out;
}

// The compressed layout (MqaLogitsOptions::compressed) of `full` = mqa_logits(in): [T, width], row t's
// column c the logit of key start_t + c where that key is in the window (and c < width), -inf elsewhere.
inline std::vector<double> compressed_mqa_logits(const MqaLogitsInputs& in, const std::vector<double>& full, std::int64_t width) {
  std::vector<double> out(static_cast<std::size_t>(in.tokens * width), -std::numeric_limits<double>::infinity());
  for (int t = 0; t < in.tokens; ++t) {
    const KeyWindow window = key_window(in, t);
    for (std::int64_t c = 0; c < width && window.start + c < window.end; ++c)
      out[static_cast<std::size_t>(t * width + c)] = full[static_cast<std::size_t>(t * in.keys + window.start + c)];
  }
  return out;
}

// ---- coarse score histogram (contract §3) -----------------------------------------------------

// Adds, for each row r, the coarse bins of its live (s < lengths[r]), non-NaN scores, each rounded to
// `stored` first (the histogram describes the logits as stored), into hist[r * 1024 + bin].
// `logits` is [rows, width] in double precision, as paged_mqa_logits() returns it.
inline void add_coarse_histogram(const std::vector<double>& logits, std::int64_t width, const std::vector<std::int64_t>& lengths,
                                 LogitsDType stored, std::vector<std::int32_t>& hist) {
  hist.resize(lengths.size() * kCoarseBins, 0);
  for (std::size_t r = 0; r < lengths.size(); ++r)
    for (std::int64_t s = 0; s < lengths[r] && s < width; ++s) {
      const float value = round_to(stored, static_cast<float>(logits[r * width + s]));
      if (!std::isnan(value)) ++hist[r * kCoarseBins + coarse_bin(value)];
    }
}

// ---- top-k selection (contract §4) -------------------------------------------------------------

struct TopkResult {
  std::vector<std::int32_t> indices;  // [rows, k]; -1 pads rows with fewer than k selectable columns
  std::vector<float> values;          // [rows, k]; -inf in the padding
};

// The exact top-k of each row's window [starts[r], ends[r]) (clamped to [0, width]; empty when
// ends <= starts), with the rules of topk(): larger first, NaN never, -0 equal to +0, equal scores to
// the lower column. Indices are absolute columns, or relative to the window's start with `relative`
// (what vLLM's prefill consumer takes); -1 pads. Unsorted rows come in selection order, `sorted` rows
// in ascending column order.
inline TopkResult topk_windows(const std::vector<float>& logits, std::int64_t stride, std::int64_t width,
                               const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends, int k,
                               bool relative, bool sorted) {
  TopkResult out;
  out.indices.assign(starts.size() * k, -1);
  out.values.assign(starts.size() * k, -std::numeric_limits<float>::infinity());
  std::vector<std::int32_t> columns;
  for (std::size_t r = 0; r < starts.size(); ++r) {
    const float* row = logits.data() + r * stride;
    const std::int64_t start = std::clamp<std::int64_t>(starts[r], 0, width);
    const std::int64_t end = std::max(start, std::clamp<std::int64_t>(ends[r], 0, width));
    columns.clear();
    for (std::int64_t s = start; s < end; ++s)
      if (!std::isnan(row[s])) columns.push_back(static_cast<std::int32_t>(s));
    const auto better = [row](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    const std::size_t taken = std::min<std::size_t>(columns.size(), k);
    std::partial_sort(columns.begin(), columns.begin() + taken, columns.end(), better);
    columns.resize(taken);
    if (sorted) std::sort(columns.begin(), columns.end());
    for (std::size_t i = 0; i < taken; ++i) {
      out.indices[r * k + i] = static_cast<std::int32_t>(columns[i] - (relative ? start : 0));
      out.values[r * k + i] = row[columns[i]];
    }
  }
  return out;
}

// The exact top-k of each row of `logits` (values as stored, widened to float; row r starts at
// r * stride and has lengths[r] live columns, clamped to [0, width]): larger first, NaN never, -0 equal
// to +0, equal scores to the lower column. Unsorted rows come in that selection order (score
// descending); `sorted` rows in ascending column order.
inline TopkResult topk(const std::vector<float>& logits, std::int64_t stride, std::int64_t width,
                       const std::vector<std::int64_t>& lengths, int k, bool sorted) {
  return topk_windows(logits, stride, width, std::vector<std::int64_t>(lengths.size(), 0), lengths, k, false, sorted);
}

// ---- decode context parallel (contract §7) -------------------------------------------------------

// The exact global top-k from `ranks` ranks' candidates: values and global positions, each
// [ranks, rows, k_in] (a rank's local top-k with its columns mapped by dcp_global_position; -1 pads),
// with the rules of topk(): larger first, NaN never, -0 equal to +0, equal scores to the lower global
// position; -1 pads rows with fewer than k candidates. Unsorted rows come in selection order, `sorted`
// rows in ascending position.
inline TopkResult topk_merge(const std::vector<float>& values, const std::vector<std::int32_t>& positions, int ranks,
                             std::int64_t rows, int k_in, int k, bool sorted) {
  TopkResult out;
  out.indices.assign(static_cast<std::size_t>(rows) * k, -1);
  out.values.assign(static_cast<std::size_t>(rows) * k, -std::numeric_limits<float>::infinity());
  struct Candidate {
    float value;
    std::int32_t position;
  };
  std::vector<Candidate> pool;
  for (std::int64_t r = 0; r < rows; ++r) {
    pool.clear();
    for (int d = 0; d < ranks; ++d)
      for (int i = 0; i < k_in; ++i) {
        const std::size_t at = (static_cast<std::size_t>(d) * rows + r) * k_in + i;
        if (positions[at] >= 0 && !std::isnan(values[at])) pool.push_back({values[at], positions[at]});
      }
    const auto better = [](const Candidate& a, const Candidate& b) {
      return a.value > b.value || (a.value == b.value && a.position < b.position);
    };
    const std::size_t taken = std::min<std::size_t>(pool.size(), k);
    std::partial_sort(pool.begin(), pool.begin() + taken, pool.end(), better);
    pool.resize(taken);
    if (sorted)
      std::sort(pool.begin(), pool.end(), [](const Candidate& a, const Candidate& b) { return a.position < b.position; });
    for (std::size_t i = 0; i < taken; ++i) {
      out.indices[r * k + i] = pool[i].position;
      out.values[r * k + i] = pool[i].value;
    }
  }
  return out;
}

// The positions of a merged top-k that rank `layout.rank` holds, as its local columns (for its own
// sparse attention), in the merged order; -1 pads.
inline std::vector<std::int32_t> dcp_owned(const std::vector<std::int32_t>& indices, std::int64_t rows, int k,
                                           const DcpLayout& layout) {
  std::vector<std::int32_t> out(indices.size(), -1);
  for (std::int64_t r = 0; r < rows; ++r) {
    int n = 0;
    for (int i = 0; i < k; ++i) {
      const std::int32_t p = indices[r * k + i];
      if (p >= 0 && dcp_owner(p, layout.ranks, layout.interleave) == layout.rank)
        out[r * k + n++] = static_cast<std::int32_t>(dcp_local_column(p, layout.ranks, layout.interleave));
    }
  }
  return out;
}

// ---- two-level indexing (DeepSeek-V4.1; docs/design/two-level.md) -----------------------------------

// First level: each row's `k_blocks` best blocks of `block` consecutive positions, ranked by the largest
// live score in them. Block i of row r covers positions [i * block, min((i + 1) * block, lengths[r]))
// (lengths clamped to [0, width]); its maximum ignores NaN, and a block with no selectable score is
// never chosen. With `keep_newest` the row's last block (the one holding its newest keys) is taken
// first, whatever its scores, as DeepSeek-V4.1's publisher forces it in; the rest follow the rules of
// topk(): larger first, -0 equal to +0, equal maxima to the lower block. [rows, k_blocks] block ids in
// ascending order; -1 pads.
inline std::vector<std::int32_t> top_blocks(const std::vector<float>& logits, std::int64_t stride, std::int64_t width,
                                            const std::vector<std::int64_t>& lengths, int block, int k_blocks, bool keep_newest) {
  std::vector<std::int32_t> out(lengths.size() * k_blocks, -1);
  std::vector<float> maxima;
  std::vector<std::int32_t> ids;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    const float* row = logits.data() + r * stride;
    const std::int64_t len = std::clamp<std::int64_t>(lengths[r], 0, width);
    const std::int64_t blocks = (len + block - 1) / block;
    maxima.assign(static_cast<std::size_t>(blocks), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t s = 0; s < len; ++s) {
      float& m = maxima[static_cast<std::size_t>(s / block)];
      if (!std::isnan(row[s]) && (std::isnan(m) || row[s] > m)) m = row[s];
    }
    ids.clear();
    const bool newest = keep_newest && blocks > 0 && k_blocks > 0;
    for (std::int64_t i = 0; i < blocks - (newest ? 1 : 0); ++i)
      if (!std::isnan(maxima[static_cast<std::size_t>(i)])) ids.push_back(static_cast<std::int32_t>(i));
    const auto better = [&](std::int32_t a, std::int32_t b) {
      return maxima[a] > maxima[b] || (maxima[a] == maxima[b] && a < b);
    };
    const std::size_t taken = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(k_blocks - (newest ? 1 : 0)));
    std::partial_sort(ids.begin(), ids.begin() + taken, ids.end(), better);
    ids.resize(taken);
    if (newest) ids.push_back(static_cast<std::int32_t>(blocks - 1));
    std::sort(ids.begin(), ids.end());
    std::copy(ids.begin(), ids.end(), out.begin() + static_cast<std::ptrdiff_t>(r * k_blocks));
  }
  return out;
}

// Second level: the paged logits of each row over its candidate blocks only. `candidates` is [B *
// next_n, num_candidates] int32: blocks of `block` positions of the row's context (position / block),
// in any order. Column c * block + o of the result ([B * next_n, num_candidates * block], double) is the
// score of position p = candidates[r][c] * block + o (paged_mqa_logits' value there: NaN where the
// position has no valid KV block) when the candidate is one of the row's blocks (0 <= candidate <
// ceil(len / block)) and p < len; -inf otherwise: an invalid candidate (-1, negative, past the row) is
// never read. A candidate listed twice has its scores twice.
inline std::vector<double> sparse_paged_mqa_logits(const PagedMqaLogitsInputs& in, const std::int32_t* candidates,
                                                   int num_candidates, int block) {
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * in.next_n;
  const std::int64_t columns = static_cast<std::int64_t>(num_candidates) * block;
  std::vector<double> out(static_cast<std::size_t>(rows * columns), -std::numeric_limits<double>::infinity());
  std::vector<double> query;
  for (int b = 0; b < in.batch; ++b)
    for (int j = 0; j < in.next_n; ++j) {
      const std::int64_t r = static_cast<std::int64_t>(b) * in.next_n + j;
      paged_query(in, r, query);
      const std::int64_t len = row_length(in, b, j);
      for (int c = 0; c < num_candidates; ++c) {
        const std::int64_t candidate = candidates[r * num_candidates + c];
        if (candidate < 0 || candidate >= (len + block - 1) / block) continue;
        for (int o = 0; o < block; ++o) {
          const std::int64_t p = candidate * block + o;
          double bound;
          if (p < len) out[static_cast<std::size_t>(r * columns + c * block + o)] = paged_logit(in, b, j, query, p, bound);
        }
      }
    }
  return out;
}

// The context positions of a second-level top-k: `columns` ([rows, k], columns of the sparse logits, -1
// padding) mapped through the rows' candidates (column j is position candidates[r][j / block] * block
// + j % block); -1 stays -1.
inline std::vector<std::int32_t> sparse_positions(const std::vector<std::int32_t>& columns, int k, const std::int32_t* candidates,
                                                  int num_candidates, int block) {
  std::vector<std::int32_t> out(columns.size(), -1);
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const std::int32_t j = columns[i];
    if (j < 0) continue;
    const std::size_t r = i / static_cast<std::size_t>(k);
    out[i] = candidates[r * num_candidates + j / block] * block + j % block;
  }
  return out;
}

}  // namespace flash_indexer::reference
