#pragma once
// The indexer shapes of the models that run DeepSeek Sparse Attention, by name, so that a plan or a
// benchmark reads "DeepSeek-V4-Flash, B 32" instead of five numbers (docs/design/model-presets.md gives
// the sources of each row).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "flash_indexer/decode_plan.hpp"

namespace flash_indexer {

struct IndexerPreset {
  std::string_view name;  // lower case, as the CLI and Python take it: "deepseek-v4-flash"
  int heads = 0;          // indexer heads
  int head_dim = 0;
  int k = 0;  // keys kept per query row
  KvFormat kv = KvFormat::fp8;  // the index cache
  // Query rows per request: 1 + the draft tokens of the model's multi-token prediction (its MTP layers).
  int next_n = 1;
  // Index keys per row at the model's longest context: its positions over the key compression (V4:
  // 1M tokens at 4:1 are 262144 keys).
  std::int64_t max_context = 0;
};

// Every preset, in a fixed order.
std::span<const IndexerPreset> indexer_presets();

// The preset of that name (case-insensitive; "deepseek-" may be left out: "v4-flash"), or nullptr.
const IndexerPreset* find_indexer_preset(std::string_view name);
// The presets' names, comma-separated (for an error that names the choices).
std::string indexer_preset_names();

// A DecodePlanConfig for up to max_batch requests of the model: its heads, head_dim, k, cache format,
// next_n and longest context; the other fields keep DecodePlanConfig's defaults.
DecodePlanConfig decode_plan_config(const IndexerPreset& preset, int max_batch);

}  // namespace flash_indexer
