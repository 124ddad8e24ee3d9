#pragma once
// MXFP4 (contract §2.2) into FP8 E4M3 for the sm_90a tensor cores, which have no FP4 path.
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
// (codes 0-3 in .x, 4-7 in .y), rounded to nearest even and saturated. From shift -5 on every one is a
// normal E4M3 number (shift <= 6 here, so at most 384): 0, then K = (6 + shift) << 3 (0.5 * 2^shift),
// then K + 4c for codes c >= 2 (exponent field e - 1 + shift + 7, mantissa bit c % 2), four bytes per
// multiply. Below, cvt.rn.satfinite.e4m3x2.f32 rounds them (it puts its first operand in the upper byte).
__device__ __forceinline__ uint2 e4m3_magnitudes(int shift) {
  if (shift >= -5) {
    const unsigned int k = static_cast<unsigned int>(6 + shift) << 3;
    return make_uint2(k * 0x01010100u + 0x0C080000u, k * 0x01010101u + 0x1C181410u);
  }
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

__device__ __forceinline__ unsigned int prmt(unsigned int a, unsigned int b, unsigned int selector) {
  unsigned int d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// How one exponent group converts: its magnitudes' table and the sign byte (0x80, or 0 with a zero table
// for a NaN vector, whose values are written as zeros).
struct E4m3Group {
  uint2 table;
  unsigned int sign;
};
__device__ __forceinline__ E4m3Group e4m3_group(int shift, bool nan) {
  return nan ? E4m3Group{make_uint2(0u, 0u), 0u} : E4m3Group{e4m3_magnitudes(shift), 0x80808080u};
}

// The 8 values of one packed word (nibble i = value i, low nibble first) as 8 E4M3 bytes (.x: values
// 0-3): prmt picks byte c of the table for selector nibble c (bit 3 clear; prmt reads the low four
// nibbles only), and the sign byte or 0 for selector nibble 4 or 0, i.e. the nibble's bit 3 moved to 2.
__device__ __forceinline__ uint2 e4m3_of_packed(unsigned int x, const E4m3Group& g) {
  const unsigned int magnitude = x & 0x77777777u;
  const unsigned int sign = (x >> 1) & 0x44444444u;
  return make_uint2(prmt(g.table.x, g.table.y, magnitude) | prmt(0u, g.sign, sign),
                    prmt(g.table.x, g.table.y, magnitude >> 16) | prmt(0u, g.sign, sign >> 16));
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
// Group g of a vector with exponent word `exponents` (whose largest and NaN flag are `e`): shifted by
// 6 - M, so that the largest group's values reach 384.
__device__ __forceinline__ E4m3Group e4m3_group(unsigned int exponents, int g, const Mxfp4Exponents& e) {
  return e4m3_group(static_cast<int>((exponents >> (8 * g)) & 0xffu) - e.largest + 6, e.nan);
}

// Byte offset of 16-byte chunk c of row r in a 128B-swizzled K-major tile of 128-byte rows (what the
// TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and the wgmma descriptors read), from a 1024-aligned base.
__device__ __forceinline__ int swizzled_128b(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// The sm90 kernel's K order (D = 128): the wgmma's A fragments give lane q of a quad, per k-step kk,
// columns 4q..4q+3 and 16+4q..16+4q+3 of its two keys (sm90_primitives.cuh, WgmmaFp8). Those columns
// hold dimensions 32q + 8kk + 0..7, so a lane converts exponent group q of its keys, 16 packed bytes
// read at once, straight into its fragments with one exponent, and the dot products are the same sums
// in another order. The query's tile is written in that order: dimension 32g + 4w + i (word w of group
// g, i < 4) at column 32(w / 2) + 16(w % 2) + 4g + i, i.e. the 16-byte chunk w of a row holds word w of
// the four groups.
// One query row (its 64 packed bytes and exponent word) as E4M3 in that order, into its 128-byte row of
// a 128B-swizzled K-major tile (what the wgmma's B descriptor reads).
__device__ __forceinline__ void mxfp4_query_row(const unsigned char* packed, unsigned int exponents, int row,
                                                unsigned char* tile) {
  const Mxfp4Exponents e = mxfp4_exponents(exponents);
  unsigned int words[8][4];  // [word w][group g]
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint4 in = *reinterpret_cast<const uint4*>(packed + 16 * g);
    const E4m3Group group = e4m3_group(exponents, g, e);
    const unsigned int x[4] = {in.x, in.y, in.z, in.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 v = e4m3_of_packed(x[i], group);
      words[2 * i][g] = v.x;
      words[2 * i + 1][g] = v.y;
    }
  }
#pragma unroll
  for (int w = 0; w < 8; ++w)
    *reinterpret_cast<uint4*>(tile + swizzled_128b(row, w)) = make_uint4(words[w][0], words[w][1], words[w][2], words[w][3]);
}

// A thread's keys key0 and key0 + 8 of an MXFP4 block (kMxfp4BlockBytes at `raw`: 64 tokens of 64
// packed bytes, then their exponent words) as the wgmma's A fragments in that order (a[kk]: k-step
// kk), lane `quad` converting group `quad`; and each key's factor 2^(M - 133) (1 for a NaN vector, whose
// values are zeros).
__device__ __forceinline__ void mxfp4_key_fragments(const unsigned char* raw, int key0, int quad, unsigned int (&a)[4][4],
                                                    float (&scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int token = key0 + 8 * r;
    const unsigned int exponents = *reinterpret_cast<const unsigned int*>(raw + 64 * 64 + token * 4);
    const uint4 in = *reinterpret_cast<const uint4*>(raw + token * 64 + quad * 16);
    const Mxfp4Exponents e = mxfp4_exponents(exponents);
    const E4m3Group group = e4m3_group(exponents, quad, e);
    const unsigned int x[4] = {in.x, in.y, in.z, in.w};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint2 v = e4m3_of_packed(x[kk], group);
      a[kk][r] = v.x;      // a0 / a1: columns 4q..4q+3 of key0 / key0 + 8
      a[kk][2 + r] = v.y;  // a2 / a3: columns 16+4q..16+4q+3
    }
    scale[r] = e.nan ? 1.0f : exact_power_of_two(e.largest - 133);
  }
}

}  // namespace kernels
}  // namespace flash_indexer
