// Every argument check of paged_mqa_logits and topk, with an error that names the argument. Validation runs
// before any driver call, so these run without a GPU (the pointers are never dereferenced).
#include "catch_compat.hpp"

#include <functional>

#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "topk_call.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;

namespace {

void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct Args {
  int B = 4, N = 2, H = 64, D = 128, blocks = 100, max_blocks = 10, width = 640;
  TensorView q = TensorView::contiguous(fake(0x10000), DType::fp8_e4m3, {B, N, H, D});
  TensorView kv = TensorView::contiguous(fake(0x200000), DType::u8, {blocks, 64, 1, D + 4});
  TensorView w = TensorView::contiguous(fake(0x30000), DType::f32, {B * N, H});
  TensorView lens = TensorView::contiguous(fake(0x40000), DType::i32, {B, N});
  TensorView table = TensorView::contiguous(fake(0x50000), DType::i32, {B, max_blocks});
  TensorView logits = TensorView::contiguous(fake(0x1000000), DType::f16, {B * N, width});
  PagedMqaLogitsOptions options{};

  void call() const { paged_mqa_logits(q, kv, w, lens, table, logits, nullptr, options); }

  // The same call on an MXFP4 cache (contract §2.2): packed query with its exponents.
  void use_mxfp4() {
    q = TensorView::contiguous(fake(0x10000), DType::u8, {B, N, H, D / 2});
    kv = TensorView::contiguous(fake(0x200000), DType::u8, {blocks, 64, 1, D / 2 + 4});
    options.q_scales = TensorView::contiguous(fake(0x60000), DType::i32, {B, N, H});
  }
};

// The error of a call with one argument changed.
void expect_error(const std::function<void(Args&)>& change, const std::string& text) {
  Args a;
  change(a);
  CHECK_THROWS_WITH(a.call(), Contains("paged_mqa_logits: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);  // the caller's mistake, not a CUDA failure
}

}  // namespace

TEST_CASE("paged_mqa_logits accepts valid arguments up to the driver", "[validation]") {
  if (driver::available()) {
    SUCCEED("a driver is present: a launch with fake pointers would fault, so this part runs only without one");
    return;
  }
  Args a;
  CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));  // validation passed; the driver was needed next
  a.lens = TensorView::contiguous(fake(0x40000), DType::i32, {a.B});
  CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));
}

TEST_CASE("an empty batch or zero width launches nothing", "[validation]") {
  Args a;
  a.q.shape[0] = 0;
  a.w.shape[0] = 0;
  a.lens.shape[0] = 0;
  a.table.shape[0] = 0;
  a.logits.shape[0] = 0;
  CHECK_NOTHROW(a.call());
  Args b;
  b.logits.shape[1] = 0;
  CHECK_NOTHROW(b.call());
}

TEST_CASE("paged_mqa_logits rejects bad q", "[validation]") {
  expect_error([](Args& a) { a.q.dtype = DType::f16; }, "q: expected dtype float8_e4m3 or uint8, got float16");
  expect_error([](Args& a) { a.q.rank = 3; }, "q: expected 4 dimensions, got 3");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {4, 9, 64, 128}); },
               "q: expected next_n = q.shape[1] in 1..8, got 9");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {4, 2, 48, 128}); },
               "q: expected heads = q.shape[2] in {16, 32, 64}, got 48");
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {4, 2, 64, 96}); },
               "q: expected head_dim = q.shape[3] in {64, 128}, got 96");
  expect_error([](Args& a) { a.q.strides[0] *= 2; }, "q: expected a contiguous tensor");
  expect_error([](Args& a) { a.q.data = fake(0x10008); }, "q: expected a 16-byte aligned data pointer");
  expect_error([](Args& a) { a.q.data = nullptr; }, "q: expected a device pointer, got nullptr");
  expect_error([](Args& a) { a.q.shape[0] = 70000; }, "q: expected batch size q.shape[0] in 0..65535");
}

