#pragma once
// The reference result of a decode plan (DecodePlan, DcpDecodePlan) for the GPU tests: the exact top-k
// of the reference logits rounded to the plan's dtype, over a logits width of `width`; positions, or
// physical slots through the block table.
#include <cstdint>
#include <vector>

#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"
#include "parallel_reference.hpp"

namespace flash_indexer::test {

inline std::vector<std::int32_t> plan_reference_indices(const check::LogitsCase& lc, const check::HostInputs& in,
                                                        const DecodePlanConfig& pc, std::int64_t width) {
  check::HostInputs wide = in;
  wide.width = width;  // the plan's logits width
  const auto ref_view = wide.reference_view(lc);
  const std::vector<double> ref = check::paged_mqa_logits_reference(ref_view);
  std::vector<float> rounded(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) rounded[i] = reference::round_to(pc.logits, static_cast<float>(ref[i]));
  const std::int64_t rows = static_cast<std::int64_t>(in.batch) * pc.next_n;
  std::vector<std::int64_t> lengths;
  for (std::int64_t r = 0; r < rows; ++r)
    lengths.push_back(reference::row_length(ref_view, static_cast<int>(r / pc.next_n), static_cast<int>(r % pc.next_n)));
  std::vector<std::int32_t> out = reference::topk(rounded, width, width, lengths, pc.k, pc.sorted).indices;
  if (pc.physical_slots)
    for (std::int64_t r = 0; r < rows; ++r)
      for (int i = 0; i < pc.k; ++i) {
        std::int32_t& v = out[r * pc.k + i];
        if (v >= 0) v = in.block_table[(r / pc.next_n) * in.max_blocks + v / 64] * 64 + v % 64;
      }
  return out;
}

}  // namespace flash_indexer::test
