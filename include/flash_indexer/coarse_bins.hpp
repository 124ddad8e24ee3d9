#pragma once
// The coarse score bins of contract §3: 1024 bins in descending score order. One definition for
// the host (users' own selectors, the CPU reference) and the device (this header is also embedded into
// the JIT's kernel sources). Plain C++17 with no includes, so NVRTC compiles it without a CUDA include
// directory.
//
//   bin 0 holds scores >= 223 (and +inf), bin 511 +0 and tiny positives, bin 512 tiny negatives,
//   bin 1023 scores < -223 (and -inf); -0 counts as +0. |x| >= 16 gets unit-width bins; below that, the
//   bin is the FP16 exponent and top 4 mantissa bits of the score rounded to FP16. A larger score never
//   lands in a larger bin. NaN has no bin: callers skip it (coarse_bin(NaN) is 0 or 1023, meaninglessly).

#if defined(__CUDACC__)
#define FLASH_INDEXER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASH_INDEXER_HOST_DEVICE inline
#endif

namespace flash_indexer {

constexpr int kCoarseBins = 1024;

FLASH_INDEXER_HOST_DEVICE unsigned int float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(unsigned int, x);
#endif
}

FLASH_INDEXER_HOST_DEVICE float float_from_bits(unsigned int bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

// FP32 -> FP16 bits, round to nearest even; overflow gives infinity, NaN gives a quiet NaN.
FLASH_INDEXER_HOST_DEVICE unsigned short float_to_f16_bits(float x) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  const unsigned int bits = float_bits(x);
  const unsigned int sign = (bits >> 16) & 0x8000u;
  const unsigned int mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<unsigned short>(sign | 0x7e00u);   // NaN
  if (mag >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // >= 65520: infinity (ties to even)
  if (mag < 0x38800000u) {  // below 2^-14: FP16 subnormal or zero; scaling by 2^24 is exact
    const float units = float_from_bits(mag) * 16777216.0f;
    unsigned int integer = static_cast<unsigned int>(units);
    const float fraction = units - static_cast<float>(integer);
    if (fraction > 0.5f || (fraction == 0.5f && (integer & 1u))) ++integer;  // 0x400 is the first normal
    return static_cast<unsigned short>(sign | integer);
  }
  unsigned int half = (((mag >> 23) - 112u) << 10) | ((mag >> 13) & 0x3ffu);
  const unsigned int rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry into the exponent is correct
  return static_cast<unsigned short>(sign | half);
#endif
}

// The coarse bin (0..1023) of a non-NaN FP32 score.
FLASH_INDEXER_HOST_DEVICE int coarse_bin(float x) {
  const unsigned int bits = float_bits(x);
  unsigned int mag = bits & 0x7fffffffu;
  const bool negative = (bits >> 31) != 0 && mag != 0;
  int code = static_cast<int>((float_to_f16_bits(x) & 0x7fffu) >> 6);
  if (code >= 304) {  // |x| >= 16, or rounds up to 16: unit-width bins
    if (negative) mag -= 1;  // one ULP down, so [-17, -16] shares a bin and -16 is not alone
    if (mag > 0x435f0000u) mag = 0x435f0000u;  // 223.0f
    const int unit = static_cast<int>(float_from_bits(mag)) + 288;  // truncation = floor for mag >= 0
    code = unit > 304 ? unit : 304;
  }
  return negative ? 512 + code : 511 - code;
}

}  // namespace flash_indexer
