#pragma once
// Hopper (sm_90a) building blocks, as thin PTX wrappers: mbarriers, TMA (cp.async.bulk.tensor) and
// bulk copies that complete on them, and FP8 wgmma with shared-memory matrix descriptors; and cp.async.
#include "tensor_map.cuh"

namespace flash_indexer {
namespace kernels {

// A 16-byte copy from global to shared memory that bypasses L1 (cp.async, sm_80 and later), shared by the
// top-k tiles and the sparse gather's threads.
__device__ __forceinline__ void cp_async16(unsigned int smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(global) : "memory");
}

namespace sm90 {

__device__ __forceinline__ unsigned int smem_address(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// ---- mbarriers -------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count));
}

// Makes barrier initialization visible to the async proxy (TMA), before any thread uses the barriers.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Makes this thread's shared-memory writes (generic proxy) visible to the async proxy (a later wgmma
// that reads them as an operand, after a barrier).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Barrier `id` (1..15; 0 is __syncthreads') of `threads` threads, whole warps.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}

// One arrival, and `bytes` more transaction bytes expected (TMA completes them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned int parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// Whether the phase of `parity` has completed, without waiting.
__device__ __forceinline__ bool mbarrier_test_wait(unsigned long long* bar, unsigned int parity) {
  unsigned int done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(smem_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// ---- TMA ---------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_load_1d(void* dst, const TensorMap* map, unsigned long long* bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];" ::"r"(
                   smem_address(dst)),
               "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(bar)), "r"(c0)
               : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
                   smem_address(dst)),
               "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
          smem_address(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_address(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Plain bulk copy global -> shared (16-byte aligned ends, a multiple of 16 bytes).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned int bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_address(dst)),
               "l"(reinterpret_cast<unsigned long long>(src)), "r"(bytes), "r"(smem_address(bar))
               : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// ---- wgmma -------------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major operand whose rows are `kRowBytes` (64 or 128) long,
// written by TMA with the matching swizzle (64B or 128B); 8-row groups are 8 * kRowBytes apart.
template <int kRowBytes>
__device__ __forceinline__ unsigned long long matrix_descriptor(const void* p) {
  static_assert(kRowBytes == 64 || kRowBytes == 128, "64B or 128B swizzle");
  const unsigned long long address = smem_address(p);
  unsigned long long desc = (address & 0x3ffffull) >> 4;          // start address
  desc |= 1ull << 16;                                              // leading byte offset: unused when swizzled
  desc |= static_cast<unsigned long long>((8 * kRowBytes) >> 4) << 32;  // stride byte offset
  desc |= static_cast<unsigned long long>(kRowBytes == 128 ? 1 : 2) << 62;  // swizzle mode
  return desc;
}

// threadIdx.x / 128 as a value the compiler knows to be the same in every lane of a warp (a shuffle from
// lane 0), so that what derives from it (ring stage, mbarrier and descriptor addresses) is computed once
// per warp on the uniform datapath instead of per thread and moved into uniform registers for each wgmma.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0); }

// A consumer warpgroup's place in a ring of kStages stages that it visits every kStep-th (its blocks i,
// i + kStep, ...): the stage and the parity of the stage's full barrier, kept as it advances instead of
// i % kStages and (i / kStages) & 1 per block. Start it at a warp-uniform index (warpgroup_index).
template <int kStages, int kStep>
struct RingCursor {
  static_assert(kStages % kStep == 0, "a consumer's blocks cycle through its stages");
  int stage;
  unsigned phase = 0;
  __device__ __forceinline__ explicit RingCursor(int first) : stage(first) {}
  __device__ __forceinline__ void advance() {
    stage += kStep;
    if (stage >= kStages) stage -= kStages, phase ^= 1;
  }
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Until at most kPending of this warpgroup's committed wgmma groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }
// The same, not before `after` is computed: ptxas schedules a wait as early as its operands allow (it
// has none), which sank the work meant to overlap the pending wgmma below it. A warp-uniform branch on
// `after` (always taken: no FP32 operation yields that NaN pattern; the other arm waits just the same)
// puts the wait behind the work that produces it.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_after(float after) {
  if (__any_sync(0xffffffffu, __float_as_uint(after) != 0xffffffffu)) wgmma_wait<kPending>();
  else asm volatile("wgmma.wait_group.sync.aligned %0; // the other arm" ::"n"(kPending) : "memory");
}

// Register reconfiguration of a whole warpgroup (every warp of it executes it).
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// Keeps the compiler from moving accumulator (or A fragment) reads/writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_register(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }
// The same for an accumulator the next wgmma overwrites (scale-d 0): its value before is not needed.
__device__ __forceinline__ void fence_register_overwritten(float& r) { asm volatile("" : "=f"(r)::"memory"); }

// D[64 x N] (+)= A[64 x 32] * B[N x 32]^T, E4M3 x E4M3 -> FP32; `accumulate` = 0 overwrites D. A from a
// shared-memory descriptor or (N = 32, 64, 128) from registers: the 8-bit fragment (CUTLASS's
// ALayout_64x32) gives a thread rows r = 16 * warp + lane / 4 and r + 8, a0 = row r at columns
// 4 * (lane % 4) + 0..3 (the lowest in the low byte), a1 = row r + 8 there, a2 and a3 the same at
// columns + 16.
template <int kN>
struct WgmmaFp8;

template <>
struct WgmmaFp8<16> {
  __device__ __forceinline__ static void mma(float (&d)[8], unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

// The wgmma's accumulator operands d[0..n) as inline-asm "+f" constraints (8 at a time), shared by the
// shared-memory (SS) and register (RS) A forms.
#define FI_WGMMA_D8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define FI_WGMMA_D16(d) FI_WGMMA_D8(d, 0), FI_WGMMA_D8(d, 8)
#define FI_WGMMA_D32(d) FI_WGMMA_D16(d), FI_WGMMA_D8(d, 16), FI_WGMMA_D8(d, 24)
#define FI_WGMMA_D64(d) FI_WGMMA_D32(d), FI_WGMMA_D8(d, 32), FI_WGMMA_D8(d, 40), FI_WGMMA_D8(d, 48), FI_WGMMA_D8(d, 56)

template <>
struct WgmmaFp8<32> {
  __device__ __forceinline__ static void mma(float (&d)[16], unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, %16, %17, p, 1, 1;\n}\n"
        : FI_WGMMA_D16(d)
        : "l"(a), "l"(b), "r"(accumulate));
  }
  __device__ __forceinline__ static void mma(float (&d)[16], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : FI_WGMMA_D16(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<64> {
  __device__ __forceinline__ static void mma(float (&d)[32], unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : FI_WGMMA_D32(d)
        : "l"(a), "l"(b), "r"(accumulate));
  }
  __device__ __forceinline__ static void mma(float (&d)[32], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : FI_WGMMA_D32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<128> {
  __device__ __forceinline__ static void mma(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : FI_WGMMA_D64(d)
        : "l"(a), "l"(b), "r"(accumulate));
  }
  __device__ __forceinline__ static void mma(float (&d)[64], const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : FI_WGMMA_D64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};

#undef FI_WGMMA_D64
#undef FI_WGMMA_D32
#undef FI_WGMMA_D16
#undef FI_WGMMA_D8

}  // namespace sm90
}  // namespace kernels
}  // namespace flash_indexer
