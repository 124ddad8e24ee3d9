#pragma once
// Parameters of the streaming-read probe, shared by host and device code.

namespace flash_indexer {
namespace kernels {

struct StreamReadParams {
  const void* data;    // 16-byte aligned
  long long vectors;  // 16-byte vectors to read
  unsigned int* sink; // written only if the XOR of everything read has an impossible value
};

constexpr int kStreamReadThreads = 512;

}  // namespace kernels
}  // namespace flash_indexer
