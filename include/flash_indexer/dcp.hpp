#pragma once
// Decode context parallel (DCP): the KV cache sharded by token position over the `ranks`
// GPUs of a group. Rank r holds the positions p with (p / interleave) % ranks == r (interleave 1, or a
// block size), in order, as its local columns. The global top-k of a row is the top-k of the union of
// the ranks' local top-k (every globally selected key is among its own rank's local top-k), so each
// rank scores its shard, selects locally, and the candidates are merged (topk_merge.hpp).
//
// One definition for the host and the device: paged_mqa_logits() and topk() take a DcpLayout
// (options.dcp) and apply these maps in their kernels (this header is also embedded into the JIT's
// kernel sources). Plain C++17 with no includes, so NVRTC compiles it without a CUDA include directory.

#if defined(__CUDACC__)
#define FLASH_INDEXER_DCP_FN __host__ __device__ __forceinline__ constexpr
#else
#define FLASH_INDEXER_DCP_FN constexpr
#endif

namespace flash_indexer {

struct DcpLayout {
  int ranks = 1;       // D
  int rank = 0;        // r in [0, D)
  int interleave = 1;  // I: consecutive positions per rank, 1 or a block size
};

// The maps compute in the integer type they are given: 64-bit on the host, 32-bit in the kernels (whose
// lengths are int32 and whose layouts have ranks * interleave <= 2^31 - 1).

// Keys that rank r holds of a request of global length L >= 0:
// floor(L / (D * I)) * I + clamp(L mod (D * I) - r * I, 0, I).
template <class Int>
FLASH_INDEXER_DCP_FN Int dcp_local_length(Int global_length, const DcpLayout& l) {
  const Int group = static_cast<Int>(l.ranks) * l.interleave;
  const Int rest = global_length % group - static_cast<Int>(l.rank) * l.interleave;
  return global_length / group * l.interleave + (rest < 0 ? Int(0) : rest > l.interleave ? Int(l.interleave) : rest);
}

// The global position of rank r's local column c: (c / I) * D * I + r * I + c mod I.
template <class Int>
FLASH_INDEXER_DCP_FN Int dcp_global_position(Int local_column, const DcpLayout& l) {
  return local_column / l.interleave * l.ranks * l.interleave + static_cast<Int>(l.rank) * l.interleave +
         local_column % l.interleave;
}

// The rank that holds global position p, and its local column there.
template <class Int>
FLASH_INDEXER_DCP_FN int dcp_owner(Int position, int ranks, int interleave) {
  return static_cast<int>(position / interleave % ranks);
}
template <class Int>
FLASH_INDEXER_DCP_FN Int dcp_local_column(Int position, int ranks, int interleave) {
  return position / (static_cast<Int>(ranks) * interleave) * interleave + position % interleave;
}

}  // namespace flash_indexer
