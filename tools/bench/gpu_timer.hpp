#pragma once
// Timing for the benchmarks: CUDA events around CUDA-graph replays (median of many), and the memory
// read bandwidth of the GPU measured with a plain streaming-read kernel in the same process.
#include <functional>

#include "../../kernels/paged_read_params.cuh"
#include "../../kernels/sparse_read_params.cuh"
#include "gpu_session.hpp"

namespace flash_indexer::bench {

struct GraphTiming {
  double median_us = 0;
  double min_us = 0;
  int replays = 0;
};

// Captures `enqueue(stream)` once into a CUDA graph and replays it `replays` times (after 3 untimed
// warm-up replays), each between two events, all queued behind a GPU spin wait so that the events
// measure GPU time, not host launch gaps (as the peers' benchmark does). With `flush`, a memset over it
// runs before each replay, outside the timed window, so every replay starts with a cold L2. `capture`:
// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL where other threads of the process use the driver meanwhile
// (one thread per GPU: bench decode --dcp).
GraphTiming time_graph(check::GpuSession& gpu, const std::function<void(CUstream)>& enqueue, int replays,
                       check::DeviceBuffer* flush = nullptr, CUstreamCaptureMode capture = CU_STREAM_CAPTURE_MODE_GLOBAL);

// The harness's own time: the same replays around a graph of one empty kernel (one thread), with the
// same flush (nullptr: none). What no kernel timed by time_graph can go below (launch, graph, events).
GraphTiming measure_launch_floor(check::GpuSession& gpu, check::DeviceBuffer* flush, int replays = 50);

// The paged-read probe (kernels/paged_read.cuh) over a logits cell's KV pool, block table and lengths:
// reads exactly the blocks the cell reads, with nothing else. `params.warp_xor` holds paged_read_warps()
// words. launch_paged_read enqueues it once; time_paged_read times it in the harness above.
int paged_read_warps();
void launch_paged_read(const kernels::PagedReadParams& params, CUstream stream);
GraphTiming time_paged_read(check::GpuSession& gpu, const kernels::PagedReadParams& params, check::DeviceBuffer* flush,
                            int replays);

// The sparse-read probe (kernels/sparse_read.cuh) over a two-level cell's KV pool, block table, lengths
// and candidates: gathers exactly the candidate keys and scales a sparse logits call reads, with nothing
// else. `params.warp_xor` holds sparse_read_warps() words.
int sparse_read_warps();
void launch_sparse_read(const kernels::SparseReadParams& params, CUstream stream);
GraphTiming time_sparse_read(check::GpuSession& gpu, const kernels::SparseReadParams& params, check::DeviceBuffer* flush,
                             int replays);

// Bytes per second of a streaming read of `bytes` (default 2 GiB), median of `replays` graph replays.
double measure_read_bandwidth(check::GpuSession& gpu, std::size_t bytes = std::size_t{2} << 30, int replays = 20);

}  // namespace flash_indexer::bench
