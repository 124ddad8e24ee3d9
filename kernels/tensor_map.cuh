#pragma once
// A TMA tensor map as a kernel parameter: the same size and alignment as the driver's CUtensorMap
// (encoded on the host with cuTensorMapEncodeTiled). Plain C++, shared by host and device code.

namespace flash_indexer {
namespace kernels {

struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

}  // namespace kernels
}  // namespace flash_indexer
