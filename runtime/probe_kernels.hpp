#pragma once
// The benchmarks' probes: the streaming read they measure the memory bandwidth with
// (kernels/stream_read.cuh), the paged read of a logits cell's own KV blocks (kernels/paged_read.cuh),
// the gather of a sparse logits cell's candidate blocks (kernels/sparse_read.cuh), and a spin wait they queue their timed replays behind.
#include "flash_indexer/arch.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

// Key "probe.stream_read.<arch>".
KernelSpec stream_read_kernel_spec(const Arch& arch);

// Key "probe.paged_read.<arch>".
KernelSpec paged_read_kernel_spec(const Arch& arch);

// Key "probe.sparse_read.<arch>".
KernelSpec sparse_read_kernel_spec(const Arch& arch);

// The benchmarks' other probe (kernels/spin_wait.cuh): one thread that spins for a given number of
// nanoseconds. Key "probe.spin_wait.<arch>".
KernelSpec spin_wait_kernel_spec(const Arch& arch);

}  // namespace flash_indexer
