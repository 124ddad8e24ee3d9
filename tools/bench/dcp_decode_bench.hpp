#pragma once
// `flash-indexer bench decode --dcp D`: DcpDecodePlan end to end on D GPUs of this host (one thread per
// rank, an NCCL communicator of the D GPUs), against the rank's DecodePlan alone (its logits and
// local top-k: what the all-gather and the merge add is the difference) and against one DecodePlan
// over the whole cache on GPU 0 (what the step costs without DCP).
#include <functional>
#include <vector>

#include "decode_bench.hpp"

namespace flash_indexer::bench {

struct DcpDecodeBenchOptions {
  DecodeBenchOptions shapes;  // heads, next_n, batch, lengths, dtypes, histogram, k, replays, seed (pdl: off)
  int ranks = 2;
  int interleave = 1;
};

struct DcpDecodeBenchRow {
  DecodeShape shape;  // pdl: off
  int k = 0, ranks = 0, interleave = 0;
  double us = 0;          // DcpDecodePlan::run: the slowest rank's median
  double local_us = 0;    // the rank's DecodePlan alone (logits + local top-k): the slowest rank's median
  double one_gpu_us = 0;  // one DecodePlan over the whole cache on GPU 0
  double kv_bytes = 0;    // KV blocks one rank reads (its shard of the lengths)
  double kv_floor_us = 0;  // kv_bytes / read bandwidth
};

// Throws Error when the host has fewer than options.ranks GPUs or libnccl cannot be loaded. The rows
// come after every rank has finished (each rank sweeps the shapes in the same order).
std::vector<DcpDecodeBenchRow> run_dcp_decode_bench(const DcpDecodeBenchOptions& options, double read_bandwidth,
                                                    const std::function<void(const DcpDecodeBenchRow&)>& on_row);

}  // namespace flash_indexer::bench
