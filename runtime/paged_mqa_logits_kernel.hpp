#pragma once
// Codegen for the paged MQA logits kernels: configuration -> KernelSpec.
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec paged_mqa_logits_kernel_spec(const PagedMqaLogitsConfig& config);

}  // namespace flash_indexer
