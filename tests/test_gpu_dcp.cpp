// GPU tests of the DCP layout in paged_mqa_logits and topk (options.dcp): given the global
// lengths and a rank's shard, each op must give exactly what it gives without the layout when the caller
// rewrites the lengths itself (each row's dcp_local_length, as 2-D lengths) and, for topk, maps the
// local columns to global positions: the logits and histograms byte for byte, the indices index for
// index. The paths without the layout are tested against the reference elsewhere.
#include "catch_compat.hpp"

#include <random>

#include "flash_indexer/dcp.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

// Row b * next_n + j's local length: the MTP rule on the global length, then the rank's share.
std::vector<std::int32_t> local_lengths(const std::vector<int>& global, int next_n, const DcpLayout& l) {
  std::vector<std::int32_t> out;
  for (int len : global)
    for (int j = 0; j < next_n; ++j)
      out.push_back(static_cast<std::int32_t>(dcp_local_length(std::max(len - next_n + j + 1, 0), l)));
  return out;
}

}  // namespace

TEST_CASE("gpu: paged_mqa_logits with a DCP layout equals it with the local lengths given", "[gpu][logits][dcp]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  for (const PagedMqaLogitsVariant variant : {PagedMqaLogitsVariant::automatic, PagedMqaLogitsVariant::portable})
    for (const int next_n : {1, 2})
      for (const DcpLayout layout : {DcpLayout{2, 1, 1}, DcpLayout{2, 0, 64}, DcpLayout{4, 3, 64}, DcpLayout{4, 2, 1}}) {
        ck::LogitsCase lc;
        lc.config = {next_n, 64, 128, 64, true, LogitsDType::f16, {}};
        lc.config.variant = variant;
        lc.lengths = {0, 1, layout.ranks * layout.interleave - 1, 5000, 20000, 129};
        lc.lens_2d = false;
        lc.fill_masked = true;
        lc.seed = rng();
        INFO(ck::describe(lc) << " D " << layout.ranks << " r " << layout.rank << " I " << layout.interleave);
        const ck::HostInputs in = ck::make_inputs(lc);
        ck::DeviceInputs d = ck::upload(in, lc);
        const ck::LogitsViews v = ck::views(d, in, lc);
        const std::int64_t rows = static_cast<std::int64_t>(in.batch) * next_n;
        const std::vector<std::int32_t> local = local_lengths(lc.lengths, next_n, layout);
        const ck::DeviceBuffer local_lens = ck::DeviceBuffer::from(local);
        ck::DeviceBuffer hist_a(static_cast<std::size_t>(rows) * kCoarseBins * 4), hist_b(hist_a.bytes());
        ck::DeviceBuffer logits_b(d.logits.bytes());
        std::vector<std::uint8_t> got[2];
        std::vector<std::int32_t> hist[2];
        for (int run = 0; run < 2; ++run) {
          ck::DeviceBuffer& logits = run == 0 ? d.logits : logits_b;
          ck::DeviceBuffer& h = run == 0 ? hist_a : hist_b;
          logits.fill(ck::kPoison);
          h.fill(0);
          TensorView out = v.logits;
          out.data = logits.data();
          PagedMqaLogitsOptions o;
          o.variant = variant;
          o.fill_masked = true;
          o.histogram = TensorView::contiguous(h.data(), DType::i32, {rows, kCoarseBins});
          TensorView lens = v.context_lens;
          if (run == 0) o.dcp = layout;  // global lengths
          else lens = TensorView::contiguous(local_lens.data(), DType::i32, {in.batch, next_n});
          paged_mqa_logits(v.q, v.kv_cache, v.weights, lens, v.block_table, out, stream, o);
          test::gpu_session().synchronize();
          got[run] = logits.to_host<std::uint8_t>(logits.bytes());
          hist[run] = h.to_host<std::int32_t>(static_cast<std::size_t>(rows) * kCoarseBins);
        }
        REQUIRE(got[0] == got[1]);
        REQUIRE(hist[0] == hist[1]);
      }
}

