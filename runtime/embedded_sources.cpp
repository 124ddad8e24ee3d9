#include "embedded_sources.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "flash_indexer/error.hpp"

namespace flash_indexer {
namespace {

// The quoted names of the #include "..." lines of `text`.
std::vector<std::string_view> quoted_includes(std::string_view text) {
  std::vector<std::string_view> names;
  std::size_t pos = 0;
  while ((pos = text.find("#include", pos)) != std::string_view::npos) {
    pos += 8;
    const std::size_t line_end = std::min(text.find('\n', pos), text.size());
    const std::size_t open = text.find('"', pos);
    if (open == std::string_view::npos || open > line_end) continue;  // <...> includes: NVRTC built-ins
    const std::size_t close = text.find('"', open + 1);
    if (close == std::string_view::npos || close > line_end) continue;
    names.push_back(text.substr(open + 1, close - open - 1));
  }
  return names;
}

void collect(std::string_view text, std::vector<EmbeddedHeader>& out) {
  for (std::string_view name : quoted_includes(text)) {
    if (std::any_of(out.begin(), out.end(), [&](const EmbeddedHeader& h) { return h.name == name; })) continue;
    const auto all = embedded_headers();
    const auto it = std::find_if(all.begin(), all.end(), [&](const EmbeddedHeader& h) { return h.name == name; });
    if (it == all.end()) throw Error(fmt::format("kernel source includes \"{}\", which is not an embedded kernel header", name));
    out.push_back(*it);
    collect(it->content, out);
  }
}

}  // namespace

std::vector<EmbeddedHeader> included_headers(std::string_view source) {
  std::vector<EmbeddedHeader> out;
  collect(source, out);
  return out;
}

}  // namespace flash_indexer
