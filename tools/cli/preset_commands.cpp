// flash-indexer presets: the model presets (model_presets.hpp) that bench decode --preset takes.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "flash_indexer/model_presets.hpp"
#include "kernel_key.hpp"

namespace fi = flash_indexer;

namespace flash_indexer::cli {

int cmd_presets(const Args& args) {
  if (args.has("--json")) {
    nlohmann::json json = nlohmann::json::array();
    for (const fi::IndexerPreset& p : fi::indexer_presets())
      json.push_back({{"name", std::string(p.name)},
                      {"heads", p.heads},
                      {"head_dim", p.head_dim},
                      {"k", p.k},
                      {"kv", fi::kv_name(p.kv)},
                      {"next_n", p.next_n},
                      {"max_context", p.max_context}});
    std::printf("%s\n", json.dump(2).c_str());
    return 0;
  }
  std::printf("%-20s %5s %4s %5s %6s %6s %11s\n", "name", "heads", "D", "k", "kv", "next_n", "max_context");
  for (const fi::IndexerPreset& p : fi::indexer_presets())
    std::printf("%-20s %5d %4d %5d %6s %6d %11lld\n", std::string(p.name).c_str(), p.heads, p.head_dim, p.k, fi::kv_name(p.kv),
                p.next_n, static_cast<long long>(p.max_context));
  return 0;
}

}  // namespace flash_indexer::cli
