#pragma once
// Number formats on the device, written out so that NVRTC needs no CUDA include directory.
// FP8 E4M3 (OCP "E4M3FN": no infinities, S.1111.111 is NaN) is decoded in software so the same code
// runs on sm_80; FP16/BF16 stores round to nearest even with the PTX cvt instructions (FP16 through
// coarse_bins.hpp, whose bin mapping must see exactly the values the kernel stores).
#include "coarse_bins.hpp"

namespace flash_indexer {
namespace kernels {

enum class LogitsOut : int { f32 = 0, f16 = 1, bf16 = 2 };

__device__ __forceinline__ float negative_infinity() { return float_from_bits(0xff800000u); }
__device__ __forceinline__ float quiet_nan() { return float_from_bits(0x7fc00000u); }

// Exact: every E4M3 value is an FP32 value. The 7 magnitude bits shifted into an FP32 exponent/
// mantissa position give the value times 2^-120 (subnormals included), so one multiply rescales it.
__device__ __forceinline__ float fp8_e4m3_to_float(unsigned int byte) {
  const unsigned int mag = byte & 0x7fu;
  const float value = float_from_bits(mag << 20) * 1.329227995784916e36f;  // 2^120
  if (mag == 0x7fu) return quiet_nan();
  return (byte & 0x80u) ? -value : value;
}

// MXFP4 (contract §2.2): an E2M1 value (the low 4 bits of `nibble`: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
// negatives) times its UE8M0 exponent 2^(e - 127); 0xFF is NaN. Exact in FP32 for e <= 252 (subnormals
// included); the largest values overflow to infinity beyond.
__device__ __forceinline__ float ue8m0_to_float(unsigned int e) {
  if (e == 0xffu) return quiet_nan();
  return e == 0 ? float_from_bits(0x00400000u) : float_from_bits(e << 23);  // 2^-127 is subnormal
}
__device__ __forceinline__ float mxfp4_to_float(unsigned int nibble, float scale) {
  const unsigned int m = nibble & 7u;
  const float magnitude = m < 4 ? 0.5f * static_cast<float>(m) : static_cast<float>(m == 4 ? 2 : m == 5 ? 3 : m == 6 ? 4 : 6);
  const float value = magnitude * scale;
  return (nibble & 8u) ? -value : value;
}

// The scale of the 32-element group g of an MXFP4 vector, from its four packed exponents (byte g).
__device__ __forceinline__ float mxfp4_group_scale(int exponents, int g) {
  return ue8m0_to_float((static_cast<unsigned int>(exponents) >> (8 * g)) & 0xffu);
}

// 16 bytes of FP8 E4M3 to out[0..15].
__device__ __forceinline__ void fp8x16_to_float(const uint4& raw, float* out) {
  const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 16; ++i) out[i] = fp8_e4m3_to_float((words[i / 4] >> (8 * (i % 4))) & 0xffu);
}

// The portable logits kernels' partial score of one key: the sum over heads h = first, first + step, ...
// below kHeads of relu(query_h . key) * weight[h], the dot over d ascending, every step one fmaf. Every
// portable kernel (ragged, paged, sparse) sums through it, so their logits agree bit for bit (the sparse
// kernel's tests compare it with the paged one's at the same positions).
template <int kHeads, int kHeadDim>
__device__ __forceinline__ float heads_relu_dot(const float* query, const float* key, const float* weight, int first, int step) {
  float acc = 0.0f;
  for (int h = first; h < kHeads; h += step) {
    float dot = 0.0f;
#pragma unroll 16
    for (int d = 0; d < kHeadDim; ++d) dot = fmaf(query[h * kHeadDim + d], key[d], dot);
    acc = fmaf(fmaxf(dot, 0.0f), weight[h], acc);
  }
  return acc;
}

// 16 bytes of packed E2M1 (32 values of one group, low nibble first) times the group's scale, to
// out[0..31].
__device__ __forceinline__ void mxfp4x32_to_float(const uint4& raw, float scale, float* out) {
  const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 32; ++i) out[i] = mxfp4_to_float(words[i / 8] >> (4 * (i % 8)), scale);
}

__device__ __forceinline__ float f16_bits_to_float(unsigned short h) {
  float x;
  asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
  return x;
}

__device__ __forceinline__ float bf16_bits_to_float(unsigned short h) {
  return float_from_bits(static_cast<unsigned int>(h) << 16);
}

// store() writes one logit and returns the value as stored, widened back to FP32 (what the histogram
// bins and what a selector reading the logits sees).
template <LogitsOut kOut>
struct LogitsStore;

template <>
struct LogitsStore<LogitsOut::f32> {
  __device__ __forceinline__ static float store(void* base, long long index, float x) {
    static_cast<float*>(base)[index] = x;
    return x;
  }
  __device__ __forceinline__ static float rounded(float x) { return x; }  // what store() stores, as FP32
};

template <>
struct LogitsStore<LogitsOut::f16> {
  __device__ __forceinline__ static float store(void* base, long long index, float x) {
    const unsigned short bits = float_to_f16_bits(x);
    static_cast<unsigned short*>(base)[index] = bits;
    return f16_bits_to_float(bits);
  }
  __device__ __forceinline__ static float rounded(float x) { return f16_bits_to_float(float_to_f16_bits(x)); }
};

template <>
struct LogitsStore<LogitsOut::bf16> {
  __device__ __forceinline__ static float store(void* base, long long index, float x) {
    unsigned short bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    static_cast<unsigned short*>(base)[index] = bits;
    return bf16_bits_to_float(bits);
  }
  __device__ __forceinline__ static float rounded(float x) {
    unsigned short bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return bf16_bits_to_float(bits);
  }
};

}  // namespace kernels
}  // namespace flash_indexer
