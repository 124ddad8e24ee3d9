#pragma once
// The checks of a caller's PlanMemory, shared by the plans that take one.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flash_indexer/error.hpp"
#include "flash_indexer/plan_memory.hpp"

namespace flash_indexer {

// 256-byte alignment: the plan places its buffers at 256-byte offsets, the alignment the kernels' vector and
// TMA accesses assume of cuMemAlloc's memory.
inline void check_plan_memory(std::string_view op, const PlanMemory& memory, std::size_t required) {
  if (reinterpret_cast<std::uintptr_t>(memory.data) % 256 != 0)
    throw ArgumentError(
        fmt::format("{}: memory.data: expected a 256-byte aligned device address, got {}", op, fmt::ptr(memory.data)));
  if (memory.bytes < required)
    throw ArgumentError(
        fmt::format("{}: memory.bytes: expected at least {} (required_bytes(config)), got {}", op, required, memory.bytes));
}

}  // namespace flash_indexer
