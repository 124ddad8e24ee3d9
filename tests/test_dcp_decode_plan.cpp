// DcpDecodePlan: its argument errors and the NCCL loader's (CPU), and on two GPUs
// the DCP result against the reference top-k of the whole cache, index for index (exact-arithmetic
// inputs, so the GPU logits equal the reference's bit for bit), with each rank's owned share.
#include "catch_compat.hpp"

#include <cstring>
#include <exception>
#include <random>
#include <thread>

#include "driver.hpp"
#include "flash_indexer/dcp.hpp"
#include "flash_indexer/dcp_decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"
#include "nccl.hpp"
#include "plan_reference.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

TEST_CASE("DcpDecodePlan rejects a configuration without DCP, a null communicator and too many candidates", "[plan][dcp]") {
  DecodePlanConfig c{4, 1, 64, 128, 2048, LogitsDType::f16, 10000};
  const auto comm = reinterpret_cast<ncclComm_t>(std::uintptr_t{0x1000});  // never dereferenced: rejected first
  CHECK_THROWS_WITH(DcpDecodePlan(c, comm), test::Contains("DcpDecodePlan: config.dcp.ranks: expected 2 or more"));
  c.dcp = {2, 0, 64};
  CHECK_THROWS_WITH(DcpDecodePlan(c, nullptr), test::Contains("DcpDecodePlan: comm: expected an NCCL communicator, got null"));
  c.k = 4096;
  c.dcp = {17, 3, 1};  // 17 * 4096 candidates per row
  CHECK_THROWS_WITH(DcpDecodePlan(c, comm), test::Contains("config.k: expected config.dcp.ranks * k <= 65536"));
}

TEST_CASE("the NCCL loader names the library it could not load and how to point at another", "[dcp]") {
  const std::string why = nccl::load_failure("/nonexistent/libnccl.so.2");
  CHECK_THAT(why, test::Contains("/nonexistent/libnccl.so.2 could not be loaded"));
  CHECK_THAT(why, test::Contains("FLASH_INDEXER_NCCL"));
}

namespace {

// Rank `layout.rank`'s shard of the FP8 cache: request b's local columns c < dcp_local_length(L_b) in
// consecutive blocks of its own, each token copied from global position dcp_global_position(c).
struct Shard {
  std::vector<std::uint8_t> cache;
  std::vector<std::int32_t> block_table;
  int blocks = 0, max_blocks = 0;
};
Shard shard_of(const ck::HostInputs& in, const DecodePlanConfig& pc, const DcpLayout& layout) {
  const int d = pc.head_dim;
  const std::int64_t block_bytes = 64 * (d + 4);
  Shard s;
  std::vector<std::int64_t> local(in.batch);
  for (int b = 0; b < in.batch; ++b) {
    local[b] = dcp_local_length(static_cast<std::int64_t>(in.context_lens[b]), layout);
    s.max_blocks = std::max<int>(s.max_blocks, static_cast<int>((local[b] + 63) / 64));
  }
  s.max_blocks = std::max(s.max_blocks, 1);
  s.block_table.assign(static_cast<std::size_t>(in.batch) * s.max_blocks, -1);
  for (int b = 0; b < in.batch; ++b)
    for (std::int64_t i = 0; i < (local[b] + 63) / 64; ++i) s.block_table[b * s.max_blocks + i] = s.blocks++;
  s.cache.assign(static_cast<std::size_t>(std::max(s.blocks, 1)) * block_bytes, 0);
  for (int b = 0; b < in.batch; ++b)
    for (std::int64_t c = 0; c < local[b]; ++c) {
      const std::int64_t p = dcp_global_position(c, layout);
      const std::uint8_t* from = in.kv_cache.data() + in.block_table[b * in.max_blocks + p / 64] * in.block_stride;
      std::uint8_t* to = s.cache.data() + s.block_table[b * s.max_blocks + c / 64] * block_bytes;
      std::memcpy(to + (c % 64) * d, from + (p % 64) * d, d);
      std::memcpy(to + 64 * d + (c % 64) * 4, from + 64 * d + (p % 64) * 4, 4);
    }
  return s;
}

struct RankResult {
  std::vector<std::int32_t> indices, owned;
  std::exception_ptr error;
};

}  // namespace