TEST_CASE("paged_mqa_logits takes an MXFP4 cache with a packed query, and names what does not match", "[validation][mxfp4]") {
  if (!driver::available()) {
    Args a;
    a.use_mxfp4();
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));  // validation passed
  }
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.options.q_scales = {};
      },
      "options.q_scales: expected");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.options.q_scales.shape[2] = 32;
      },
      "options.q_scales: expected shape[2] = 64 (heads)");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.options.q_scales.dtype = DType::f32;
      },
      "options.q_scales: expected dtype int32");
  expect_error([](Args& a) { a.options.q_scales = TensorView::contiguous(fake(0x60000), DType::i32, {4, 2, 64}); },
               "options.q_scales: expected none for an FP8 query");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 1, 132});
      },
      "kv_cache: expected shape[3] = 68");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 1, 68}); },
               "kv_cache: expected shape[3] = 132");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.q = TensorView::contiguous(a.q.data, DType::u8, {4, 2, 64, 32});
      },
      "q: expected q.shape[3] = head_dim / 2 = 64");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.q = TensorView::contiguous(a.q.data, DType::u8, {4, 7, 64, 64});
      },
      "q: expected next_n = q.shape[1] in 1..6 for MXFP4 (5..6 on the sm90 kernel), got 7");
  // next_n 5-6 at 64 heads run as B * next_n grid rows of the sm90 kernel: at most 65535 of them.
  expect_error([](Args& a) { a.q = TensorView::contiguous(a.q.data, DType::fp8_e4m3, {10923, 6, 64, 128}); },
               "q: expected B * next_n <= 65535 at next_n 6 and 64 heads (B <= 10922), got 10923");
  expect_error(
      [](Args& a) {
        a.use_mxfp4();
        a.q = TensorView::contiguous(a.q.data, DType::u8, {13108, 5, 64, 64});
      },
      "q: expected B * next_n <= 65535 at next_n 5 and 64 heads (B <= 13107), got 13108");
}

TEST_CASE("paged_mqa_logits rejects a bad kv_cache", "[validation]") {
  expect_error([](Args& a) { a.kv.dtype = DType::f32; }, "kv_cache: expected dtype uint8 or float8_e4m3, got float32");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 32, 1, 132}); },
               "kv_cache: expected block_size = kv_cache.shape[1] = 64, got 32");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 1, 128}); },
               "kv_cache: expected shape[3] = 132");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 2, 132}); },
               "kv_cache: expected shape[2] = 1");
  expect_error([](Args& a) { a.kv.strides[0] = 8448 + 8; },
               "kv_cache: expected a block stride >= 8448 bytes and a multiple of 16, got 8456");
  expect_error([](Args& a) { a.kv.strides[0] = 8432; }, "a multiple of 16, got 8432");
  expect_error([](Args& a) { a.kv.strides[1] = 140; }, "kv_cache: expected strides[1] = 132, got 140");
  expect_error([](Args& a) { a.kv.data = fake(0x200004); }, "kv_cache: expected a 16-byte aligned data pointer");
}

TEST_CASE("paged_mqa_logits rejects bad weights and lengths and block tables", "[validation]") {
  expect_error([](Args& a) { a.w.dtype = DType::bf16; }, "weights: expected dtype float32, got bfloat16");
  expect_error([](Args& a) { a.w = TensorView::contiguous(a.w.data, DType::f32, {8, 32}); },
               "weights: expected shape[1] = 64 (heads), got 32");
  expect_error([](Args& a) { a.w = TensorView::contiguous(a.w.data, DType::f32, {4, 64}); },
               "weights: expected shape[0] = 8 (B * next_n), got 4");
  expect_error([](Args& a) { a.lens.dtype = DType::f32; }, "context_lens: expected dtype int32, got float32");
  expect_error([](Args& a) { a.lens = TensorView::contiguous(a.lens.data, DType::i32, {4, 3}); },
               "context_lens: expected shape[1] = 2 (next_n), got 3");
  expect_error([](Args& a) { a.lens = TensorView::contiguous(a.lens.data, DType::i32, {5}); },
               "context_lens: expected shape[0] = 4 (B), got 5");
  expect_error([](Args& a) { a.lens = TensorView::contiguous(a.lens.data, DType::i32, {4, 2, 1}); },
               "context_lens: expected 1 or 2 dimensions, got 3");
  expect_error([](Args& a) { a.lens.strides[0] = 4; }, "context_lens: expected a contiguous tensor");
  expect_error([](Args& a) { a.table = TensorView::contiguous(a.table.data, DType::i32, {3, 10}); },
               "block_table: expected shape[0] = 4 (B), got 3");
  expect_error([](Args& a) { a.table.strides[1] = 2; }, "block_table: expected strides[1] = 1, got 2");
  expect_error([](Args& a) { a.table.strides[0] = 5; }, "block_table: expected a row stride >= max_blocks = 10, got 5");
  expect_error([](Args& a) { a.table.dtype = DType::u8; }, "block_table: expected dtype int32, got uint8");
}

