#pragma once
// Decode context parallel (DCP, issue 16): the KV cache sharded by token position over the `ranks`
// GPUs of a group. Rank r holds the positions p with (p / interleave) % ranks == r (interleave 1, or a
// block size), in order, as its local columns. The global top-k of a row is the top-k of the union of
// the ranks' local top-k (every globally selected key is among its own rank's local top-k), so each
// rank scores its shard, selects locally, and the candidates are merged (reference::topk_merge).
//
// Plain integer maps, usable by host code. topk_merge() (topk_merge.hpp) merges the ranks' candidates on
// the GPU; the logits and top-k kernels do not take a DCP layout yet.
#include <algorithm>
#include <cstdint>

namespace flash_indexer {

struct DcpLayout {
  int ranks = 1;       // D
  int rank = 0;        // r in [0, D)
  int interleave = 1;  // I: consecutive positions per rank, 1 or a block size
};

// Keys that rank r holds of a request of global length L:
// floor(L / (D * I)) * I + clamp(L mod (D * I) - r * I, 0, I).
constexpr std::int64_t dcp_local_length(std::int64_t global_length, const DcpLayout& l) {
  const std::int64_t group = static_cast<std::int64_t>(l.ranks) * l.interleave;
  const std::int64_t rest = global_length % group - static_cast<std::int64_t>(l.rank) * l.interleave;
  return global_length / group * l.interleave + std::clamp<std::int64_t>(rest, 0, l.interleave);
}

// The global position of rank r's local column c: (c / I) * D * I + r * I + c mod I.
constexpr std::int64_t dcp_global_position(std::int64_t local_column, const DcpLayout& l) {
  return local_column / l.interleave * l.ranks * l.interleave + static_cast<std::int64_t>(l.rank) * l.interleave +
         local_column % l.interleave;
}

// The rank that holds global position p, and its local column there.
constexpr int dcp_owner(std::int64_t position, int ranks, int interleave) {
  return static_cast<int>(position / interleave % ranks);
}
constexpr std::int64_t dcp_local_column(std::int64_t position, int ranks, int interleave) {
  return position / (static_cast<std::int64_t>(ranks) * interleave) * interleave + position % interleave;
}

}  // namespace flash_indexer