TEST_CASE("gpu: DcpDecodePlan on two GPUs equals the reference top-k of the whole cache", "[gpu][plan][dcp][nccl]") {
  test::require_gpu();
  int devices = 0;
  driver::check(driver::api().cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices < 2) test::skip("needs two GPUs (device kind nvidia-h200-x2)");
  std::string why;
  if (!nccl::available(&why)) test::skip(why);
  const nccl::Api& api = nccl::api();
  std::mt19937_64 rng(test::fresh_seed());
  for (const int interleave : {1, 64})
    for (const int next_n : {1, 3})
      for (const LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16}) {
        DecodePlanConfig pc{4, next_n, 64, 128, 512, dtype, 6000, true, false, true};
        ck::LogitsCase lc;
        lc.config = {next_n, 64, 128, 64, false, dtype, {}};
        lc.lengths = {5000, 0, 70, 100 + static_cast<int>(rng() % 5900)};  // 70 < D * I at I = 64
        lc.lens_2d = false;
        lc.exact_values = true;
        lc.width = pc.max_context;
        lc.seed = rng();
        INFO(ck::describe(lc) << " interleave " << interleave);
        const ck::HostInputs in = ck::make_inputs(lc);
        const std::vector<std::int32_t> expected = test::plan_reference_indices(lc, in, pc, in.width);  // sorted positions
        const std::int64_t rows = static_cast<std::int64_t>(in.batch) * next_n;
        nccl::UniqueId id{};
        nccl::check(api.ncclGetUniqueId(&id), "ncclGetUniqueId");
        RankResult results[2];
        auto rank_main = [&](int rank) {
          RankResult& out = results[rank];
          try {
            const ck::GpuSession gpu(rank);  // this thread's device
            ncclComm_t comm = nullptr;
            nccl::check(api.ncclCommInitRank(&comm, 2, id, rank), "ncclCommInitRank");
            {
              DecodePlanConfig rc = pc;
              rc.dcp = {2, rank, interleave};
              const Shard shard = shard_of(in, pc, rc.dcp);
              ck::DeviceBuffer q = ck::DeviceBuffer::from(in.q), w = ck::DeviceBuffer::from(in.weights);
              ck::DeviceBuffer lens = ck::DeviceBuffer::from(in.context_lens), table = ck::DeviceBuffer::from(shard.block_table);
              ck::DeviceBuffer cache = ck::DeviceBuffer::from(shard.cache);
              ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * pc.k * 4), owned(indices.bytes());
              indices.fill(0x7d);
              owned.fill(0x7d);
              const CUstream stream = gpu.stream();
              const DcpDecodePlan plan(rc, comm);
              const TensorView qv = TensorView::contiguous(q.data(), DType::fp8_e4m3, {in.batch, next_n, 64, 128});
              const TensorView kv = TensorView::contiguous(cache.data(), DType::u8, {std::max(shard.blocks, 1), 64, 1, 132});
              const TensorView wv = TensorView::contiguous(w.data(), DType::f32, {rows, 64});
              const TensorView lv = TensorView::contiguous(lens.data(), DType::i32, {in.batch});
              const TensorView tv = TensorView::contiguous(table.data(), DType::i32, {in.batch, shard.max_blocks});
              const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});
              const TensorView ov = TensorView::contiguous(owned.data(), DType::i32, {rows, pc.k});
              plan.run(qv, kv, wv, lv, tv, iv, ov, stream);
              gpu.synchronize();
              out.indices = indices.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k);
              out.owned = owned.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k);
            }
            api.ncclCommDestroy(comm);
          } catch (...) {
            out.error = std::current_exception();
          }
        };
        std::thread rank0(rank_main, 0), rank1(rank_main, 1);
        rank0.join();
        rank1.join();
        for (int rank = 0; rank < 2; ++rank) {
          INFO("rank " << rank);
          if (results[rank].error) std::rethrow_exception(results[rank].error);
          REQUIRE(results[rank].indices == expected);
          REQUIRE(results[rank].owned == reference::dcp_owned(expected, rows, pc.k, DcpLayout{2, rank, interleave}));
        }
      }
}