TEST_CASE("gpu: topk with a DCP layout equals it on the local lengths, columns mapped to positions", "[gpu][topk][dcp]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  for (const LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16})
    for (const std::int64_t width : {std::int64_t{6000}, std::int64_t{70000}, std::int64_t{300000}})
      for (const int next_n : {1, 2})
        for (const DcpLayout layout : {DcpLayout{2, 1, 1}, DcpLayout{4, 2, 64}}) {
          INFO("dtype " << static_cast<int>(dtype) << " local width " << width << " next_n " << next_n << " D " << layout.ranks
                        << " r " << layout.rank << " I " << layout.interleave);
          const int batch = 4, k = 2048;
          const std::int64_t rows = batch * next_n;
          const std::int64_t global_width = width * layout.ranks;  // longer rows clamp to the local width
          std::vector<int> global = {0, static_cast<int>(global_width / 3), static_cast<int>(global_width),
                                     static_cast<int>(global_width + 100)};
          const std::size_t bytes = static_cast<std::size_t>(rows * width) * dtype_size(tensor_dtype(dtype));
          std::vector<std::uint8_t> logits(bytes);
          std::normal_distribution<float> normal;
          for (std::int64_t i = 0; i < rows * width; ++i) {
            const float x = std::round(normal(rng) * 64) / 64;  // ties
            if (dtype == LogitsDType::f32) std::memcpy(logits.data() + 4 * i, &x, 4);
            else {
              const std::uint16_t h = float_to_f16_bits(x);
              std::memcpy(logits.data() + 2 * i, &h, 2);
            }
          }
          const ck::DeviceBuffer dl = ck::DeviceBuffer::from(logits);
          std::vector<std::int32_t> global32(global.begin(), global.end());
          const ck::DeviceBuffer dg = ck::DeviceBuffer::from(global32),
                                 dlocal = ck::DeviceBuffer::from(local_lengths(global, next_n, layout));
          ck::DeviceBuffer workspace(topk_workspace_bytes(rows)), ia(static_cast<std::size_t>(rows) * k * 4), ib(ia.bytes());
          const TensorView lv = TensorView::contiguous(dl.data(), tensor_dtype(dtype), {rows, width});
          const TensorView ws =
              TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});
          ia.fill(0x7d);
          ib.fill(0x7d);
          TopkOptions a;
          a.next_n = next_n;  // global lengths per request, the MTP rule
          a.dcp = layout;
          topk(lv, TensorView::contiguous(dg.data(), DType::i32, {batch}),
               TensorView::contiguous(ia.data(), DType::i32, {rows, k}), ws, stream, a);
          topk(lv, TensorView::contiguous(dlocal.data(), DType::i32, {rows}),
               TensorView::contiguous(ib.data(), DType::i32, {rows, k}), ws, stream, {});
          test::gpu_session().synchronize();
          std::vector<std::int32_t> want = ib.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k);
          for (auto& c : want)
            if (c >= 0) c = static_cast<std::int32_t>(dcp_global_position(static_cast<std::int64_t>(c), layout));
          REQUIRE(ia.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k) == want);
        }
}

TEST_CASE("gpu: DecodePlan with a DCP layout equals the plan on the local lengths, mapped to positions", "[gpu][plan][dcp]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  CUstream stream = test::gpu_session().stream();
  for (const int next_n : {1, 2})
    for (const DcpLayout layout : {DcpLayout{2, 1, 64}, DcpLayout{4, 0, 1}}) {
      const int batch = 3, k = 2048;
      const std::int64_t max_context = 90000;
      DecodePlanConfig dcp_config{batch, next_n, 64, 128, k, LogitsDType::f16, max_context, true, false, false};
      dcp_config.dcp = layout;
      DecodePlanConfig plain_config = dcp_config;
      plain_config.dcp = {};
      plain_config.max_context = dcp_local_length(max_context, layout);
      const DecodePlan dcp_plan(dcp_config), plain_plan(plain_config);
      REQUIRE(dcp_plan.width() == plain_plan.width());
      ck::LogitsCase lc;
      lc.config = {next_n, 64, 128, 64, true, LogitsDType::f16, {}};
      lc.lengths = {static_cast<int>(max_context), 0, 40000};
      lc.lens_2d = false;
      lc.seed = rng();
      INFO(ck::describe(lc) << " D " << layout.ranks << " r " << layout.rank << " I " << layout.interleave);
      const ck::HostInputs in = ck::make_inputs(lc);
      ck::DeviceInputs d = ck::upload(in, lc);
      const ck::LogitsViews v = ck::views(d, in, lc);
      const std::int64_t rows = static_cast<std::int64_t>(batch) * next_n;
      const ck::DeviceBuffer local = ck::DeviceBuffer::from(local_lengths(lc.lengths, next_n, layout));
      ck::DeviceBuffer ia(static_cast<std::size_t>(rows) * k * 4), ib(ia.bytes());
      ia.fill(0x7d);
      ib.fill(0x7d);
      dcp_plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table,
                   TensorView::contiguous(ia.data(), DType::i32, {rows, k}), stream);
      plain_plan.run(v.q, v.kv_cache, v.weights, TensorView::contiguous(local.data(), DType::i32, {batch, next_n}), v.block_table,
                     TensorView::contiguous(ib.data(), DType::i32, {rows, k}), stream);
      test::gpu_session().synchronize();
      std::vector<std::int32_t> want = ib.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k);
      for (auto& c : want)
        if (c >= 0) c = static_cast<std::int32_t>(dcp_global_position(static_cast<std::int64_t>(c), layout));
      REQUIRE(ia.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k) == want);
    }
}
