#pragma once
// A sparse_paged_mqa_logits call's checks apart from its launch: the op and the sparse decode step
// (sparse_decode_step.hpp), which computes the same logits inside its own kernel, check alike.
#include <cstdint>
#include <string_view>

#include "../kernels/sparse_paged_mqa_logits_params.cuh"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "paged_mqa_logits_call.hpp"

namespace flash_indexer {

struct SparsePagedMqaLogitsCall {
  PagedMqaLogitsCall paged;  // the checks of the arguments shared with paged_mqa_logits
  SparsePagedMqaLogitsConfig config;  // arch: Arch{}, the current device's at load
  std::int64_t rows = 0;              // B * next_n
  kernels::SparsePagedMqaLogitsParams params{};
  bool empty() const { return rows == 0 || params.num_candidates == 0; }
};

// Every argument check, no driver call; `op` prefixes every error.
SparsePagedMqaLogitsCall check_sparse_paged_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv_cache,
                                                       const TensorView& weights, const TensorView& context_lens,
                                                       const TensorView& block_table, const TensorView& candidates,
                                                       int candidate_block, const TensorView& logits,
                                                       const SparsePagedMqaLogitsOptions& options);

// The sm90 kernels' parameters of a checked call: its own (no tensor map: both sm90 kernels copy the
// candidates' tiles without one), tiles_per_cta left 0 for the launch to set.
kernels::SparsePagedMqaLogitsSm90Params sparse_sm90_params(const SparsePagedMqaLogitsCall& call);

}  // namespace flash_indexer
