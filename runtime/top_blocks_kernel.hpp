#pragma once
// Codegen for the first level of two-level indexing (top_blocks): configuration -> KernelSpec.
#include "flash_indexer/top_blocks.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec top_blocks_kernel_spec(const TopBlocksConfig& config);

}  // namespace flash_indexer
