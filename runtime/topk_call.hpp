#pragma once
// A topk call in three steps (see paged_mqa_logits_call.hpp for why):
//   check_topk()    every argument check, no driver call; returns the checked call
//   prepare_topk()  loads the kernel(s), picks the split, checks the stream; enqueues nothing
//   enqueue()       the launch alone
#include <string_view>

#include "../kernels/topk_params.cuh"
#include "flash_indexer/topk.hpp"
#include "kernel_registry.hpp"
#include "topk_kernel.hpp"

namespace flash_indexer {

struct TopkCall {
  LogitsDType logits = LogitsDType::f32;
  int split = 0;  // options.split: 0 automatic
  bool pdl = false;  // options.pdl
  kernels::TopkParams params{};
  bool empty() const { return params.rows == 0; }
};

TopkCall check_topk(std::string_view op, const TensorView& logits, const TensorView& lengths, const TensorView& indices,
                    const TensorView& workspace, const TopkOptions& options);

struct TopkLaunch {
  const LoadedKernel* kernel = nullptr;
  kernels::TopkParams params{};
  unsigned grid = 0;  // rows * split CTAs
  int smem_bytes = -1;  // the split selector's dynamic shared memory for this k (topk_split_smem_bytes); -1: the kernel's
  bool pdl = false;      // a programmatic dependent launch (launch_kernel)
  bool on_chip = false;  // the register or resident selector, which counts its rows itself (a given histogram is not read)
};

// The device as choose_topk_kernel() sees it (loads the kernels that tell it).
TopkDevice topk_device(std::string_view op, LogitsDType logits, CUstream stream);

// Not for an empty call.
TopkLaunch prepare_topk(std::string_view op, const TopkCall& call, CUstream stream);
void enqueue(const TopkLaunch& launch, CUstream stream);

}  // namespace flash_indexer
