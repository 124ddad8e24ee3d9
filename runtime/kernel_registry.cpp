#include "kernel_registry.hpp"

#include <fmt/format.h>

#include <bit>

#include "disk_cache.hpp"
#include "flash_indexer/error.hpp"

namespace flash_indexer {

LoadedKernel load_kernel(const KernelSpec& spec) {
  const driver::Api& cu = driver::api();
  const DiskCache cache = current_disk_cache();
  CachedCubin cached = cache.get_or_compile(spec);

  LoadedKernel kernel;
  kernel.key = spec.key;
  kernel.threads = spec.threads;
  kernel.smem_bytes = spec.smem_bytes;
  kernel.variant = spec.variant;
  kernel.arch = spec.arch;
  CUdevice device = 0;
  FI_CU(cuCtxGetDevice, spec.key, &device);
  FI_CU(cuDeviceGetAttribute, spec.key, &kernel.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  CUresult loaded = cu.cuModuleLoadData(&kernel.module, cached.cubin.data());
  if (loaded != CUDA_SUCCESS && cached.outcome == CacheOutcome::hit) {
    const char* name = nullptr;
    cu.cuGetErrorName(loaded, &name);
    cache.discard(spec, fmt::format("cuModuleLoadData failed: {}", name ? name : "unknown error"));
    cached = cache.get_or_compile(spec);
    loaded = cu.cuModuleLoadData(&kernel.module, cached.cubin.data());
  }
  driver::check(loaded, "cuModuleLoadData", spec.key);
  FI_CU(cuModuleGetFunction, spec.key, &kernel.function, kernel.module, spec.entry.c_str());
  FI_CU(cuFuncSetAttribute, spec.key, kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        static_cast<int>(spec.smem_bytes));
  FI_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, spec.key, &kernel.ctas_per_sm, kernel.function,
        static_cast<int>(spec.threads), static_cast<std::size_t>(spec.smem_bytes));
  int required_cluster = 0;
  if (kernel.arch.major >= 9)
    FI_CU(cuFuncGetAttribute, spec.key, &required_cluster, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, kernel.function);
  // A cluster of more than 8 CTAs (a non-portable size) needs the function's permission: the kernels
  // compiled with one, and the one-CTA kernels whose capacity for such clusters is asked below.
  if (kernel.arch.major >= 9 && (required_cluster == 0 || required_cluster > 8))
    FI_CU(cuFuncSetAttribute, spec.key, kernel.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  if (kernel.arch.major >= 9 && required_cluster > 1) {  // the compiled cluster size's capacity
    CUlaunchConfig config{};
    config.gridDimX = static_cast<unsigned>(required_cluster);
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = spec.threads;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = spec.smem_bytes;
    const int i = std::countr_zero(static_cast<unsigned>(required_cluster));
    if (i < 5) FI_CU(cuOccupancyMaxActiveClusters, spec.key, &kernel.max_active_clusters[i], kernel.function, &config);
  }
  if (kernel.arch.major >= 9 && required_cluster == 0) {
    for (int i = 1; i < 5; ++i) {
      CUlaunchAttribute cluster{};
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = 1u << i;
      cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
      CUlaunchConfig config{};
      config.gridDimX = 1u << i;
      config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = spec.threads;
      config.blockDimY = config.blockDimZ = 1;
      config.sharedMemBytes = spec.smem_bytes;
      config.attrs = &cluster;
      config.numAttrs = 1;
      FI_CU(cuOccupancyMaxActiveClusters, spec.key, &kernel.max_active_clusters[i], kernel.function, &config);
    }
  }
  int max_threads = 0;  // also forces a lazily loaded function to load now, outside any capture
  FI_CU(cuFuncGetAttribute, spec.key, &max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel.function);
  if (max_threads < static_cast<int>(spec.threads))
    throw Error(fmt::format("kernel {} can run at most {} threads per CTA on this device, it needs {}", spec.key, max_threads,
                            spec.threads));
  return kernel;
}

void require_not_capturing(CUstream stream, const std::string& key) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  FI_CU(cuStreamIsCapturing, key, stream, &status);
  if (status != CU_STREAM_CAPTURE_STATUS_NONE)
    throw Error(
        fmt::format("kernel {} is not loaded yet and the stream is capturing a CUDA graph; loading a "
                    "module during capture is not allowed: warm the kernel first (call the op once, or "
                    "its warm_* function, before capture)",
                    key));
}

void require_stream_of_context(std::string_view op, CUstream stream, CUcontext context) {
  if (stream == nullptr) return;  // the default stream is the current context's
  CUcontext stream_context = nullptr;
  FI_CU(cuStreamGetCtx, fmt::format("{}: stream", op), stream, &stream_context);
  if (stream_context != context)
    throw ArgumentError(fmt::format("{}: stream: expected a stream of the current CUDA context, got one of another context", op));
}

void launch_kernel(const LoadedKernel& kernel, unsigned grid_x, unsigned grid_y, unsigned grid_z, CUstream stream, void** args,
                   bool programmatic, int smem_bytes, bool cooperative) {
  CUlaunchConfig config{};
  config.gridDimX = grid_x;
  config.gridDimY = grid_y;
  config.gridDimZ = grid_z;
  config.blockDimX = kernel.threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = smem_bytes >= 0 ? static_cast<unsigned>(smem_bytes) : kernel.smem_bytes;
  config.hStream = stream;
  CUlaunchAttribute attributes[2]{};
  config.attrs = attributes;
  if (programmatic && kernel.arch.major >= 9) {
    attributes[config.numAttrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[config.numAttrs++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (cooperative) {
    attributes[config.numAttrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[config.numAttrs++].value.cooperative = 1;
  }
  FI_CU(cuLaunchKernelEx, kernel.key, &config, kernel.function, args, nullptr);
}

CUcontext current_context(std::string_view op) {
  CUcontext context = nullptr;
  FI_CU(cuCtxGetCurrent, op, &context);
  if (context == nullptr)
    throw Error(fmt::format("{}: no current CUDA context (call cudaSetDevice, or make a context current, first)", op));
  return context;
}

CUcontext current_or_primary_context(std::string_view op) {
  CUcontext context = nullptr;
  FI_CU(cuCtxGetCurrent, op, &context);
  if (context != nullptr) return context;
  int devices = 0;
  FI_CU(cuDeviceGetCount, op, &devices);
  if (devices == 0) throw Error(fmt::format("{}: no CUDA device (to warm without one, pass the target arch)", op));
  CUdevice device = 0;
  FI_CU(cuDeviceGet, op, &device, 0);
  // Retained for the process's lifetime, as the loaded modules live in it.
  FI_CU(cuDevicePrimaryCtxRetain, op, &context, device);
  FI_CU(cuCtxSetCurrent, op, context);
  return context;
}

void compile_into_disk_cache(std::string_view op, const KernelSpec& spec) {
  const CachedCubin c = current_disk_cache().get_or_compile(spec);
  if (c.outcome == CacheOutcome::compiled_in_memory)
    throw Error(fmt::format("{}: {} compiled, but the kernel cache {} is not writable", op, spec.key,
                            current_disk_cache().root().string()));
}

Arch current_device_arch() {
  CUdevice device = 0;
  FI_CU(cuCtxGetDevice, "current_device_arch", &device);
  int major = 0, minor = 0;
  FI_CU(cuDeviceGetAttribute, "current_device_arch", &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  FI_CU(cuDeviceGetAttribute, "current_device_arch", &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  if (major < 8)
    throw Error(fmt::format("the current GPU has compute capability {}.{}; flash_indexer needs 8.0 or newer", major, minor));
  return Arch::for_compute_capability(major, minor);
}

}  // namespace flash_indexer
