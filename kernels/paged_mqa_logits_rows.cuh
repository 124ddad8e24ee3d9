#pragma once
// Row lengths of the paged MQA logits kernels (CONTRACT 1).
#include "dcp.hpp"
#include "paged_mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// Length of query row j of request b (this rank's share of it under DCP), clamped to [0, width].
template <int kNextN>
__device__ __forceinline__ int row_length(const PagedMqaLogitsParams& p, int b, int j) {
  long long len = p.lens_2d ? p.context_lens[b * kNextN + j]
                            : static_cast<long long>(p.context_lens[b]) - kNextN + j + 1;
  if (len < 0) len = 0;
  if (p.dcp_ranks > 1) len = dcp_local_length(static_cast<int>(len), DcpLayout{p.dcp_ranks, p.dcp_rank, p.dcp_interleave});
  if (len > p.width) len = p.width;
  return static_cast<int>(len);
}

}  // namespace kernels
}  // namespace flash_indexer
