#pragma once
// Kernel parameters of topk_merge (kernels/topk_merge.cuh), shared verbatim by the host launcher and
// the device code (plain types only: compiled by both the host compiler and NVRTC).

namespace flash_indexer {
namespace kernels {

struct TopkMergeParams {
  const void* values;    // [lists, rows, k_in] FP32/FP16/BF16, contiguous
  const int* positions;  // [lists, rows, k_in], contiguous; < 0: no candidate
  int* indices;          // [rows, k], contiguous
  float* out_values;     // [rows, k], contiguous, or null
  int* owned;            // [rows, k], contiguous, or null: the positions `owner_rank` holds, as its local columns
  int lists;             // D
  int rows;
  int k_in;
  int k;  // 1..kMaxTopk
  // The DCP layout of `owned`: position p belongs to rank (p / interleave) % ranks.
  int owner_ranks;
  int owner_rank;
  int owner_interleave;
};

constexpr int kTopkMergeThreads = 512;
// Candidates per row, at most (lists * k_in): 16 lists of kMaxTopk.
constexpr int kTopkMergeMaxCandidates = 65536;

}  // namespace kernels
}  // namespace flash_indexer
