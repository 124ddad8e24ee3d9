#pragma once
// A ragged (prefill) mqa_logits run against the CPU reference on exact-arithmetic inputs
// (prefill_inputs.hpp): every live logit bitwise the reference's rounded to the output type, every
// column outside a window poisoned (or -inf with fill_masked), the row padding untouched, and the
// histogram's counts; in the full [T, N] layout or the compressed [T, W] one. Shared by the GPU tests and `flash-indexer check`.
#include <cstdint>
#include <string>

#include "flash_indexer/mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::check {

struct PrefillCase {
  MqaLogitsConfig config;  // arch is ignored (the device decides); the variant is forced
  int tokens = 37, keys = 700;
  bool fill_masked = false;
  // > 0: options.compressed, logits [T, compressed_width] (column c of row t = key ks[t] + c); a width
  // below the longest window truncates it.
  int compressed_width = 0;
  std::uint64_t seed = 1;
  // kv_scales starts this many bytes (0, 4, 8 or 12) past a 16-byte boundary, with NaN bytes before it
  // and after it: the sm90 kernel copies the scales with a TMA, which needs 16-byte aligned addresses.
  int scales_misalignment = 0;
};

struct PrefillComparison {
  bool passed = true;
  std::string failure;       // the first problem found
  std::int64_t checked = 0;  // live logits compared
};

PrefillComparison run_prefill_case(GpuSession& gpu, const PrefillCase& c);

std::string describe(const PrefillCase& c);

}  // namespace flash_indexer::check
