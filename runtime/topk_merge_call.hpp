#pragma once
// topk_merge() in its two halves, for the plans that launch it after other steps: the checks (nothing
// enqueued), then the launch.
#include <string_view>

#include "../kernels/topk_merge_params.cuh"
#include "flash_indexer/topk_merge.hpp"
#include "topk_merge_kernel.hpp"

namespace flash_indexer {

struct TopkMergeCall {
  TopkMergeConfig config;
  kernels::TopkMergeParams params{};
  bool pdl = false;
};

// Every argument check of the op, in one place (errors name `op`).
TopkMergeCall check_topk_merge(std::string_view op, const TensorView& values, const TensorView& positions,
                               const TensorView& indices, const TopkMergeOptions& options);

// Launches a checked call (nothing for zero rows); the kernel is loaded on first use.
void enqueue(std::string_view op, const TopkMergeCall& call, CUstream stream);

}  // namespace flash_indexer
