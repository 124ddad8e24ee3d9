#include "parallel_reference.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

namespace flash_indexer::check {

reference::PagedMqaLogitsInputs one_request(const reference::PagedMqaLogitsInputs& in, int b) {
  reference::PagedMqaLogitsInputs v = in;
  v.batch = 1;
  const std::int64_t rows_before = static_cast<std::int64_t>(b) * in.next_n;  // query rows of earlier requests
  const std::int64_t row_bytes = in.kv == KvFormat::mxfp4 ? in.head_dim / 2 : in.head_dim;
  v.q = in.q + rows_before * in.heads * row_bytes;
  if (in.q_scales != nullptr) v.q_scales = in.q_scales + rows_before * in.heads;
  v.weights = in.weights + rows_before * in.heads;
  v.context_lens = in.context_lens + (in.lens_2d ? rows_before : b);
  v.block_table = in.block_table + static_cast<std::int64_t>(b) * in.block_table_stride;
  return v;
}

std::vector<double> paged_mqa_logits_reference(const reference::PagedMqaLogitsInputs& in, std::vector<double>* magnitude) {
  const std::size_t per_request = static_cast<std::size_t>(in.next_n) * static_cast<std::size_t>(in.width);
  std::vector<double> out(static_cast<std::size_t>(in.batch) * per_request);
  if (magnitude != nullptr) magnitude->assign(out.size(), 0.0);
  std::atomic<int> next{0};
  auto work = [&] {
    std::vector<double> part_magnitude;
    for (int b = next++; b < in.batch; b = next++) {
      const std::vector<double> part =
          reference::paged_mqa_logits(one_request(in, b), magnitude != nullptr ? &part_magnitude : nullptr);
      std::copy(part.begin(), part.end(), out.begin() + static_cast<std::ptrdiff_t>(b * per_request));
      if (magnitude != nullptr)
        std::copy(part_magnitude.begin(), part_magnitude.end(), magnitude->begin() + static_cast<std::ptrdiff_t>(b * per_request));
    }
  };
  const int workers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::max(in.batch, 1));
  std::vector<std::thread> threads;
  for (int i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace flash_indexer::check
