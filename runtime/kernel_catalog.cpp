#include "kernel_catalog.hpp"

#include <fmt/format.h>

#include "decode_step.hpp"
#include "flash_indexer/error.hpp"
#include "mqa_logits_kernel.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "probe_kernels.hpp"
#include "sparse_decode_step.hpp"
#include "sparse_paged_mqa_logits_kernel.hpp"
#include "top_blocks_kernel.hpp"
#include "topk_kernel.hpp"
#include "topk_merge_kernel.hpp"

namespace flash_indexer {

std::vector<KernelSpec> supported_kernel_specs(const Arch& arch) {
  std::vector<KernelSpec> specs;
  for (const auto& c : supported_paged_mqa_logits_configs(arch)) specs.push_back(paged_mqa_logits_kernel_spec(c));
  for (const auto& c : supported_topk_configs(arch)) specs.push_back(topk_kernel_spec(c));
  for (const auto& c : supported_mqa_logits_configs(arch)) specs.push_back(mqa_logits_kernel_spec(c));
  for (const auto& c : supported_topk_merge_configs(arch)) specs.push_back(topk_merge_kernel_spec(c));
  for (const auto& c : supported_top_blocks_configs(arch)) specs.push_back(top_blocks_kernel_spec(c));
  for (const auto& c : supported_sparse_paged_mqa_logits_configs(arch)) specs.push_back(sparse_paged_mqa_logits_kernel_spec(c));
  // The sparse decode step with FP8 keys, which DecodeStep::automatic takes where it fills the GPU; the
  // MXFP4 ones only run where a plan asks for one_pass, which loads them.
  for (const auto& c : supported_sparse_decode_step_configs(arch))
    if (c.kv == KvFormat::fp8) specs.push_back(sparse_decode_step_kernel_spec(c));
  specs.push_back(stream_read_kernel_spec(arch));  // the benchmarks' bandwidth probe
  specs.push_back(paged_read_kernel_spec(arch));   // the read floor of a logits cell's own blocks
  specs.push_back(sparse_read_kernel_spec(arch));  // and of a sparse logits cell's candidate blocks
  specs.push_back(spin_wait_kernel_spec(arch));    // and the wait their timed replays queue behind
  return specs;
}

KernelSpec kernel_spec_for_key(std::string_view key) {
  if (key.starts_with("paged_mqa_logits.")) return paged_mqa_logits_kernel_spec(PagedMqaLogitsConfig::parse_key(key));
  if (key.starts_with("topk.")) return topk_kernel_spec(TopkConfig::parse_key(key));
  if (key.starts_with("sparse_paged_mqa_logits."))
    return sparse_paged_mqa_logits_kernel_spec(SparsePagedMqaLogitsConfig::parse_key(key));
  if (key.starts_with("mqa_logits.")) return mqa_logits_kernel_spec(MqaLogitsConfig::parse_key(key));
  if (key.starts_with("topk_merge.")) return topk_merge_kernel_spec(TopkMergeConfig::parse_key(key));
  if (key.starts_with("top_blocks.")) return top_blocks_kernel_spec(TopBlocksConfig::parse_key(key));
  if (key.starts_with("decode_step.")) return decode_step_kernel_spec(DecodeStepConfig::parse_key(key));
  if (key.starts_with("sparse_decode_step.")) return sparse_decode_step_kernel_spec(SparseDecodeStepConfig::parse_key(key));
  if (key.starts_with("probe.stream_read.")) return stream_read_kernel_spec(Arch::parse(key.substr(18), key));
  if (key.starts_with("probe.paged_read.")) return paged_read_kernel_spec(Arch::parse(key.substr(17), key));
  if (key.starts_with("probe.sparse_read.")) return sparse_read_kernel_spec(Arch::parse(key.substr(18), key));
  if (key.starts_with("probe.spin_wait.")) return spin_wait_kernel_spec(Arch::parse(key.substr(16), key));
  throw Error(fmt::format(
      "kernel key \"{}\": expected a key starting with paged_mqa_logits., sparse_paged_mqa_logits., mqa_logits., topk., "
      "topk_merge., top_blocks., decode_step., sparse_decode_step. or probe.",
      key));
}

}  // namespace flash_indexer
