#pragma once
// The CUDA Driver API, loaded from libcuda.so.1 with dlopen at first need and never linked, so the
// library runs (compiles, caches, validates) on machines that have no GPU and no driver.
#include <cuda.h>

#include <string>
#include <string_view>

namespace flash_indexer::driver {

// Every driver entry point the library and its tools use. The names go through cuda.h's macros, so
// cuMemAlloc resolves to the versioned symbol cuMemAlloc_v2, exactly as a linked program would.
// clang-format off
#define FI_DRIVER_FUNCTIONS(X)                                                                         \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGetCount)            \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)                        \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent)       \
  X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)   \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernelEx) X(cuStreamIsCapturing)               \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamBeginCapture)                  \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemsetD8)        \
  X(cuMemsetD8Async) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)         \
  X(cuEventElapsedTime) X(cuTensorMapEncodeTiled) X(cuMemsetD32Async) X(cuStreamWaitEvent)             \
  X(cuStreamGetCtx) X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)   \
  X(cuGraphGetNodes)
// clang-format on

struct Api {
#define FI_DECLARE_DRIVER_FUNCTION(name) decltype(&::name) name = nullptr;
  FI_DRIVER_FUNCTIONS(FI_DECLARE_DRIVER_FUNCTION)
#undef FI_DECLARE_DRIVER_FUNCTION
};

// True when libcuda.so.1 loads and cuInit succeeds with at least one device; otherwise false and
// `why` (if given) says what is missing.
bool available(std::string* why = nullptr);

// The loaded API; throws Error (with the reason) when the driver is not available.
const Api& api();

// Throws Error "<call> failed: <CUDA_ERROR_NAME> (<description>)[ for <context>]" unless result is
// CUDA_SUCCESS.
void check(CUresult result, std::string_view call, std::string_view context = {});

// Driver version as "13.0", or "none" when no driver is present.
std::string version_string();

}  // namespace flash_indexer::driver

// FI_CU(cuFoo, context, args...) calls the dlopen'd cuFoo and checks its result.
#define FI_CU(name, context, ...) \
  ::flash_indexer::driver::check(::flash_indexer::driver::api().name(__VA_ARGS__), #name, (context))
