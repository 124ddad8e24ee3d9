// GPU tests of topk_merge (decode context parallel, dcp.hpp) against reference::topk_merge: candidate
// lists with ties, signed zeros, infinities, NaN and -1 padding, in every values dtype, with the rank's
// own share (options.owned) against reference::dcp_owned; and the DCP flow end to end: each rank's
// shard of whole rows selected by topk() on the GPU, the columns mapped to global positions, merged,
// equal index for index to topk() over the whole rows.
#include "catch_compat.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <random>

#include "flash_indexer/dcp.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "flash_indexer/topk_merge.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;
namespace ref = flash_indexer::reference;

namespace {

std::size_t bytes_of(LogitsDType t) { return dtype_size(tensor_dtype(t)); }

void require_same_floats(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("slot " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]));
  }
}

}  // namespace

TEST_CASE("gpu: topk_merge equals reference::topk_merge on adversarial candidate lists", "[gpu][topk][merge]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  struct Shape {
    int lists, rows, k_in, k;
  };
  const Shape shapes[] = {{1, 3, 5, 3},       {2, 5, 64, 64},      {2, 4, 2048, 2048}, {4, 33, 7, 16},
                          {8, 6, 300, 2048},  {16, 2, 2048, 2048}, {3, 9, 100, 1},     {5, 1, 1, 7},
                          {2, 4, 4096, 4096}, {16, 2, 4096, 4096}, {4, 3, 1000, 3000}};
  for (const LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
    for (const Shape& s : shapes) {
      INFO("values " << static_cast<int>(dtype) << " D " << s.lists << " rows " << s.rows << " k_in " << s.k_in << " k " << s.k);
      const std::size_t n = static_cast<std::size_t>(s.lists) * s.rows * s.k_in;
      std::vector<unsigned char> bytes(n * bytes_of(dtype));
      std::vector<float> values(n);
      std::vector<std::int32_t> positions(n);
      for (int r = 0; r < s.rows; ++r) {
        // Distinct positions per row, from a range three times the candidates; some slots padding.
        std::vector<std::int32_t> pool(static_cast<std::size_t>(3 * s.lists * s.k_in));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        for (int d = 0; d < s.lists; ++d)
          for (int i = 0; i < s.k_in; ++i) {
            const std::size_t at = (static_cast<std::size_t>(d) * s.rows + r) * s.k_in + i;
            const bool padding = rng() % 8 == 0;
            positions[at] = padding ? -1 : pool[static_cast<std::size_t>(d) * s.k_in + i];
            const float x = padding ? -std::numeric_limits<float>::infinity() : test::adversarial_score(rng);
            test::store_score(dtype, bytes, at, x);
            values[at] = ref::load_logit(dtype, bytes.data(), at);
          }
      }
      const DcpLayout layout{s.lists, static_cast<int>(rng() % s.lists), rng() % 2 ? 64 : 1};
      const ref::TopkResult want = ref::topk_merge(values, positions, s.lists, s.rows, s.k_in, s.k, true);
      const std::vector<std::int32_t> want_owned = ref::dcp_owned(want.indices, s.rows, s.k, layout);

      const ck::DeviceBuffer dv = ck::DeviceBuffer::from(bytes), dp = ck::DeviceBuffer::from(positions);
      const std::size_t out = static_cast<std::size_t>(s.rows) * s.k;
      ck::DeviceBuffer di(out * 4), dval(out * 4), downed(out * 4);
      for (const bool pdl : {false, true}) {
        INFO((pdl ? "pdl" : "no pdl"));
        di.fill(0x7d);
        dval.fill(0x7d);
        downed.fill(0x7d);
        TopkMergeOptions o;
        o.values = TensorView::contiguous(dval.data(), DType::f32, {s.rows, s.k});
        o.owned = TensorView::contiguous(downed.data(), DType::i32, {s.rows, s.k});
        o.layout = layout;
        o.pdl = pdl;
        topk_merge(TensorView::contiguous(dv.data(), tensor_dtype(dtype), {s.lists, s.rows, s.k_in}),
                   TensorView::contiguous(dp.data(), DType::i32, {s.lists, s.rows, s.k_in}),
                   TensorView::contiguous(di.data(), DType::i32, {s.rows, s.k}), test::gpu_session().stream(), o);
        test::gpu_session().synchronize();
        REQUIRE(di.to_host<std::int32_t>(out) == want.indices);
        require_same_floats(dval.to_host<float>(out), want.values);
        REQUIRE(downed.to_host<std::int32_t>(out) == want_owned);
      }
    }
}

