#pragma once
// Loaded kernels, per (configuration, CUDA context): the launch path looks a kernel up without
// allocating; the first call for a configuration compiles or reads the disk cache and loads the
// module, once, however many threads ask at the same time.
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "driver.hpp"
#include "kernel_spec.hpp"

namespace flash_indexer {

struct LoadedKernel {
  std::string key;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  unsigned threads = 0;
  unsigned smem_bytes = 0;
  int variant = 0;          // KernelSpec::variant
  Arch arch{};              // the target it was compiled for
  int multiprocessors = 0;  // of the device the module was loaded on
  int ctas_per_sm = 0;      // CTAs of this kernel (its threads and shared memory) one SM runs at once
  // Clusters of 2, 4, 8 and 16 CTAs of this kernel (its threads and shared memory) that the device runs at
  // once (cuOccupancyMaxActiveClusters), at index log2 of the size (index 0 unused); 0 before sm_90. A kernel
  // compiled with a cluster size has only that size's. A GPC holds whole clusters, so this can be well below
  // multiprocessors * (CTAs per SM) / size: on the H200 30 clusters of 8 at two CTAs per SM, not 33.
  int max_active_clusters[5] = {};
};

// Loads spec in the current context (disk cache -> NVRTC on a miss -> cuModuleLoadData), sets the
// dynamic shared memory limit once. A cached CUBIN the driver refuses is discarded and rebuilt once.
LoadedKernel load_kernel(const KernelSpec& spec);

// Throws Error when `stream` is capturing: loading a module then would invalidate the capture.
void require_not_capturing(CUstream stream, const std::string& key);

// Throws ArgumentError naming `op` when `stream` belongs to another context than `context` (a launch
// there would read this context's pointers in the other's address space).
void require_stream_of_context(std::string_view op, CUstream stream, CUcontext context);

// Launches with cuLaunchKernelEx on `stream`; `args` are the kernel parameter addresses. `programmatic`:
// as a programmatic dependent launch (kernels/grid_dependency.cuh) where the kernel was compiled for
// sm_90 or newer; the kernel waits for the stream's previous kernel before it touches global memory.
// `smem_bytes` >= 0: the call's dynamic shared memory, at most the kernel's (-1: the kernel's).
// `cooperative`: the driver launches every CTA at once or fails the launch (a kernel whose CTAs wait for
// each other).
void launch_kernel(const LoadedKernel& kernel, unsigned grid_x, unsigned grid_y, unsigned grid_z, CUstream stream, void** args,
                   bool programmatic = false, int smem_bytes = -1, bool cooperative = false);

// The current CUDA context (an Error naming `op` when there is none) and the target the JIT compiles for
// on its device.
CUcontext current_context(std::string_view op);
Arch current_device_arch();
// The current CUDA context or, where the calling thread has none, device 0's primary context made current
// (what the CUDA runtime does on its first call, and the context torch uses): the warm functions take it,
// so that warming in a fresh process needs no context set up first.
CUcontext current_or_primary_context(std::string_view op);
// Compiles `spec` into the disk cache (a cached entry is a hit): warming for an explicit arch, which needs
// no GPU. An error naming `op` where the entry cannot be stored.
void compile_into_disk_cache(std::string_view op, const KernelSpec& spec);

// Config must be equality-comparable and hashable by Hash, and have an `arch` member. Entries live for the whole process
// (modules are never unloaded: kernels may still run when static destructors do).
template <class Config, class Hash>
class KernelRegistry {
 public:
  // The kernel of `config` in the current context, whatever config.arch says: make_spec(config with the
  // current device's arch), returning a KernelSpec, builds its spec on a miss. `stream`, the one the
  // kernel will be launched on, must belong to that context.
  template <class MakeSpec>
  const LoadedKernel& get_for_current_device(std::string_view op, Config config, CUstream stream, MakeSpec&& make_spec) {
    config.arch = Arch{};
    const CUcontext context = current_context(op);
    require_stream_of_context(op, stream, context);
    return get(context, config, stream, [&] {
      Config full = config;
      full.arch = current_device_arch();
      return make_spec(full);
    });
  }

  template <class MakeSpec>
  const LoadedKernel& get(CUcontext context, const Config& config, CUstream stream, MakeSpec&& make_spec) {
    const Key key{context, config};
    Slot* slot = nullptr;
    {
      std::shared_lock lock(mutex_);
      if (auto it = slots_.find(key); it != slots_.end()) slot = it->second.get();
    }
    if (slot != nullptr)
      if (const LoadedKernel* ready = slot->ready.load(std::memory_order_acquire)) return *ready;
    {
      std::unique_lock lock(mutex_);
      auto& owned = slots_[key];
      if (!owned) owned = std::make_unique<Slot>();
      slot = owned.get();
    }
    std::lock_guard slot_lock(slot->mutex);  // concurrent first calls: one loads, the others wait
    if (const LoadedKernel* ready = slot->ready.load(std::memory_order_acquire)) return *ready;
    KernelSpec spec = make_spec();
    require_not_capturing(stream, spec.key);
    slot->kernel = std::make_unique<LoadedKernel>(load_kernel(spec));
    slot->ready.store(slot->kernel.get(), std::memory_order_release);
    return *slot->kernel;
  }

 private:
  struct Key {
    CUcontext context;
    Config config;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return Hash{}(k.config) * 31 + std::hash<const void*>{}(k.context); }
  };
  struct Slot {
    std::mutex mutex;
    std::atomic<const LoadedKernel*> ready{nullptr};
    std::unique_ptr<LoadedKernel> kernel;
  };

  std::shared_mutex mutex_;
  std::unordered_map<Key, std::unique_ptr<Slot>, KeyHash> slots_;
};

}  // namespace flash_indexer