TEST_CASE("paged_mqa_logits rejects bad logits", "[validation]") {
  expect_error([](Args& a) { a.logits.dtype = DType::i32; }, "logits: expected dtype float32 or float16 or bfloat16, got int32");
  expect_error([](Args& a) { a.logits = TensorView::contiguous(a.logits.data, DType::f16, {4, 640}); },
               "logits: expected shape[0] = 8 (B * next_n), got 4");
  expect_error([](Args& a) { a.logits.strides[1] = 2; }, "logits: expected strides[1] = 1, got 2");
  expect_error([](Args& a) { a.logits.strides[0] = 600; }, "logits: expected a row stride >= width = 640, got 600");
  expect_error([](Args& a) { a.logits.data = fake(0x1000002); }, "logits: expected a 16-byte aligned data pointer");
  expect_error([](Args& a) { a.logits.rank = 3; }, "logits: expected 2 dimensions, got 3");
}

TEST_CASE("paged_mqa_logits rejects a bad histogram", "[validation]") {
  auto with = [](TensorView h) {
    Args a;
    PagedMqaLogitsOptions o;
    o.histogram = h;
    return [a, o] { paged_mqa_logits(a.q, a.kv, a.w, a.lens, a.table, a.logits, nullptr, o); };
  };
  CHECK_THROWS_WITH(with(TensorView::contiguous(fake(0x80000), DType::i32, {8, 512}))(),
                    Contains("paged_mqa_logits: histogram: expected shape[1] = 1024 (coarse bins), got 512"));
  CHECK_THROWS_WITH(with(TensorView::contiguous(fake(0x80000), DType::i32, {4, 1024}))(),
                    Contains("histogram: expected shape[0] = 8 (B * next_n), got 4"));
  CHECK_THROWS_WITH(with(TensorView::contiguous(fake(0x80000), DType::f32, {8, 1024}))(),
                    Contains("histogram: expected dtype int32, got float32"));
  CHECK_THROWS_WITH(with(TensorView::contiguous(fake(0x80004), DType::i32, {8, 1024}))(),
                    Contains("histogram: expected a 8-byte aligned data pointer"));
}

namespace {

struct TopkArgs {
  std::int64_t rows = 6, width = 5000, k = 512;
  TensorView logits = TensorView::contiguous(fake(0x1000000), DType::f32, {rows, width});
  TensorView lengths = TensorView::contiguous(fake(0x40000), DType::i32, {rows});
  TensorView indices = TensorView::contiguous(fake(0x50000), DType::i32, {rows, k});
  TensorView workspace = TensorView::contiguous(fake(0x60000), DType::u8, {static_cast<std::int64_t>(topk_workspace_bytes(6))});
  TopkOptions options;
  void call() const { topk(logits, lengths, indices, workspace, nullptr, options); }
};

void expect_topk_error(const std::function<void(TopkArgs&)>& change, const std::string& text) {
  TopkArgs a;
  change(a);
  CHECK_THROWS_WITH(a.call(), Contains("topk: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);
}

}  // namespace

TEST_CASE("topk maps slots through block_table in blocks of options.block_size", "[validation]") {
  TopkArgs a;
  const TensorView table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100});
  CHECK(check_topk("topk", a.logits, a.lengths, a.indices, a.workspace, a.options).params.slot_table == nullptr);
  a.options.block_table = table;
  for (int size : {64, 1, 8, 16, 32}) {
    a.options.block_size = size;
    const kernels::TopkParams p = check_topk("topk", a.logits, a.lengths, a.indices, a.workspace, a.options).params;
    CHECK(p.slot_table == table.data);
    CHECK(1 << p.slot_block_shift == size);
    CHECK(p.slot_table_blocks == 100);
    CHECK(p.slot_rows_per_request == 2);
  }
}

TEST_CASE("topk accepts valid arguments up to the driver, and zero rows launch nothing", "[validation]") {
  if (!driver::available()) {
    TopkArgs a;
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));
    a.lengths = TensorView::contiguous(fake(0x40000), DType::i32, {3, 2});
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));
    a.lengths = TensorView::contiguous(fake(0x40000), DType::i32, {2});
    a.options.next_n = 3;
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));
    TopkArgs broadcast;  // row stride 0: one row for every row
    broadcast.logits.strides[0] = 0;
    CHECK_THROWS_WITH(broadcast.call(), Contains("libcuda.so.1"));
  }
  TopkArgs e;
  e.logits.shape[0] = e.lengths.shape[0] = e.indices.shape[0] = 0;
  CHECK_NOTHROW(e.call());
}

