// GPU tests of top_blocks (the first level of two-level indexing) against reference::top_blocks: scores
// with ties, signed zeros, infinities and NaN in every logits dtype, blocks of 1 to 128 columns (and
// one that is no power of two), lengths of 0, partial last blocks and full rows, rows with fewer blocks
// than k, rows of one repeated score and of +inf only (where keep_newest must push out a selected block),
// with and without keep_newest; lengths per row and per request (the MTP rule); outputs and workspace
// poisoned before each call, every call twice for identical bytes.
#include "catch_compat.hpp"

#include <cmath>
#include <limits>
#include <random>

#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "logits_check.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;
namespace ref = flash_indexer::reference;

TEST_CASE("gpu: top_blocks equals reference::top_blocks on adversarial rows", "[gpu][topk][blocks]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  struct Shape {
    std::int64_t width;
    int block, k;
  };
  // Rows of up to 17500 blocks (140000 / 8), blocks of 1 to 128 columns, rows that are not 16-byte
  // aligned (odd strides: 257 and 4001 columns), k from 1 (with keep_newest: only the newest block) to 4096.
  const Shape shapes[] = {{40000, 8, 2048}, {40000, 16, 1024}, {3000, 8, 512},   {700, 1, 64},      {1000, 3, 5},
                          {5000, 64, 7},    {257, 8, 1},       {65536, 8, 4096}, {100000, 8, 2048}, {140000, 8, 1000},
                          {20000, 4, 300},  {9000, 128, 33},   {4001, 8, 64}};
  for (const LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
    for (const Shape& s : shapes)
      for (const bool keep_newest : {false, true}) {
        INFO("logits " << static_cast<int>(dtype) << " width " << s.width << " block " << s.block << " k " << s.k
                       << (keep_newest ? " keep_newest" : ""));
        const std::int64_t w = s.width, b = s.block;
        // Lengths: empty, one column, around a block and around k blocks, the full row; rows 6-8 full rows
        // of one repeated score, of NaN only, and of +inf only.
        // Past the width and negative: clamped, as the reference clamps.
        const std::vector<std::int64_t> lengths = {
            0, 1, b - 1 > 0 ? b - 1 : 1, b + 1, s.k * b - 1, s.k * b + b / 2 + 1, w, w, w, w, w / 2 + 3, w + 100, -5};
        const int rows = static_cast<int>(lengths.size());
        const std::int64_t stride = w + 24;  // a row stride past the width
        const std::size_t esize = dtype_size(tensor_dtype(dtype));
        std::vector<unsigned char> bytes(static_cast<std::size_t>(rows * stride) * esize);
        const float repeated = test::adversarial_score(rng);
        for (int r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < stride; ++c) {
            float x = test::adversarial_score(rng);
            if (r == 7) x = std::isnan(repeated) ? 1.5f : repeated;
            if (r == 8) x = std::numeric_limits<float>::quiet_NaN();
            if (r == 9) x = std::numeric_limits<float>::infinity();
            test::store_score(dtype, bytes, static_cast<std::size_t>(r * stride + c), x);
          }
        std::vector<float> values(static_cast<std::size_t>(rows * stride));
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = ref::load_logit(dtype, bytes.data(), i);
        const std::vector<std::int32_t> lens(lengths.begin(), lengths.end());
        const std::vector<std::int32_t> want = ref::top_blocks(values, stride, w, lengths, s.block, s.k, keep_newest);

        const ck::DeviceBuffer dl = ck::DeviceBuffer::from(bytes), dn = ck::DeviceBuffer::from(lens);
        ck::DeviceBuffer out(static_cast<std::size_t>(rows) * s.k * 4);
        ck::DeviceBuffer ws(top_blocks_workspace_bytes(rows, w, s.block, dtype));
        const TensorView logits = TensorView::contiguous(dl.data(), tensor_dtype(dtype), {rows, w}).with_strides({stride, 1});
        TopBlocksOptions o;
        o.keep_newest = keep_newest;
        std::vector<std::int32_t> first;
        for (int run = 0; run < 2; ++run) {
          out.fill(0x7d);
          ws.fill(static_cast<unsigned char>(run == 0 ? 0x7d : 0xff));
          top_blocks(logits, TensorView::contiguous(dn.data(), DType::i32, {rows}), s.block,
                     TensorView::contiguous(out.data(), DType::i32, {rows, s.k}),
                     TensorView::contiguous(ws.data(), DType::u8, {static_cast<std::int64_t>(ws.bytes())}), stream, o);
          test::gpu_session().synchronize();
          const auto got = out.to_host<std::int32_t>(static_cast<std::size_t>(rows) * s.k);
          for (int r = 0; r < rows; ++r) {
            INFO("row " << r << " length " << lens[r]);
            REQUIRE(std::vector<std::int32_t>(got.begin() + r * s.k, got.begin() + (r + 1) * s.k) ==
                    std::vector<std::int32_t>(want.begin() + r * s.k, want.begin() + (r + 1) * s.k));
          }
          if (run == 0) first = got;
          REQUIRE(got == first);
        }
      }
}

