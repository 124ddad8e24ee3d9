#pragma once
// Random prefill problems for the mqa_logits and PrefillPlan tests and `flash-indexer check`:
// exact-arithmetic inputs (q and k in {0, +-1, +-2, +-3, +-4}, weights in steps of 1/8, power-of-two
// scales), so every FP32 sum is exact and the GPU logits equal the reference's rounded to the output
// type; windows of every kind.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "flash_indexer/reference.hpp"

namespace flash_indexer::check {

struct PrefillProblem {
  int T, H, D, N;
  std::vector<std::uint8_t> q, kv;  // kv rows padded to kv_stride bytes
  std::int64_t kv_stride;
  std::vector<float> scales, w;
  std::vector<std::int32_t> ks, ke;

  reference::MqaLogitsInputs reference_inputs() const {
    reference::MqaLogitsInputs in;
    in.tokens = T;
    in.heads = H;
    in.head_dim = D;
    in.keys = N;
    in.q = q.data();
    in.kv = kv.data();
    in.kv_stride = kv_stride;
    in.kv_scales = scales.data();
    in.weights = w.data();
    in.ks = ks.data();
    in.ke = ke.data();
    return in;
  }
};

// Token t's window by t % 6: causal, a sliding window of 300, empty, reversed (empty), beyond both ends
// (the whole), arbitrary.
inline PrefillProblem make_prefill_problem(int T, int H, int D, int N, std::mt19937_64& rng) {
  static const std::uint8_t small[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8};
  PrefillProblem p{T, H, D, N, {}, {}, D + 16, {}, {}, {}, {}};
  std::uniform_int_distribution<int> pick(0, 8), step(-16, 16), exp2(4, 11);
  p.q.resize(static_cast<std::size_t>(T) * H * D);
  for (auto& b : p.q) b = small[pick(rng)];
  p.kv.assign(static_cast<std::size_t>(N) * p.kv_stride, 0xEE);  // the row padding is never read
  for (int s = 0; s < N; ++s)
    for (int d = 0; d < D; ++d) p.kv[static_cast<std::size_t>(s) * p.kv_stride + d] = small[pick(rng)];
  for (int s = 0; s < N; ++s) p.scales.push_back(std::ldexp(1.0f, -exp2(rng)));
  for (int i = 0; i < T * H; ++i) p.w.push_back(step(rng) / 8.0f);
  std::uniform_int_distribution<int> any(-50, N + 50);
  for (int t = 0; t < T; ++t) {
    int start, end;
    switch (t % 6) {
      case 0: start = 0, end = N - T + t + 1; break;
      case 1: end = N - T + t + 1, start = std::max(0, end - 300); break;
      case 2: start = end = any(rng); break;
      case 3: start = any(rng), end = start - 5; break;
      case 4: start = -20, end = N + 20; break;
      default: start = any(rng), end = any(rng); break;
    }
    p.ks.push_back(start);
    p.ke.push_back(end);
  }
  return p;
}

}  // namespace flash_indexer::check
