#pragma once
// Codegen for the merge of candidate lists (topk_merge): configuration -> KernelSpec.
#include "flash_indexer/topk_merge.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec topk_merge_kernel_spec(const TopkMergeConfig& config);

}  // namespace flash_indexer
