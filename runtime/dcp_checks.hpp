#pragma once
// The checks of a DcpLayout argument, shared by the ops that take one (paged_mqa_logits, topk,
// topk_merge): "<op>: <name>.<field>: expected ..., got ...".
#include <fmt/format.h>

#include <climits>
#include <string_view>

#include "flash_indexer/dcp.hpp"
#include "flash_indexer/error.hpp"

namespace flash_indexer {

inline void check_dcp_layout(std::string_view op, std::string_view name, const DcpLayout& l) {
  if (l.ranks < 1 || l.ranks > 1024)
    throw ArgumentError(fmt::format("{}: {}.ranks: expected 1..1024, got {}", op, name, l.ranks));
  if (l.rank < 0 || l.rank >= l.ranks)
    throw ArgumentError(fmt::format("{}: {}.rank: expected 0..{} (ranks - 1), got {}", op, name, l.ranks - 1, l.rank));
  if (l.interleave < 1 || static_cast<long long>(l.interleave) * l.ranks > INT_MAX)
    throw ArgumentError(
        fmt::format("{}: {}.interleave: expected >= 1 with ranks * interleave <= 2^31-1, got {}", op, name, l.interleave));
}

}  // namespace flash_indexer