TEST_CASE("topk rejects bad arguments, naming them", "[validation]") {
  expect_topk_error([](TopkArgs& a) { a.logits.dtype = DType::i32; },
                    "logits: expected dtype float32 or float16 or bfloat16, got int32");
  expect_topk_error([](TopkArgs& a) { a.logits.strides[0] = 4000; },
                    "logits: expected a row stride >= width = 5000, or 0, got 4000");
  expect_topk_error([](TopkArgs& a) { a.logits.strides[1] = 2; }, "logits: expected strides[1] = 1, got 2");
  expect_topk_error([](TopkArgs& a) { a.logits.data = fake(0x1000002); }, "logits: expected a 4-byte aligned data pointer");
  expect_topk_error([](TopkArgs& a) { a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {5}); },
                    "lengths: expected shape[0] = 6 (rows), got 5");
  expect_topk_error([](TopkArgs& a) { a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {4, 2}); },
                    "lengths: expected [B, next_n] with B * next_n = rows = 6, got [4, 2]");
  expect_topk_error(
      [](TopkArgs& a) {
        a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {3, 2});
        a.options.next_n = 3;
      },
      "lengths: expected shape[1] = options.next_n = 3, got 2");
  expect_topk_error(
      [](TopkArgs& a) {
        a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {4});
        a.options.next_n = 2;
      },
      "lengths: expected [B] with B * next_n (2) = rows = 6, got [4]");
  expect_topk_error([](TopkArgs& a) { a.options.next_n = -1; }, "options.next_n: expected 0 (per-row lengths) or 1..64, got -1");
  expect_topk_error([](TopkArgs& a) { a.lengths.dtype = DType::f32; }, "lengths: expected dtype int32, got float32");
  expect_topk_error([](TopkArgs& a) { a.indices = TensorView::contiguous(a.indices.data, DType::i32, {6, 4097}); },
                    "indices: expected k = indices.shape[1] in 1..4096, got 4097");
  expect_topk_error([](TopkArgs& a) { a.indices = TensorView::contiguous(a.indices.data, DType::i32, {6, 0}); },
                    "indices: expected k = indices.shape[1] in 1..4096, got 0");
  expect_topk_error([](TopkArgs& a) { a.indices = TensorView::contiguous(a.indices.data, DType::i32, {5, 512}); },
                    "indices: expected shape[0] = 6 (rows), got 5");
  expect_topk_error([](TopkArgs& a) { a.indices.strides[0] = 1024; }, "indices: expected a contiguous tensor");
  expect_topk_error([](TopkArgs& a) { a.options.values = TensorView::contiguous(fake(0x70000), DType::f32, {6, 256}); },
                    "values: expected shape[1] = 512 (k), got 256");
  expect_topk_error([](TopkArgs& a) { a.options.values = TensorView::contiguous(fake(0x70000), DType::f16, {6, 512}); },
                    "values: expected dtype float32, got float16");
  expect_topk_error([](TopkArgs& a) { a.options.histogram = TensorView::contiguous(fake(0x80000), DType::i32, {6, 256}); },
                    "histogram: expected shape[1] = 1024 (coarse bins), got 256");
  expect_topk_error([](TopkArgs& a) { a.workspace.shape[0] = 8; },
                    "workspace: expected at least topk_workspace_bytes(6) = 96 bytes, got 8");
  expect_topk_error([](TopkArgs& a) { a.workspace.data = fake(0x60008); }, "workspace: expected a 16-byte aligned data pointer");
  expect_topk_error([](TopkArgs& a) { a.workspace.dtype = DType::i32; }, "workspace: expected dtype uint8, got int32");
  expect_topk_error([](TopkArgs& a) { a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {4, 100}); },
                    "block_table: expected shape[0] = B dividing rows = 6, got 4");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100}).with_strides({50, 1});
      },
      "block_table: expected a row stride >= max_blocks = 100, got 50");
  expect_topk_error([](TopkArgs& a) { a.options.block_size = 8; },
                    "options.block_size: expected 64 without options.block_table, got 8");
  for (int size : {0, 12, 128, -8})
    expect_topk_error(
        [size](TopkArgs& a) {
          a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100});
          a.options.block_size = size;
        },
        "options.block_size: expected a power of two in 1..64 (positions per block_table entry), got " + std::to_string(size));
  expect_topk_error([](TopkArgs& a) { a.options.row_starts = TensorView::contiguous(fake(0xa0000), DType::i32, {5}); },
                    "row_starts: expected shape[0] = 6 (rows), got 5");
  expect_topk_error([](TopkArgs& a) { a.options.row_starts = TensorView::contiguous(fake(0xa0000), DType::f32, {6}); },
                    "row_starts: expected dtype int32, got float32");
  expect_topk_error([](TopkArgs& a) { a.options.relative = true; },
                    "options.relative: indices relative to a window need options.row_starts");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.row_starts = TensorView::contiguous(fake(0xa0000), DType::i32, {6});
        a.options.relative = true;
        a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100});
      },
      "options.relative: expected absolute columns with options.block_table");
  expect_topk_error([](TopkArgs& a) { a.options.split = 3; },
                    "options.split: expected 0 (automatic) or 1, 2, 4, 8, 16 CTAs per row, got 3");
  expect_topk_error([](TopkArgs& a) { a.options.split = 32; },
                    "options.split: expected 0 (automatic) or 1, 2, 4, 8, 16 CTAs per row, got 32");
  expect_topk_error(
      [](TopkArgs& a) {
        a.logits.shape[0] = 1 << 29;
        a.options.split = 8;
      },
      "options.split: expected rows * split <= 2^31-1 (the grid), got 536870912 rows * 8");
}

