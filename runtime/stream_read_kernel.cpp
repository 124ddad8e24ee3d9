#include "stream_read_kernel.hpp"

#include <fmt/format.h>

#include "../kernels/paged_read_params.cuh"
#include "../kernels/stream_read_params.cuh"

namespace flash_indexer {

KernelSpec stream_read_kernel_spec(const Arch& arch) {
  KernelSpec spec;
  spec.key = "probe.stream_read." + arch.name();
  spec.arch = arch;
  spec.entry = "fi_probe_stream_read";
  spec.threads = kernels::kStreamReadThreads;
  spec.source = fmt::format(
      "// {}\n"
      "#include \"stream_read.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const flash_indexer::kernels::StreamReadParams p) {{\n"
      "  flash_indexer::kernels::stream_read(p);\n"
      "}}\n",
      spec.key, spec.threads, spec.entry);
  spec.config = {{"kind", "probe"}, {"variant", "stream_read"}, {"arch", arch.name()}};
  return spec;
}

KernelSpec paged_read_kernel_spec(const Arch& arch) {
  KernelSpec spec;
  spec.key = "probe.paged_read." + arch.name();
  spec.arch = arch;
  spec.entry = "fi_probe_paged_read";
  spec.threads = kernels::kPagedReadThreads;
  spec.source = fmt::format(
      "// {}\n"
      "#include \"paged_read.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({}, {}) {}(const flash_indexer::kernels::PagedReadParams p) {{\n"
      "  flash_indexer::kernels::paged_read(p);\n"
      "}}\n",
      spec.key, spec.threads, kernels::kPagedReadCtasPerSm, spec.entry);
  spec.config = {{"kind", "probe"}, {"variant", "paged_read"}, {"arch", arch.name()}};
  return spec;
}

KernelSpec spin_wait_kernel_spec(const Arch& arch) {
  KernelSpec spec;
  spec.key = "probe.spin_wait." + arch.name();
  spec.arch = arch;
  spec.entry = "fi_probe_spin_wait";
  spec.threads = 32;
  spec.source = fmt::format(
      "// {}\n"
      "#include \"spin_wait.cuh\"\n"
      "extern \"C\" __global__ void {}(const unsigned long long ns) {{\n"
      "  flash_indexer::kernels::spin_wait(ns);\n"
      "}}\n",
      spec.key, spec.entry);
  spec.config = {{"kind", "probe"}, {"variant", "spin_wait"}, {"arch", arch.name()}};
  return spec;
}

}  // namespace flash_indexer
