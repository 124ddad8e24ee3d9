// check::paged_mqa_logits_reference and check::mqa_logits_reference, the parallel references the GPU
// tests and `check` use, against the serial reference::paged_mqa_logits and reference::mqa_logits: the
// same bytes, logits and bounds (paged: FP8 and MXFP4 caches, 2-D and 1-D lengths with zeros, a NaN
// weight, slots without a valid block; prefill: windows of every kind, more tokens than runs).
#include "catch_compat.hpp"

#include <cstring>
#include <random>
#include <vector>

#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"
#include "parallel_reference.hpp"
#include "prefill_inputs.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

bool same_bytes(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("the request-parallel paged reference gives the serial reference's bytes", "[reference]") {
  struct Shape {
    int next_n, heads, head_dim;
    KvFormat kv;
    bool lens_2d;
    std::vector<int> lengths;
  };
  const Shape shapes[] = {
      {2, 16, 64, KvFormat::fp8, true, {0, 1, 63, 700, 65, 300, 129, 0}},
      {3, 32, 128, KvFormat::fp8, false, {500, 0, 2, 130, 64}},
      {1, 32, 128, KvFormat::mxfp4, true, {300, 0, 129}},
  };
  for (const Shape& s : shapes) {
    ck::LogitsCase c;
    c.config = {s.next_n, s.heads, s.head_dim, 64, false, LogitsDType::f32, {}};
    c.config.kv = s.kv;
    c.lens_2d = s.lens_2d;
    c.lengths = s.lengths;
    c.nan_weight_row = 1;
    c.wide_values = s.kv == KvFormat::fp8;
    c.seed = test::fresh_seed();
    ck::HostInputs in = ck::make_inputs(c);
    // A slot past the cache and a negative one in the first request's live range: NaN in both.
    in.block_table[0] = -1;
    in.block_table[1] = in.num_blocks;
    const reference::PagedMqaLogitsInputs view = in.reference_view(c);
    INFO(ck::describe(c));
    std::vector<double> bound_serial, bound_parallel;
    const std::vector<double> serial = reference::paged_mqa_logits(view, &bound_serial);
    const std::vector<double> parallel = ck::paged_mqa_logits_reference(view, &bound_parallel);
    CHECK(same_bytes(serial, parallel));
    CHECK(same_bytes(bound_serial, bound_parallel));
    CHECK(same_bytes(serial, ck::paged_mqa_logits_reference(view)));
  }
}

TEST_CASE("the token-parallel prefill reference gives the serial reference's bytes", "[reference]") {
  std::mt19937_64 rng(test::fresh_seed());
  for (const int tokens : {1, 7, 150}) {
    const ck::PrefillProblem p = ck::make_prefill_problem(tokens, 16, 64, 700, rng);
    INFO("T " << tokens);
    std::vector<double> bound_serial, bound_parallel;
    const std::vector<double> serial = reference::mqa_logits(p.reference_inputs(), &bound_serial);
    const std::vector<double> parallel = ck::mqa_logits_reference(p.reference_inputs(), &bound_parallel);
    CHECK(same_bytes(serial, parallel));
    CHECK(same_bytes(bound_serial, bound_parallel));
  }
}
