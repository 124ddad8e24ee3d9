#pragma once
// Paged MQA logits of the DeepSeek Sparse Attention indexer (contract §1, §2 and §5, docs/design/contract.md):
//
//   logits[r, s] = kv_scale[s] * sum_h w[r, h] * max(0, sum_d q[b, j, h, d] * k[s, d]),  r = b*next_n + j
//
// with the keys read from a paged FP8 (or MXFP4) KV cache through a block table.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/arch.hpp"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/dcp.hpp"
#include "flash_indexer/tensor.hpp"

struct CUstream_st;

namespace flash_indexer {

// The same type as CUstream and cudaStream_t.
using Stream = CUstream_st*;

enum class LogitsDType : std::uint8_t { f32, f16, bf16 };

// The tensor element type of logits of type `t`.
constexpr DType tensor_dtype(LogitsDType t) {
  return t == LogitsDType::f32 ? DType::f32 : t == LogitsDType::f16 ? DType::f16 : DType::bf16;
}

// Which kernel computes the logits. `sm90` is the Hopper kernel (TMA + FP8 wgmma, sm_90a, next_n
// 1..6); `portable` runs on any GPU from sm_80. `automatic` takes sm90 where it applies, unless the
// environment says FLASH_INDEXER_KERNEL=portable.
enum class PagedMqaLogitsVariant : std::uint8_t { automatic, portable, sm90 };

// The KV cache's format (contract §2): FP8 E4M3 keys with an FP32 scale per token, or MXFP4 (contract
// §2.2: E2M1 keys with a UE8M0 exponent per 32 elements, and the query in MXFP4 too; next_n 1..6, H
// 32/64, D 128: the sm90 kernel's MXFP4 form on sm_90a, the portable kernel (next_n 1..4) elsewhere or
// on request).
enum class KvFormat : std::uint8_t { fp8, mxfp4 };

// One compiled kernel: everything that is a template argument of the device code.
struct PagedMqaLogitsConfig {
  int next_n = 1;       // 1..8
  int heads = 64;       // 16, 32, 64
  int head_dim = 128;   // 64, 128
  int block_size = 64;  // 64
  bool histogram = false;
  LogitsDType logits = LogitsDType::f32;
  Arch arch{9, 0, true};
  PagedMqaLogitsVariant variant = PagedMqaLogitsVariant::automatic;  // resolved against `arch`
  KvFormat kv = KvFormat::fp8;

  // Canonical, readable key, e.g. paged_mqa_logits.portable.n2.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a
  // or paged_mqa_logits.sm90.n2.h64.d128.bs64.hist1.out-f16.kv-fp8.sm_90a (kv-mxfp4 for MXFP4)
  std::string key() const;
  // Inverse of key(); throws Error naming the part that does not parse or is out of range.
  static PagedMqaLogitsConfig parse_key(std::string_view key);
  // Throws Error when a field is outside what the kernels support.
  void check_supported() const;
  // The same configuration with `automatic` replaced by the kernel the op picks for `arch`.
  PagedMqaLogitsConfig resolved() const;

  friend bool operator==(const PagedMqaLogitsConfig&, const PagedMqaLogitsConfig&) = default;
};

// Every configuration the library compiles for `arch` (the default warm manifest).
std::vector<PagedMqaLogitsConfig> supported_paged_mqa_logits_configs(const Arch& arch);

struct PagedMqaLogitsOptions {
  // Write -inf into the columns s >= len(r) of every row up to the logical width (contract §5).
  // Without it those columns are left alone.
  bool fill_masked = false;
  // Optional coarse score histogram (contract §3): int32 [B * next_n, 1024], contiguous, 8-byte aligned.
  // The kernel ADDS the coarse-bin counts of each row's live, non-NaN logits, binned as stored (after
  // rounding to FP16/BF16), so the caller zeroes it first; counts accumulate across calls. Leave it
  // empty (rank 0) for no histogram. The logits are bitwise the same either way.
  TensorView histogram{};
  // Force a kernel (comparisons, debugging); `sm90` on a device or configuration it does not cover is
  // an error.
  PagedMqaLogitsVariant variant = PagedMqaLogitsVariant::automatic;
  // MXFP4 only: the query's exponents, int32 [B, next_n, H], contiguous (four UE8M0 bytes each, byte 0
  // for elements 0..31).
  TensorView q_scales{};
  // Programmatic dependent launch (sm_90 and newer; ignored before): the kernel may be scheduled while
  // the stream's previous kernel still runs, and waits for it to complete (its writes visible) before
  // it reads or writes any global memory, so its launch latency overlaps that kernel's end; it lets the
  // stream's next kernel do the same. Also under stream capture (a programmatic graph edge). Off by
  // default: the bytes are the same either way.
  bool pdl = false;
  // Decode context parallel (dcp.hpp): this kv_cache and block_table are rank dcp.rank's shard of the
  // cache (its local columns), context_lens the requests' global lengths; row r then has
  // dcp_local_length(its length) columns (the MTP rule applied to the global length first), and the
  // logits are its local columns. Default: one rank.
  DcpLayout dcp{};
};

// Tensor arguments (device memory; strides in elements):
//   q             float8_e4m3 [B, next_n, H, D], contiguous, 16-byte aligned; or, for an MXFP4 cache,
//                 uint8 [B, next_n, H, D / 2] (packed E2M1, low nibble first) with options.q_scales
//   kv_cache      uint8 [num_blocks, block_size, 1, D + 4]; the dims after the first contiguous, the
//                 block stride (bytes) >= block_size * (D + 4) and a multiple of 16; 16-byte aligned.
//                 MXFP4: [num_blocks, block_size, 1, D / 2 + 4] (each block: the packed values, then
//                 one int32 of four UE8M0 exponents per token); the format follows q's dtype
//   weights       float32 [B * next_n, H], contiguous
//   context_lens  int32 [B] (length includes the draft tokens: token j sees L - next_n + j + 1 keys)
//                 or int32 [B, next_n] (row b*next_n + j sees context_lens[b][j] keys), contiguous
//   block_table   int32 [B, max_blocks], inner stride 1, row stride >= max_blocks
//   logits        float32 / float16 / bfloat16 [B * next_n, width], inner stride 1, row stride >= width
//
// Lengths are clamped to [0, width]. A key whose block-table slot lies past max_blocks, or whose block
// id lies outside [0, num_blocks), is never read: its logit is NaN (NaN is never selected downstream).
//
// Launches on `stream` (which must belong to the current CUDA context) without allocating, copying or
// synchronizing, so it can be captured in a CUDA graph once the kernel is loaded: the first call for a
// configuration compiles (or loads from the disk cache) and must not happen during stream capture.
void paged_mqa_logits(const TensorView& q, const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, const TensorView& logits, Stream stream,
                      const PagedMqaLogitsOptions& options = {});

// Loads (compiling on a cache miss) the kernel the op would launch for `config` in the current context
// (device 0's primary context where the thread has none), so that a later call can be captured in a CUDA
// graph. Warm with the variant you will call with (automatic, by default of the options, is its own
// entry). With config.arch set, compiles the kernel for that target into the disk cache only: no GPU or
// context needed.
void warm_paged_mqa_logits(const PagedMqaLogitsConfig& config);

}  // namespace flash_indexer
