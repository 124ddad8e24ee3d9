#include "paged_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"

namespace flash_indexer::bench {
namespace {

constexpr int kBlock = 64;

// Four UE8M0 exponents (one per 32 values) in an int32, each in 2^-4 .. 2^3.
std::int32_t random_exponents(std::mt19937_64& rng) {
  std::uint32_t e = 0;
  for (int g = 0; g < 4; ++g) e |= static_cast<std::uint32_t>(123 + rng() % 8) << (8 * g);
  return static_cast<std::int32_t>(e);
}

// 64 key tokens of N(0, 1) values, each quantized to E4M3 with the scale amax / 448 (DeepGEMM's test),
// or to MXFP4 (an exponent per 32 values, reference.hpp's mxfp4_quantize).
void normal_block(std::uint8_t* base, int head_dim, KvFormat kv, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(head_dim));
  const int value_bytes = kv == KvFormat::mxfp4 ? head_dim / 2 : head_dim;
  for (int t = 0; t < kBlock; ++t) {
    float amax = 0.0f;
    for (float& x : v) amax = std::max(amax, std::fabs(x = normal(rng)));
    if (kv == KvFormat::mxfp4) {
      const std::int32_t exponents = reference::mxfp4_quantize(v.data(), head_dim, base + t * value_bytes);
      std::memcpy(base + kBlock * value_bytes + 4 * t, &exponents, 4);
      continue;
    }
    const float scale = std::max(amax, 1e-4f) / 448.0f;
    for (int d = 0; d < head_dim; ++d) base[t * head_dim + d] = check::fp8_e4m3_nearest(v[d] / scale);
    std::memcpy(base + kBlock * head_dim + 4 * t, &scale, 4);
  }
}

// 4096 random blocks, replicated over the pool: valid FP8 keys and positive scales, or MXFP4 keys
// (every byte is two valid E2M1 values) and their exponents.
void fill_pool(check::DeviceBuffer& pool, std::int64_t blocks, std::int64_t block_bytes, int head_dim, KvFormat kv,
               std::mt19937_64& rng, PagedValues values) {
  const std::int64_t pattern_blocks = std::min<std::int64_t>(blocks, 4096);
  const int value_bytes = kv == KvFormat::mxfp4 ? head_dim / 2 : head_dim;
  std::vector<std::uint8_t> host(static_cast<std::size_t>(pattern_blocks * block_bytes));
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  for (std::int64_t b = 0; b < pattern_blocks; ++b) {
    std::uint8_t* base = host.data() + b * block_bytes;
    if (values == PagedValues::normal) {
      normal_block(base, head_dim, kv, rng);
      continue;
    }
    for (int i = 0; i < kBlock * value_bytes; i += 8) {
      std::uint64_t r = rng();
      for (int k = 0; k < 8; ++k, r >>= 8)
        base[i + k] = static_cast<std::uint8_t>(kv == KvFormat::fp8 && (r & 0x7f) == 0x7f ? 0x3c : r);
    }
    for (int t = 0; t < kBlock; ++t) {
      if (kv == KvFormat::mxfp4) {
        const std::int32_t e = random_exponents(rng);
        std::memcpy(base + kBlock * value_bytes + 4 * t, &e, 4);
      } else {
        const float s = scale(rng);
        std::memcpy(base + kBlock * value_bytes + 4 * t, &s, 4);
      }
    }
  }
  for (std::int64_t b = 0; b < blocks; b += pattern_blocks) {
    const std::int64_t n = std::min(pattern_blocks, blocks - b);
    pool.upload(host.data(), static_cast<std::size_t>(n * block_bytes), static_cast<std::size_t>(b * block_bytes));
  }
}

}  // namespace

const char* paged_values_name(PagedValues values) { return values == PagedValues::normal ? "normal" : "bytes"; }

