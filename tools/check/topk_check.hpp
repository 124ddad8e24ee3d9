#pragma once
// Top-k problems (adversarial and random rows, stale histograms), their launch, and the comparison
// with the CPU reference. Shared by the GPU tests and the CLI.
#include <cstdint>
#include <string>
#include <vector>

#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::check {

enum class RowKind {
  normal,        // N(0, 1)
  heavy_tailed,  // Cauchy
  relu,          // 60 % exact zeros, the rest |N(0, 4)| (real indexer scores after ReLU-weighted sums)
  all_equal,     // one value
  one_bin,       // distinct values all in one coarse bin, [1, 1.06)
  inf_nan,       // normals with +inf, -inf and NaN mixed in
  signed_zeros,  // -0 and +0 with a few of each sign around them
  unit_bins,     // uniform in [-300, 300]: the unit-width bins and both saturated ends
  wide,          // magnitudes from 1e-9 (FP16 zero, -0 after rounding) to 1e6 (FP16 infinity)
  nan_heavy,     // 90 % NaN
  all_nan,
  // Large scores on 4 of every 64 columns, normals elsewhere: a regular row that a strided sample can
  // misjudge (the one-pass path of long rows must then fall back and stay exact). At 64K and 128K
  // columns the selector's sample reads only spike columns (every 64th column group), sees nothing but
  // spikes, and sets a cutoff that fewer than k columns pass.
  strided_spikes,
  // N(0, 1) rounded to multiples of 2^-10: a few keys tied inside a narrow threshold bin, the k-th
  // often in the middle of a run of equal scores.
  rounded_normal,
  // N(0, 1000): most scores past the coarse histogram's +-223, in its two end bins, as the scores of
  // random FP8 bytes: a long row's threshold bin holds tens of thousands of columns (too coarse to use).
  saturated,
};
const char* row_kind_name(RowKind kind);

struct RowSpec {
  RowKind kind = RowKind::normal;
  std::int64_t length = 0;  // may be negative or past the width (>= 2^24 does not size the logits): the op clamps it
};

enum class HistogramMode { none, exact, doubled, zeroed, other_data, random };
const char* histogram_mode_name(HistogramMode mode);

struct TopkCase {
  LogitsDType dtype = LogitsDType::f32;
  int k = 2048;
  bool sorted = false;
  bool values = true;  // ask for the values output
  HistogramMode histogram = HistogramMode::none;
  std::vector<RowSpec> rows;
  std::int64_t width = 0;        // 0: the longest clamped length + 37
  std::int64_t row_padding = 3;  // row stride = width + row_padding
  bool aligned_rows = false;     // round the row stride up to 16 bytes (rows start on 16 bytes: vector loads)
  int runs = 1;                  // launches whose bytes must all be identical
  // options.split of each launch: run i uses splits[i % size] (and runs is at least size); empty: 0,
  // the automatic choice. Every split must give the same bytes.
  std::vector<int> splits;
  // Decode forms of the lengths (contract §1): next_n > 0 uploads 1-D request lengths with the MTP rule
  // (then rows[b * next_n + j].length must be request_lengths[b] - next_n + j + 1); lengths_2d uploads
  // the row lengths as [rows / next_n, next_n].
  int next_n = 0;
  bool lengths_2d = false;
  std::vector<std::int32_t> request_lengths;
  // Prefill windows: row r selects from [starts[r], its length) (options.row_starts; empty: none), with
  // indices relative to the window start when `relative`. Not with a histogram (it would have to count
  // the window).
  std::vector<std::int32_t> starts;
  bool relative = false;
  std::uint64_t seed = 1;
};

// Every adversarial row for this k: lengths 0, 1, k-1, k, k+1, 65 537, odd lengths,
// a 100K-long single-bin row, ties, +-inf, NaN, signed zeros, unit bins, random distributions.
std::vector<RowSpec> adversarial_rows(int k);

struct TopkComparison {
  bool passed = true;
  std::string failure;
  std::int64_t selected = 0;  // indices compared
  std::vector<TopkRowReport> reports;
};

TopkComparison run_topk_case(GpuSession& gpu, const TopkCase& c);

std::string describe(const TopkCase& c);

}  // namespace flash_indexer::check
