// The topk_merge call: argument checks, kernel, launch; and the public entry points.
#include <fmt/format.h>

#include <climits>

#include "../kernels/topk_merge_params.cuh"
#include "flash_indexer/error.hpp"
#include "flash_indexer/topk.hpp"
#include "flash_indexer/topk_merge.hpp"
#include "dcp_checks.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "tensor_checks.hpp"
#include "topk_merge_call.hpp"
#include "topk_merge_kernel.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const TopkMergeConfig& c) const { return static_cast<std::size_t>(c.values); }
};

KernelRegistry<TopkMergeConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<TopkMergeConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const TopkMergeConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const TopkMergeConfig& c) { return topk_merge_kernel_spec(c); });
}

}  // namespace

TopkMergeCall check_topk_merge(std::string_view op, const TensorView& values, const TensorView& positions,
                               const TensorView& indices, const TopkMergeOptions& options) {
  TensorChecks vc(op, "values", values);
  vc.dtype({DType::f32, DType::f16, DType::bf16}).rank({3}).contiguous().not_null().aligned(dtype_size(values.dtype));
  const std::int64_t lists = values.shape[0], rows = values.shape[1], k_in = values.shape[2];
  if (rows > INT_MAX) vc.fail("rows = shape[1] in 0..2^31-1", std::to_string(rows));
  if (lists * k_in > kernels::kTopkMergeMaxCandidates)
    vc.fail(fmt::format("D * k_in = shape[0] * shape[2] <= {} candidates per row", kernels::kTopkMergeMaxCandidates), vc.shape());
  TensorChecks pc(op, "positions", positions);
  pc.dtype({DType::i32}).rank({3}).dim(0, lists, "D = values.shape[0]").dim(1, rows, "rows = values.shape[1]");
  pc.dim(2, k_in, "k_in = values.shape[2]").contiguous().not_null().aligned(4);
  TensorChecks ic(op, "indices", indices);
  ic.dtype({DType::i32}).rank({2}).dim(0, rows, "rows = values.shape[1]").contiguous().not_null().aligned(4);
  const std::int64_t k = indices.shape[1];
  if (k < 1 || k > kMaxTopk) ic.fail(fmt::format("k = indices.shape[1] in 1..{}", kMaxTopk), std::to_string(k));
  if (options.values.rank != 0) {
    TensorChecks oc(op, "options.values", options.values);
    oc.dtype({DType::f32}).rank({2}).dim(0, rows, "rows").dim(1, k, "k").contiguous().not_null().aligned(4);
  }
  const DcpLayout& l = options.layout;
  if (options.owned.rank != 0) {
    TensorChecks oc(op, "options.owned", options.owned);
    oc.dtype({DType::i32}).rank({2}).dim(0, rows, "rows").dim(1, k, "k").contiguous().not_null().aligned(4);
    if (l.ranks != lists)
      throw ArgumentError(fmt::format("{}: options.layout.ranks: expected D = values.shape[0] = {}, got {}", op, lists, l.ranks));
  }
  // Checked with or without `owned`: a bad option is the caller's mistake even where no kernel reads it.
  check_dcp_layout(op, "options.layout", l);
  TopkMergeCall c;
  c.config.values = logits_dtype_of(values.dtype);
  c.pdl = options.pdl;
  auto& p = c.params;
  p.values = values.data;
  p.positions = static_cast<const int*>(positions.data);
  p.indices = static_cast<int*>(indices.data);
  p.out_values = static_cast<float*>(options.values.data);
  p.owned = static_cast<int*>(options.owned.data);
  p.lists = static_cast<int>(lists);
  p.rows = static_cast<int>(rows);
  p.k_in = static_cast<int>(k_in);
  p.k = static_cast<int>(k);
  p.owner_ranks = l.ranks;
  p.owner_rank = l.rank;
  p.owner_interleave = l.interleave;
  return c;
}

TopkMergeLaunch prepare_topk_merge(std::string_view op, const TopkMergeCall& call, CUstream stream) {
  TopkMergeLaunch launch;
  launch.params = call.params;
  launch.pdl = call.pdl;
  if (call.params.rows > 0) launch.kernel = &loaded_kernel(op, call.config, stream);
  return launch;
}

void enqueue(const TopkMergeLaunch& launch, CUstream stream) {
  if (launch.kernel == nullptr) return;  // no rows
  kernels::TopkMergeParams params = launch.params;
  void* args[] = {&params};
  launch_kernel(*launch.kernel, static_cast<unsigned>(params.rows), 1, 1, stream, args, launch.pdl);
}

void topk_merge(const TensorView& values, const TensorView& positions, const TensorView& indices, Stream stream,
                const TopkMergeOptions& options) {
  constexpr std::string_view op = "topk_merge";
  enqueue(prepare_topk_merge(op, check_topk_merge(op, values, positions, indices, options), stream), stream);
}

void warm_topk_merge(LogitsDType values) {
  TopkMergeConfig fields{values, Arch{9, 0, true}};  // the fields first, named even without a GPU
  fields.check_supported();
  loaded_kernel("warm_topk_merge", {values, Arch{}}, nullptr);
}

}  // namespace flash_indexer
