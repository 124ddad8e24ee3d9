#pragma once
// Keeps the GPU busy for a while: the benchmarks queue it before their timed replays, so every replay
// is already enqueued when the GPU reaches it and its event pair measures GPU time, not the host's
// launch gaps (the peers' benchmark times the same way).
namespace flash_indexer {
namespace kernels {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void spin_wait(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace kernels
}  // namespace flash_indexer
