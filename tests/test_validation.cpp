// Every argument check of paged_mqa_logits, with an error that names the argument. Validation runs
// before any driver call, so these run without a GPU (the pointers are never dereferenced).
#include <catch2/catch.hpp>

#include <functional>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"

using namespace flash_indexer;
using Catch::Matchers::Contains;

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

  void call() const { paged_mqa_logits(q, kv, w, lens, table, logits, nullptr); }
};

// The error of a call with one argument changed.
void expect_error(const std::function<void(Args&)>& change, const std::string& text) {
  Args a;
  change(a);
  CHECK_THROWS_WITH(a.call(), Contains("paged_mqa_logits: ") && Contains(text));
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
  expect_error([](Args& a) { a.q.dtype = DType::u8; }, "q: expected dtype float8_e4m3, got uint8");
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

TEST_CASE("paged_mqa_logits rejects a bad kv_cache", "[validation]") {
  expect_error([](Args& a) { a.kv.dtype = DType::f32; }, "kv_cache: expected dtype uint8 or float8_e4m3, got float32");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 32, 1, 132}); },
               "kv_cache: expected block_size = kv_cache.shape[1] = 64, got 32");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 1, 128}); },
               "kv_cache: expected shape[3] = 132");
  expect_error([](Args& a) { a.kv = TensorView::contiguous(a.kv.data, DType::u8, {100, 64, 2, 132}); },
               "kv_cache: expected shape[2] = 1");
  expect_error([](Args& a) { a.kv.strides[0] = 8448 + 8; }, "kv_cache: expected a block stride >= 8448 bytes and a multiple of 16, got 8456");
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
