#pragma once
// NCCL, loaded from libnccl.so.2 (or the file FLASH_INDEXER_NCCL names) with dlopen at first need and
// never linked, as libcuda is (driver.hpp): the library builds and runs without it, and only the DCP
// decode plan needs it. The declarations below are the subset of nccl.h's ABI this library calls.
#include <cuda.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "flash_indexer/dcp_decode_plan.hpp"  // ncclComm_t

namespace flash_indexer::nccl {

using Result = int;                 // ncclResult_t: ncclSuccess is 0
constexpr int kInt8 = 0;            // ncclDataType_t ncclInt8
struct UniqueId {                   // ncclUniqueId
  char internal[128];
};

struct Api {
  Result (*ncclGetVersion)(int* version) = nullptr;
  const char* (*ncclGetErrorString)(Result result) = nullptr;
  Result (*ncclCommCount)(ncclComm_t comm, int* count) = nullptr;
  Result (*ncclCommUserRank)(ncclComm_t comm, int* rank) = nullptr;
  Result (*ncclCommCuDevice)(ncclComm_t comm, int* device) = nullptr;
  Result (*ncclAllGather)(const void* send, void* receive, std::size_t count, int datatype, ncclComm_t comm,
                          CUstream stream) = nullptr;
  Result (*ncclGroupStart)() = nullptr;
  Result (*ncclGroupEnd)() = nullptr;
  // For the tests and tools that make their own communicators.
  Result (*ncclGetUniqueId)(UniqueId* id) = nullptr;
  Result (*ncclCommInitRank)(ncclComm_t* comm, int ranks, UniqueId id, int rank) = nullptr;
  Result (*ncclCommDestroy)(ncclComm_t comm) = nullptr;
};

// True when the library loads with every entry point above; otherwise false and `why` says what is
// missing.
bool available(std::string* why = nullptr);

// The loaded API; throws Error (with the reason) when NCCL is not available.
const Api& api();

// Why `file` does not load as NCCL ("" when it does), without making it the library's NCCL: for tests.
std::string load_failure(const std::string& file);

// Throws Error "<call> failed: <NCCL's message> (ncclResult_t N)[ for <context>]" unless result is 0.
void check(Result result, std::string_view call, std::string_view context = {});

}  // namespace flash_indexer::nccl
