#pragma once
// Codegen for the top-k selector kernels: configuration -> KernelSpec.
#include "flash_indexer/topk.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec topk_kernel_spec(const TopkConfig& config);
// Logits per CTA the resident selector holds in shared memory on `arch` (its staging buffer).
std::int64_t topk_resident_columns(LogitsDType logits, const Arch& arch);

}  // namespace flash_indexer
