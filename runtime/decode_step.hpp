#pragma once
// The one-pass decode step (kernels/decode_step.cuh): the Hopper paged logits kernel with the fused
// histogram, whose CTA that completes a row selects the row's top-k. DecodePlan runs it instead of the
// logits and top-k kernels where its config.step asks for it; docs/design/decode-step.md.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../kernels/decode_step_params.cuh"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_registry.hpp"
#include "kernel_spec.hpp"
#include "paged_mqa_logits_call.hpp"
#include "topk_call.hpp"

namespace flash_indexer {

// The step kernel's next_n: 1..4. The logits kernel goes to 6 (kernels::kSm90MaxNextN); a plan of next_n
// 5-6 runs the logits and the top-k as two kernels.
constexpr int kStepMaxNextN = 4;

struct DecodeStepConfig {
  int next_n = 1;  // 1..kStepMaxNextN (the kernel's rows per grid row: 1 where the call runs flattened)
  int heads = 64;  // 32, 64
  int head_dim = 128;
  LogitsDType logits = LogitsDType::f32;
  KvFormat kv = KvFormat::fp8;
  kernels::StepForm form = kernels::StepForm::last_cta;
  Arch arch{9, 0, true};

  // e.g. decode_step.sm90.n1.h64.d128.out-f32.kv-fp8.last.sm_90a (the form: last or spread)
  std::string key() const;
  static DecodeStepConfig parse_key(std::string_view key);
  void check_supported() const;
  friend bool operator==(const DecodeStepConfig&, const DecodeStepConfig&) = default;
};

// Where the step kernel is built: sm_90a, next_n 1..4, H 32 or 64, D 128, FP8 or MXFP4 (the model
// shapes; other configurations run the two kernels).
bool decode_step_builds(int next_n, int heads, int head_dim, KvFormat kv, const Arch& arch);
std::vector<DecodeStepConfig> supported_decode_step_configs(const Arch& arch);
KernelSpec decode_step_kernel_spec(const DecodeStepConfig& config);

// Per coarse bin b, the lowest order-preserving key of the dtype (kernels/topk_common.cuh, TopkInput)
// whose value has a coarse bin <= b: the step's threshold intervals (DecodeStepParams::coarse_lowest_key).
const std::array<unsigned int, kCoarseBins>& decode_step_coarse_lowest_keys(LogitsDType dtype);

struct DecodeStepLaunch {
  const LoadedKernel* kernel = nullptr;
  kernels::StepForm form = kernels::StepForm::last_cta;
  kernels::DecodeStepParams params{};
  unsigned grid_x = 0, grid_y = 0;
  int smem_bytes = 0;
};

// The step's memory beside the logits and the histogram. The counters are zero before each launch: one
// per row of the grid (B * next_n suffice) for the arrivals and the spread form's filters, one per query
// row for its candidates. `spread`: spread_rows x decode_step_spread_row_bytes(width) bytes, or null
// (no spread form).
struct DecodeStepScratch {
  unsigned int* arrivals = nullptr;
  unsigned int* filtered = nullptr;
  int* candidates_count = nullptr;
  void* spread = nullptr;
  std::int64_t spread_rows = 0;
};

// The counters' ints per grid row (arrivals, filtered, candidates: 3).
constexpr int kDecodeStepCountersPerRow = 3;

// The step of a checked logits call (its histogram set) and its checked top-k, whose launch the
// logits call's grid decides (the split, or flattened rows; never the ranges form). The spread form
// where the grid fits the device at once and its rows the scratch. Loads the kernel; enqueues nothing.
DecodeStepLaunch prepare_decode_step(std::string_view op, const PagedMqaLogitsCall& logits, const kernels::TopkParams& topk,
                                     const DecodeStepScratch& scratch, CUstream stream);
void enqueue(const DecodeStepLaunch& launch, CUstream stream);

// Loads the step kernels a plan of this shape may launch in the current context: next_n's and, where a
// small call runs flattened, next_n 1's, each in the last-CTA and the spread form.
void warm_decode_step(int next_n, int heads, int head_dim, LogitsDType logits, KvFormat kv);

}  // namespace flash_indexer
