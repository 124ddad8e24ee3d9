// DcpDecodePlan: the rank's DecodePlan (with the top-k's values), one NCCL all-gather of the candidate
// lists, and topk_merge.
#include "flash_indexer/dcp_decode_plan.hpp"

#include <fmt/format.h>

#include <utility>

#include "decode_plan_launch.hpp"
#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/topk_merge.hpp"
#include "nccl.hpp"
#include "tensor_checks.hpp"
#include "topk_merge_call.hpp"

namespace flash_indexer {
namespace {

constexpr std::string_view kCreate = "DcpDecodePlan";

// Bytes of one [max_batch * next_n, k] list of 4-byte elements: the local values, the local positions,
// and each rank's of both gathered.
std::size_t list_capacity(const DecodePlanConfig& c) { return static_cast<std::size_t>(c.max_batch) * c.next_n * c.k * 4; }

DecodePlanConfig checked(const DecodePlanConfig& config, ncclComm_t comm) {
  if (config.dcp.ranks < 2)
    throw ArgumentError(fmt::format("{}: config.dcp.ranks: expected 2 or more (one GPU needs no DCP plan: DecodePlan), got {}",
                                    kCreate, config.dcp.ranks));
  if (static_cast<std::int64_t>(config.dcp.ranks) * config.k > kernels::kTopkMergeMaxCandidates)
    throw ArgumentError(fmt::format("{}: config.k: expected config.dcp.ranks * k <= {} candidates per row to merge, got {} * {}",
                                    kCreate, kernels::kTopkMergeMaxCandidates, config.dcp.ranks, config.k));
  if (comm == nullptr) throw ArgumentError(fmt::format("{}: comm: expected an NCCL communicator, got null", kCreate));
  return config;  // the rest is DecodePlan's to check
}

// The communicator must be the layout's group, on this context's device.
void check_communicator(ncclComm_t comm, const DcpLayout& layout) {
  const nccl::Api& api = nccl::api();
  int count = 0, rank = 0, device = 0;
  nccl::check(api.ncclCommCount(comm, &count), "ncclCommCount", kCreate);
  nccl::check(api.ncclCommUserRank(comm, &rank), "ncclCommUserRank", kCreate);
  nccl::check(api.ncclCommCuDevice(comm, &device), "ncclCommCuDevice", kCreate);
  if (count != layout.ranks)
    throw ArgumentError(
        fmt::format("{}: comm: expected {} ranks (config.dcp.ranks), got a communicator of {}", kCreate, layout.ranks, count));
  if (rank != layout.rank)
    throw ArgumentError(fmt::format("{}: comm: expected rank {} (config.dcp.rank), got rank {}", kCreate, layout.rank, rank));
  CUdevice current = 0;
  FI_CU(cuCtxGetDevice, kCreate, &current);
  if (device != static_cast<int>(current))
    throw ArgumentError(fmt::format("{}: comm: expected a communicator on the current device {}, got one on device {}", kCreate,
                                    static_cast<int>(current), device));
}

}  // namespace

DcpDecodePlan::DcpDecodePlan(const DecodePlanConfig& config, ncclComm_t comm) : local_(checked(config, comm)), comm_(comm) {
  check_communicator(comm_, config.dcp);
  // The local values and positions, then every rank's, gathered ([D, rows, k] each).
  bytes_ = 2 * list_capacity(config) * (1 + static_cast<std::size_t>(config.dcp.ranks));
  CUdeviceptr memory = 0;
  FI_CU(cuMemAlloc, fmt::format("DcpDecodePlan candidate lists of {} bytes", bytes_), &memory, bytes_);
  memory_ = memory;
  try {
    warm_topk_merge(LogitsDType::f32);  // the top-k's values are float32
  } catch (...) {
    release();
    throw;
  }
}

DcpDecodePlan::~DcpDecodePlan() { release(); }

DcpDecodePlan::DcpDecodePlan(DcpDecodePlan&& other) noexcept
    : local_(std::move(other.local_)),
      comm_(std::exchange(other.comm_, nullptr)),
      bytes_(other.bytes_),
      memory_(std::exchange(other.memory_, 0)) {}

DcpDecodePlan& DcpDecodePlan::operator=(DcpDecodePlan&& other) noexcept {
  if (this != &other) {
    release();
    local_ = std::move(other.local_);
    comm_ = std::exchange(other.comm_, nullptr);
    bytes_ = other.bytes_;
    memory_ = std::exchange(other.memory_, 0);
  }
  return *this;
}

void DcpDecodePlan::release() noexcept {
  if (memory_ != 0 && driver::available()) driver::api().cuMemFree(static_cast<CUdeviceptr>(memory_));
  memory_ = 0;
}

void DcpDecodePlan::run(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, const TensorView& indices,
                        const TensorView& owned, Stream stream) const {
  run(q, TensorView{}, kv_cache, weights, context_lens, block_table, indices, owned, stream);
}

void DcpDecodePlan::run(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, const TensorView& indices,
                        const TensorView& owned, Stream stream) const {
  constexpr std::string_view op = "DcpDecodePlan::run";
  if (memory_ == 0) throw ArgumentError(fmt::format("{}: the plan was moved from", op));
  const DecodePlanConfig& config = local_.config();
  // Every check of every step first: a rejected run enqueues nothing and changes no byte.
  TensorChecks(op, "q", q).rank({4});
  const std::int64_t batch = q.shape[0], rows = batch * config.next_n, ranks = config.dcp.ranks;
  TensorChecks(op, "indices", indices)
      .dtype({DType::i32})
      .rank({2})
      .dim(0, rows, "B * config.next_n")
      .dim(1, config.k, "config.k");
  // The candidate lists of these B requests: [rows, k] here, [D, rows, k] gathered, all contiguous.
  const std::size_t list = static_cast<std::size_t>(rows) * config.k * 4;
  const std::size_t capacity = list_capacity(config);
  auto at = [&](std::size_t offset) { return reinterpret_cast<void*>(memory_ + offset); };
  const TensorView local_values = TensorView::contiguous(at(0), DType::f32, {rows, config.k});
  const TensorView local_positions = TensorView::contiguous(at(capacity), DType::i32, {rows, config.k});
  const TensorView all_values = TensorView::contiguous(at(2 * capacity), DType::f32, {ranks, rows, config.k});
  const TensorView all_positions =
      TensorView::contiguous(at(2 * capacity + capacity * ranks), DType::i32, {ranks, rows, config.k});
  const DecodeLaunch local = prepare_decode(op, local_, q, q_scales, kv_cache, weights, context_lens, block_table,
                                            local_positions, local_values, stream);
  TopkMergeOptions mo;
  mo.owned = owned;
  mo.layout = config.dcp;
  const TopkMergeLaunch merge = prepare_topk_merge(op, check_topk_merge(op, all_values, all_positions, indices, mo), stream);
  if (batch == 0) return;

  enqueue(local, stream);
  const nccl::Api& api = nccl::api();
  nccl::check(api.ncclGroupStart(), "ncclGroupStart", op);
  nccl::check(api.ncclAllGather(local_values.data, all_values.data, list, nccl::kInt8, comm_, stream), "ncclAllGather", op);
  nccl::check(api.ncclAllGather(local_positions.data, all_positions.data, list, nccl::kInt8, comm_, stream), "ncclAllGather", op);
  nccl::check(api.ncclGroupEnd(), "ncclGroupEnd", op);
  enqueue(merge, stream);
}

}  // namespace flash_indexer
