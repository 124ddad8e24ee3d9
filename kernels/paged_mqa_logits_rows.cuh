#pragma once
// Row lengths of the paged MQA logits kernels (contract §1).
#include "dcp.hpp"
#include "paged_mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// Kernel rows per request of a kernel of kNextN rows: rows_per_request where its rows may be groups of a
// request's rows (kNextN <= kSm90MaxGroupRows: flattened next_n = 1 rows, or next_n 6 as groups of 2),
// else 1 at compile time, so that the wider kernels carry no code for it.
template <int kNextN>
__device__ __forceinline__ int rows_per_request(const PagedMqaLogitsParams& p) {
  return kNextN <= kSm90MaxGroupRows ? p.rows_per_request : 1;
}

// The block table row of kernel row b (a request, or a flattened query row).
template <int kNextN>
__device__ __forceinline__ long long table_row(const PagedMqaLogitsParams& p, int b) {
  const int g = rows_per_request<kNextN>(p);
  return g == 1 ? b : static_cast<int>(static_cast<unsigned>(b) / static_cast<unsigned>(g));
}

// Length of query row j of kernel row b (this rank's share of it under DCP), clamped to [0, width]. With
// 1-D lengths, the MTP rule over the call's next_n (kNextN * rows_per_request: rows_per_request > 1 only
// at kNextN = 1, params.cuh).
template <int kNextN>
__device__ __forceinline__ int row_length(const PagedMqaLogitsParams& p, int b, int j) {
  const int g = rows_per_request<kNextN>(p);
  const int request = static_cast<int>(table_row<kNextN>(p, b));
  long long len = p.lens_2d ? p.context_lens[b * kNextN + j]
                            : static_cast<long long>(p.context_lens[request]) - kNextN * g + (b - request * g) * kNextN + j + 1;
  if (len < 0) len = 0;
  if (p.dcp_ranks > 1) len = dcp_local_length(static_cast<int>(len), DcpLayout{p.dcp_ranks, p.dcp_rank, p.dcp_interleave});
  if (len > p.width) len = p.width;
  return static_cast<int>(len);
}

}  // namespace kernels
}  // namespace flash_indexer
