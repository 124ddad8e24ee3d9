// top_blocks without a GPU: its kernel keys, its workspace size, and every argument check naming the
// argument (validation runs before any driver call; the pointers are never dereferenced).
#include "catch_compat.hpp"

#include "flash_indexer/error.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "flash_indexer/topk.hpp"
#include "kernel_catalog.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;

namespace {

void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct BlocksArgs {
  int rows = 5, width = 1000, block = 8, k = 16;
  TensorView logits = TensorView::contiguous(fake(0x10000), DType::f32, {rows, width});
  TensorView lengths = TensorView::contiguous(fake(0x20000), DType::i32, {rows});
  TensorView blocks = TensorView::contiguous(fake(0x30000), DType::i32, {rows, k});
  TensorView workspace = TensorView::contiguous(
      fake(0x40000), DType::u8, {static_cast<std::int64_t>(top_blocks_workspace_bytes(rows, width, block, LogitsDType::f32))});
  TopBlocksOptions options{};
  void call() const { top_blocks(logits, lengths, block, blocks, workspace, nullptr, options); }
};

void require_rejected(const BlocksArgs& a, const std::string& text) {
  CHECK_THROWS_WITH(a.call(), Contains("top_blocks: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);
}

}  // namespace

TEST_CASE("top_blocks kernel keys parse back, and bad keys are named", "[blocks][keys]") {
  for (const Arch& arch : {Arch{8, 0, false}, Arch{9, 0, true}})
    for (const TopBlocksConfig& c : supported_top_blocks_configs(arch)) {
      CHECK(TopBlocksConfig::parse_key(c.key()) == c);
      CHECK(kernel_spec_for_key(c.key()).key == c.key());
    }
  CHECK(TopBlocksConfig{LogitsDType::f16, Arch{9, 0, true}}.key() == "top_blocks.in-f16.sm_90a");
  CHECK_THROWS_WITH(TopBlocksConfig::parse_key("top_blocks.in-i32.sm_90a"), Contains("top_blocks.in-<f32|f16|bf16>"));
  CHECK_THROWS_WITH(TopBlocksConfig::parse_key("top_blocks.sm_90a"), Contains("top_blocks.in-<f32|f16|bf16>"));
  CHECK_THROWS_WITH(TopBlocksConfig::parse_key("top_blocks.in-f32.sm_75"), Contains("sm_80 or newer"));
}

TEST_CASE("top_blocks' workspace holds the top-k's, the block counts and the maxima", "[blocks]") {
  // 5 rows of ceil(1000 / 8) = 125 maxima, rows padded to 128: after the top-k's (16-byte aligned) and
  // the counts (16-byte aligned).
  const std::size_t topk_bytes = (topk_workspace_bytes(5) + 15) / 16 * 16;
  CHECK(top_blocks_workspace_bytes(5, 1000, 8, LogitsDType::f32) == topk_bytes + 32 + 5 * 128 * 4);
  CHECK(top_blocks_workspace_bytes(5, 1000, 8, LogitsDType::bf16) == topk_bytes + 32 + 5 * 128 * 2);
  CHECK(top_blocks_workspace_bytes(0, 0, 16, LogitsDType::f16) >= topk_workspace_bytes(0));
  CHECK_THROWS_WITH(top_blocks_workspace_bytes(5, 1000, 0, LogitsDType::f32), Contains("block: expected 1..1024"));
  CHECK_THROWS_WITH(top_blocks_workspace_bytes(-1, 1000, 8, LogitsDType::f32), Contains("rows >= 0"));
}

TEST_CASE("top_blocks rejects bad arguments before any driver call, naming them", "[blocks][validation]") {
  BlocksArgs a;
  a.logits.dtype = DType::i32;
  require_rejected(a, "logits: expected dtype");
  a = {};
  a.logits = a.logits.with_strides({a.width, 2});
  require_rejected(a, "logits: expected strides[1] = 1");
  a = {};
  a.logits = a.logits.with_strides({a.width - 1, 1});
  require_rejected(a, "logits: expected a row stride >= width = 1000");
  a = {};
  a.block = 0;
  require_rejected(a, "block: expected 1..1024 columns, got 0");
  a.block = 1025;
  require_rejected(a, "block: expected 1..1024 columns, got 1025");
  a = {};
  a.lengths = TensorView::contiguous(fake(0x20000), DType::i32, {a.rows + 1});
  require_rejected(a, "lengths: expected shape[0] = 5 (rows = logits.shape[0])");
  a = {};
  a.lengths.dtype = DType::f32;
  require_rejected(a, "lengths: expected dtype int32");
  a = {};
  a.options.next_n = 2;  // 5 rows are no whole number of requests of 2
  require_rejected(a, "lengths: expected [B] with B * next_n (2) = rows = 5");
  a.options.next_n = 65;
  require_rejected(a, "options.next_n: expected 0 (per-row lengths) or 1..64, got 65");
  a.options.next_n = 0;
  a.lengths = TensorView::contiguous(fake(0x20000), DType::i32, {2, 2});
  require_rejected(a, "lengths: expected [B, next_n] with B * next_n = rows = 5");
  a = {};
  a.blocks = TensorView::contiguous(fake(0x30000), DType::i32, {a.rows, 4097});
  require_rejected(a, "blocks: expected k_blocks = blocks.shape[1] in 1..4096");
  a = {};
  a.blocks = TensorView::contiguous(fake(0x30000), DType::i32, {a.rows - 1, a.k});
  require_rejected(a, "blocks: expected shape[0] = 5");
  a = {};
  a.workspace.shape[0] -= 1;
  require_rejected(a, "workspace: expected at least top_blocks_workspace_bytes");
  a = {};
  a.workspace.data = fake(0x40008);
  require_rejected(a, "workspace: expected a 16-byte aligned data pointer");
  a = {};
  a.logits.data = nullptr;
  require_rejected(a, "logits: expected a device pointer");
  // Valid: the next step needs the driver (absent here) or a GPU; no rows need neither.
  a = {};
  a.logits = TensorView::contiguous(fake(0x10000), DType::f16, {0, a.width});
  a.lengths = TensorView::contiguous(fake(0x20000), DType::i32, {0});
  a.blocks = TensorView::contiguous(fake(0x30000), DType::i32, {0, a.k});
  CHECK_NOTHROW(a.call());
}
