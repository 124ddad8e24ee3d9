#pragma once
// The streaming-read probe the benchmarks measure the memory bandwidth with (kernels/stream_read.cuh).
#include "flash_indexer/arch.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

// Key "probe.stream_read.<arch>".
KernelSpec stream_read_kernel_spec(const Arch& arch);

}  // namespace flash_indexer
