#pragma once
// The exact top-k of the union of candidate lists (decode context parallel, dcp.hpp): each of D ranks
// brings its local top-k of a row (values and global positions), and topk_merge() writes the row's
// global top-k with the rules of topk() (larger first, NaN never, -0 equal to +0, equal values to the
// lower position, -1 padding, deterministic bytes), in ascending position order as topk() writes a row.
// The global top-k of a row is contained in the union of the ranks' local top-k, so this equals the
// top-k over the whole, unsharded row index for index (reference::topk_merge).
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/arch.hpp"
#include "flash_indexer/dcp.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"  // LogitsDType
#include "flash_indexer/tensor.hpp"

namespace flash_indexer {

// One kernel per dtype of the candidates' values.
struct TopkMergeConfig {
  LogitsDType values = LogitsDType::f32;
  Arch arch{9, 0, true};

  std::string key() const;  // "topk_merge.in-f32.sm_90a"
  static TopkMergeConfig parse_key(std::string_view key);
  void check_supported() const;
  friend bool operator==(const TopkMergeConfig&, const TopkMergeConfig&) = default;
};
std::vector<TopkMergeConfig> supported_topk_merge_configs(const Arch& arch);

struct TopkMergeOptions {
  // Optional second output: the merged values, widened to float32 [rows, k], contiguous; -inf where
  // the index is -1.
  TensorView values{};
  // Optional: the merged positions that rank `layout.rank` of `layout` holds, as its local columns
  // (dcp_local_column), in the same order, then -1: int32 [rows, k], contiguous. layout.ranks must be
  // the number of lists.
  TensorView owned{};
  // Checked always (ranks 1..1024, 0 <= rank < ranks, interleave >= 1 with ranks * interleave <= 2^31-1);
  // read only for `owned`.
  DcpLayout layout{};
  // Programmatic dependent launch: as PagedMqaLogitsOptions::pdl (paged_mqa_logits.hpp).
  bool pdl = false;
};

// Tensor arguments (device memory):
//   values     float32 / float16 / bfloat16 [D, rows, k_in], contiguous: list d's candidates of row r
//              (a rank's local top-k, e.g. topk()'s `values` output or the logits at its indices)
//   positions  int32 [D, rows, k_in], contiguous: their global positions; a negative position is no
//              candidate (topk()'s -1 padding), nor is a NaN value. Distinct within a row (each
//              position lives on one rank); a position given twice with the same value counts twice.
//   indices    int32 [rows, k], contiguous; 1 <= k <= 4096; D * k_in <= 65536
// Launches on `stream` without allocating, copying or synchronizing (capturable once the kernel is
// loaded: the first call per dtype compiles or reads the disk cache).
void topk_merge(const TensorView& values, const TensorView& positions, const TensorView& indices, Stream stream,
                const TopkMergeOptions& options = {});

// Loads (compiling on a cache miss) the merge kernel for `values` in the current context.
void warm_topk_merge(LogitsDType values);

}  // namespace flash_indexer
