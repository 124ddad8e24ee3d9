#pragma once
// The device headers of kernels/, embedded into the library at build time (cmake/embed_kernels.cmake),
// so the JIT needs no source tree and no CUDA include directory at run time.
#include <span>
#include <string_view>
#include <vector>

namespace flash_indexer {

struct EmbeddedHeader {
  std::string_view name;     // file name, as written in #include "..."
  std::string_view content;
};

std::span<const EmbeddedHeader> embedded_headers();

// The embedded headers `source` includes, directly or through other embedded headers, in a fixed
// order (first inclusion first). Throws Error for an #include "..." that is not embedded.
std::vector<EmbeddedHeader> included_headers(std::string_view source);

}  // namespace flash_indexer
