// topk_merge without a GPU: its kernel keys, and every argument check naming the argument (validation
// runs before any driver call; the pointers are never dereferenced).
#include "catch_compat.hpp"

#include "flash_indexer/error.hpp"
#include "flash_indexer/topk_merge.hpp"
#include "kernel_catalog.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;

namespace {

void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct MergeArgs {
  int D = 2, rows = 5, k_in = 64, k = 32;
  TensorView values = TensorView::contiguous(fake(0x10000), DType::f16, {D, rows, k_in});
  TensorView positions = TensorView::contiguous(fake(0x20000), DType::i32, {D, rows, k_in});
  TensorView indices = TensorView::contiguous(fake(0x30000), DType::i32, {rows, k});
  TopkMergeOptions options{};
  void call() const { topk_merge(values, positions, indices, nullptr, options); }
};

void require_rejected(const MergeArgs& a, const std::string& text) {
  CHECK_THROWS_WITH(a.call(), Contains("topk_merge: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);
}

}  // namespace

TEST_CASE("topk_merge kernel keys parse back, and bad keys are named", "[merge][keys]") {
  for (const Arch& arch : {Arch{8, 0, false}, Arch{9, 0, true}})
    for (const TopkMergeConfig& c : supported_topk_merge_configs(arch)) {
      CHECK(TopkMergeConfig::parse_key(c.key()) == c);
      CHECK(kernel_spec_for_key(c.key()).key == c.key());
    }
  CHECK(TopkMergeConfig{LogitsDType::bf16, Arch{9, 0, true}}.key() == "topk_merge.in-bf16.sm_90a");
  CHECK_THROWS_WITH(TopkMergeConfig::parse_key("topk_merge.in-f8.sm_90a"), Contains("topk_merge.in-<f32|f16|bf16>"));
  CHECK_THROWS_WITH(TopkMergeConfig::parse_key("topk_merge.sm_90a"), Contains("topk_merge.in-<f32|f16|bf16>"));
  CHECK_THROWS_WITH(TopkMergeConfig::parse_key("topk_merge.in-f32.sm_70"), Contains("sm_80 or newer"));
}

TEST_CASE("topk_merge rejects bad arguments before any driver call, naming them", "[merge][validation]") {
  MergeArgs a;
  a.values.dtype = DType::i32;
  require_rejected(a, "values: expected dtype");
  a = {};
  a.values = TensorView::contiguous(fake(0x10000), DType::f32, {a.rows, a.k_in});
  require_rejected(a, "values: expected 3 dimensions");
  a = {};
  a.values.strides[2] = 2;
  require_rejected(a, "values: expected a contiguous tensor");
  a = {};
  a.values = TensorView::contiguous(fake(0x10000), DType::f32, {17, a.rows, 4096});
  a.positions = TensorView::contiguous(fake(0x20000), DType::i32, {17, a.rows, 4096});
  require_rejected(a, "values: expected D * k_in");
  a = {};
  a.positions.dtype = DType::f32;
  require_rejected(a, "positions: expected dtype int32");
  a = {};
  a.positions = TensorView::contiguous(fake(0x20000), DType::i32, {a.D, a.rows, a.k_in + 1});
  require_rejected(a, "positions: expected shape[2] = 64 (k_in");
  a = {};
  a.positions = TensorView::contiguous(fake(0x20000), DType::i32, {a.D + 1, a.rows, a.k_in});
  require_rejected(a, "positions: expected shape[0] = 2 (D");
  a = {};
  a.indices = TensorView::contiguous(fake(0x30000), DType::i32, {a.rows + 1, a.k});
  require_rejected(a, "indices: expected shape[0] = 5 (rows");
  a = {};
  a.indices = TensorView::contiguous(fake(0x30000), DType::i32, {a.rows, 4097});
  require_rejected(a, "indices: expected k = indices.shape[1] in 1..4096");
  a = {};
  a.indices = TensorView::contiguous(fake(0x30000), DType::i32, {a.rows, 0});
  require_rejected(a, "indices: expected k = indices.shape[1] in 1..4096");
  a = {};
  a.values.data = nullptr;
  require_rejected(a, "values: expected");
  a = {};
  a.options.values = TensorView::contiguous(fake(0x40000), DType::f16, {a.rows, a.k});
  require_rejected(a, "options.values: expected dtype float32");
  a = {};
  a.options.values = TensorView::contiguous(fake(0x40000), DType::f32, {a.rows, a.k + 1});
  require_rejected(a, "options.values: expected shape[1] = 32 (k)");
  a = {};
  a.options.owned = TensorView::contiguous(fake(0x50000), DType::i32, {a.rows, a.k});
  require_rejected(a, "options.layout.ranks: expected D = values.shape[0] = 2, got 1");
  a.options.layout = {2, 2, 1};
  require_rejected(a, "options.layout.rank: expected 0..1 (ranks - 1), got 2");
  a.options.layout = {2, 1, 0};
  require_rejected(a, "options.layout.interleave");
  a.options.layout = {2, 1, 64};
  a.options.owned = TensorView::contiguous(fake(0x50000), DType::i32, {a.rows + 1, a.k});
  require_rejected(a, "options.owned: expected shape[0] = 5 (rows)");
  // Valid: the next step needs the driver (absent here) or a GPU; an empty batch needs neither.
  a = {};
  a.values = TensorView::contiguous(fake(0x10000), DType::f16, {a.D, 0, a.k_in});
  a.positions = TensorView::contiguous(fake(0x20000), DType::i32, {a.D, 0, a.k_in});
  a.indices = TensorView::contiguous(fake(0x30000), DType::i32, {0, a.k});
  CHECK_NOTHROW(a.call());
}

TEST_CASE("topk_merge checks options.layout without options.owned", "[merge][validation][dcp]") {
  // The layout is read only for `owned`, but a bad one is rejected all the same, before any driver call.
  MergeArgs a;
  a.options.layout = {0, 0, 1};
  require_rejected(a, "options.layout.ranks: expected 1..1024, got 0");
  a.options.layout = {1025, 0, 1};
  require_rejected(a, "options.layout.ranks: expected 1..1024, got 1025");
  a.options.layout = {2, 2, 1};
  require_rejected(a, "options.layout.rank: expected 0..1 (ranks - 1), got 2");
  a.options.layout = {2, -1, 1};
  require_rejected(a, "options.layout.rank: expected 0..1 (ranks - 1), got -1");
  a.options.layout = {2, 1, 0};
  require_rejected(a, "options.layout.interleave: expected >= 1");
  a.options.layout = {4, 1, 1 << 30};
  require_rejected(a, "options.layout.interleave: expected >= 1 with ranks * interleave <= 2^31-1");
  // Also on an empty batch, which launches nothing.
  a.values = TensorView::contiguous(fake(0x10000), DType::f16, {a.D, 0, a.k_in});
  a.positions = TensorView::contiguous(fake(0x20000), DType::i32, {a.D, 0, a.k_in});
  a.indices = TensorView::contiguous(fake(0x30000), DType::i32, {0, a.k});
  a.options.layout = {2, 2, 1};
  require_rejected(a, "options.layout.rank");
  // A valid layout passes; without `owned` its ranks need not be D.
  a.options.layout = {3, 2, 64};
  CHECK_NOTHROW(a.call());
}
