#pragma once
// Exact top-k selection over indexer logits (contract §4): per row, the columns of the k largest
// live scores; NaN is never selected; -0 equals +0; equal scores go to the lower column; -1 pads rows
// with fewer than k selectable columns; the output bytes are deterministic.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/arch.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/tensor.hpp"

namespace flash_indexer {

constexpr int kMaxTopk = 4096;

// One compiled selector kernel (k, lengths form, histogram use and sorting are run-time arguments).
struct TopkConfig {
  LogitsDType logits = LogitsDType::f32;
  Arch arch{9, 0, true};
  // CTAs per row: 1 (any arch), or a thread-block cluster of 2, 4, 8 (sm_90 or newer; 16 for the
  // resident 512-thread form, a non-portable size the library allows per kernel) that splits
  // each row and merges through distributed shared memory, for batches too small to fill the GPU.
  int split = 1;
  // The selector for rows whose segment per CTA stays in shared memory (16K FP32 or 32K FP16/BF16
  // logits per CTA on sm_80/90/100): fewer instructions per logit and no given histogram read (counting
  // a resident segment costs less than checking one). topk() picks it whenever the widest row fits
  // (choose_topk_kernel in runtime/topk.cpp).
  bool resident = false;
  // The resident selector with 1024 threads and a 128 KiB buffer (32K FP32 or 64K FP16/BF16 logits per
  // CTA), one CTA per SM (sm_90 or newer): taken only for rows the 512-thread form cannot hold, since it
  // is slower where both fit (its scans and barriers span twice the warps).
  bool wide = false;
  // The register selector (FP32 logits, one CTA per row, split 1): the row in registers, 16 logits per
  // thread: 8K with 512 threads, 16K with `wide` (1024 threads). topk() picks it for FP32 rows that fit
  // on one CTA: the fixed cost per call is its time there.
  bool registers = false;
  // The filter selector for streamed rows (kernels/topk_filter.cuh): one pass over the row from a cutoff
  // (the given histogram's threshold bin, or a sample), winners marked in bitmaps of up to 256K columns
  // per CTA; topk() picks it for rows too long for the on-chip selectors on parts with 163 KiB of shared
  // memory per CTA (sm_80, sm_90, sm_100). The other streamed rows take the split selector (the default).
  bool filter = false;

  // e.g. topk.split8.in-f16.sm_90a, topk.resident1.in-f32.sm_90a, topk.residentwide8.in-f32.sm_90a,
  // topk.register1.in-f32.sm_90a, topk.registerwide1.in-f32.sm_90a, topk.filter2.in-f32.sm_90a
  std::string key() const;
  static TopkConfig parse_key(std::string_view key);
  void check_supported() const;

