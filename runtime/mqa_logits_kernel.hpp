#pragma once
// Codegen for the ragged (prefill) MQA logits kernel: configuration -> KernelSpec.
#include "flash_indexer/mqa_logits.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec mqa_logits_kernel_spec(const MqaLogitsConfig& config);

}  // namespace flash_indexer
