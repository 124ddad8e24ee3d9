#pragma once
// The sparse decode step (kernels/sparse_decode_step_sm90.cuh): the second level of two-level indexing
// in one kernel, the sparse logits of each query row kept in shared memory and its top-k selected there
// by the row's cluster. DecodePlan::run_second_level runs it instead of the sparse logits and top-k
// kernels where its config.step asks for it; docs/design/two-level.md.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../kernels/sparse_decode_step_params.cuh"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_registry.hpp"
#include "kernel_spec.hpp"
#include "sparse_paged_mqa_logits_call.hpp"
#include "topk_call.hpp"

namespace flash_indexer {

struct SparseDecodeStepConfig {
  int heads = 64;  // 32, 64
  int head_dim = 128;
  int candidate_block = 8;  // 8, 16
  LogitsDType logits = LogitsDType::f32;  // the stored dtype the selection ranks
  KvFormat kv = KvFormat::fp8;
  int cluster = 1;  // CTAs per query row: 1, 2, 4, 8
  Arch arch{9, 0, true};

  // e.g. sparse_decode_step.sm90.h64.d128.cb8.out-f32.kv-fp8.c4.sm_90a
  std::string key() const;
  static SparseDecodeStepConfig parse_key(std::string_view key);
  void check_supported() const;
  friend bool operator==(const SparseDecodeStepConfig&, const SparseDecodeStepConfig&) = default;
};

std::vector<SparseDecodeStepConfig> supported_sparse_decode_step_configs(const Arch& arch);
KernelSpec sparse_decode_step_kernel_spec(const SparseDecodeStepConfig& config);

// Query rows the device runs at once per cluster size, at index log2 of the size (1, 2, 4, 8): the SMs
// for one CTA per row, cuOccupancyMaxActiveClusters for the others (a GPC holds whole clusters, so a
// size may fill fewer SMs than rows x size suggests). Loads the four kernels of `config` (its cluster
// ignored) in the current context.
using SparseStepCapacity = std::array<int, 4>;
SparseStepCapacity sparse_decode_step_capacity(std::string_view op, const SparseDecodeStepConfig& config, CUstream stream);

// CTAs per query row for `rows` rows of `width` columns: the largest cluster size the device runs for
// every row at once, at least the fewest CTAs that hold a row's segments (then in several waves); 0
// where a row does not fit kSparseStepMaxCluster segments.
int sparse_decode_step_cluster(std::int64_t rows, std::int64_t width, const SparseStepCapacity& capacity);

// Whether DecodeStep::automatic takes the step for `rows` rows of `width` columns: FP8 caches only, where
// every row runs at once (sparse_decode_step_cluster's size) and the rows' CTAs, one per SM, fill at least
// 15/16 of the device. The step's time is that of one CTA's segment, whatever the rows, as each SM gathers
// its candidates at a fixed rate; the two kernels spread the same gather over every SM and add the top-k
// kernel (13-15 us at 16K columns), so the step wins only where it fills the device (B 64 and 128 at 16K
// columns on the H100; MXFP4, whose gather the step's four warpgroups compute more slowly than the sparse
// kernel's CTAs, lost: docs/benchmarks/decode.md, "Two-level indexing").
bool sparse_decode_step_preferred(KvFormat kv, std::int64_t rows, std::int64_t width, const SparseStepCapacity& capacity);

struct SparseDecodeStepLaunch {
  const LoadedKernel* kernel = nullptr;
  kernels::SparseDecodeStepParams params{};
  unsigned grid = 0;  // rows * cluster CTAs
  bool pdl = false;
};

// The step of a checked sparse logits call (sm90 variant) and its checked top-k over the same rows, at
// the cluster size sparse_decode_step_cluster gives for `capacity` (sparse_decode_step_capacity of the
// call's configuration). Loads the kernel for the current device (an sm_90a one); enqueues nothing. Not
// for an empty call.
SparseDecodeStepLaunch prepare_sparse_decode_step(std::string_view op, const SparsePagedMqaLogitsCall& logits,
                                                  const TopkCall& topk, const SparseStepCapacity& capacity, CUstream stream);
void enqueue(const SparseDecodeStepLaunch& launch, CUstream stream);

// Loads the step kernels of `config` at every cluster size in the current context.
void warm_sparse_decode_step(const SparseDecodeStepConfig& config);

}  // namespace flash_indexer
