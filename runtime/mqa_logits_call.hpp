#pragma once
// An mqa_logits call in three steps (see paged_mqa_logits_call.hpp for why): check_mqa_logits() (every
// argument check, no driver call), prepare_mqa_logits() (loads the kernel, checks the stream; enqueues
// nothing), enqueue() (the launch alone).
#include <cstdint>
#include <string_view>

#include "../kernels/mqa_logits_params.cuh"
#include "flash_indexer/mqa_logits.hpp"
#include "kernel_registry.hpp"

namespace flash_indexer {

// The most tokens one call takes: the portable kernel's grid y dimension (65535) of kMqaTokens each.
constexpr std::int64_t kMqaMaxTokens = std::int64_t{65535} * kernels::kMqaTokens;

struct MqaLogitsCall {
  MqaLogitsConfig config;  // arch: the current device's, filled in by prepare
  kernels::MqaLogitsParams params{};
  bool pdl = false;  // options.pdl
  bool empty() const { return params.tokens == 0 || params.keys == 0; }
};

// `op` prefixes every error ("mqa_logits", or the caller's name for a composite op).
MqaLogitsCall check_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv, const TensorView& kv_scales,
                               const TensorView& weights, const TensorView& ks, const TensorView& ke, const TensorView& logits,
                               const MqaLogitsOptions& options);

struct MqaLogitsLaunch {
  const LoadedKernel* kernel = nullptr;
  bool sm90 = false;
  kernels::MqaLogitsSm90Params sm90_params{};  // .p: the parameters of either kernel
  unsigned grid_x = 0, grid_y = 0;
  bool pdl = false;  // a programmatic dependent launch (launch_kernel)
};

// Not for an empty call.
MqaLogitsLaunch prepare_mqa_logits(std::string_view op, const MqaLogitsCall& call, CUstream stream);
void enqueue(const MqaLogitsLaunch& launch, CUstream stream);

}  // namespace flash_indexer
