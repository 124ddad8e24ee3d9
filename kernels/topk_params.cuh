#pragma once
// Kernel parameters of the top-k selector, shared verbatim by the host launcher and the device code
// (plain types only: compiled by both the host compiler and NVRTC).

namespace flash_indexer {
namespace kernels {

struct TopkParams {
  const void* logits;       // [rows, width] FP32/FP16/BF16, row stride logits_stride
  const int* lengths;       // see lengths_next_n
  const int* histogram;     // [rows, 1024] coarse-bin counts of these logits, or null
  int* indices;             // [rows, k], contiguous
  float* values;            // [rows, k], contiguous, or null
  int* report;              // [rows, 4]: TopkRowReport (the op's workspace)
  long long logits_stride;  // elements
  int rows;
  int width;
  int lengths_next_n;  // 0: row r has lengths[r]; n > 0: lengths is [rows / n], row r = b*n + j has lengths[b] - n + j + 1
  int k;               // 1..kMaxTopk
  int sorted;          // 1: each row's indices in ascending column order
  // Physical KV slots instead of columns (null: columns): row r of request r / slot_rows_per_request
  // writes slot_table[b][column >> s] << s | column & ((1 << s) - 1), s = slot_block_shift (6: the paged
  // logits' blocks of 64; 3 or 4: a sparse candidate table's blocks); a column past slot_table_blocks
  // gives -1.
  const int* slot_table;
  long long slot_table_stride;
  int slot_table_blocks;
  int slot_rows_per_request;
  int slot_block_shift;
  // Window starts (null: 0): row r selects from [row_starts[r], its length), both clamped to [0, width].
  const int* row_starts;
  int relative;  // 1: indices relative to the window start
  // Decode context parallel (dcp.hpp): with dcp_ranks > 1 the lengths are global and the logits are
  // rank dcp_rank's local columns, so a row has dcp_local_length(its length) of them, and the indices
  // are global positions (dcp_global_position).
  int dcp_ranks;
  int dcp_rank;
  int dcp_interleave;
};

constexpr int kMaxTopk = 4096;
constexpr int kTopkThreads = 512;
// Threshold-bin candidates the selector keeps in shared memory; a bigger threshold bin is refined with
// extra passes over the row instead (never dropped).
constexpr int kTopkCandidates = 4096;
// The split selector takes a single-key threshold bin's first kTopkCandidates columns: enough for any k.
static_assert(kTopkCandidates >= kMaxTopk, "a single-key bin's candidates hold every winner it can give");
// Threshold-bin candidates the resident selector keeps (topk_resident.cuh; its bins are four times finer).
constexpr int kTopkResidentCandidates = 2048;
// Bytes of one stage of the selector's shared-memory staging ring (topk_split.cuh).
constexpr int kTopkStageBytes = 2 * kTopkThreads * 16;
// The split selector's dynamic shared memory for a call: the staging ring, then its k selected columns
// (topk_split.cuh), so that k <= 2048 keeps two CTAs per SM on 227 KiB parts.
constexpr unsigned topk_split_smem_bytes(int stages, int k) {
  return static_cast<unsigned>(stages * kTopkStageBytes + (4 * k + 15) / 16 * 16);
}
// The register selector (topk_register.cuh): each thread holds 16 FP32 logits of a row; 512 threads
// (two CTAs per SM), 1024 in its wide form.
constexpr int kRegisterColumns = 16;
// Columns per CTA the filter selector (topk_filter.cuh) marks in its two bitmaps (dynamic shared memory).
constexpr int kFilterColumns = 262144;
// Rows from this long per CTA (no histogram given) take the filter selector's sampled cutoff.
constexpr int kTopkFilterSampleColumns = 16384;
// Ints per row in the workspace (the row report).
constexpr int kTopkReportInts = 4;

}  // namespace kernels
}  // namespace flash_indexer
