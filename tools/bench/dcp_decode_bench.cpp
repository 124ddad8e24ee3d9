#include "dcp_decode_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <optional>
#include <random>
#include <thread>

#include "flash_indexer/dcp.hpp"
#include "flash_indexer/dcp_decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "gpu_timer.hpp"
#include "nccl.hpp"
#include "paged_inputs.hpp"

namespace flash_indexer::bench {

namespace {

struct RankTimes {
  std::vector<double> us, local_us, one_gpu_us, kv_blocks;
  std::exception_ptr error;
};

}  // namespace

std::vector<DcpDecodeBenchRow> run_dcp_decode_bench(const DcpDecodeBenchOptions& o, double read_bandwidth,
                                                    const std::function<void(const DcpDecodeBenchRow&)>& on_row) {
  if (o.ranks < 2) throw Error(fmt::format("bench decode --dcp: expected at least 2 ranks, got {}", o.ranks));
  int devices = 0;
  FI_CU(cuDeviceGetCount, "bench decode --dcp", &devices);
  if (devices < o.ranks) throw Error(fmt::format("bench decode --dcp {}: this host has {} GPU(s)", o.ranks, devices));
  std::string why;
  if (!nccl::available(&why)) throw Error(fmt::format("bench decode --dcp: {}", why));
  const nccl::Api& api = nccl::api();
  nccl::UniqueId id{};
  nccl::check(api.ncclGetUniqueId(&id), "ncclGetUniqueId");

  const DecodeBenchOptions& so = o.shapes;
  const std::vector<DecodeShape> shapes = decode_shapes(so);
  const int max_batch = *std::max_element(so.batches.begin(), so.batches.end());
  const int max_length = *std::max_element(so.lengths.begin(), so.lengths.end());
  const int max_next_n = *std::max_element(so.next_ns.begin(), so.next_ns.end());
  const int max_heads = *std::max_element(so.heads.begin(), so.heads.end());
  std::vector<RankTimes> times(static_cast<std::size_t>(o.ranks));
  // Every rank times a shape at the same moment (their replays meet in the all-gather), and every rank
  // passes every barrier, so that a rank that failed in a setup step stops them all at the next one.
  // (A rank that fails inside a collective, ncclCommInitRank or a timed run, can still leave the others
  // waiting in NCCL, which has no timeout.)
  std::barrier together(o.ranks);
  std::atomic<bool> any_failed{false};

  auto rank_main = [&](int rank) {
    RankTimes& t = times[static_cast<std::size_t>(rank)];
    auto fail = [&] {
      if (!t.error) t.error = std::current_exception();
      any_failed = true;
    };
    std::optional<check::GpuSession> gpu;
    ncclComm_t comm = nullptr;
    std::optional<PagedInputs> inputs;
    // The same seed on every rank: the same global lengths and queries. Each rank's table covers the
    // global lengths; the plan reads its first local-length blocks, KV blocks like any other.
    std::mt19937_64 rng(so.seed);
    try {
      gpu.emplace(rank);
      nccl::check(api.ncclCommInitRank(&comm, o.ranks, id, rank), "ncclCommInitRank");
      inputs.emplace(max_batch, max_length, max_next_n, max_heads, kDecodeHeadDim, KvFormat::fp8, rng);
    } catch (...) {
      fail();
    }
    const DcpLayout layout{o.ranks, rank, o.interleave};
    int drawn_batch = -1, drawn_length = -1;
    for (const DecodeShape& s : shapes) {
      DecodePlanConfig pc;
      std::optional<DcpDecodePlan> plan;
      std::optional<check::DeviceBuffer> indices;
      try {
        if (!any_failed) {
          if (s.batch != drawn_batch || s.length != drawn_length) {
            inputs->draw(s.batch, s.length, true, rng);
            drawn_batch = s.batch;
            drawn_length = s.length;
          }
          pc = decode_plan_config(s, so.k, inputs->width());
          DecodePlanConfig dc = pc;
          dc.dcp = layout;
          plan.emplace(dc, comm);
          indices.emplace(static_cast<std::size_t>(s.batch) * s.next_n * so.k * 4);
        }
      } catch (...) {
        fail();
      }
      together.arrive_and_wait();
      if (!any_failed) {
        try {
          const auto q = inputs->q(s.next_n, s.heads);
          const auto kv = inputs->kv_cache();
          const auto w = inputs->weights(s.next_n, s.heads);
          const auto lens = inputs->context_lens();
          const auto table = inputs->block_table();
          const auto iv =
              TensorView::contiguous(indices->data(), DType::i32, {static_cast<std::int64_t>(s.batch) * s.next_n, so.k});
          constexpr CUstreamCaptureMode kThreadLocal = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
          t.us.push_back(
              time_graph(
                  *gpu, [&](CUstream st) { plan->run(q, kv, w, lens, table, iv, {}, st); }, so.replays, nullptr, kThreadLocal)
                  .median_us);
          t.local_us.push_back(
              time_graph(
                  *gpu, [&](CUstream st) { plan->local().run(q, kv, w, lens, table, iv, st); }, so.replays, nullptr, kThreadLocal)
                  .median_us);
          std::int64_t blocks = 0;
          for (std::int32_t len : inputs->lengths()) blocks += (dcp_local_length<std::int64_t>(len, layout) + 63) / 64;
          t.kv_blocks.push_back(static_cast<double>(blocks));
          if (rank == 0) {
            const DecodePlan whole(pc);
            t.one_gpu_us.push_back(
                time_graph(
                    *gpu, [&](CUstream st) { whole.run(q, kv, w, lens, table, iv, st); }, so.replays, nullptr, kThreadLocal)
                    .median_us);
          }
        } catch (...) {
          fail();
        }
      }
      together.arrive_and_wait();
    }
    if (comm != nullptr) api.ncclCommDestroy(comm);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) threads.emplace_back(rank_main, r);
  for (auto& th : threads) th.join();
  for (const RankTimes& t : times)
    if (t.error) std::rethrow_exception(t.error);

  std::vector<DcpDecodeBenchRow> out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const DecodeShape& s = shapes[i];
    DcpDecodeBenchRow r;
    r.shape = s;
    r.k = so.k;
    r.ranks = o.ranks;
    r.interleave = o.interleave;
    double blocks = 0;
    for (const RankTimes& t : times) {
      r.us = std::max(r.us, t.us[i]);
      r.local_us = std::max(r.local_us, t.local_us[i]);
      blocks = std::max(blocks, t.kv_blocks[i]);
    }
    r.one_gpu_us = times[0].one_gpu_us[i];
    r.kv_bytes = blocks * (kDecodeHeadDim + 4) * 64;
    r.kv_floor_us = r.kv_bytes / read_bandwidth * 1e6;
    out.push_back(r);
    if (on_row) on_row(r);
  }
  return out;
}

}  // namespace flash_indexer::bench
