// GPU test of the benchmarks' sparse-read probe (kernels/sparse_read.cuh), the gather floor `bench decode
// --two-level` reports per cell: it must read exactly the keys and scales of the live candidates, located
// as the sparse logits locate them (the MTP rule for each query row's length; -1, negative and past-the-
// length candidates never read; duplicates read twice; a row of length 0), which the XOR of every 32-bit
// word it read shows against the same XOR on the host. FP8 (128-byte keys) and MXFP4 (64-byte) blocks,
// candidate blocks of 8 and 16 positions, counts that do not fill the probe's groups.
#include "catch_compat.hpp"

#include <algorithm>
#include <random>
#include <vector>

#include "gpu_timer.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

struct Cell {
  int batch, next_n, count, candidate_block, key_bytes;
};

unsigned int xor_of_live_candidates(const std::vector<unsigned int>& pool, const std::vector<int>& table,
                                    const std::vector<int>& lengths, const std::vector<int>& candidates, const Cell& c,
                                    int stride, int block_words) {
  unsigned int x = 0;
  for (int r = 0; r < c.batch * c.next_n; ++r) {
    const int b = r / c.next_n;
    const long long len = std::max(0ll, static_cast<long long>(lengths[b]) - c.next_n + r % c.next_n + 1);
    for (int i = 0; i < c.count; ++i) {
      const long long cand = candidates[static_cast<std::size_t>(r) * c.count + i];
      if (cand < 0 || cand >= (len + c.candidate_block - 1) / c.candidate_block) continue;
      const long long pos = cand * c.candidate_block;
      const std::size_t block = static_cast<std::size_t>(table[static_cast<std::size_t>(b) * stride + pos / 64]) * block_words;
      const std::size_t keys = block + static_cast<std::size_t>(pos % 64) * c.key_bytes / 4;
      for (int w = 0; w < c.candidate_block * c.key_bytes / 4; ++w) x ^= pool[keys + w];
      const std::size_t scales = block + 64 * c.key_bytes / 4 + pos % 64;
      for (int w = 0; w < c.candidate_block; ++w) x ^= pool[scales + w];
    }
  }
  return x;
}

}  // namespace

TEST_CASE("gpu: the sparse-read probe reads exactly the live candidates' keys and scales", "[gpu][sparse][probe]") {
  test::require_gpu();
  ck::GpuSession& gpu = test::gpu_session();
  const std::uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (const Cell c : {Cell{1, 1, 2048, 8, 128}, Cell{5, 2, 37, 16, 128}, Cell{3, 3, 130, 8, 64}, Cell{64, 1, 61, 16, 64}}) {
    const int block_bytes = 64 * (c.key_bytes + 4), block_words = block_bytes / 4, pool_blocks = 300, stride = 37;
    std::vector<unsigned int> pool(static_cast<std::size_t>(pool_blocks) * block_words);
    for (auto& w : pool) w = static_cast<unsigned int>(rng());
    std::uniform_int_distribution<int> length(0, stride * 64), id(0, pool_blocks - 1);
    std::vector<int> lengths(c.batch), table(static_cast<std::size_t>(c.batch) * stride);
    for (auto& l : lengths) l = length(rng);
    lengths[0] = c.batch == 1 ? stride * 64 : 0;
    if (c.batch > 1) lengths[1] = 1;
    for (auto& t : table) t = id(rng);
    // Slots past each request's length point outside the pool: reading one would fault, or change the XOR.
    for (int b = 0; b < c.batch; ++b)
      for (int j = 0; j < stride; ++j)
        if (static_cast<long long>(j) * 64 >= lengths[b]) table[static_cast<std::size_t>(b) * stride + j] = 1 << 30;
    // Candidates: mostly live, some -1, negative, past the row's blocks or repeated.
    std::uniform_int_distribution<int> any(-3, stride * 64 / c.candidate_block + 4);
    std::vector<int> candidates(static_cast<std::size_t>(c.batch) * c.next_n * c.count);
    for (auto& x : candidates) x = any(rng);
    if (c.count > 1) candidates[1] = candidates[0];
    ck::DeviceBuffer pool_d = ck::DeviceBuffer::from(pool), table_d = ck::DeviceBuffer::from(table),
                     lengths_d = ck::DeviceBuffer::from(lengths), candidates_d = ck::DeviceBuffer::from(candidates);
    ck::DeviceBuffer warp_xor(static_cast<std::size_t>(bench::sparse_read_warps()) * 4);
    warp_xor.fill(0xa5);  // poisoned: every warp must store its slot
    const kernels::SparseReadParams p{static_cast<const unsigned char*>(pool_d.data()),
                                      block_bytes,
                                      static_cast<const int*>(table_d.data()),
                                      static_cast<const int*>(lengths_d.data()),
                                      static_cast<const int*>(candidates_d.data()),
                                      c.batch,
                                      c.next_n,
                                      stride,
                                      c.count,
                                      c.candidate_block,
                                      c.key_bytes,
                                      static_cast<unsigned int*>(warp_xor.data())};
    bench::launch_sparse_read(p, gpu.stream());
    gpu.synchronize();
    unsigned int got = 0;
    for (unsigned int w : warp_xor.to_host<unsigned int>(static_cast<std::size_t>(bench::sparse_read_warps()))) got ^= w;
    INFO("batch " << c.batch << " next_n " << c.next_n << " count " << c.count << " block " << c.candidate_block << " key bytes "
                  << c.key_bytes << ", seed " << seed);
    CHECK(got == xor_of_live_candidates(pool, table, lengths, candidates, c, stride, block_words));
  }
}
