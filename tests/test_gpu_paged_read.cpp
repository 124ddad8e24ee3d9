// GPU test of the benchmarks' paged-read probe (kernels/paged_read.cuh), the floor `bench logits` reports
// per cell: it must read exactly the KV blocks the lengths cover through the block table (ragged lengths,
// 0 included; ids in any order, repeated; table slots past a request's length never touched), which the
// XOR of every 32-bit word it read shows against the same XOR on the host. Block sizes of the FP8 (8448
// bytes) and MXFP4 (4352) caches, and one of a single 16-byte vector.
#include "catch_compat.hpp"

#include <random>
#include <vector>

#include "gpu_timer.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

unsigned int xor_of_covered_blocks(const std::vector<unsigned int>& pool, const std::vector<int>& table,
                                   const std::vector<int>& lengths, int stride, int block_words, int block_tokens) {
  unsigned int x = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (int j = 0; j < stride && static_cast<long long>(j) * block_tokens < lengths[b]; ++j) {
      const int id = table[b * stride + j];
      for (int w = 0; w < block_words; ++w) x ^= pool[static_cast<std::size_t>(id) * block_words + w];
    }
  return x;
}

}  // namespace

TEST_CASE("gpu: the paged-read probe reads exactly the blocks the lengths cover", "[gpu][logits][probe]") {
  test::require_gpu();
  ck::GpuSession& gpu = test::gpu_session();
  const std::uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (const int block_bytes : {8448, 4352, 16}) {
    const int block_tokens = 64, block_words = block_bytes / 4, pool_blocks = 300;
    std::vector<unsigned int> pool(static_cast<std::size_t>(pool_blocks) * block_words);
    for (auto& w : pool) w = static_cast<unsigned int>(rng());
    for (const int batch : {1, 5, 64}) {
      const int stride = 37;
      std::uniform_int_distribution<int> length(0, stride * block_tokens), id(0, pool_blocks - 1);
      std::vector<int> lengths(batch), table(static_cast<std::size_t>(batch) * stride);
      for (auto& l : lengths) l = length(rng);
      lengths[0] = 0;
      if (batch > 1) lengths[1] = 1;
      if (batch > 2) lengths[2] = stride * block_tokens;
      for (auto& t : table) t = id(rng);
      // Slots past each request's length point outside the pool: reading one would fault, or change the XOR.
      for (int b = 0; b < batch; ++b)
        for (int j = 0; j < stride; ++j)
          if (static_cast<long long>(j) * block_tokens >= lengths[b]) table[static_cast<std::size_t>(b) * stride + j] = 1 << 30;
      ck::DeviceBuffer pool_d = ck::DeviceBuffer::from(pool), table_d = ck::DeviceBuffer::from(table),
                       lengths_d = ck::DeviceBuffer::from(lengths);
      ck::DeviceBuffer warp_xor(static_cast<std::size_t>(bench::paged_read_warps()) * 4);
      warp_xor.fill(0xa5);  // poisoned: every warp must store its slot
      const kernels::PagedReadParams p{pool_d.data(),
                                       static_cast<const int*>(table_d.data()),
                                       static_cast<const int*>(lengths_d.data()),
                                       batch,
                                       stride,
                                       block_bytes / 16,
                                       block_tokens,
                                       static_cast<unsigned int*>(warp_xor.data())};
      bench::launch_paged_read(p, gpu.stream());
      gpu.synchronize();
      unsigned int got = 0;
      for (unsigned int w : warp_xor.to_host<unsigned int>(static_cast<std::size_t>(bench::paged_read_warps()))) got ^= w;
      INFO("block bytes " << block_bytes << ", batch " << batch << ", seed " << seed);
      CHECK(got == xor_of_covered_blocks(pool, table, lengths, stride, block_words, block_tokens));
    }
  }
}
