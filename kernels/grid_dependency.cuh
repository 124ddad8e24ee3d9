#pragma once
// Programmatic dependent launch (sm_90 and newer). Every kernel calls this first:
// launched with the attribute (launch_kernel's `programmatic`), the kernel may be scheduled while the
// stream's previous kernel still runs, and it waits here, before its first global memory access (read
// or write), until that kernel has completed and its writes are visible; then it lets the stream's
// next kernel be scheduled early in the same way. Launched without it, there is nothing to wait for.
// The wait gives completion, not just the previous kernel's trigger, so where a kernel triggers never
// affects what it reads.
namespace flash_indexer {
namespace kernels {

__device__ __forceinline__ void await_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace kernels
}  // namespace flash_indexer
