#pragma once
// `flash-indexer bench logits`: the paged MQA logits kernel over a grid of batch sizes, context
// lengths, next_n, heads, histogram and logits dtype, on paged KV blocks drawn shuffled from a pool
// larger than L2; timed with CUDA events over CUDA-graph replays.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"
#include "paged_inputs.hpp"

namespace flash_indexer::bench {

struct LogitsBenchOptions {
  std::vector<int> batches = {1, 8, 32, 64, 128};
  std::vector<int> lengths = {8192, 32768, 65536, 131072};
  std::vector<int> next_ns = {1, 2, 3, 4};
  std::vector<int> heads = {32, 64};
  std::vector<int> histogram = {0, 1};
  std::vector<LogitsDType> dtypes = {LogitsDType::f32, LogitsDType::f16};
  // Key caches: FP8, and MXFP4 (contract §2.2; only its configurations run: next_n <= 4, H 32/64, D 128).
  std::vector<KvFormat> kvs = {KvFormat::fp8};
  // The key and query values (paged_inputs.hpp).
  std::vector<PagedValues> inputs = {PagedValues::bytes};
  int head_dim = 128;
  int replays = 50;
  bool cold_l2 = false;
  bool fixed_length = false;  // every request exactly L instead of uniform in [0.7, 1.3] L
  // > 0: every block table entry one of this many pool blocks, so that the KV stays in L2 (what the SM
  // computes, not what HBM delivers; never with cold_l2). 0: distinct blocks drawn from the whole pool.
  int resident_blocks = 0;
  bool compare_portable = false;
  // The kernel to time: the library's choice, or one forced (cells it does not build are skipped; the
  // sm90 kernel's MXFP4 form is not the automatic choice yet).
  PagedMqaLogitsVariant variant = PagedMqaLogitsVariant::automatic;
  std::uint64_t seed = 1;
};

struct LogitsBenchRow {
  int batch = 0, length = 0, next_n = 0, heads = 0, head_dim = 0;
  bool histogram = false;
  LogitsDType dtype = LogitsDType::f32;
  KvFormat kv = KvFormat::fp8;
  PagedValues input = PagedValues::bytes;
  std::string kernel;        // the kernel key that ran
  double us = 0;             // median
  double bytes = 0;          // KV blocks (keys + scales) + logits written + q (+ its exponents) + weights + block table
  double flops = 0;          // 2 * keys * next_n * H * D
  double gbps = 0;           // bytes / time
  double bandwidth_fraction = 0;  // of the measured read bandwidth
  double tflops = 0;
  double floor_us = 0;       // max(bytes / read bandwidth, FLOPs / 1600 TFLOP/s)
  double read_us = 0;        // the paged-read probe on the same blocks, timed the same way (the cell's read floor)
  double portable_us = 0;    // with compare_portable
};

// Runs every cell; `on_row` sees each row as it is measured. `read_bandwidth` in bytes/s.
std::vector<LogitsBenchRow> run_logits_bench(check::GpuSession& gpu, const LogitsBenchOptions& options, double read_bandwidth,
                                             const std::function<void(const LogitsBenchRow&)>& on_row);

}  // namespace flash_indexer::bench
