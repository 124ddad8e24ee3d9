// Decode context parallel on the CPU: the length and position maps against enumeration,
// and the merge of the ranks' local top-k against the top-k of the whole row, index for index.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "flash_indexer/dcp.hpp"
#include "flash_indexer/reference.hpp"

using namespace flash_indexer;
namespace ref = flash_indexer::reference;

TEST_CASE("DCP maps: every position on exactly one rank, in order, lengths that add up", "[dcp][cpu]") {
  for (int ranks : {1, 2, 3, 4, 8})
    for (int interleave : {1, 3, 64})
      for (std::int64_t length : {0, 1, 2, 5, 63, 64, 65, 127, 128, 129, 191, 300, 1000}) {
        INFO("D " << ranks << " I " << interleave << " L " << length);
        std::int64_t total = 0;
        std::set<std::int64_t> seen;
        for (int r = 0; r < ranks; ++r) {
          const DcpLayout l{ranks, r, interleave};
          const std::int64_t local = dcp_local_length(length, l);
          total += local;
          std::int64_t previous = -1;
          for (std::int64_t c = 0; c < local; ++c) {
            const std::int64_t p = dcp_global_position(c, l);
            REQUIRE(p < length);
            REQUIRE(p > previous);  // local order is global order
            previous = p;
            REQUIRE(seen.insert(p).second);
            REQUIRE(dcp_owner(p, ranks, interleave) == r);
            REQUIRE(dcp_local_column(p, ranks, interleave) == c);
          }
          // The next local column would lie at or past L: the rank holds no more.
          REQUIRE(dcp_global_position(local, l) >= length);
        }
        REQUIRE(total == length);
      }
  // The MTP rule: draft token j of next_n sees L - next_n + j + 1 keys; its local length follows.
  const DcpLayout l{2, 1, 64};
  CHECK(dcp_local_length(130 - 2 + 0 + 1, l) == 64 + 0);  // 129 keys: [64, 128) on rank 1
  CHECK(dcp_local_length(200, l) == 64 + 8);               // [64, 128) and [192, 200)
}

namespace {

// A row with ties, zeros of both signs, infinities and NaN.
std::vector<float> adversarial_row(std::int64_t length, std::mt19937_64& rng) {
  std::vector<float> row(static_cast<std::size_t>(length));
  std::uniform_int_distribution<int> pick(0, 9), small(-20, 20);
  for (auto& x : row) {
    switch (pick(rng)) {
      case 0: x = std::numeric_limits<float>::quiet_NaN(); break;
      case 1: x = -std::numeric_limits<float>::infinity(); break;
      case 2: x = std::numeric_limits<float>::infinity(); break;
      case 3: x = -0.0f; break;
      default: x = static_cast<float>(small(rng)) / 4; break;  // many ties
    }
  }
  return row;
}

}  // namespace

TEST_CASE("DCP merge of the ranks' local top-k equals the top-k of the whole row", "[dcp][cpu]") {
  std::mt19937_64 rng(20261201);
  for (int ranks : {1, 2, 4})
    for (int interleave : {1, 64})
      for (int k : {1, 7, 64})
        for (std::int64_t length : {0, 1, 5, 64, 100, 129, 700}) {
          INFO("D " << ranks << " I " << interleave << " k " << k << " L " << length);
          const std::vector<float> row = adversarial_row(length, rng);
          // Each rank's shard (its local columns), its local top-k, the columns mapped to positions.
          std::vector<float> values(static_cast<std::size_t>(ranks) * k);
          std::vector<std::int32_t> positions(static_cast<std::size_t>(ranks) * k);
          for (int r = 0; r < ranks; ++r) {
            const DcpLayout l{ranks, r, interleave};
            const std::int64_t local = dcp_local_length(length, l);
            std::vector<float> shard(static_cast<std::size_t>(std::max<std::int64_t>(local, 1)));
            for (std::int64_t c = 0; c < local; ++c) shard[c] = row[dcp_global_position(c, l)];
            const ref::TopkResult mine = ref::topk(shard, local, local, {local}, k, false);
            for (int i = 0; i < k; ++i) {
              const std::int32_t c = mine.indices[i];
              positions[r * k + i] = c < 0 ? -1 : static_cast<std::int32_t>(dcp_global_position(c, l));
              values[r * k + i] = mine.values[i];
            }
          }
          for (bool sorted : {false, true}) {
            const ref::TopkResult merged = ref::topk_merge(values, positions, ranks, 1, k, k, sorted);
            const ref::TopkResult whole = ref::topk(row, length, length, {length}, k, sorted);
            REQUIRE(merged.indices == whole.indices);
            for (int i = 0; i < k; ++i)
              REQUIRE(std::bit_cast<std::uint32_t>(merged.values[i]) == std::bit_cast<std::uint32_t>(whole.values[i]));
          }
          // Each rank's share of the merged top-k, as local columns: together exactly the merged set.
          const ref::TopkResult merged = ref::topk_merge(values, positions, ranks, 1, k, k, true);
          std::int64_t owned = 0;
          for (int r = 0; r < ranks; ++r) {
            const DcpLayout l{ranks, r, interleave};
            for (const std::int32_t c : ref::dcp_owned(merged.indices, 1, k, l))
              if (c >= 0) {
                ++owned;
                REQUIRE(dcp_owner(dcp_global_position(c, l), ranks, interleave) == r);
              }
          }
          std::int64_t selected = 0;
          for (const std::int32_t p : merged.indices) selected += p >= 0;
          REQUIRE(owned == selected);
        }
}
