#pragma once
// Every kernel the library can build, across ops: what `flash-indexer warm` compiles by default, and
// the way back from a kernel key (a manifest entry) to its spec.
#include <string_view>
#include <vector>

#include "flash_indexer/arch.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

// The opt-in one-pass decode step's kernels (decode_step.hpp) are not among them: a plan that asks for
// them loads them, a manifest names them.
std::vector<KernelSpec> supported_kernel_specs(const Arch& arch);

// Throws Error naming the key when no op recognizes it or it does not parse.
KernelSpec kernel_spec_for_key(std::string_view key);

}  // namespace flash_indexer
