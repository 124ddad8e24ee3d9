#pragma once
// Codegen for the top-k selector kernels: configuration -> KernelSpec.
#include "flash_indexer/topk.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec topk_kernel_spec(const TopkConfig& config);

}  // namespace flash_indexer
