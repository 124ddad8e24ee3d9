#pragma once
// Device memory a plan works in instead of allocating its own: a buffer from the engine's allocator
// (torch's caching allocator, a memory pool), so that the engine accounts for it and can reuse it after
// the plan is gone. The plan neither frees it nor keeps it alive: the buffer must outlive the plan and
// every graph that captured one of its runs.
#include <cstddef>

namespace flash_indexer {

struct PlanMemory {
  void* data = nullptr;   // device memory of the context the plan runs in, 256-byte aligned
  std::size_t bytes = 0;  // at least the plan's required_bytes(config)
};

}  // namespace flash_indexer
