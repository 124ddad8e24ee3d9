// The model presets: each names a shape the library takes, and names are found as users type them.
#include <set>
#include <string>

#include "catch_compat.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/model_presets.hpp"

using namespace flash_indexer;

TEST_CASE("model presets: every preset is a valid DecodePlan configuration under a unique lower-case name", "[presets]") {
  std::set<std::string> names;
  REQUIRE(indexer_presets().size() >= 5);
  for (const IndexerPreset& p : indexer_presets()) {
    INFO(std::string(p.name));
    CHECK(names.insert(std::string(p.name)).second);
    for (char c : p.name) CHECK((c < 'A' || c > 'Z'));
    const DecodePlanConfig c = decode_plan_config(p, 32);
    CHECK(c.max_batch == 32);
    CHECK(c.heads == p.heads);
    CHECK(c.head_dim == p.head_dim);
    CHECK(c.k == p.k);
    CHECK(c.kv == p.kv);
    CHECK(c.next_n == p.next_n);
    CHECK(c.max_context == p.max_context);
    // required_bytes validates the whole configuration (no GPU needed) and holds the logits of its width.
    CHECK(DecodePlan::required_bytes(c) >= static_cast<std::size_t>(32 * p.next_n) * p.max_context * 2);
  }
}

TEST_CASE("model presets: found by name, case-insensitively, with or without the vendor prefix", "[presets]") {
  const IndexerPreset* flash = find_indexer_preset("deepseek-v4-flash");
  REQUIRE(flash != nullptr);
  CHECK(flash->k == 512);
  CHECK(flash->kv == KvFormat::mxfp4);
  CHECK(find_indexer_preset("DeepSeek-V4-Flash") == flash);
  CHECK(find_indexer_preset("v4-flash") == flash);
  CHECK(find_indexer_preset("deepseek-v4-pro")->k == 1024);
  CHECK(find_indexer_preset("deepseek-v3.2")->k == 2048);
  CHECK(find_indexer_preset("GLM-5")->heads == 32);
  CHECK(find_indexer_preset("v4") == nullptr);
  CHECK(find_indexer_preset("") == nullptr);
  CHECK(find_indexer_preset("deepseek-") == nullptr);
  CHECK(find_indexer_preset("deepseek-glm-5") == nullptr);
  CHECK(find_indexer_preset("deepseek-v4-flash ") == nullptr);
}
