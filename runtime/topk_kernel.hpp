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
TopkChoice choose_topk_kernel(std::int64_t rows, std::int64_t width, LogitsDType logits, const Arch& arch, int multiprocessors,
                              int requested_split);

}  // namespace flash_indexer
