#pragma once
// The consumer warpgroup's math of the sm_90a MQA logits kernels (paged: paged_mqa_logits_sm90.cuh;
// ragged prefill: mqa_logits_sm90.cuh), for one stage of 64 keys against kRows query rows of kHeads
// heads (N = kRows * kHeads wgmma columns):
//
//   S[64 keys x N] = K[64 x D] * Q[N x D]^T     (wgmma m64nNk32 E4M3 x E4M3 -> FP32)
//   sum[j][r]      = sum_h w[j, h] * max(S[key_r, j*H + h], 0)   for this thread's keys key0, key0 + 8
//
// The head sum runs in registers (each thread holds 2 keys x N/4 columns of S), then across the 4
// lanes of a quad with shuffles, in a fixed order: results are bitwise deterministic.
#include "paged_mqa_logits_params.cuh"  // Sm90Layout
#include "sm90_primitives.cuh"

namespace flash_indexer {
namespace kernels {

// The dynamic shared memory of both kernels (a Sm90Layout of kStages ring stages) in its parts, with the
// ring's mbarriers: full (the producer's TMA), empty (the 128 threads of each consumer warpgroup that
// takes the stage), scores full (a consumer warpgroup), scores free (a store warp), and q full.
template <int kStages>
struct Sm90MqaSmem {
  unsigned char* q;
  unsigned char* k;
  float* scales;
  float* weights;
  float* scores;  // [stage][query row][64]
  int* hist;
  unsigned long long* full;
  unsigned long long* empty;
  unsigned long long* scores_full;
  unsigned long long* scores_free;
  unsigned long long* q_full;
  int* invalid;    // [stage]
  int* block_ids;  // [kSm90MaxBlocksPerSplit] (the paged kernel)

  __device__ __forceinline__ Sm90MqaSmem(unsigned char* raw, const Sm90Layout& l) {
    unsigned char* smem = raw + ((1024u - (sm90::smem_address(raw) & 1023u)) & 1023u);  // 128B swizzle: 1024-aligned
    q = smem + l.q;
    k = smem + l.k;
    scales = reinterpret_cast<float*>(smem + l.scales);
    weights = reinterpret_cast<float*>(smem + l.weights);
    scores = reinterpret_cast<float*>(smem + l.values);
    hist = reinterpret_cast<int*>(smem + l.histogram);
    full = reinterpret_cast<unsigned long long*>(smem + l.barriers);
    empty = full + kStages;
    scores_full = empty + kStages;
    scores_free = scores_full + kStages;
    q_full = scores_free + kStages;
    invalid = reinterpret_cast<int*>(smem + l.invalid);
    block_ids = reinterpret_cast<int*>(smem + l.block_ids);
  }

  // By one thread; the block synchronizes before any barrier is used. `empty_arrivals`: the threads of
  // the consumer warpgroups that share each stage.
  __device__ __forceinline__ void init_barriers(int empty_arrivals = 128) const {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);
      sm90::mbarrier_init(&empty[s], empty_arrivals);
      sm90::mbarrier_init(&scores_full[s], 128);
      sm90::mbarrier_init(&scores_free[s], 32);
    }
    sm90::mbarrier_init(q_full, 1);
    sm90::fence_barrier_init();
  }
};

template <int kRows, int kHeads, int kHeadDim>
struct Sm90MqaTile {
  static constexpr int kN = kRows * kHeads;
  static_assert(kN <= 256, "one wgmma tile in N");
  static_assert(kHeads % 8 == 0, "an 8-column wgmma group never spans two query rows");
  // One wgmma as wide as N up to 128 (N = 256: two of 128), so each k-step reads the key tile from
  // shared memory once per 128 columns. The accumulators of chunk c, group g are those of group
  // c * kChunk / 8 + g of one wide tile, so the head sums below run in the same order for any chunking.
  static constexpr int kChunk = kN % 128 == 0 ? 128 : kN % 64 == 0 ? 64 : kN % 32 == 0 ? 32 : 16;
  static constexpr int kChunks = kN / kChunk;
  static constexpr int kKeyBytes = 64 * kHeadDim;
  using Mma = sm90::WgmmaFp8<kChunk>;
  using Acc = float[kChunks][kChunk / 2];

