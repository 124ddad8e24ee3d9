#pragma once
// The CPU reference logits over all cores, for the GPU tests' and `check`'s large cases: requests (paged)
// or runs of query tokens (prefill) are computed on their own, each through a view of the inputs, by as
// many threads as the machine has, so every logit is the same double as the serial reference gives, in a
// fraction of the time (the serial reference would dominate the decode-plan tests' run time).
#include <vector>

#include "flash_indexer/reference.hpp"

namespace flash_indexer::check {

// The inputs of request b alone (batch 1), pointing into `in`'s buffers.
reference::PagedMqaLogitsInputs one_request(const reference::PagedMqaLogitsInputs& in, int b);

// Equal to reference::paged_mqa_logits(in, magnitude), element for element.
std::vector<double> paged_mqa_logits_reference(const reference::PagedMqaLogitsInputs& in,
                                               std::vector<double>* magnitude = nullptr);

// Tokens [first, first + count) alone, pointing into `in`'s buffers (the keys stay whole).
reference::MqaLogitsInputs token_range(const reference::MqaLogitsInputs& in, int first, int count);

// Equal to reference::mqa_logits(in, magnitude), element for element.
std::vector<double> mqa_logits_reference(const reference::MqaLogitsInputs& in, std::vector<double>* magnitude = nullptr);

}  // namespace flash_indexer::check
