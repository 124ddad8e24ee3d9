#pragma once
// NVRTC, straight to a CUBIN for the exact target, with the ptxas resource report captured.
#include <string>
#include <vector>

#include "kernel_spec.hpp"

namespace flash_indexer {

// ptxas's resource report for the kernel (-1 where the log did not say).
struct PtxasReport {
  int registers = -1;
  int shared_bytes = 0;  // static shared memory
  int stack_frame_bytes = -1;  // the largest of the kernel's and its calls'
  int spill_store_bytes = -1;  // spills: the kernel's and its calls' together
  int spill_load_bytes = -1;

  static PtxasReport parse(const std::string& log);
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

struct CompiledKernel {
  std::string cubin;
  std::string log;
  PtxasReport report;
  double compile_ms = 0.0;
};

// "13.0"
std::string nvrtc_version();

// Every option the compile of `spec` passes to NVRTC (they are part of the cache key).
std::vector<std::string> nvrtc_options(const Arch& arch);

// Compiles spec.source with the embedded headers it includes. Throws Error carrying NVRTC's log and
// the kernel key on failure.
CompiledKernel compile_kernel(const KernelSpec& spec);

}  // namespace flash_indexer
