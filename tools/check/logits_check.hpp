#pragma once
// Random paged-MQA-logits problems, their upload, and the comparison of a GPU result with the CPU
// reference. Shared by the GPU tests and `flash-indexer check`.
#include <cstdint>
#include <string>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/reference.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::check {

struct LogitsCase {
  PagedMqaLogitsConfig config;        // arch is ignored: the device decides; the variant is forced
  std::vector<int> lengths;           // per request (lens_2d = false) or per row b*next_n+j (true)
  bool lens_2d = true;
  bool fill_masked = false;
  std::int64_t width = 0;             // logits width; 0: the longest row rounded up to a block, + 64
  std::int64_t row_padding = 8;       // logits row stride = width + row_padding
  std::int64_t spare_blocks = 7;      // cache blocks beyond the ones the lengths need
  std::int64_t block_stride_padding = 32;  // bytes after each block (a multiple of 16)
  int nan_weight_row = -1;            // this row gets a NaN weight (all its live scores are NaN)
  bool wide_values = false;           // raw random FP8 bytes: the whole range, FP16 overflow included
  // Small integers for q and k, weights in steps of 1/8, power-of-two scales: every FP32 sum is exact,
  // so the GPU logits equal the reference bit for bit (and ties are frequent).
  bool exact_values = false;
  // Weights of both signs and magnitudes 2^-4..2^7 instead of N(0, 1/H).
  bool wide_weights = false;
  // The sm90 kernel only: KV blocks per CTA forced (0: the library's choice, runtime/sm90_split.hpp), so
  // that short inputs still run CTAs whose consumers take many blocks each (the ring wraps, the MXFP4
  // scale sets are reused).
  int blocks_per_split = 0;
  // With blocks_per_split: 0 / 1 forces where the producer starts (after / before the CTA's barrier,
  // PagedMqaLogitsSm90Params::fill_before_barrier); -1 leaves the library's choice.
  int fill_before_barrier = -1;
  // The sm90 kernels that take ranges of blocks across requests (takes_ranges): a grid of this many CTAs
  // splitting the B x width blocks evenly (0: the library's choice), so that short inputs still run
  // CTAs that switch requests (the query and weights, the histogram's flush per request).
  int ranges_ctas = 0;
  std::uint64_t seed = 1;
};

struct HostInputs {
  int batch = 0;
  int max_blocks = 0;
  int num_blocks = 0;
  std::int64_t block_stride = 0;
  std::int64_t width = 0;
  std::int64_t logits_stride = 0;
  std::vector<std::uint8_t> q, kv_cache;  // MXFP4 (config.kv): packed E2M1, and the cache's exponents
  std::vector<std::int32_t> q_scales;     // MXFP4 only: [B, next_n, H]
  std::vector<float> weights;
  std::vector<std::int32_t> context_lens, block_table;

  reference::PagedMqaLogitsInputs reference_view(const LogitsCase& c) const;
};

// Fresh random inputs: q, keys and weights drawn from normal distributions (or raw bytes), block ids
// shuffled over a pool larger than needed, table slots past the live range holding ids that would
// fault if dereferenced.
HostInputs make_inputs(const LogitsCase& c);
// The finite E4M3 byte nearest to x (the lower of two equally near), saturating at +-448.
std::uint8_t fp8_e4m3_nearest(float x);
// A new block table for the same pool, as between a captured graph's replays: the pool's blocks shuffled
// (by `seed`), the first `live_blocks` slots of every request from it, `past` in the others.
void reshuffle_block_table(HostInputs& in, std::uint64_t seed, int live_blocks, std::int32_t past);

struct DeviceInputs {
  DeviceBuffer q, q_scales, kv_cache, weights, context_lens, block_table, logits;
};
DeviceInputs upload(const HostInputs& in, const LogitsCase& c);

// The op's tensor views over device inputs.
struct LogitsViews {
  TensorView q, q_scales, kv_cache, weights, context_lens, block_table, logits;  // q_scales: MXFP4 only
};
LogitsViews views(const DeviceInputs& d, const HostInputs& in, const LogitsCase& c);

// Poison byte written over the logits buffer before a run: every column the kernel must not touch
// has to keep it.
inline constexpr std::uint8_t kPoison = 0x7d;

struct Comparison {
  bool passed = true;
  std::string failure;              // the first problem found
  double diff = 0.0;                // 1 - 2Σxy/Σ(x²+y²) over live, finite logits
  std::int64_t checked = 0;         // live logits compared
  double worst_error = 0.0;         // max |GPU - reference rounded| / magnitude (see compare_logits)
  // FP32 logits beyond FP32 rounding: max |GPU - reference| / (FP32 rounding + tensor_core_bound), how
  // close the worst logit comes to the model's bound.
  double worst_bound_fraction = 0.0;
};

// The FP8 tensor core's accumulation as probed on the H200 (tests/test_gpu_precision.cpp): in each
// k-slice of 32, the 32 products and the incoming accumulator are aligned to the largest of them and
// each one's magnitude cut (toward zero) to kMmaKeptBits bits below the largest one's leading bit before
// they are summed; so each addend loses less than 2^-kMmaKeptBits of the largest.
inline constexpr int kMmaKeptBits = 13;
inline constexpr int kMmaSliceAddends = 33;

// The error bound of that model for logit (r, s): sum over heads of |w| * sum over k-slices of
// kMmaSliceAddends * 2^-kMmaKeptBits * (largest addend of the slice), times the key scale.
double tensor_core_bound(const LogitsCase& c, const HostInputs& in, std::int64_t r, std::int64_t s);

// Compares downloaded logits (raw bytes, row stride in.logits_stride) with the reference.
Comparison compare_logits(const LogitsCase& c, const HostInputs& in, const std::vector<std::uint8_t>& gpu);

// The reference histogram (contract §3) of downloaded logits: each row's live, non-NaN values as stored.
std::vector<std::int32_t> histogram_of(const LogitsCase& c, const HostInputs& in, const std::vector<std::uint8_t>& gpu);

// Poisons the logits, launches once (c.blocks_per_split honoured, no histogram) and downloads the raw
// logits bytes.
std::vector<std::uint8_t> logits_bytes(GpuSession& gpu, const LogitsCase& c, DeviceInputs& d, const LogitsViews& v);

// Uploads, poisons, launches, downloads and compares. For a histogram configuration it also checks the
// counts against histogram_of(), that a second call doubles them, and that the logits are bitwise the
// same as without the histogram.
Comparison run_logits_case(GpuSession& gpu, const LogitsCase& c);

std::string describe(const LogitsCase& c);

}  // namespace flash_indexer::check