TEST_CASE("paged_mqa_logits and topk name a bad DCP layout, and topk its conflicts", "[validation][dcp]") {
  expect_error([](Args& a) { a.options.dcp = {0, 0, 1}; }, "options.dcp.ranks: expected 1..1024, got 0");
  expect_error([](Args& a) { a.options.dcp = {2, 2, 1}; }, "options.dcp.rank: expected 0..1 (ranks - 1), got 2");
  expect_error([](Args& a) { a.options.dcp = {2, -1, 1}; }, "options.dcp.rank: expected 0..1 (ranks - 1), got -1");
  expect_error([](Args& a) { a.options.dcp = {2, 1, 0}; }, "options.dcp.interleave: expected >= 1");
  expect_error([](Args& a) { a.options.dcp = {1024, 1, 1 << 22}; },
               "options.dcp.interleave: expected >= 1 with ranks * interleave <= 2^31-1");
  expect_topk_error([](TopkArgs& a) { a.options.dcp = {4, 4, 64}; }, "options.dcp.rank: expected 0..3 (ranks - 1), got 4");
  expect_topk_error([](TopkArgs& a) { a.options.dcp = {2000, 0, 1}; }, "options.dcp.ranks: expected 1..1024, got 2000");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.dcp = {2, 1, 64};
        a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100});
      },
      "options.block_table: expected none with options.dcp (the indices are global positions)");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.dcp = {2, 1, 64};
        a.options.row_starts = TensorView::contiguous(fake(0xa0000), DType::i32, {6});
      },
      "options.row_starts: expected none with options.dcp (decode rows)");
  if (!driver::available()) {  // a valid layout passes validation; the driver was needed next
    TopkArgs t;
    t.options.dcp = {2, 1, 64};
    CHECK_THROWS_WITH(t.call(), Contains("libcuda.so.1"));
    Args l;
    l.options.dcp = {8, 7, 1};
    CHECK_THROWS_WITH(l.call(), Contains("libcuda.so.1"));
  }
}

TEST_CASE("topk splits a row over a cluster only for few rows, while the grid fits and segments stay long", "[validation]") {
  const Arch h200{9, 0, true};
  CHECK(automatic_topk_split(1, 131072, 132, h200) == 8);
  CHECK(automatic_topk_split(12, 131072, 132, h200) == 8);   // 96 CTAs
  CHECK(automatic_topk_split(13, 131072, 132, h200) == 4);
  CHECK(automatic_topk_split(24, 131072, 132, h200) == 4);   // 96 CTAs
  CHECK(automatic_topk_split(25, 131072, 132, h200) == 2);
  CHECK(automatic_topk_split(66, 131072, 132, h200) == 2);   // one wave
  CHECK(automatic_topk_split(67, 131072, 132, h200) == 1);
  CHECK(automatic_topk_split(1, 8192, 132, h200) == 1);      // one register tile: one CTA
  CHECK(automatic_topk_split(1, 16384, 132, h200) == 1);
  CHECK(automatic_topk_split(1, 16385, 132, h200) == 4);     // segments of at least 4096 columns
  CHECK(automatic_topk_split(1, 32768, 132, h200) == 8);
  CHECK(automatic_topk_split(1, 4095, 132, h200) == 1);
  CHECK(automatic_topk_split(1, 131072, 132, Arch{8, 0, false}) == 1);  // no clusters before sm_90
}

