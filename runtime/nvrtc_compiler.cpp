#include "nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <regex>

#include "embedded_sources.hpp"
#include "flash_indexer/error.hpp"

namespace flash_indexer {
namespace {

void check(nvrtcResult result, const char* call, const KernelSpec& spec, const std::string& log = {}) {
  if (result == NVRTC_SUCCESS) return;
  throw Error(fmt::format("{} failed: {} for kernel {}{}{}", call, nvrtcGetErrorString(result), spec.key,
                          log.empty() ? "" : "\nNVRTC log:\n", log));
}

int first_int(const std::string& text, const std::regex& pattern, int fallback) {
  std::smatch m;
  return std::regex_search(text, m, pattern) ? std::stoi(m[1].str()) : fallback;
}

// The sum (or the largest) of a pattern's values over every function of the log: a kernel's calls
// (__noinline__) have their own stack frames and spills, listed after the entry's.
int all_ints(const std::string& text, const std::regex& pattern, int fallback, bool largest) {
  int result = fallback;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it) {
    const int v = std::stoi((*it)[1].str());
    result = result < 0 ? v : largest ? std::max(result, v) : result + v;
  }
  return result;
}

}  // namespace

PtxasReport PtxasReport::parse(const std::string& log) {
  static const std::regex registers(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex stack(R"((\d+) bytes stack frame)");
  static const std::regex spill_stores(R"((\d+) bytes spill stores)");
  static const std::regex spill_loads(R"((\d+) bytes spill loads)");
  PtxasReport r;
  r.registers = first_int(log, registers, -1);
  r.shared_bytes = first_int(log, smem, 0);
  r.stack_frame_bytes = all_ints(log, stack, -1, true);
  r.spill_store_bytes = all_ints(log, spill_stores, -1, false);
  r.spill_load_bytes = all_ints(log, spill_loads, -1, false);
  return r;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) throw Error("nvrtcVersion failed");
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_options(const Arch& arch) {
  // No -I: the kernels include only embedded headers. No fast-math: the kernels are exact.
  return {"--gpu-architecture=" + arch.name(), "-std=c++17", "-default-device", "--ptxas-options=-v"};
}

CompiledKernel compile_kernel(const KernelSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<EmbeddedHeader> headers = included_headers(spec.source);
  std::vector<std::string> header_names, header_texts;  // NUL-terminated copies for NVRTC
  for (const auto& h : headers) {
    header_names.emplace_back(h.name);
    header_texts.emplace_back(h.content);
  }
  std::vector<const char*> name_ptrs, text_ptrs;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    name_ptrs.push_back(header_names[i].c_str());
    text_ptrs.push_back(header_texts[i].c_str());
  }

  nvrtcProgram raw = nullptr;
  check(nvrtcCreateProgram(&raw, spec.source.c_str(), "kernel.cu", static_cast<int>(headers.size()), text_ptrs.data(),
                           name_ptrs.data()),
        "nvrtcCreateProgram", spec);
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> program(&raw, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });

  const std::vector<std::string> options = nvrtc_options(spec.arch);
  std::vector<const char*> option_ptrs;
  for (const auto& o : options) option_ptrs.push_back(o.c_str());
  const nvrtcResult compiled = nvrtcCompileProgram(raw, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  CompiledKernel out;
  std::size_t log_size = 0;
  check(nvrtcGetProgramLogSize(raw, &log_size), "nvrtcGetProgramLogSize", spec);
  out.log.resize(log_size);
  if (log_size > 0) {
    check(nvrtcGetProgramLog(raw, out.log.data()), "nvrtcGetProgramLog", spec);
    while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();  // the terminating NUL(s)
  }
  check(compiled, "nvrtcCompileProgram", spec, out.log);

  std::size_t cubin_size = 0;
  check(nvrtcGetCUBINSize(raw, &cubin_size), "nvrtcGetCUBINSize", spec);
  out.cubin.resize(cubin_size);
  check(nvrtcGetCUBIN(raw, out.cubin.data()), "nvrtcGetCUBIN", spec);
  if (cubin_size == 0) throw Error(fmt::format("NVRTC returned an empty CUBIN for kernel {}", spec.key));
  out.report = PtxasReport::parse(out.log);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace flash_indexer