  using KeyFragments = unsigned[kHeadDim / 32][4];
  // Keeps the compiler from moving reads or writes of these registers across the asynchronous wgmma.
  __device__ __forceinline__ static void fence(Acc& acc) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int r = 0; r < kChunk / 2; ++r) sm90::fence_register(acc[c][r]);
  }
  __device__ __forceinline__ static void fence(KeyFragments& a) {
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) sm90::fence_register(a[kk][i]);
  }

  // The wgmma of kCount chunks from chunk c on, as one instruction per k-step (their accumulators are
  // contiguous in acc), over the block's keys (descriptor `a`); not committed.
  template <int kCount = 1>
  __device__ __forceinline__ static void issue_chunks(Acc& acc, unsigned long long a, const unsigned char* q_s, int c) {
    using Columns = float[kCount * kChunk / 2];
    const unsigned long long b = sm90::matrix_descriptor<kHeadDim>(q_s + c * kChunk * kHeadDim);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk)
      sm90::WgmmaFp8<kCount * kChunk>::mma(*reinterpret_cast<Columns*>(&acc[c][0]), a + 2 * kk, b + 2 * kk, kk);
  }

  // acc = K(stage) * Q^T; waits for the wgmma, so the stage may be released on return.
  __device__ __forceinline__ static void scores(Acc& acc, const unsigned char* k_stage, const unsigned char* q_s) {
    fence(acc);
    sm90::wgmma_fence();
    // A k-step 32 bytes on is the descriptor's start address (bytes / 16, 14 bits) plus 2: shared memory
    // ends below 256 KB, so the field never carries. One descriptor per operand and block instead of
    // one per k-step and operand (the address arithmetic was a quarter of the consumers' issue slots
    // around the wgmma).
    const unsigned long long a = sm90::matrix_descriptor<kHeadDim>(k_stage);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) issue_chunks(acc, a, q_s, c);
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();
    fence(acc);
  }

  // The same with the keys as wgmma A fragments in registers, one set per k-step (the MXFP4 path
  // converts its keys straight into them: mxfp4_e4m3.cuh). The first k-step overwrites acc.
  __device__ __forceinline__ static void scores(Acc& acc, KeyFragments& a, const unsigned char* q_s) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int r = 0; r < kChunk / 2; ++r) sm90::fence_register_overwritten(acc[c][r]);
    fence(a);
    sm90::wgmma_fence();
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const unsigned long long b = sm90::matrix_descriptor<kHeadDim>(q_s + c * kChunk * kHeadDim);
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) Mma::mma(acc[c], a[kk], b + 2 * kk, kk);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();
    fence(acc);
    fence(a);
  }

  // Column c = j * H + h of S: a thread holds columns 8g + 2 * quad + {0, 1} of each 8-column group g,
  // for its two keys (accumulator registers 4g + {0, 1} and 4g + {2, 3}). Its partial sums of the
  // 2 * kRows values v = 2j + r (query row j, key key0 + 8r) are then reduced across the quad and
  // scattered: lane `quad` ends with the values v = 4n + quad (n < kOwned), see reduce_quad. The weights
  // come from shared memory (weight_s) or from registers (Weights).
  static constexpr int kOwned = (kRows + 1) / 2;
  using Owned = float[kOwned];
  // The weights of this thread's columns, held in registers where they do not change for the CTA's
  // keys: at N = 128 that saves 16 KB of shared-memory reads per stage and consumer.
  using Weights = float2[kChunks][kChunk / 8];
  // Group g of chunk c's two weights for this lane, from registers or from shared memory.
  __device__ __forceinline__ static float2 weight_of(const Weights& w, int c, int g, int) { return w[c][g]; }
  __device__ __forceinline__ static float2 weight_of(const float* weight_s, int c, int g, int quad) {
    return *reinterpret_cast<const float2*>(&weight_s[c * kChunk + 8 * g + 2 * quad]);
  }
  __device__ __forceinline__ static void load_weights(Weights& w, const float* weight_s, int quad) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int g = 0; g < kChunk / 8; ++g) w[c][g] = weight_of(weight_s, c, g, quad);
  }
  // The same operations in the same order whichever the weights' source, so the same bits.
  template <class WeightSource>
  __device__ __forceinline__ static void head_sums(const Acc& acc, const WeightSource& weight, int quad, Owned& out) {
    float sum[kRows][2];
    clear(sum);
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int g = 0; g < kChunk / 8; ++g) add_group(acc, c, g, weight_of(weight, c, g, quad), sum);
    reduce_quad(sum, quad, out);
  }

  // scores() and head_sums() with the consumer's epilogue overlapping its own tensor work: the first
  // chunk of N columns as one wgmma and commit group, the later chunks as another, and the first chunk's
  // head sums while the later chunks' wgmma runs, shortening one consumer's chain of wgmma then epilogue.
  // Two wgmma per block, so the keys are read from shared memory twice, not once per chunk (at N = 192,
  // three groups of one row each were 3 % slower). The paged kernel uses it where only two consumers
  // share the SM (N = 192); where four overlap each other's epilogues (N = 96..128) it gained nothing
  // (docs/benchmarks/logits.md, "Tried and not kept"). The sums are added in head_sums' order and a column's dot does not depend
  // on the wgmma's width: the same bits. `released` runs once the last wgmma has read the stage.
  template <class WeightSource, class Released>
  __device__ __forceinline__ static void scores_and_head_sums(Acc& acc, const unsigned char* k_stage, const unsigned char* q_s,
                                                              const WeightSource& weight, int quad, Owned& out,
                                                              Released&& released) {
    static_assert(kChunks > 1 && kChunk % kHeads == 0, "whole query rows in each of several chunks");
    fence(acc);
    sm90::wgmma_fence();
    const unsigned long long a = sm90::matrix_descriptor<kHeadDim>(k_stage);
    issue_chunks(acc, a, q_s, 0);
    sm90::wgmma_commit();
    issue_chunks<kChunks - 1>(acc, a, q_s, 1);
    sm90::wgmma_commit();
    float sum[kRows][2];
    clear(sum);
    float half[kRows];
    chunk_head_sums<0>(acc, weight, quad, sum, half, released);
    reduce_quad_pairs(half, quad, out);
  }
  template <int kC, class WeightSource, class Released>
  __device__ __forceinline__ static void chunk_head_sums(Acc& acc, const WeightSource& weight, int quad, float (&sum)[kRows][2],
                                                         float (&half)[kRows], Released& released) {
    constexpr int kChunkRows = kChunk / kHeads;
    if constexpr (kC == 0) sm90::wgmma_wait<1>();
    else if constexpr (kC == 1) sm90::wgmma_wait_after<0>(half[kChunkRows - 1]);
#pragma unroll
    for (int r = 0; r < kChunk / 2; ++r) sm90::fence_register(acc[kC][r]);
    if constexpr (kC == 1) released();
#pragma unroll
    for (int g = 0; g < kChunk / 8; ++g) add_group(acc, kC, g, weight_of(weight, kC, g, quad), sum);
      // The chunk's rows' first exchange step now, before the next wait: the shuffles keep ptxas from
      // sinking the first chunk's sums below it (it did, with the sums alone).
#pragma unroll
    for (int m = kC * kChunkRows; m < (kC + 1) * kChunkRows; ++m) half[m] = reduce_pair(sum[m], (quad & 1) != 0);
    if constexpr (kC + 1 < kChunks) chunk_head_sums<kC + 1>(acc, weight, quad, sum, half, released);
  }

  __device__ __forceinline__ static void clear(float (&sum)[kRows][2]) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) sum[j][0] = sum[j][1] = 0.0f;
  }
  // Group g of chunk c (query row j = its columns' row) with its two weights w.
  __device__ __forceinline__ static void add_group(const Acc& acc, int c, int g, float2 w, float (&sum)[kRows][2]) {
    add_group(&acc[c][4 * g], c * (kChunk / 8) + g, w, sum);
  }
  // The 4 accumulators v of 8-column group `group` of the whole tile.
  __device__ __forceinline__ static void add_group(const float* v, int group, float2 w, float (&sum)[kRows][2]) {
    const int j = group / (kHeads / 8);
    sum[j][0] = fmaf(fmaxf(v[0], 0.0f), w.x, sum[j][0]);
    sum[j][1] = fmaf(fmaxf(v[2], 0.0f), w.x, sum[j][1]);
    sum[j][0] = fmaf(fmaxf(v[1], 0.0f), w.y, sum[j][0]);
    sum[j][1] = fmaf(fmaxf(v[3], 0.0f), w.y, sum[j][1]);
  }

  // The register-fragment form where N's accumulators and the fragments together do not fit the
  // registers (Sm90PagedForm::mxfp4_round: next_n 4, N = 128 with four consumers, N = 256 with two): the columns in
  // rounds of kRound, each its own wgmma over the same fragments followed by its query rows' head sums,
  // so that one round's accumulators are live at a time. Rows never span rounds (kRound % kHeads == 0),
  // so every sum runs in head_sums' order: the same bits.
  template <int kRound>
  __device__ __forceinline__ static void head_sums_in_rounds(KeyFragments& a, const unsigned char* q_s, const float* weight_s,
                                                             int quad, Owned& out) {
    static_assert(kN % kRound == 0 && kRound % kHeads == 0, "whole query rows per round");
    using Round = Sm90MqaTile<kRound / kHeads, kHeads, kHeadDim>;  // the tile of one round's rows
    float sum[kRows][2];
    clear(sum);
#pragma unroll
    for (int round = 0; round < kN / kRound; ++round) {
      typename Round::Acc acc;
      Round::scores(acc, a, q_s + round * kRound * kHeadDim);
#pragma unroll
      for (int c = 0; c < Round::kChunks; ++c)
#pragma unroll
        for (int g = 0; g < Round::kChunk / 8; ++g) {
          const int group = round * (kRound / 8) + c * (Round::kChunk / 8) + g;
          add_group(&acc[c][4 * g], group, *reinterpret_cast<const float2*>(&weight_s[8 * group + 2 * quad]), sum);
        }
    }
    reduce_quad(sum, quad, out);
  }
  // Across the 4 lanes of a quad, in a fixed order: every value is (p0 + p1) + (p2 + p3) of the four
  // lanes' partials p, as a butterfly of two xor-shuffles per value gives it, but each exchange step
  // sends only the half of the values that the partner keeps (a reduce-scatter): 2 * kRows values take
  // kRows + kOwned shuffles instead of 4 * kRows, the latency chain of the epilogue. Step 1 (xor 1)
  // keeps v with v % 2 == quad % 2, step 2 (xor 2) of those the ones with (v / 2) % 2 == quad / 2, so
  // lane quad ends with v = 4n + quad. An odd kRows leaves its last value unpaired in step 2: both
  // lanes of the pair add it (a plain butterfly step), only the owner hands it off.
  __device__ __forceinline__ static void reduce_quad(const float (&sum)[kRows][2], int quad, Owned& out) {
    const bool odd = (quad & 1) != 0;
    float half[kRows];  // value 2m + quad % 2, summed over lanes quad and quad ^ 1
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const float keep = odd ? sum[m][1] : sum[m][0];
      const float send = odd ? sum[m][0] : sum[m][1];
      half[m] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
    reduce_quad_pairs(half, quad, out);
  }
  // Step 1 for row m's two values (odd: quad % 2), for scores_and_head_sums. reduce_quad keeps the same
  // step inline: calling this from there changed the MXFP4 n1 h32 kernels' schedule (their SASS, not
  // their instruction count).
  __device__ __forceinline__ static float reduce_pair(const float (&row)[2], bool odd) {
    const float keep = odd ? row[1] : row[0];
    const float send = odd ? row[0] : row[1];
    return keep + __shfl_xor_sync(0xffffffffu, send, 1);
  }
  // Step 2.
  __device__ __forceinline__ static void reduce_quad_pairs(const float (&half)[kRows], int quad, Owned& out) {
    const bool high = (quad & 2) != 0;
#pragma unroll
    for (int n = 0; n < kOwned; ++n) {
      if (2 * n + 1 < kRows) {
        const float keep = high ? half[2 * n + 1] : half[2 * n];
        const float send = high ? half[2 * n] : half[2 * n + 1];
        out[n] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
      } else {
        out[n] = half[2 * n] + __shfl_xor_sync(0xffffffffu, half[2 * n], 2);
      }
    }
  }
  // The key of this lane's values: key0 + 8 * (v % 2) for its v = 4n + quad.
  __device__ __forceinline__ static int owned_key(int quad, int key0) { return key0 + 8 * (quad & 1); }
  // The query row (v / 2) of this lane's value n, and whether the lane owns it: an odd kRows' last value
  // is summed by both lanes of a pair, and only the lower pair (quad < 2) hands it off.
  __device__ __forceinline__ static int owned_row(int n, int quad) { return 2 * n + quad / 2; }
  __device__ __forceinline__ static bool owns(int n, int quad) { return 2 * n + 1 < kRows || quad < 2; }

  // Hands a block's 64 x kRows values to the store warps through its score stage ([row][64]): value
  // v = 4n + quad (row v / 2, key owned_key) by its owner lane.
  __device__ __forceinline__ static void hand_off(float* stage_scores, const Owned& value, int quad, int key0) {
#pragma unroll
    for (int n = 0; n < kOwned; ++n) {
      if (owns(n, quad)) stage_scores[owned_row(n, quad) * 64 + owned_key(quad, key0)] = value[n];
    }
  }
};

}  // namespace kernels
}  // namespace flash_indexer
