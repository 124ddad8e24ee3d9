#pragma once
// A plan's one device buffer: the caller's PlanMemory, checked, or an allocation of the plan's own.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/plan_memory.hpp"
#include "kernel_registry.hpp"

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

// The buffer of `bytes` a plan works in: the caller's `memory` (checked first, so a rejected one changes
// nothing) or, where memory.data is null, a cuMemAlloc the plan owns and frees. Needs a current context.
struct PlanBuffer {
  unsigned long long address = 0;
  bool owned = true;
};
inline PlanBuffer acquire_plan_buffer(std::string_view op, const PlanMemory& memory, std::size_t bytes) {
  if (memory.data != nullptr) check_plan_memory(op, memory, bytes);
  current_context(op);  // a clear error without a current context
  if (memory.data != nullptr) return {reinterpret_cast<std::uintptr_t>(memory.data), false};
  CUdeviceptr allocated = 0;
  FI_CU(cuMemAlloc, fmt::format("{} workspace of {} bytes", op, bytes), &allocated, bytes);
  return {allocated, true};
}

}  // namespace flash_indexer