PagedInputs::PagedInputs(int max_batch, int max_length, int max_next_n, int max_heads, int head_dim, KvFormat kv,
                         std::mt19937_64& rng, PagedValues values)
    : head_dim_(head_dim),
      kv_(kv),
      token_bytes_((kv == KvFormat::mxfp4 ? head_dim / 2 : head_dim) + 4),
      block_bytes_(kBlock * token_bytes_) {
  max_width_ = (static_cast<std::int64_t>(max_length) * 13 / 10 + kBlock) / kBlock * kBlock;
  // Enough distinct blocks for the largest batch, and always several times the 60 MiB L2.
  pool_blocks_ = std::max<std::int64_t>(static_cast<std::int64_t>(max_batch) * (max_width_ / kBlock) * 11 / 10,
                                        (std::int64_t{512} << 20) / block_bytes_);
  pool_ = check::DeviceBuffer(static_cast<std::size_t>(pool_blocks_ * block_bytes_));
  fill_pool(pool_, pool_blocks_, block_bytes_, head_dim, kv, rng, values);
  const std::size_t query_heads = static_cast<std::size_t>(max_batch) * max_next_n * max_heads;
  q_ = check::DeviceBuffer(query_heads * (kv == KvFormat::mxfp4 ? head_dim / 2 : head_dim));
  weights_ = check::DeviceBuffer(static_cast<std::size_t>(max_batch) * max_next_n * max_heads * 4);
  lens_ = check::DeviceBuffer(static_cast<std::size_t>(max_batch) * 4);
  table_ = check::DeviceBuffer(static_cast<std::size_t>(max_batch) * (max_width_ / kBlock) * 4);
  std::vector<std::uint8_t> qh(q_.bytes());
  std::vector<std::int32_t> sh(kv == KvFormat::mxfp4 ? query_heads : 0);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  if (values == PagedValues::normal && kv == KvFormat::mxfp4) {
    std::vector<float> head(static_cast<std::size_t>(head_dim));
    for (std::size_t h = 0; h < query_heads; ++h) {
      for (float& x : head) x = unit(rng);
      sh[h] = reference::mxfp4_quantize(head.data(), head_dim, qh.data() + h * (head_dim / 2));
    }
  } else {
    for (auto& v : qh) {
      if (values == PagedValues::normal) {
        v = check::fp8_e4m3_nearest(unit(rng));
        continue;
      }
      v = static_cast<std::uint8_t>(rng());
      if (kv == KvFormat::fp8 && (v & 0x7f) == 0x7f) v = 0x38;
    }
    for (auto& e : sh) e = random_exponents(rng);
  }
  q_.upload(qh.data(), qh.size());
  if (kv == KvFormat::mxfp4) {
    q_scales_ = check::DeviceBuffer(query_heads * 4);
    q_scales_.upload(sh.data(), sh.size() * 4);
  }
  std::normal_distribution<float> normal(0.0f, values == PagedValues::normal ? 1.0f : 0.125f);
  std::vector<float> wh(weights_.bytes() / 4);
  for (auto& w : wh) w = normal(rng);
  weights_.upload(wh.data(), wh.size() * 4);
  ids_.resize(static_cast<std::size_t>(pool_blocks_));
  std::iota(ids_.begin(), ids_.end(), 0);
}

void PagedInputs::draw(int batch, int length, bool fixed, std::mt19937_64& rng, std::int64_t resident_blocks, bool ragged) {
  batch_ = batch;
  std::uniform_int_distribution<int> len_dist(fixed    ? length
                                              : ragged ? length / 2
                                                       : length * 7 / 10,
                                              fixed || ragged ? length : length * 13 / 10);
  lengths_.resize(batch);
  for (auto& l : lengths_) l = len_dist(rng);
  width_ = (*std::max_element(lengths_.begin(), lengths_.end()) + kBlock - 1) / kBlock * kBlock;
  std::shuffle(ids_.begin(), ids_.end(), rng);
  std::vector<std::int32_t> table(static_cast<std::size_t>(batch) * (width_ / kBlock));
  const std::size_t distinct =
      resident_blocks > 0 ? std::min(static_cast<std::size_t>(resident_blocks), ids_.size()) : ids_.size();
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = ids_[i % distinct];
  lens_.upload(lengths_.data(), lengths_.size() * 4);
  table_.upload(table.data(), table.size() * 4);
  blocks_read_ = 0;
  for (auto l : lengths_) blocks_read_ += (l + kBlock - 1) / kBlock;
}

TensorView PagedInputs::q(int next_n, int heads) const {
  if (kv_ == KvFormat::mxfp4) return TensorView::contiguous(q_.data(), DType::u8, {batch_, next_n, heads, head_dim_ / 2});
  return TensorView::contiguous(q_.data(), DType::fp8_e4m3, {batch_, next_n, heads, head_dim_});
}
TensorView PagedInputs::q_scales(int next_n, int heads) const {
  if (kv_ != KvFormat::mxfp4) return TensorView{};
  return TensorView::contiguous(q_scales_.data(), DType::i32, {batch_, next_n, heads});
}
TensorView PagedInputs::kv_cache() const {
  return TensorView::contiguous(pool_.data(), DType::u8, {pool_blocks_, kBlock, 1, token_bytes_});
}
TensorView PagedInputs::weights(int next_n, int heads) const {
  return TensorView::contiguous(weights_.data(), DType::f32, {static_cast<std::int64_t>(batch_) * next_n, heads});
}
TensorView PagedInputs::context_lens() const { return TensorView::contiguous(lens_.data(), DType::i32, {batch_}); }
TensorView PagedInputs::block_table() const {
  return TensorView::contiguous(table_.data(), DType::i32, {batch_, width_ / kBlock});
}

}  // namespace flash_indexer::bench
