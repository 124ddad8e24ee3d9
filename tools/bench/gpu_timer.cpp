#include "gpu_timer.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "../../kernels/stream_read_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_registry.hpp"
#include "probe_kernels.hpp"

namespace flash_indexer::bench {

namespace {

// A probe's kernel in the current context (a module belongs to the context that loaded it; bench decode
// --dcp times one GPU per thread).
template <KernelSpec (*kSpec)(const Arch&)>
const LoadedKernel& probe_kernel() {
  static std::mutex mutex;
  static std::map<CUcontext, LoadedKernel> loaded;
  CUcontext context = nullptr;
  FI_CU(cuCtxGetCurrent, "bench", &context);
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(context);
  if (it == loaded.end()) it = loaded.emplace(context, load_kernel(kSpec(current_device_arch()))).first;
  return it->second;
}

}  // namespace

GraphTiming time_graph(check::GpuSession& gpu, const std::function<void(CUstream)>& enqueue, int replays,
                       check::DeviceBuffer* flush, CUstreamCaptureMode capture) {
  const auto& cu = driver::api();
  CUstream stream = gpu.stream();
  enqueue(stream);  // loads the kernels outside the capture
  gpu.synchronize();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  FI_CU(cuStreamBeginCapture, "bench", stream, capture);
  try {
    enqueue(stream);
  } catch (...) {  // leave the stream usable: end the capture before reporting
    if (cu.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph != nullptr) cu.cuGraphDestroy(graph);
    throw;
  }
  FI_CU(cuStreamEndCapture, "bench", stream, &graph);
  FI_CU(cuGraphInstantiate, "bench", &exec, graph, 0);
  for (int i = 0; i < 3; ++i) FI_CU(cuGraphLaunch, "bench", exec, stream);  // warm-up
  gpu.synchronize();
  // Every replay queued behind a spin wait long enough for the host to enqueue them all: each event
  // pair then brackets GPU time only, not the host's launch latency.
  const LoadedKernel& spin = probe_kernel<spin_wait_kernel_spec>();
  unsigned long long wait_ns = 2'000'000ull + 30'000ull * static_cast<unsigned long long>(replays);
  void* spin_args[] = {&wait_ns};
  std::vector<CUevent> starts(replays), stops(replays);
  for (int i = 0; i < replays; ++i) {
    FI_CU(cuEventCreate, "bench", &starts[i], CU_EVENT_DEFAULT);
    FI_CU(cuEventCreate, "bench", &stops[i], CU_EVENT_DEFAULT);
  }
  launch_kernel(spin, 1, 1, 1, stream, spin_args);
  for (int i = 0; i < replays; ++i) {
    if (flush != nullptr)
      FI_CU(cuMemsetD8Async, "bench", reinterpret_cast<CUdeviceptr>(flush->data()), static_cast<unsigned char>(i & 0xff),
            flush->bytes(), stream);
    FI_CU(cuEventRecord, "bench", starts[i], stream);
    FI_CU(cuGraphLaunch, "bench", exec, stream);
    FI_CU(cuEventRecord, "bench", stops[i], stream);
  }
  gpu.synchronize();
  std::vector<float> times;
  for (int i = 0; i < replays; ++i) {
    float ms = 0;
    FI_CU(cuEventElapsedTime, "bench", &ms, starts[i], stops[i]);
    times.push_back(ms);
    cu.cuEventDestroy(starts[i]);
    cu.cuEventDestroy(stops[i]);
  }
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  GraphTiming t;
  t.replays = replays;
  t.median_us = times.empty() ? 0 : 1000.0 * times[times.size() / 2];
  t.min_us = times.empty() ? 0 : 1000.0 * times.front();
  return t;
}

GraphTiming measure_launch_floor(check::GpuSession& gpu, check::DeviceBuffer* flush, int replays) {
  const LoadedKernel& spin = probe_kernel<spin_wait_kernel_spec>();
  unsigned long long no_wait = 0;
  return time_graph(
      gpu,
      [&](CUstream stream) {
        void* args[] = {&no_wait};
        launch_kernel(spin, 1, 1, 1, stream, args);
      },
      replays, flush);
}

int paged_read_warps() {
  return probe_kernel<paged_read_kernel_spec>().multiprocessors * kernels::kPagedReadCtasPerSm *
         (kernels::kPagedReadThreads / 32);
}

void launch_paged_read(const kernels::PagedReadParams& params, CUstream stream) {
  if (static_cast<long long>(params.batch) * params.table_stride >= (1ll << 31) ||
      params.block_vectors > 32 * kernels::kPagedReadVectorsPerLane)
    throw Error("paged-read probe: more than 2^31 table entries, or blocks of more than 8704 bytes");
  const LoadedKernel& kernel = probe_kernel<paged_read_kernel_spec>();
  kernels::PagedReadParams p = params;
  void* args[] = {&p};
  launch_kernel(kernel, static_cast<unsigned>(kernel.multiprocessors) * kernels::kPagedReadCtasPerSm, 1, 1, stream, args);
}

GraphTiming time_paged_read(check::GpuSession& gpu, const kernels::PagedReadParams& params, check::DeviceBuffer* flush,
                            int replays) {
  return time_graph(gpu, [&](CUstream stream) { launch_paged_read(params, stream); }, replays, flush);
}

int sparse_read_warps() {
  return probe_kernel<sparse_read_kernel_spec>().multiprocessors * kernels::kSparseReadCtasPerSm *
         (kernels::kSparseReadThreads / 32);
}

void launch_sparse_read(const kernels::SparseReadParams& params, CUstream stream) {
  if ((params.candidate_block != 8 && params.candidate_block != 16) || (params.key_bytes != 128 && params.key_bytes != 64) ||
      params.block_stride % 16 != 0)
    throw Error("sparse-read probe: candidate blocks of 8 or 16 positions, keys of 128 or 64 bytes, 16-byte block strides");
  const LoadedKernel& kernel = probe_kernel<sparse_read_kernel_spec>();
  kernels::SparseReadParams p = params;
  void* args[] = {&p};
  launch_kernel(kernel, static_cast<unsigned>(kernel.multiprocessors) * kernels::kSparseReadCtasPerSm, 1, 1, stream, args);
}

GraphTiming time_sparse_read(check::GpuSession& gpu, const kernels::SparseReadParams& params, check::DeviceBuffer* flush,
                             int replays) {
  return time_graph(gpu, [&](CUstream stream) { launch_sparse_read(params, stream); }, replays, flush);
}

double measure_read_bandwidth(check::GpuSession& gpu, std::size_t bytes, int replays) {
  const LoadedKernel& kernel = probe_kernel<stream_read_kernel_spec>();
  check::DeviceBuffer data(bytes), sink(16);
  data.fill(0x3c);
  kernels::StreamReadParams p{data.data(), static_cast<long long>(bytes / 16), static_cast<unsigned int*>(sink.data())};
  const unsigned grid = static_cast<unsigned>(kernel.multiprocessors) * 4;
  const GraphTiming t = time_graph(
      gpu,
      [&](CUstream stream) {
        void* args[] = {&p};
        launch_kernel(kernel, grid, 1, 1, stream, args);
      },
      replays);
  return static_cast<double>(bytes) / (t.median_us * 1e-6);
}

}  // namespace flash_indexer::bench