// Sizes and strides a caller can get wrong in ways that would otherwise reach the device: negative dims,
// negative strides, and products that overflow. rank() rejects them for every tensor of every op.
TEST_CASE("paged_mqa_logits rejects negative sizes and strides and overflowing extents", "[validation]") {
  constexpr std::int64_t huge = std::int64_t{1} << 62;
  expect_error([](Args& a) { a.q.shape[0] = -1; }, "q: expected shape[0] >= 0, got [-1, 2, 64, 128]");
  expect_error([](Args& a) { a.q.rank = -1; }, "q: expected 4 dimensions, got -1");
  expect_error([](Args& a) { a.q.rank = 9; }, "q: expected 4 dimensions, got 9");
  expect_error([](Args& a) { a.kv.shape[0] = -100; }, "kv_cache: expected shape[0] >= 0");
  expect_error([](Args& a) { a.kv.strides[0] = -8448; }, "kv_cache: expected strides[0] >= 0");
  expect_error([](Args& a) { a.kv.strides[0] = huge; }, "kv_cache: expected a tensor of at most 2^48 bytes");
  expect_error([](Args& a) { a.w.shape[1] = -64; }, "weights: expected shape[1] >= 0");
  expect_error([](Args& a) { a.lens.shape[1] = -2; }, "context_lens: expected shape[1] >= 0");
  expect_error([](Args& a) { a.table.shape[1] = -10; }, "block_table: expected shape[1] >= 0");
  expect_error([](Args& a) { a.table.strides[0] = huge; }, "block_table: expected a tensor of at most 2^48 bytes");
  expect_error([](Args& a) { a.table.shape[1] = std::int64_t{1} << 47; }, "block_table: expected a tensor of at most 2^48 bytes");
  expect_error([](Args& a) { a.logits.shape[1] = -640; }, "logits: expected shape[1] >= 0");
  expect_error([](Args& a) { a.logits.strides[0] = -640; }, "logits: expected strides[0] >= 0");
  expect_error([](Args& a) { a.logits.strides[0] = huge; }, "logits: expected a tensor of at most 2^48 bytes");
  expect_error(
      [](Args& a) {
        a.logits.shape[1] = std::int64_t{1} << 31;
        a.logits.strides[0] = a.logits.shape[1];
      },
      "logits: expected a width in 0..2^31-65");
  Args a;
  PagedMqaLogitsOptions o;
  o.histogram = TensorView::contiguous(fake(0x80000), DType::i32, {-8, 1024});
  CHECK_THROWS_WITH(paged_mqa_logits(a.q, a.kv, a.w, a.lens, a.table, a.logits, nullptr, o),
                    Contains("paged_mqa_logits: histogram: expected shape[0] >= 0"));
  o = {};
  o.variant = static_cast<PagedMqaLogitsVariant>(9);
  CHECK_THROWS_WITH(paged_mqa_logits(a.q, a.kv, a.w, a.lens, a.table, a.logits, nullptr, o),
                    Contains("paged_mqa_logits: options.variant: expected automatic, portable or sm90, got 9"));
}

TEST_CASE("topk rejects negative sizes and strides and overflowing extents", "[validation]") {
  constexpr std::int64_t huge = std::int64_t{1} << 62;
  expect_topk_error([](TopkArgs& a) { a.logits.shape[0] = -6; }, "logits: expected shape[0] >= 0");
  expect_topk_error([](TopkArgs& a) { a.logits.strides[0] = huge; }, "logits: expected a tensor of at most 2^48 bytes");
  // [-2, -3] multiplies to the 6 rows: the dims themselves must be checked, not only their product.
  expect_topk_error([](TopkArgs& a) { a.lengths = TensorView::contiguous(a.lengths.data, DType::i32, {-2, -3}); },
                    "lengths: expected shape[0] >= 0, got [-2, -3]");
  expect_topk_error([](TopkArgs& a) { a.indices.shape[1] = -512; }, "indices: expected shape[1] >= 0");
  // A negative workspace size must not pass as a huge size_t.
  expect_topk_error([](TopkArgs& a) { a.workspace.shape[0] = -1; }, "workspace: expected shape[0] >= 0, got [-1]");
  expect_topk_error([](TopkArgs& a) { a.options.values = TensorView::contiguous(fake(0x70000), DType::f32, {6, -512}); },
                    "values: expected shape[1] >= 0");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.histogram = TensorView::contiguous(fake(0x80000), DType::i32, {6, 1024}).with_strides({huge, 1});
      },
      "histogram: expected a tensor of at most 2^48 bytes");
  expect_topk_error([](TopkArgs& a) { a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, -100}); },
                    "block_table: expected shape[1] >= 0");
  expect_topk_error(
      [](TopkArgs& a) {
        a.options.block_table = TensorView::contiguous(fake(0x90000), DType::i32, {3, 100}).with_strides({-100, 1});
      },
      "block_table: expected strides[0] >= 0");
}

