#pragma once
// The parts of the sm90 sparse logits that the sparse logits kernel (sparse_paged_mqa_logits_sm90.cuh)
// and the sparse decode step (sparse_decode_step_sm90.cuh) share: where a candidate lies, the query
// tile, the gather of a 64-column tile into a ring stage, and the tile's scores, so that both compute
// every live value bitwise as the sm90 paged_mqa_logits kernel does at the same position
// (docs/design/two-level.md).
#include "mxfp4_e4m3.cuh"
#include "numeric.cuh"
#include "sm90_mqa_tile.cuh"
#include "sparse_paged_mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// Query row r's context length (MTP rule: row b * next_n + j sees lengths[b] - next_n + j + 1), >= 0.
__device__ __forceinline__ long long sparse_row_length(const SparsePagedMqaLogitsParams& sp, int r) {
  const PagedMqaLogitsParams& p = sp.p;
  const int b = r / sp.next_n, j = r % sp.next_n;
  const long long len = p.lens_2d ? p.context_lens[r] : static_cast<long long>(p.context_lens[b]) - sp.next_n + j + 1;
  return len < 0 ? 0 : len;
}

// Where candidate c of row r lies: x the cache block that holds it (-1: masked, as a candidate past the
// row's length, negative, or c past the list; -2: a block id outside the cache), y its first token in
// that block | its live positions (below the row's length) << 8.
template <int kBlock>
__device__ __forceinline__ int2 sparse_candidate(const SparsePagedMqaLogitsParams& sp, int r, int c, long long len) {
  const PagedMqaLogitsParams& p = sp.p;
  int id = -1, token = 0, live = 0;
  if (c < sp.num_candidates) {
    const long long candidate = sp.candidates[static_cast<long long>(r) * sp.candidates_stride + c];
    if (candidate >= 0 && candidate < (len + kBlock - 1) / kBlock) {
      const long long pos = candidate * kBlock;
      const long long slot = pos / 64;
      const int b = r / sp.next_n;
      const int block = slot < p.max_blocks ? p.block_table[static_cast<long long>(b) * p.block_table_stride + slot] : -1;
      id = block >= 0 && block < p.num_blocks ? block : -2;
      token = static_cast<int>(pos % 64);
      live = static_cast<int>(min(static_cast<long long>(kBlock), len - pos));
    }
  }
  return make_int2(id, token | live << 8);
}
__device__ __forceinline__ int sparse_candidate_live(int2 c) { return c.y >> 8; }

// Row r's query as E4M3 in the 128B-swizzled tile the wgmma reads (the layout of the full-context
// kernel's TMA) and its weights (MXFP4: with each head's factor 2^(M - 133), as there), by the
// `threads` threads from `tid`.
template <int kHeads, int kHeadDim, bool kMxfp4>
__device__ __forceinline__ void sparse_load_query(const PagedMqaLogitsParams& p, int r, unsigned char* q_s, float* weight_s,
                                                  int tid, int threads) {
  if constexpr (kMxfp4) {
    for (int h = tid; h < kHeads; h += threads) {
      const long long q_row = static_cast<long long>(r) * kHeads + h;
      const unsigned int exponents = static_cast<unsigned int>(p.q_scales[q_row]);
      mxfp4_query_row(p.q + q_row * (kHeadDim / 2), exponents, h, q_s);
      const Mxfp4Exponents e = mxfp4_exponents(exponents);
      float w = p.weights[q_row];
      if (!e.nan) w *= exact_power_of_two(e.largest - 133);
      weight_s[h] = w;
    }
  } else {
    const unsigned char* q = p.q + static_cast<long long>(r) * (kHeads * kHeadDim);
    for (int c = tid; c < kHeads * kHeadDim / 16; c += threads)
      *reinterpret_cast<uint4*>(q_s + swizzled_128b(c / 8, c % 8)) = reinterpret_cast<const uint4*>(q)[c];
    for (int h = tid; h < kHeads; h += threads) weight_s[h] = p.weights[static_cast<long long>(r) * kHeads + h];
  }
}

