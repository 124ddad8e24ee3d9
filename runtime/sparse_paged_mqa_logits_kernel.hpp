#pragma once
// The kernel spec of a sparse_paged_mqa_logits configuration (for the catalog and the op).
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec sparse_paged_mqa_logits_kernel_spec(const SparsePagedMqaLogitsConfig& config);

}  // namespace flash_indexer
