#pragma once
// Codegen for the paged MQA logits kernels: configuration -> KernelSpec.
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec paged_mqa_logits_kernel_spec(const PagedMqaLogitsConfig& config);

// Before the device is known: throws ArgumentError unless a kernel the variant may resolve to builds the
// configuration's fields (the portable kernel, or for automatic and sm90 the sm90 kernel, which alone
// takes MXFP4 next_n 5-6), naming it as the portable kernel's check does.
void check_paged_mqa_logits_fields(const PagedMqaLogitsConfig& config);

// "auto", "portable", "sm90": the variant's part of a kernel key (also the ragged op's).
const char* variant_name(PagedMqaLogitsVariant v);
// FLASH_INDEXER_KERNEL=portable: `automatic` resolves to the portable kernels (read once).
bool portable_forced_by_environment();

}  // namespace flash_indexer
