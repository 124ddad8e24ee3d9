#pragma once
// Codegen for the paged MQA logits kernels: configuration -> KernelSpec.
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec paged_mqa_logits_kernel_spec(const PagedMqaLogitsConfig& config);

// "auto", "portable", "sm90": the variant's part of a kernel key (also the ragged op's).
const char* variant_name(PagedMqaLogitsVariant v);
// FLASH_INDEXER_KERNEL=portable: `automatic` resolves to the portable kernels (read once).
bool portable_forced_by_environment();

}  // namespace flash_indexer
