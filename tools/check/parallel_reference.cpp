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

namespace {

// Runs part(i) for i in [0, parts) on all cores; each part writes its own range of the result.
template <class Part>
void on_all_cores(int parts, const Part& part) {
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next++; i < parts; i = next++) part(i);
  };
  const int workers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::max(parts, 1));
  std::vector<std::thread> threads;
  for (int i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

// Copies a part's rows (and bounds) into the whole result at `offset`.
void place(const std::vector<double>& part, const std::vector<double>& part_magnitude, std::size_t offset,
           std::vector<double>& out, std::vector<double>* magnitude) {
  std::copy(part.begin(), part.end(), out.begin() + static_cast<std::ptrdiff_t>(offset));
  if (magnitude != nullptr)
    std::copy(part_magnitude.begin(), part_magnitude.end(), magnitude->begin() + static_cast<std::ptrdiff_t>(offset));
}

}  // namespace

std::vector<double> paged_mqa_logits_reference(const reference::PagedMqaLogitsInputs& in, std::vector<double>* magnitude) {
  const std::size_t per_request = static_cast<std::size_t>(in.next_n) * static_cast<std::size_t>(in.width);
  std::vector<double> out(static_cast<std::size_t>(in.batch) * per_request);
  if (magnitude != nullptr) magnitude->assign(out.size(), 0.0);
  on_all_cores(in.batch, [&](int b) {
    std::vector<double> part_magnitude;
    const std::vector<double> part =
        reference::paged_mqa_logits(one_request(in, b), magnitude != nullptr ? &part_magnitude : nullptr);
    place(part, part_magnitude, b * per_request, out, magnitude);
  });
  return out;
}

reference::MqaLogitsInputs token_range(const reference::MqaLogitsInputs& in, int first, int count) {
  reference::MqaLogitsInputs v = in;
  v.tokens = count;
  v.q = in.q + static_cast<std::int64_t>(first) * in.heads * in.head_dim;
  v.weights = in.weights + static_cast<std::int64_t>(first) * in.heads;
  v.ks = in.ks + first;
  v.ke = in.ke + first;
  return v;
}

std::vector<double> mqa_logits_reference(const reference::MqaLogitsInputs& in, std::vector<double>* magnitude) {
  const std::size_t per_token = static_cast<std::size_t>(in.keys);
  std::vector<double> out(static_cast<std::size_t>(in.tokens) * per_token);
  if (magnitude != nullptr) magnitude->assign(out.size(), 0.0);
  // Runs of tokens a few times more than the cores, so that windows of different lengths even out.
  const int runs = std::min(in.tokens, 4 * std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  on_all_cores(runs, [&](int i) {
    const int first = static_cast<int>(static_cast<std::int64_t>(in.tokens) * i / runs);
    const int end = static_cast<int>(static_cast<std::int64_t>(in.tokens) * (i + 1) / runs);
    std::vector<double> part_magnitude;
    const std::vector<double> part =
        reference::mqa_logits(token_range(in, first, end - first), magnitude != nullptr ? &part_magnitude : nullptr);
    place(part, part_magnitude, first * per_token, out, magnitude);
  });
  return out;
}

}  // namespace flash_indexer::check
