#pragma once
// topk_merge() in its steps, for the plans that launch it after other steps, so that a rejected call
// enqueues nothing:
//   check_topk_merge()    every argument check, no driver call
//   prepare_topk_merge()  loads the kernel; enqueues nothing
//   enqueue()             the launch alone
#include <string_view>

#include "../kernels/topk_merge_params.cuh"
#include "flash_indexer/topk_merge.hpp"
#include "kernel_registry.hpp"
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

struct TopkMergeLaunch {
  const LoadedKernel* kernel = nullptr;  // none for zero rows
  kernels::TopkMergeParams params{};
  bool pdl = false;
};

TopkMergeLaunch prepare_topk_merge(std::string_view op, const TopkMergeCall& call, CUstream stream);
void enqueue(const TopkMergeLaunch& launch, CUstream stream);

}  // namespace flash_indexer