TEST_CASE("warm functions and DecodePlan name a bad configuration before they need a GPU", "[validation]") {
  PagedMqaLogitsConfig c;
  c.heads = 48;
  CHECK_THROWS_WITH(warm_paged_mqa_logits(c), Contains("expected heads in {16, 32, 64}, got 48"));
  c = {};
  c.next_n = 0;
  CHECK_THROWS_WITH(warm_paged_mqa_logits(c), Contains("expected next_n in 1..8, got 0"));
  c = {};
  c.variant = static_cast<PagedMqaLogitsVariant>(5);
  CHECK_THROWS_WITH(warm_paged_mqa_logits(c), Contains("config.variant: expected automatic, portable or sm90, got 5"));
  TopkConfig t;
  t.split = 3;
  CHECK_THROWS_WITH(warm_topk(t), Contains("expected split 1, 2, 4, 8 or 16, got 3"));
  CHECK_THROWS_WITH(warm_topk(static_cast<LogitsDType>(7)), Contains("warm_topk: logits: expected f32, f16 or bf16, got 7"));
  CHECK_THROWS_WITH(DecodePlan({-1, 1, 64, 128, 2048, LogitsDType::f16, 1000}), Contains("config.max_batch"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 0, LogitsDType::f16, 1000}), Contains("config.k"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 2048, LogitsDType::f16, -5}), Contains("config.max_context"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 2048, LogitsDType::f16, std::int64_t{1} << 40}), Contains("config.max_context"));
  CHECK_THROWS_WITH(DecodePlan({1, 0, 64, 128, 2048, LogitsDType::f16, 1000}), Contains("next_n in 1..8"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 96, 2048, LogitsDType::f16, 1000}), Contains("head_dim in {64, 128}"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 16, 128, 2048, LogitsDType::f16, 1000, true, false, false, KvFormat::mxfp4}),
                    Contains("DecodePlan: paged_mqa_logits configuration") && Contains("the MXFP4 cache is built for"));
  // MXFP4 next_n 5-6 exist on the sm90 kernel only: accepted before the device is known, 7 never.
  CHECK_NOTHROW(DecodePlan::required_bytes({3, 6, 64, 128, 512, LogitsDType::f32, 9000, true, true, false, KvFormat::mxfp4}));
  CHECK_THROWS_WITH(DecodePlan({1, 7, 64, 128, 2048, LogitsDType::f16, 1000, true, false, false, KvFormat::mxfp4}),
                    Contains("the MXFP4 cache is built for next_n 1..4 (1..6 on the sm90 kernel"));
  PagedMqaLogitsConfig m{6, 64, 128, 64, false, LogitsDType::f32, Arch{}, PagedMqaLogitsVariant::automatic, KvFormat::mxfp4};
  if (!driver::available()) CHECK_THROWS_WITH(warm_paged_mqa_logits(m), Contains("libcuda.so.1"));  // past the checks
  m.variant = PagedMqaLogitsVariant::portable;
  CHECK_THROWS_WITH(warm_paged_mqa_logits(m), Contains("the MXFP4 cache is built for next_n 1..4"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 2048, LogitsDType::f16, 1000, true, false, false, static_cast<KvFormat>(3)}),
                    Contains("config.kv: expected fp8 or mxfp4, got 3"));
  CHECK_THROWS_WITH(DecodePlan({1, 1, 64, 128, 2048, static_cast<LogitsDType>(7), 1000}),
                    Contains("expected logits f32, f16 or bf16, got 7"));
  c = {};
  c.logits = static_cast<LogitsDType>(3);
  CHECK_THROWS_WITH(warm_paged_mqa_logits(c), Contains("expected logits f32, f16 or bf16, got 3"));
  t = {};
  t.logits = static_cast<LogitsDType>(3);
  CHECK_THROWS_WITH(warm_topk(t), Contains("expected logits f32, f16 or bf16, got 3"));
  CHECK_THROWS_AS(warm_topk(t), ArgumentError);
  CHECK_THROWS_AS(DecodePlan({0, 1, 64, 128, 2048, LogitsDType::f16, 1000}), ArgumentError);
}