TEST_CASE("gpu: DCP top-k (each rank's shard selected, then merged) equals topk over the whole rows", "[gpu][topk][merge]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  for (const LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16})
    for (const int ranks : {2, 4})
      for (const int interleave : {1, 64})
        for (const int k : {64, 2048, 4096}) {
          INFO("dtype " << static_cast<int>(dtype) << " D " << ranks << " I " << interleave << " k " << k);
          // Whole rows: global lengths 0, below D * I, around k, and long.
          const std::vector<std::int64_t> lengths = {0, 1, ranks * interleave - 1, k - 1, k + 1, 3 * k + 17, 40000, 65536};
          const int rows = static_cast<int>(lengths.size());
          const std::int64_t width = 65536;
          std::vector<unsigned char> whole(static_cast<std::size_t>(rows) * width * bytes_of(dtype));
          for (std::size_t i = 0; i < static_cast<std::size_t>(rows) * width; ++i)
            test::store_score(dtype, whole, i, test::adversarial_score(rng));
          auto row_view = [&](const ck::DeviceBuffer& b, std::int64_t w) {
            return TensorView::contiguous(b.data(), tensor_dtype(dtype), {rows, w});
          };
          ck::DeviceBuffer workspace(topk_workspace_bytes(rows));
          const TensorView ws =
              TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});
          // The single-GPU top-k of the whole rows.
          std::vector<std::int32_t> whole_lengths(lengths.begin(), lengths.end());
          const ck::DeviceBuffer dwhole = ck::DeviceBuffer::from(whole), dlens = ck::DeviceBuffer::from(whole_lengths);
          ck::DeviceBuffer expected(static_cast<std::size_t>(rows) * k * 4);
          expected.fill(0x7d);
          topk(row_view(dwhole, width), TensorView::contiguous(dlens.data(), DType::i32, {rows}),
               TensorView::contiguous(expected.data(), DType::i32, {rows, k}), ws, stream, {});
          // Each rank: its shard's local columns, topk() with values, columns mapped to positions.
          std::vector<float> cand_values;
          std::vector<std::int32_t> cand_positions;
          for (int r = 0; r < ranks; ++r) {
            const DcpLayout l{ranks, r, interleave};
            const std::int64_t local_width = dcp_local_length(width, l);
            std::vector<unsigned char> shard(static_cast<std::size_t>(rows) * local_width * bytes_of(dtype));
            std::vector<std::int32_t> local_lengths;
            for (int row = 0; row < rows; ++row) {
              local_lengths.push_back(static_cast<std::int32_t>(dcp_local_length(lengths[row], l)));
              for (std::int64_t c = 0; c < local_width; ++c)
                std::memcpy(shard.data() + (row * local_width + c) * bytes_of(dtype),
                            whole.data() + (row * width + dcp_global_position(c, l)) * bytes_of(dtype), bytes_of(dtype));
            }
            const ck::DeviceBuffer dshard = ck::DeviceBuffer::from(shard), dll = ck::DeviceBuffer::from(local_lengths);
            ck::DeviceBuffer li(static_cast<std::size_t>(rows) * k * 4), lv(static_cast<std::size_t>(rows) * k * 4);
            TopkOptions to;
            to.values = TensorView::contiguous(lv.data(), DType::f32, {rows, k});
            topk(row_view(dshard, local_width), TensorView::contiguous(dll.data(), DType::i32, {rows}),
                 TensorView::contiguous(li.data(), DType::i32, {rows, k}), ws, stream, to);
            test::gpu_session().synchronize();
            for (const std::int32_t c : li.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k))
              cand_positions.push_back(c < 0 ? -1 : static_cast<std::int32_t>(dcp_global_position(c, l)));
            for (const float v : lv.to_host<float>(static_cast<std::size_t>(rows) * k)) cand_values.push_back(v);
          }
          const ck::DeviceBuffer dcv = ck::DeviceBuffer::from(cand_values), dcp = ck::DeviceBuffer::from(cand_positions);
          ck::DeviceBuffer merged(static_cast<std::size_t>(rows) * k * 4);
          merged.fill(0x7d);
          topk_merge(TensorView::contiguous(dcv.data(), DType::f32, {ranks, rows, k}),
                     TensorView::contiguous(dcp.data(), DType::i32, {ranks, rows, k}),
                     TensorView::contiguous(merged.data(), DType::i32, {rows, k}), stream, {});
          test::gpu_session().synchronize();
          const auto got = merged.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k);
          REQUIRE(got == expected.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k));
          // And the reference over the whole rows.
          std::vector<float> whole_values(static_cast<std::size_t>(rows) * width);
          for (std::size_t i = 0; i < whole_values.size(); ++i) whole_values[i] = ref::load_logit(dtype, whole.data(), i);
          REQUIRE(got == ref::topk(whole_values, width, width, lengths, k, true).indices);
        }
}
