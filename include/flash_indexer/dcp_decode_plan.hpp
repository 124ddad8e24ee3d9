#pragma once
// Decode context parallel over NCCL (dcp.hpp): each of the D GPUs of a group holds one rank's shard of
// the KV cache. On every rank, one run() scores the rank's shard and takes its local top-k (values and
// global positions: DecodePlan with config.dcp), all-gathers the D candidate lists through the
// engine's NCCL communicator, and merges them into the exact global top-k (topk_merge.hpp), so every
// rank ends with the same [B * next_n, k] global positions, and, if asked, its own share of them as
// local columns for its sparse attention. All on the caller's stream, without allocating, copying or
// synchronizing: one run() per rank can be captured in a CUDA graph (NCCL's collectives are capturable).
//
// libnccl is loaded at run time (libnccl.so.2, or the file named by FLASH_INDEXER_NCCL), as libcuda
// is: the library builds and runs without it, and a DcpDecodePlan says what is missing.
#include "flash_indexer/decode_plan.hpp"

struct ncclComm;
typedef struct ncclComm* ncclComm_t;  // as nccl.h declares it

namespace flash_indexer {

class DcpDecodePlan {
 public:
  // config.dcp is this rank's layout (ranks > 1), which `comm` must match (ncclCommCount = ranks,
  // ncclCommUserRank = rank, its device the current context's); config.physical_slots must be false.
  // Allocates the local plan's workspace and the candidate lists, and loads every kernel run() launches.
  DcpDecodePlan(const DecodePlanConfig& config, ncclComm_t comm);
  ~DcpDecodePlan();
  DcpDecodePlan(DcpDecodePlan&& other) noexcept;
  DcpDecodePlan& operator=(DcpDecodePlan&& other) noexcept;
  DcpDecodePlan(const DcpDecodePlan&) = delete;
  DcpDecodePlan& operator=(const DcpDecodePlan&) = delete;

  // The inputs as DecodePlan::run takes them, with the global lengths and this rank's cache; indices
  // int32 [B * next_n, k], contiguous: the global top-k (global positions, the same bytes on every
  // rank); owned: empty, or int32 [B * next_n, k], contiguous: the global top-k's positions this rank
  // holds, as its local columns (dcp_local_column), then -1. Every rank calls run() with the same B,
  // in the same order relative to its other collectives on `comm`.
  void run(const TensorView& q, const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
           const TensorView& block_table, const TensorView& indices, const TensorView& owned, Stream stream) const;
  // The MXFP4 form (config.kv = mxfp4), as DecodePlan's.
  void run(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache, const TensorView& weights,
           const TensorView& context_lens, const TensorView& block_table, const TensorView& indices, const TensorView& owned,
           Stream stream) const;

  const DecodePlan& local() const { return local_; }  // this rank's plan (its logits, histogram, ...)
  std::size_t workspace_bytes() const { return local_.workspace_bytes() + bytes_; }

 private:
  void release() noexcept;
  DecodePlan local_;
  ncclComm_t comm_ = nullptr;
  std::size_t bytes_ = 0;
  unsigned long long memory_ = 0;  // local values | local positions | gathered values | gathered positions
};

}  // namespace flash_indexer