  friend bool operator==(const TopkConfig&, const TopkConfig&) = default;
};

std::vector<TopkConfig> supported_topk_configs(const Arch& arch);
std::vector<int> supported_topk_splits(const Arch& arch);

// The CTAs per row topk() uses when options.split is 0: the largest supported split such that a
// cluster of 4 or 8 fills at most 3/4 of the multiprocessors (rows * split), a split of 2 at most all
// of them (one wave), and every CTA gets a segment of at least 4096 columns of the widest row; a row of
// at most 16384 columns stays on one CTA. The crossovers were measured on the H200
// (docs/design/topk-selectors.md, docs/benchmarks/topk.md).
// topk() then picks the selector, and may take a larger split (up to 16 for the resident selector) that
// lets a resident selector hold the row (its segment per CTA fits shared memory) within one wave of the
// clusters the device runs at once, or a cluster of 4 for a streamed row (runtime/topk.cpp,
// choose_topk_kernel). supported_topk_splits() lists 1, 2, 4, 8 (sm_90); clusters of 16 exist only as
// the resident form's configurations.
int automatic_topk_split(std::int64_t rows, std::int64_t width, int multiprocessors, const Arch& arch);

struct TopkOptions {
  // Each row's indices in ascending column order. Without it the order is unspecified but still
  // deterministic (run after run, the same bytes); this version writes ascending order either way (the
  // selector's paths would otherwise list the winners differently), so the flag costs nothing.
  bool sorted = false;
  // The decode form of 1-D lengths (contract §1, the MTP rule): lengths is int32 [rows / next_n] and row
  // r = b * next_n + j has lengths[b] - next_n + j + 1 columns. 0: 1-D lengths are per row.
  int next_n = 0;
  // Optional coarse histogram of exactly these logits and lengths (contract §3), as the logits kernel
  // writes it: int32 [rows, 1024], contiguous. The selector then skips its own counting pass. A
  // histogram that does not add up is detected per row; that row is selected from its own counts.
  TensorView histogram{};
  // Optional second output: the selected scores as stored, widened to float32 [rows, k], contiguous;
  // -inf in the padding slots (index -1).
  TensorView values{};
  // Optional: write physical KV slots instead of columns, for sparse-attention kernels that gather by
  // slot. int32 [B, max_blocks] (inner stride 1), the block table of the logits op (block size 64),
  // with rows a multiple of B (row r belongs to request r / (rows / B)): column i becomes
  // block_table[b][i / block_size] * block_size + i % block_size; -1 stays -1. `sorted` still orders
  // by column.
  TensorView block_table{};
  // Positions per block_table entry: 64 (paged_mqa_logits' blocks), or a power of two from 1 to 64. With
  // sparse_paged_mqa_logits' candidates as block_table and its candidate_block here, the indices are
  // context positions: the second level's top-k in one call (docs/design/two-level.md). Only with
  // block_table.
  int block_size = 64;
  // Optional window starts (prefill): int32 [rows], contiguous. Row r then selects from the columns
  // [row_starts[r], end), end being its length as above (both clamped to [0, width]; the window is
  // empty when the start is not below the end). A given histogram must count that window.
  TensorView row_starts{};
  // With row_starts: indices relative to the window start (column - row_starts[r]; -1 still pads), as
  // vLLM's prefill consumer takes them. Not with block_table.
  bool relative = false;
  // CTAs per row: 0 picks automatic_topk_split() (or a larger split that keeps the row resident, see
  // there); 1, 2, 4, 8 or 16 forces one (2..16 need sm_90 or newer; 16 only where the row's segment per
  // CTA stays resident: 16K FP32 or 32K FP16/BF16 logits).
  // Every choice gives the same bytes.
  int split = 0;
  // Programmatic dependent launch: as PagedMqaLogitsOptions::pdl (paged_mqa_logits.hpp).
  bool pdl = false;
  // Decode context parallel (dcp.hpp): the logits are rank dcp.rank's local columns and the lengths
  // global (as PagedMqaLogitsOptions::dcp), so row r selects from its dcp_local_length(length) columns
  // and the indices are global positions (dcp_global_position), ready for topk_merge(). Not with
  // block_table or row_starts. Default: one rank.
  DcpLayout dcp{};
};

// What the selector did for one row; the workspace holds one per row (int32 x 4), readable after the
// call, e.g. to notice a stale histogram in a pipeline.
struct TopkRowReport {
  // 0: counted here (none given, or the row was resident: the resident selector never reads one);
  // 1: the given one was used; 2: it did not add up, recounted; 3: a long streamed row's given threshold
  // bin held more than 4096 columns of several keys, so the row was selected as with none given (from a
  // sample, else counted here: docs/design/topk-selectors.md, "An uninformative histogram").
  std::int32_t histogram_use;
  // Bin of the k-th score; 1024 when every selectable column was taken. With histogram_use 1 a contract §3
  // coarse bin; otherwise one of the selector's own 1024 bins, which it counts when no histogram is given:
  // best first, the magnitude's exponent and top 3 mantissa bits (FP16: top 4) on each side of zero,
  // FP32/BF16 magnitudes clamped to 2^-32 .. 2^32 (kernels/topk_selector_bins.cuh).
  std::int32_t threshold_bin;
  // Columns in that bin; -1 for a long row (no histogram given) selected in one pass from a cutoff
  // estimated on a sample of it, which counts no bin.
  std::int32_t threshold_count;
  // Extra passes over the row: the threshold bin outgrew the on-chip candidate buffer. Split
  // selector: a selector bin of more than 4096 columns holding more than one value, 2 per narrowing
  // step; resident selector: a fine bin (a quarter of a selector bin) of more than 2048, 1 per step;
  // filter selector: the given histogram's bin past 4096 or its own fine bin past 2048, 1 per step.
  std::int32_t row_passes;
};

// Bytes of workspace topk() needs for `rows` rows (allocate once; nothing is allocated per call).
std::size_t topk_workspace_bytes(std::int64_t rows);

// Tensor arguments (device memory; strides in elements):
//   logits     float32 / float16 / bfloat16 [rows, width], inner stride 1, row stride >= width
//   lengths    int32 [rows]; or int32 [B, next_n] with B * next_n = rows; or int32 [B] with
//              options.next_n (the MTP rule); contiguous. Clamped to [0, width].
//   indices    int32 [rows, k], contiguous; 1 <= k <= kMaxTopk = 4096 (k is indices.shape[1])
//   workspace  uint8, at least topk_workspace_bytes(rows) bytes, 16-byte aligned; afterwards it holds a
//              TopkRowReport per row
// Launches on `stream` without allocating, copying or synchronizing (capturable once the kernel is
// loaded: the first call per dtype compiles or reads the disk cache and must not be captured).
void topk(const TensorView& logits, const TensorView& lengths, const TensorView& indices, const TensorView& workspace,
          Stream stream, const TopkOptions& options = {});

// Loads (compiling on a cache miss) the selector for `config` in the current context (device 0's primary
// context where the thread has none). With config.arch set, compiles it for that target into the disk
// cache only: no GPU or context needed.
void warm_topk(const TopkConfig& config);
// Loads every selector topk() may pick for `logits` on the current device (before a CUDA-graph capture), in
// the current context or device 0's primary one.
void warm_topk(LogitsDType logits);
// Compiles every selector for `logits` and `arch` (e.g. Arch::parse("sm_90a")) into the disk cache,
// without a GPU.
void warm_topk(LogitsDType logits, const Arch& arch);

}  // namespace flash_indexer
