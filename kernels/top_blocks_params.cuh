#pragma once
// Kernel parameters of top_blocks (kernels/top_blocks.cuh), shared verbatim by the host launcher and the
// device code (plain types only: compiled by both the host compiler and NVRTC).

namespace flash_indexer {
namespace kernels {

struct TopBlocksParams {
  const void* logits;       // [rows, width] FP32/FP16/BF16, row stride logits_stride
  const int* lengths;       // see lengths_next_n; a row's live columns are clamped to [0, width]
  void* maxima;             // [rows, maxima_stride] of the logits' dtype: each block's largest live score
  int* block_counts;        // [rows]: ceil(length / block), the lengths of the top-k over the maxima
  int* indices;             // [rows, k], contiguous: the top-k's output, which the newest phase completes
  long long logits_stride;  // elements
  long long maxima_stride;  // elements
  int width;
  int block;        // keys per block, 1..kTopBlocksMaxBlock
  int k;            // k_blocks, 1..kMaxTopk
  int lengths_next_n;  // 0: row r has lengths[r]; n > 0: lengths is [rows / n], row b*n + j has lengths[b] - n + j + 1
  int keep_newest;     // 1: each row's newest block is taken first (docs/design/two-level.md)
  int phase;        // kTopBlocksMaxima or kTopBlocksNewest
};

constexpr int kTopBlocksThreads = 256;
constexpr int kTopBlocksMaxBlock = 1024;
constexpr int kTopBlocksMaxima = 0;  // grid (ceil(maxima columns / threads), rows): a thread per block
constexpr int kTopBlocksNewest = 1;  // grid (rows): a CTA per row, after the top-k

}  // namespace kernels
}  // namespace flash_indexer
