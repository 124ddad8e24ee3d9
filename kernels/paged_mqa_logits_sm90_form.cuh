#pragma once
// The form of the Hopper paged MQA logits kernel for one (next_n, heads, key cache): every choice that
// depends on the configuration alone, in one table that the device code (paged_mqa_logits_sm90.cuh,
// paged_mqa_logits_sm90_ranges.cuh) and the host (kernel spec, shared-memory layout, tensor maps, grid)
// both read. docs/design/logits-sm90.md lists the form of every configuration and the measurements
// behind each rule (docs/benchmarks/logits.md).
//
// Plain constexpr code: compiled by both the host compiler and NVRTC.

namespace flash_indexer {
namespace kernels {

// next_n up to 6: a request's query row and up to 5 draft tokens (DeepSeek-V4's speculative decoding).
constexpr int kSm90MaxNextN = 6;

// Whether a configuration has a kernel of its own: all next_n rows of a block in one wgmma tile, N =
// next_n * heads <= 256. Past that (next_n 5-6 at H 64) every call runs as groups of rows of a smaller
// kernel (sm90_group_rows), which read each block once per group through L2.
constexpr bool sm90_n_wide(int next_n, int heads) { return next_n >= 1 && next_n <= kSm90MaxNextN && next_n * heads <= 256; }

// Such a configuration runs its rows in groups of this many, each group a row of the kernel of that
// next_n: next_n 6 as three groups of 2 (the N 128 kernel, each block read three times through L2 instead
// of six), next_n 5 as five rows of the next_n = 1 kernel. Kernels of up to kSm90MaxGroupRows rows take
// such groups (PagedMqaLogitsParams::rows_per_request).
constexpr int sm90_group_rows(int next_n) { return next_n % 2 == 0 ? 2 : 1; }
constexpr int kSm90MaxGroupRows = 2;

struct Sm90PagedForm {
  // Query rows one consumer computes of each block it takes, and its wgmma N (rows * heads). Every
  // N-keyed choice below takes this N, not next_n * heads.
  int consumer_rows;
  int consumer_n;
  int consumers_per_block;  // next_n / consumer_rows: consumers that share each block, a row group each
  int consumers;            // consumer warpgroups per CTA
  int takers;               // consumers that take distinct blocks: consumers / consumers_per_block
  int stages;               // key stages in the ring
  int threads;              // the consumers and the producer warpgroup
  // The consumers hold their columns' weights in registers (Sm90MqaTile::load_weights), else they read
  // them from shared memory.
  bool register_weights;
  // The consumers take registers from the producer warpgroup (setmaxnreg), to these counts per thread.
  bool moves_registers;
  int producer_registers;
  int consumer_registers;
  // The producer loads the split's block ids, a weight per thread and the tensor map before the lengths
  // arrive, and may fill the first stages before the CTA's barrier (PagedMqaLogitsSm90Params::
  // fill_before_barrier); not where the consumers move registers.
  bool early_loads;
  // One 3-D TMA brings a block's keys and their scales into one stage; else a TMA for the keys and a
  // bulk copy for the scales (FP8; the MXFP4 block is one bulk copy either way).
  bool one_tma_per_block;
  // Who counts the fused histogram: the consumers (each lane the values it owns) or the store warps.
  bool consumers_count;
  // The consumers store their values themselves; else they hand them to the three store warps through
  // shared-memory score stages.
  bool direct_stores;
  // The FP8 key stage is released after the head sums instead of as soon as the wgmma has read it.
  bool late_release;
  // The wgmma in two parts (the first query row, then the rest), the first part's head sums while the
  // second part runs.
  bool overlapped_parts;
  // MXFP4: the wgmma N per round of head sums (consumer_n: one round).
  int mxfp4_round;
  // Has a ranges form (one CTA per SM over an even share of all B x width blocks), which the host takes
  // where the split grid would need more than one wave.
  bool has_ranges;
  // The largest B * next_n * width_blocks that runs as B * next_n rows of the next_n = 1 kernel (0: never);
  // runtime/sm90_split.hpp, sm90_flattened.
  int flatten_max_row_blocks;
};

// The rules, each with its reason; docs/benchmarks/logits.md has the numbers.
constexpr Sm90PagedForm sm90_paged_form(int next_n, int heads, bool mxfp4) {
  Sm90PagedForm f{};
  // Two consumers share every block, two rows each, only at next_n 4 H 64 FP8 (N 256): four consumers of
  // N 128 hide most of their CUDA-core epilogue under the tensor work, two of N 256 did not. Not at
  // next_n 3 H 64 (three rows do not halve) nor for MXFP4 (its consumers hold the keys' fragments).
  f.consumer_rows = !mxfp4 && next_n == 4 && heads == 64 ? 2 : next_n;
  f.consumer_n = f.consumer_rows * heads;
  f.consumers_per_block = next_n / f.consumer_rows;
  // Up to N 64 (at most 66 registers) two CTAs fit an SM, so two consumers each; up to N 128 one CTA with
  // four (640 threads: the 96 registers each hold a consumer's 64 accumulators), so that a consumer's
  // epilogue overlaps three others' wgmma; beyond, the 128 accumulators per thread leave room for two.
  f.consumers = f.consumer_n <= 64 ? 2 : f.consumer_n <= 128 ? 4 : 2;
  f.takers = f.consumers / f.consumers_per_block;
  // A stage always goes to the same consumer (stage % takers) and the same store warp (stage % 3), so no
  // waiter ever waits on a barrier a phase ahead.
  f.stages = f.consumers == 4 ? 12 : 6;
  f.threads = 128 * (f.consumers + 1);
  // Up to N 128 and next_n 3 (ptxas: next_n 4 spilled at N 128). MXFP4 consumers need the registers for
  // their keys' fragments.
  f.register_weights = !mxfp4 && f.consumer_rows <= 3 && f.consumer_n <= 128;
  // Four consumers with the weights in registers (or MXFP4's fragments) need more than a 640-thread
  // launch's 96 registers each: 128 * 32 + 512 * 112 = 640 * 96. MXFP4 from next_n 3: 40 / 104, as its
  // store warps spilled at 32 (128 * 40 + 512 * 104 <= 640 * 96).
  f.moves_registers = f.consumers == 4 && (mxfp4 || f.register_weights);
  f.producer_registers = mxfp4 && next_n > 2 ? 40 : 32;
  f.consumer_registers = mxfp4 && next_n > 2 ? 104 : 112;
  // Where registers move they are at the limit: the early loads spilled the block count (next_n 3 H 32)
  // or measured slower (next_n 2 H 64).
  f.early_loads = !f.moves_registers;
  // The four-consumer FP8 kernels: faster from B 64 x 64K on; the two-consumer N 256 kernel was slower up
  // to B 32 x 32K and next_n 1 no faster.
  f.one_tma_per_block = !mxfp4 && f.consumers == 4;
  // With four consumers (one CTA per SM) three store warps could not keep up with a bin and an atomic per
  // score; with two consumers of N 192-256 the consumers are the bound, and with two CTAs per SM six
  // store warps share the SM.
  f.consumers_count = f.consumers == 4;
  // The four-consumer FP8 kernels, whose consumers count already. MXFP4's keep the hand-off (next_n 4
  // H 32 with the histogram spilled).
  f.direct_stores = f.consumers_count && !mxfp4;
  // Releasing the stage before the head sums spilled where the accumulators and the weights fill the
  // registers.
  f.late_release = !mxfp4 && f.moves_registers;
  // With two consumers per SM the tensor pipe idles whenever both are in their epilogues.
  f.overlapped_parts = !mxfp4 && f.consumers == 2 && f.consumer_n > 128;
  // At next_n 4 all four rows' accumulators and the keys' 16 fragment registers do not fit: two rows a
  // round. N 160-192 (next_n 5-6 H 32) have two consumers of up to 168 registers, as next_n 3 H 64: one
  // round.
  f.mxfp4_round = mxfp4 ? (next_n == 4 ? 2 * heads : next_n * heads) : f.consumer_n;
  // The four-consumer FP8 kernels that move registers, over whole blocks (n2 h64, n3 h32). At next_n 4
  // H 32 (weights in shared memory) the ranges' state spilled.
  f.has_ranges = f.consumers_per_block == 1 && f.direct_stores && f.moves_registers;
  // A one-wave grid of the N-wide kernel is latency where few blocks meet a wide N: the flattened rows
  // spread each block's rows over more CTAs and read the shared blocks through L2. It gains at H 64, and
  // at H 32 only for next_n 3 (four consumers, one CTA per SM); never for MXFP4.
  f.flatten_max_row_blocks = mxfp4 || next_n < 2 ? 0 : heads == 64 ? 6144 : heads == 32 && next_n == 3 ? 1536 : 0;
  return f;
}

}  // namespace kernels
}  // namespace flash_indexer