// One 64-column MXFP4 tile of gathered candidates: its kPer candidates (sparse_candidate) into a ring
// stage in the block layout of kMxfp4BlockBytes at dst, one bulk copy of key rows and one of exponents
// each, completing on `full` (at once where no candidate has an id). One thread issues it.
template <int kHeadDim, int kBlock>
__device__ __forceinline__ void sparse_issue_tile_mxfp4(const PagedMqaLogitsParams& p, const int2* candidates, unsigned char* dst,
                                                        unsigned long long* full) {
  constexpr int kPer = kSparseTile / kBlock;
  unsigned int bytes = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (candidates[i].x >= 0) bytes += kBlock * (kHeadDim / 2 + 4);
  sm90::mbarrier_arrive_expect_tx(full, bytes);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int id = candidates[i].x;
    if (id < 0) continue;
    const int token = candidates[i].y & 0xff;
    const unsigned char* block = p.kv_cache + static_cast<long long>(id) * p.kv_block_stride;
    sm90::bulk_load(dst + i * kBlock * 64, block + token * 64, kBlock * 64, full);
    sm90::bulk_load(dst + 64 * 64 + i * kBlock * 4, block + 64 * 64 + token * 4, kBlock * 4, full);
  }
}

// One 64-column FP8 tile of gathered candidates copied by a warpgroup's 128 threads (thread gtid): each
// key row's eight 16-byte chunks by cp.async into the 128B-swizzled layout a whole block's TMA writes,
// the 64 scales (to `scales`) by 16 threads; each thread then arrives on `full` (initialised for 128
// arrivals) once its copies have landed. One thread's TMA per candidate gathered 8-13 % slower
// (docs/benchmarks/decode.md).
template <int kBlock>
__device__ __forceinline__ void sparse_copy_tile_threads(const PagedMqaLogitsParams& p, const int2* candidates,
                                                         unsigned char* dst, float* scales, unsigned long long* full, int gtid) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int j = gtid + 128 * u, row = j >> 3, chunk = j & 7;
    const int2 c = candidates[row / kBlock];
    if (c.x >= 0) {
      const unsigned char* src =
          p.kv_cache + static_cast<long long>(c.x) * p.kv_block_stride + ((c.y & 0xff) + row % kBlock) * 128 + chunk * 16;
      cp_async16(sm90::smem_address(dst + swizzled_128b(row, chunk)), src);
    }
  }
  if (gtid < 16) {
    const int row = gtid * 4;
    const int2 c = candidates[row / kBlock];
    if (c.x >= 0) {
      const unsigned char* src =
          p.kv_cache + static_cast<long long>(c.x) * p.kv_block_stride + 64 * 128 + ((c.y & 0xff) + row % kBlock) * 4;
      cp_async16(sm90::smem_address(scales + row), src);
    }
  }
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(sm90::smem_address(full)) : "memory");
}

// How both sparse kernels fill a ring stage: FP8 by the warpgroup's 128 threads, MXFP4 by its thread 0.
template <int kHeadDim, int kBlock, bool kMxfp4>
struct SparseStageFill {
  static constexpr unsigned int kArrivals = kMxfp4 ? 1 : 128;  // the stage mbarrier's count
  // FP8's copies write through the generic proxy and the wgmma reads through the async one: a proxy
  // fence after the wait. The bulk copies write through the async proxy already.
  static constexpr bool kFenceAfterWait = !kMxfp4;
  __device__ static bool fills(int gtid) { return !kMxfp4 || gtid == 0; }
  // Called by the threads for which fills() holds: the candidates' key rows (and FP8 scales) into the
  // stage.
  __device__ static void fill(const PagedMqaLogitsParams& p, const int2* candidates, unsigned char* stage, float* scales,
                              unsigned long long* full, int gtid) {
    if constexpr (kMxfp4) sparse_issue_tile_mxfp4<kHeadDim, kBlock>(p, candidates, stage, full);
    else sparse_copy_tile_threads<kBlock>(p, candidates, stage, scales, full, gtid);
  }
};

// The scores of a landed stage (one warpgroup; its thread holds keys key0 and key0 + 8): acc = K * Q^T,
// and the scale of owned_key, the key whose head sum this thread keeps.
template <int kHeads, int kHeadDim, bool kMxfp4>
__device__ __forceinline__ float sparse_tile_scores(typename Sm90MqaTile<1, kHeads, kHeadDim>::Acc& acc,
                                                    const unsigned char* stage, const float* scales, const unsigned char* q_s,
                                                    int key0, int quad, int owned_key) {
  using Tile = Sm90MqaTile<1, kHeads, kHeadDim>;
  if constexpr (kMxfp4) {
    typename Tile::KeyFragments a;
    float key_scales[2];
    mxfp4_key_fragments(stage, key0, quad, a, key_scales);
    Tile::scores(acc, a, q_s);
    return (quad & 1) != 0 ? key_scales[1] : key_scales[0];
  } else {
    Tile::scores(acc, stage, q_s);
    return scales[owned_key];
  }
}

}  // namespace kernels
}  // namespace flash_indexer
