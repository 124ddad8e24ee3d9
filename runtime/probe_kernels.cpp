#include "probe_kernels.hpp"

#include <fmt/format.h>

#include <string>

#include "../kernels/paged_read_params.cuh"
#include "../kernels/sparse_read_params.cuh"
#include "../kernels/stream_read_params.cuh"

namespace flash_indexer {

namespace {

// A probe: key "probe.<name>.<arch>", entry fi_probe_<name>, one call of kernels::<name>(p) from
// kernels/<name>.cuh; `bounds` the __launch_bounds__ arguments (empty: none).
KernelSpec probe_spec(const Arch& arch, const std::string& name, int threads, const std::string& bounds,
                      const std::string& parameter) {
  KernelSpec spec;
  spec.key = "probe." + name + "." + arch.name();
  spec.arch = arch;
  spec.entry = "fi_probe_" + name;
  spec.threads = threads;
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"{name}.cuh\"\n"
      "extern \"C\" __global__ void {bounds}{entry}(const {parameter} p) {{\n"
      "  flash_indexer::kernels::{name}(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("name", name),
      fmt::arg("bounds", bounds.empty() ? std::string() : "__launch_bounds__(" + bounds + ") "), fmt::arg("entry", spec.entry),
      fmt::arg("parameter", parameter));
  spec.config = {{"kind", "probe"}, {"variant", name}, {"arch", arch.name()}};
  return spec;
}

}  // namespace

KernelSpec stream_read_kernel_spec(const Arch& arch) {
  return probe_spec(arch, "stream_read", kernels::kStreamReadThreads, std::to_string(kernels::kStreamReadThreads),
                    "flash_indexer::kernels::StreamReadParams");
}

KernelSpec paged_read_kernel_spec(const Arch& arch) {
  return probe_spec(arch, "paged_read", kernels::kPagedReadThreads,
                    fmt::format("{}, {}", kernels::kPagedReadThreads, kernels::kPagedReadCtasPerSm),
                    "flash_indexer::kernels::PagedReadParams");
}

KernelSpec sparse_read_kernel_spec(const Arch& arch) {
  return probe_spec(arch, "sparse_read", kernels::kSparseReadThreads,
                    fmt::format("{}, {}", kernels::kSparseReadThreads, kernels::kSparseReadCtasPerSm),
                    "flash_indexer::kernels::SparseReadParams");
}

KernelSpec spin_wait_kernel_spec(const Arch& arch) { return probe_spec(arch, "spin_wait", 32, "", "unsigned long long"); }

}  // namespace flash_indexer