TEST_CASE("gpu: top_blocks takes lengths per request with next_n, as DecodePlan's context_lens", "[gpu][topk][blocks]") {
  // [B] lengths and next_n 3: row b * 3 + j sees lengths[b] - 3 + j + 1 columns, also when that is
  // negative; the same as [B * 3] per-row lengths, and as the reference over them.
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  const int n = 3, block = 8, k = 40;
  const std::vector<std::int32_t> requests = {0, 2, 9, 333, 1000, 17};
  const int batch = static_cast<int>(requests.size()), rows = batch * n;
  const std::int64_t width = 1000;
  std::vector<float> values(static_cast<std::size_t>(rows * width));
  for (float& x : values) x = test::adversarial_score(rng);
  std::vector<std::int64_t> per_row;
  for (int r = 0; r < rows; ++r) per_row.push_back(requests[r / n] - n + r % n + 1);
  for (const bool keep_newest : {false, true}) {
    const std::vector<std::int32_t> want = ref::top_blocks(values, width, width, per_row, block, k, keep_newest);
    const ck::DeviceBuffer dl = ck::DeviceBuffer::from(values), dn = ck::DeviceBuffer::from(requests);
    ck::DeviceBuffer out(static_cast<std::size_t>(rows) * k * 4),
        ws(top_blocks_workspace_bytes(rows, width, block, LogitsDType::f32));
    out.fill(0x7d);
    ws.fill(0x7d);
    TopBlocksOptions o;
    o.keep_newest = keep_newest;
    o.next_n = n;
    top_blocks(TensorView::contiguous(dl.data(), DType::f32, {rows, width}),
               TensorView::contiguous(dn.data(), DType::i32, {batch}), block,
               TensorView::contiguous(out.data(), DType::i32, {rows, k}),
               TensorView::contiguous(ws.data(), DType::u8, {static_cast<std::int64_t>(ws.bytes())}), stream, o);
    test::gpu_session().synchronize();
    REQUIRE(out.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k) == want);
  }
}

TEST_CASE("gpu: DecodePlan::top_blocks publishes the first level of the plan's own step", "[gpu][plan][blocks]") {
  // After run(): the blocks of the logits the run left in the plan, with its [B] context_lens and
  // next_n, equal the reference over those logits read back; a second-level plan is refused.
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  DecodePlanConfig pc;
  pc.max_batch = 3;
  pc.next_n = 2;
  pc.heads = 64;
  pc.head_dim = 128;
  pc.k = 512;
  pc.logits = LogitsDType::f32;
  pc.max_context = 9000;
  const DecodePlan plan(pc);
  ck::LogitsCase lc;
  lc.config = {pc.next_n, pc.heads, pc.head_dim, 64, pc.histogram, pc.logits, {}};
  lc.lengths = {9000, 1, 4321};
  lc.lens_2d = false;
  lc.exact_values = true;
  lc.width = pc.max_context;
  lc.seed = rng();
  const ck::HostInputs in = ck::make_inputs(lc);
  ck::DeviceInputs d = ck::upload(in, lc);
  const ck::LogitsViews v = ck::views(d, in, lc);
  const int batch = 3, rows = batch * pc.next_n, block = 8, k_blocks = 300;
  ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * pc.k * 4), blocks(static_cast<std::size_t>(rows) * k_blocks * 4);
  ck::DeviceBuffer ws(top_blocks_workspace_bytes(rows, plan.width(), block, pc.logits));
  blocks.fill(0x7d);
  ws.fill(0x7d);
  const TensorView bv = TensorView::contiguous(blocks.data(), DType::i32, {rows, k_blocks});
  const TensorView wv = TensorView::contiguous(ws.data(), DType::u8, {static_cast<std::int64_t>(ws.bytes())});
  plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table,
           TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k}), stream);
  plan.top_blocks(v.context_lens, block, bv, wv, stream);
  test::gpu_session().synchronize();
  std::vector<float> logits(static_cast<std::size_t>(rows) * plan.width());
  driver::check(driver::api().cuMemcpyDtoH(logits.data(), reinterpret_cast<CUdeviceptr>(plan.logits(batch).data),
                                           logits.size() * sizeof(float)),
                "cuMemcpyDtoH");
  std::vector<std::int64_t> row_lengths;
  for (int r = 0; r < rows; ++r) row_lengths.push_back(lc.lengths[r / pc.next_n] - pc.next_n + r % pc.next_n + 1);
  REQUIRE(blocks.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k_blocks) ==
          ref::top_blocks(logits, plan.width(), plan.width(), row_lengths, block, k_blocks, true));
  // A second-level plan's logits are its candidates': refused before any launch.
  DecodePlanConfig second = pc;
  second.candidates = 64;
  const DecodePlan sparse(second);
  CHECK_THROWS_WITH(sparse.top_blocks(v.context_lens, block, bv, wv, stream),
                    test::Contains("DecodePlan::top_blocks: the plan has config.candidates = 64"));
}
