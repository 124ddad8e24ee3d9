#pragma once
// Kernel parameters and shared-memory sizes of the one-pass decode step (decode_step.cuh), shared
// verbatim by the host launcher and the device code (plain types only: compiled by both the host
// compiler and NVRTC).
#include "paged_mqa_logits_params.cuh"
#include "topk_params.cuh"

namespace flash_indexer {
namespace kernels {

// How the CTAs of a grid row finish the row (docs/design/decode-step.md), compiled into the kernel: a
// kernel holds the code of one form only, so that the spread form's code costs the last-CTA form no
// registers (one kernel with both spilled, and its multi-wave grids ran 4 % slower).
enum class StepForm : int {
  last_cta = 0,  // the CTA that completes the row selects it; any grid
  spread = 1,    // every CTA of the row selects its own columns; a cooperative launch (one wave)
};

struct DecodeStepParams {
  PagedMqaLogitsSm90Params logits;  // with the fused histogram (logits.p.histogram)
  TopkParams topk;                  // the rows' selection: logits, lengths, indices, values, report, slots
  // One counter per row of the logits grid (grid.y: a request, or a query row where the call runs
  // flattened), zero before the launch and left zero by it (as are the row's histograms): each CTA adds
  // the KV blocks of the row it covered, and the CTA whose addition completes width_blocks selects the
  // row's query rows.
  unsigned int* arrivals;
  int width_blocks;
  // The spread form (StepForm::spread: a cooperative launch, so every CTA is resident at once): every CTA
  // of a grid row waits for the row's arrivals, counts its own columns against each query row's threshold
  // interval into spread_counts and lists the interval's columns, then waits for the row's `filtered`
  // count and writes its own selected columns. Zero before the launch and left zero by it: filtered (per
  // grid row), spread_candidates_count (per query row).
  unsigned int* filtered;
  int* spread_candidates_count;
  unsigned long long* spread_candidates;  // per query row spread_list entries: key << 32 | column
  int spread_list;                        // min(kStepCandidates, width): no row has more candidates
  unsigned long long* spread_counts;      // per query row spread_slots entries, one per CTA: winners | ties << 32
  int spread_slots;                       // (width + 63) / 64: a grid row never has more CTAs than KV blocks
  // The lowest order-preserving key (TopkInput of the logits dtype, topk_common.cuh) whose value has a
  // coarse bin <= b, for each bin b: a threshold bin's key interval without a search on the device.
  unsigned int coarse_lowest_key[1024];  // kCoarseBins (coarse_bins.hpp; both sides assert it)
};

// Threshold-bin candidates the selecting CTA keeps (key, column); a larger threshold bin is narrowed by
// digit passes over the row first, never truncated.
constexpr int kStepCandidates = 4096;
// The widest row the step selects on chip: its two bitmaps (winners, ties) take width / 4 bytes, which
// with the candidates stays within what keeps the logits kernels' occupancy (two CTAs of 113 KiB per SM
// on 228 KiB parts). Wider plans run the logits and the top-k as two kernels.
constexpr int kStepMaxWidth = 262144;

// The spread form's scratch per query row, in bytes: the candidates and one count per CTA.
constexpr long long decode_step_spread_list(long long width) { return width < kStepCandidates ? width : kStepCandidates; }
constexpr long long decode_step_spread_slots(long long width) { return (width + 63) / 64; }
constexpr long long decode_step_spread_row_bytes(long long width) {
  return decode_step_spread_list(width) * 8 + decode_step_spread_slots(width) * 8;
}
// The most query rows a plan keeps the spread form's scratch for (a one-wave grid of more rows is rare:
// short contexts at large batch).
constexpr int kStepSpreadMaxRows = 256;

// The selection's fixed shared memory (decode_step.cuh, StepSmem) and the bitmaps after it.
constexpr int kStepFixedBytes = (1024 + 2 * kStepCandidates) * 4 + 512;
constexpr int decode_step_select_bytes(int width) { return kStepFixedBytes + 2 * ((width + 63) / 64) * 8; }

}  // namespace kernels
}  // namespace flash_indexer
