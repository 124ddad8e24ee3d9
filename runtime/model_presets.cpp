#include "flash_indexer/model_presets.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace flash_indexer {
namespace {

// One row per model; docs/design/model-presets.md cites the configuration each number comes from.
constexpr std::array<IndexerPreset, 5> kPresets = {{
    {"deepseek-v3.2", 64, 128, 2048, KvFormat::fp8, 2, 163840},
    {"deepseek-v4-flash", 64, 128, 512, KvFormat::mxfp4, 2, 262144},
    {"deepseek-v4-pro", 64, 128, 1024, KvFormat::mxfp4, 2, 262144},
    {"deepseek-v4.1-flash", 32, 128, 512, KvFormat::mxfp4, 4, 524288},
    {"glm-5", 32, 128, 2048, KvFormat::fp8, 2, 202752},
}};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::span<const IndexerPreset> indexer_presets() { return kPresets; }

const IndexerPreset* find_indexer_preset(std::string_view name) {
  constexpr std::string_view kVendor = "deepseek-";
  for (const IndexerPreset& p : kPresets) {
    if (same_name(p.name, name)) return &p;
    if (p.name.starts_with(kVendor) && same_name(p.name.substr(kVendor.size()), name)) return &p;
  }
  return nullptr;
}

std::string indexer_preset_names() {
  std::string names;
  for (const IndexerPreset& p : kPresets) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

DecodePlanConfig decode_plan_config(const IndexerPreset& preset, int max_batch) {
  DecodePlanConfig c;
  c.max_batch = max_batch;
  c.next_n = preset.next_n;
  c.heads = preset.heads;
  c.head_dim = preset.head_dim;
  c.k = preset.k;
  c.kv = preset.kv;
  c.max_context = preset.max_context;
  return c;
}

}  // namespace flash_indexer
