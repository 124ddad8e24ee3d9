#pragma once
// Codegen for the top-k selector kernels: configuration -> KernelSpec.
#include "flash_indexer/topk.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

KernelSpec topk_kernel_spec(const TopkConfig& config);
// Logits per CTA the resident selector holds in shared memory on `arch` (its staging buffer); `wide`:
// the 1024-thread form (sm_90 or newer).
std::int64_t topk_resident_columns(LogitsDType logits, const Arch& arch, bool wide);
// Logits per row the register selector holds (one CTA); `wide`: its 1024-thread form.
std::int64_t topk_register_columns(LogitsDType logits, bool wide);
// The split selector's dynamic shared memory for a call with this k on `arch` (its kernel is loaded
// with the size for k = kMaxTopk).
unsigned topk_split_kernel_smem_bytes(const Arch& arch, int k);

// Which selector topk() launches for `rows` rows of `width` logits with options.split = `requested_split`:
// 0 starts from automatic_topk_split() and may grow; a forced split stays.
struct TopkChoice {
  int split;
  bool resident;  // the resident selector (else the streaming one)
  bool wide;      // its 1024-thread form (or the register selector's)
  bool registers = false;  // the register selector (split 1)
  bool filter = false;     // the filter selector (a streamed row whose segment fits its bitmaps)
  // The row stays on chip and no given histogram is read.
  bool on_chip() const { return resident || registers; }
};

// What the choice knows of the device: its arch, SMs, and how many clusters of 2, 4, 8 and 16 CTAs run at
// once (at index log2 of the size) with two CTAs per SM (the 512-thread selectors) and with one (the
// 1024-thread wide form). A GPC holds whole clusters, so a grid of clusters can need a second wave long
// before it has one CTA per SM slot: on the H200 a grid of 32 rows in clusters of 8 at two CTAs per SM
// takes 31.6 µs against 20.7 for 16 rows, and 16 rows at one per SM 42.3 against 22.2 for 8
// (docs/benchmarks/topk.md, "Cluster capacity"). Zero: not known, taken as multiprocessors * CTAs per
// SM / size.
struct TopkDevice {
  Arch arch;
  int multiprocessors = 0;
  int clusters_two_per_sm[5] = {};
  int clusters_one_per_sm[5] = {};
  // Rows of `split` CTAs each that run at once (one wave).
  std::int64_t rows_at_once(int split, bool wide) const;
};
TopkChoice choose_topk_kernel(std::int64_t rows, std::int64_t width, LogitsDType logits, const TopkDevice& device,
                              int requested_split);

}  // namespace flash_indexer