namespace {

// A valid sparse_paged_mqa_logits call (B 4, next_n 2, H 64, C 40 candidate blocks of 8), one argument
// changed by `change`, expected to fail naming `text`.
struct SparseArgs : Args {
  int C = 40, block = 8;
  TensorView candidates = TensorView::contiguous(fake(0x70000), DType::i32, {B * N, C});
  SparseArgs() { logits = TensorView::contiguous(fake(0x1000000), DType::f16, {B * N, C * block}); }
  void call() const { sparse_paged_mqa_logits(q, kv, w, lens, table, candidates, block, logits, nullptr, sparse_options); }
  SparsePagedMqaLogitsOptions sparse_options{};
};

void expect_sparse_error(const std::function<void(SparseArgs&)>& change, const std::string& text) {
  SparseArgs a;
  change(a);
  CHECK_THROWS_WITH(a.call(), Contains("sparse_paged_mqa_logits: ") && Contains(text));
  CHECK_THROWS_AS(a.call(), ArgumentError);
}

}  // namespace

TEST_CASE("sparse_paged_mqa_logits validates its arguments before the driver, naming them", "[validation]") {
  if (!driver::available()) {
    SparseArgs a;
    CHECK_THROWS_WITH(a.call(), Contains("libcuda.so.1"));  // validation passed; the driver was needed next
  }
  // Zero candidates or rows: nothing to launch.
  SparseArgs empty;
  empty.candidates.shape[1] = 0;
  empty.logits.shape[1] = 0;
  CHECK_NOTHROW(empty.call());
  // The shared arguments as paged_mqa_logits checks them.
  expect_sparse_error([](SparseArgs& a) { a.q.dtype = DType::f16; }, "q: expected dtype");
  expect_sparse_error([](SparseArgs& a) { a.w.shape[1] = 32; }, "weights: expected");
  expect_sparse_error(
      [](SparseArgs& a) { a.sparse_options.histogram = TensorView::contiguous(fake(0x80000), DType::i32, {3, 1024}); },
      "histogram: expected shape[0] = 8 (B * next_n), got 3");
  // What only the sparse op has.
  expect_sparse_error(
      [](SparseArgs& a) {
        a.q = TensorView::contiguous(fake(0x10000), DType::fp8_e4m3, {4, 2, 16, 128});
        a.w = TensorView::contiguous(fake(0x30000), DType::f32, {8, 16});
      },
      "q: expected heads = q.shape[2] in {32, 64}, got 16");
  expect_sparse_error([](SparseArgs& a) { a.block = 32; }, "candidate_block: expected 8 or 16, got 32");
  expect_sparse_error([](SparseArgs& a) { a.candidates.dtype = DType::f32; }, "candidates: expected dtype int32");
  expect_sparse_error([](SparseArgs& a) { a.candidates.shape[0] = 7; }, "candidates: expected");
  expect_sparse_error([](SparseArgs& a) { a.candidates.strides[1] = 2; }, "candidates: expected");
  expect_sparse_error([](SparseArgs& a) { a.candidates.strides[0] = 39; }, "candidates: expected a row stride >= C = 40, got 39");
  expect_sparse_error([](SparseArgs& a) { a.candidates.data = nullptr; }, "candidates: expected");
  expect_sparse_error([](SparseArgs& a) { a.logits = TensorView::contiguous(fake(0x1000000), DType::f16, {8, 40 * 16}); },
                      "logits: expected logits.shape[1] = C * candidate_block = 320, got 640");
  expect_sparse_error([](SparseArgs& a) { a.block = 16; },
                      "logits: expected logits.shape[1] = C * candidate_block = 640, got 320");
  expect_sparse_error([](SparseArgs& a) { a.sparse_options.variant = static_cast<PagedMqaLogitsVariant>(7); },
                      "options.variant: expected automatic, portable or sm90, got 7");
}
