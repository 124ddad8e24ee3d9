#pragma once
// MXFP4 (CONTRACT 2.2) into FP8 E4M3 for the sm_90a tensor cores, which have no FP4 path.
//
// A vector's value i is e2m1(i) * 2^(e_g - 127), e_g the UE8M0 exponent of its 32-element group g. With
// M = max_g e_g, it is written as E4M3 e2m1(i) * 2^(e_g - M + 6) times the vector's factor 2^(M - 133):
// the largest group's values then reach 6 * 2^6 = 384 <= 448, E4M3's largest finite value, and the
// E4M3 value is exact (E2M1 has one mantissa bit, E4M3 three) down to a group 14 binades below M (its
// 0.5 * 2^-8 = 2^-9 is E4M3's smallest subnormal). A group further below is rounded to the nearest
// E4M3 (to even; to 0 below 2^-10): the only inexact case. The factor 2^(M - 133) is a power of two in
// FP32 (subnormal below M = 7), applied to the logit by the kernel (the key's as its scale, the query
// head's folded into the head's weight), so the logits are the FP8 path's with these operands.
// An exponent 0xFF (NaN) makes the vector's dots NaN, which the ReLU counts as 0: such a vector is
// written as zeros (its scale 1), and so its logits are 0 as the reference makes them.

namespace flash_indexer {
namespace kernels {

// The E4M3 bytes of the 8 E2M1 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^shift, byte c for code c
// (codes 0-3 in .x, 4-7 in .y), rounded to nearest even and saturated: cvt.rn.satfinite.e4m3x2.f32
// puts its first operand in the upper byte.
__device__ __forceinline__ uint2 e4m3_magnitudes(int shift) {
  shift = shift < -30 ? -30 : shift;  // below, every value rounds to 0 anyway
  const float f = __int_as_float((127 + shift) << 23);
  unsigned short b[4];
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(b[0]) : "f"(0.5f * f), "f"(0.0f));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(b[1]) : "f"(1.5f * f), "f"(1.0f * f));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(b[2]) : "f"(3.0f * f), "f"(2.0f * f));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(b[3]) : "f"(6.0f * f), "f"(4.0f * f));
  return make_uint2(static_cast<unsigned int>(b[0]) | static_cast<unsigned int>(b[1]) << 16,
                    static_cast<unsigned int>(b[2]) | static_cast<unsigned int>(b[3]) << 16);
}

// The 8 values of one packed word (nibble i = value i, low nibble first) as 8 E4M3 bytes (.x: values
// 0-3), through a table of magnitudes (e4m3_magnitudes); the sign bit of each nibble becomes the byte's.
__device__ __forceinline__ uint2 e4m3_of_packed(unsigned int x, uint2 table) {
  const unsigned int lo = __byte_perm(table.x, table.y, x & 0x7777u) | __byte_perm(0u, 0x80808080u, (x >> 1) & 0x4444u);
  const unsigned int hi =
      __byte_perm(table.x, table.y, (x >> 16) & 0x7777u) | __byte_perm(0u, 0x80808080u, (x >> 17) & 0x4444u);
  return make_uint2(lo, hi);
}

// 2^e for e in [-149, 127], exact in FP32 (subnormal below -126): a vector's factor 2^(M - 133).
__device__ __forceinline__ float exact_power_of_two(int e) {
  return e >= -126 ? __int_as_float((e + 127) << 23) : __int_as_float(1 << (e + 149));
}

// The largest of a vector's four UE8M0 exponents, and whether one is 0xFF.
struct Mxfp4Exponents {
  int largest;
  bool nan;
};
__device__ __forceinline__ Mxfp4Exponents mxfp4_exponents(unsigned int word) {
  const unsigned int e0 = word & 0xffu, e1 = (word >> 8) & 0xffu, e2 = (word >> 16) & 0xffu, e3 = word >> 24;
  const unsigned int m = max(max(e0, e1), max(e2, e3));
  return {static_cast<int>(m), m == 0xffu};
}

// Converts the 32 values of group g of a vector (16 packed bytes, `in`) into its 32 E4M3 bytes (`out`).
__device__ __forceinline__ void e4m3_of_group(const uint4& in, unsigned int exponents, int g, int largest, uint4 (&out)[2]) {
  const uint2 table = e4m3_magnitudes(static_cast<int>((exponents >> (8 * g)) & 0xffu) - largest + 6);
  const uint2 a = e4m3_of_packed(in.x, table), b = e4m3_of_packed(in.y, table);
  const uint2 c = e4m3_of_packed(in.z, table), d = e4m3_of_packed(in.w, table);
  out[0] = make_uint4(a.x, a.y, b.x, b.y);
  out[1] = make_uint4(c.x, c.y, d.x, d.y);
}

// Byte offset of 16-byte chunk c of row r in a 128B-swizzled K-major tile of 128-byte rows (what the
// TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and the wgmma descriptors read), from a 1024-aligned base.
__device__ __forceinline__ int swizzled_128b(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

}  // namespace kernels
}  // namespace flash_indexer
