// GPU tests of the top-k selector against the CPU reference: every dtype x k x histogram x sorted, with
// the adversarial rows of contract §4's edge cases (lengths 0, 1, k-1, k, k+1, 65 537, a 100K single-bin row, ties,
// +-inf, NaN, signed zeros, unit bins) and random distributions; stale histograms; 20 runs with
// identical bytes; the decode forms of the lengths; logits kernel -> top-k end to end; CUDA graphs.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "logits_check.hpp"
#include "parallel_reference.hpp"
#include "test_support.hpp"
#include "topk_check.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

void require_pass(const ck::TopkComparison& r) {
  INFO(r.failure);
  CHECK(r.selected > 0);
  REQUIRE(r.passed);
}

// The adversarial rows plus random rows of each distribution at random lengths.
std::vector<ck::RowSpec> test_rows(int k, std::mt19937_64& rng) {
  std::vector<ck::RowSpec> rows = ck::adversarial_rows(k);
  std::uniform_int_distribution<std::int64_t> length(0, 40000);
  for (ck::RowKind kind : {ck::RowKind::normal, ck::RowKind::heavy_tailed, ck::RowKind::relu, ck::RowKind::unit_bins})
    rows.push_back({kind, length(rng)});
  std::shuffle(rows.begin(), rows.end(), rng);
  return rows;
}

void run_configuration(LogitsDType dtype, int k, bool histogram, bool sorted) {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  ck::TopkCase c;
  c.dtype = dtype;
  c.k = k;
  c.sorted = sorted;
  c.values = !sorted || k != 7;  // once without the values output
  c.histogram = histogram ? ck::HistogramMode::exact : ck::HistogramMode::none;
  c.rows = test_rows(k, rng);
  c.aligned_rows = k >= 512;  // vector loads; k 1 and 7 keep rows that start off 16 bytes
  // Unsorted: 20 launches, every split four times (16: the resident form in a non-portable cluster), all
  // with the same bytes. Sorted: the two extremes.
  c.runs = sorted ? 2 : 20;
  c.splits = sorted ? std::vector<int>{16, 1} : std::vector<int>{1, 2, 4, 8, 16};
  c.seed = rng();
  require_pass(ck::run_topk_case(test::gpu_session(), c));
  if (!histogram) return;
  // Histograms that do not describe these logits: the answer stays exact (the row falls back), whichever
  // the split.
  int split = 1;
  for (ck::HistogramMode mode :
       {ck::HistogramMode::doubled, ck::HistogramMode::zeroed, ck::HistogramMode::other_data, ck::HistogramMode::random}) {
    c.histogram = mode;
    c.rows = test_rows(k, rng);
    c.runs = 1;
    c.splits = {split};
    split *= 2;
    c.seed = rng();
    require_pass(ck::run_topk_case(test::gpu_session(), c));
  }
}

const bool registered = [] {
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
    for (int k : {1, 7, 512, 1024, 2048, 3000, 4096})
      for (bool histogram : {false, true})
        for (bool sorted : {false, true})
          test::register_test(fmt::format("gpu topk in-{} k{} hist{} {}", logits_name(dtype), k, histogram ? 1 : 0,
                                          sorted ? "sorted" : "unsorted"),
                              "[gpu][topk]", [=] { run_configuration(dtype, k, histogram, sorted); });
  return true;
}();

}  // namespace

// The register selector (FP32 rows of at most 16K on one CTA: 512 threads to 8K, 1024 to 16K) on its
// own widths: every adversarial row clamped to the width, random rows of each distribution, and rows
// whose threshold bin takes one digit round (randn), ties inside it (rounded randn), or narrows to a
// single key whose lowest columns win (one-bin, relu's zeros, all equal); windows too. Identical bytes
// over the runs.
TEST_CASE("gpu: top-k of FP32 rows on one CTA (the register selector) at its widths", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (std::int64_t width : {8192, 16384, 3001}) {
    for (int k : {1, 7, 512, 2048, 4096}) {
      for (bool windows : {false, true}) {
        ck::TopkCase c;
        c.dtype = LogitsDType::f32;
        c.k = k;
        c.width = width;
        c.sorted = windows;
        c.values = !windows || k != 7;
        c.rows = ck::adversarial_rows(k);  // longer lengths clamp to the width
        std::uniform_int_distribution<std::int64_t> length(0, width);
        for (ck::RowKind kind : {ck::RowKind::normal, ck::RowKind::rounded_normal, ck::RowKind::relu, ck::RowKind::heavy_tailed,
                                 ck::RowKind::unit_bins, ck::RowKind::one_bin, ck::RowKind::all_equal})
          for (int i = 0; i < 4; ++i) c.rows.push_back({kind, i < 2 ? width : length(rng)});
        std::shuffle(c.rows.begin(), c.rows.end(), rng);
        c.aligned_rows = k >= 512;
        if (windows) {
          c.relative = k == 512;
          for (std::size_t i = 0; i < c.rows.size(); ++i) {
            const std::int64_t end = std::clamp<std::int64_t>(c.rows[i].length, 0, width);
            std::uniform_int_distribution<std::int64_t> inside(0, end);
            const std::int64_t choice[] = {0, -5, end + 3, 1, 13, inside(rng), inside(rng) | 1};
            c.starts.push_back(static_cast<std::int32_t>(choice[i % 7]));
          }
        }
        c.runs = 3;
        c.splits = {1};
        c.seed = rng();
        INFO(ck::describe(c));
        require_pass(ck::run_topk_case(test::gpu_session(), c));
      }
    }
  }
}

// Long rows, as a decode step makes them: every split (and the automatic one) on the same rows, with
// row starts on and off 16 bytes, resident and streamed segments, and rows selected from a sampled cutoff
// (including a regular row that can mislead the sample, which must then fall back).
TEST_CASE("gpu: top-k over long rows gives the same exact bytes with every split", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
    for (bool histogram : {false, true}) {
      for (bool aligned : {true, false}) {
        ck::TopkCase c;
        c.dtype = dtype;
        c.k = aligned ? 2048 : 4096;
        c.histogram = histogram ? ck::HistogramMode::exact : ck::HistogramMode::none;
        c.rows = {{ck::RowKind::relu, 131072},
                  {ck::RowKind::normal, 262144},
                  {ck::RowKind::heavy_tailed, static_cast<std::int64_t>(rng() % 262144)},
                  {ck::RowKind::relu, 65536 + 13},
                  {ck::RowKind::unit_bins, 8191},
                  {ck::RowKind::normal, 2049},
                  {ck::RowKind::strided_spikes, 131072}};
        c.aligned_rows = aligned;
        c.width = 262144;  // 16K FP32 per CTA at split 16, the most a cluster of 16 holds
        c.splits = {0, 1, 2, 4, 8, 16};
        c.seed = rng();
        INFO(ck::describe(c));
        require_pass(ck::run_topk_case(test::gpu_session(), c));
      }
    }
  }
}

// A row sampled by a cluster whose last CTA's segment ends below 64K columns while the others pass
// it: every CTA must still reach the same cutoff (the sample's size comes from the row).
TEST_CASE("gpu: top-k over sampled rows whose last segment is shorter, in clusters of 4", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16}) {
    ck::TopkCase c;
    c.dtype = dtype;
    c.k = dtype == LogitsDType::f32 ? 2048 : 4096;
    c.rows = {{ck::RowKind::normal, 262148}, {ck::RowKind::relu, 262148}, {ck::RowKind::heavy_tailed, 262148}};
    c.width = 262148;
    c.splits = {4};
    c.seed = rng();
    INFO(ck::describe(c));
    require_pass(ck::run_topk_case(test::gpu_session(), c));
  }
}

// Segments past the filter selector's bitmaps (256K columns per CTA) stream through the split
// selector: a forced split of 1 over rows of 300K columns, with and without a histogram.
TEST_CASE("gpu: top-k over rows longer than the filter selector holds per CTA", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16}) {
    for (bool histogram : {false, true}) {
      for (int k : {2048, 4096}) {  // 4096: the selected columns past the 2048 of two CTAs per SM
        ck::TopkCase c;
        c.dtype = dtype;
        c.k = k;
        c.histogram = histogram ? ck::HistogramMode::exact : ck::HistogramMode::none;
        c.rows = {{ck::RowKind::relu, 300000}, {ck::RowKind::normal, 262144 + 7}, {ck::RowKind::heavy_tailed, 100000}};
        c.splits = {1};
        c.seed = rng();
        INFO(ck::describe(c));
        require_pass(ck::run_topk_case(test::gpu_session(), c));
      }
    }
  }
}

// A given histogram whose threshold bin holds tens of thousands of a long row's columns (scores past
// +-223) is set aside: the streamed selectors (filter up to 256K per CTA, split beyond) select the row
// as without a histogram, report 3, and give the same bytes. A one-bin row (a bin too coarse as well)
// and a normal row (a histogram worth using: 1) beside them.
TEST_CASE("gpu: top-k with a histogram too coarse to select from takes the no-histogram path", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16}) {
    for (std::int64_t length : {std::int64_t{300000}, std::int64_t{200000}}) {  // split selector, filter selector
      for (int k : {512, 2048}) {
        ck::TopkCase c;
        c.dtype = dtype;
        c.k = k;
        c.histogram = ck::HistogramMode::exact;
        c.rows = {{ck::RowKind::saturated, length},
                  {ck::RowKind::normal, length},
                  {ck::RowKind::saturated, length - 5},
                  {ck::RowKind::one_bin, length}};
        c.aligned_rows = true;  // the split selector samples 16-byte aligned rows only
        c.splits = {1};
        c.seed = rng();
        INFO(ck::describe(c));
        const ck::TopkComparison r = ck::run_topk_case(test::gpu_session(), c);
        require_pass(r);
        REQUIRE(r.reports.size() == c.rows.size());
        CHECK(r.reports[0].histogram_use == 3);
        CHECK(r.reports[1].histogram_use == 1);
        CHECK(r.reports[2].histogram_use == 3);
        CHECK(r.reports[3].histogram_use == 3);
      }
    }
  }
}

// The wide resident form holds 64K FP16 logits per CTA: a row of 65536 equal ones ties in every column, a
// count past 16 bits in the output scan.
TEST_CASE("gpu: top-k of FP16 rows of 65536 equal logits on one wide CTA", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (int k : {2048, 4096}) {
    ck::TopkCase c;
    c.dtype = LogitsDType::f16;
    c.k = k;
    c.rows = {{ck::RowKind::all_equal, 65536}, {ck::RowKind::all_equal, 65535}, {ck::RowKind::normal, 65536}};
    c.width = 65536;
    c.splits = {1};
    c.seed = rng();
    INFO(ck::describe(c));
    require_pass(ck::run_topk_case(test::gpu_session(), c));
  }
}

TEST_CASE("gpu: top-k with decode-form lengths ([B] with the MTP rule, and [B, next_n])", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (int next_n : {1, 2, 4}) {
    for (bool two_d : {false, true}) {
      ck::TopkCase c;
      c.dtype = LogitsDType::f16;
      c.k = 512;
      c.next_n = two_d ? next_n : next_n;
      c.lengths_2d = two_d;
      c.request_lengths = {0, 1, 3, 600, 513, 20000, static_cast<std::int32_t>(rng() % 30000)};
      for (std::int32_t len : c.request_lengths)
        for (int j = 0; j < next_n; ++j) c.rows.push_back({ck::RowKind::relu, std::int64_t{len} - next_n + j + 1});
      if (two_d) {  // [B, next_n] holds the row lengths themselves
        c.request_lengths.clear();
        for (const auto& row : c.rows) c.request_lengths.push_back(static_cast<std::int32_t>(row.length));
      }
      c.seed = rng();
      INFO("next_n " << next_n << (two_d ? " 2-D" : " 1-D"));
      require_pass(ck::run_topk_case(test::gpu_session(), c));
    }
  }
}

TEST_CASE("gpu: top-k over prefill windows (row_starts), absolute and relative indices", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16}) {
    for (int k : {7, 2048}) {
      for (bool relative : {false, true}) {
        ck::TopkCase c;
        c.dtype = dtype;
        c.k = k;
        c.sorted = relative;  // both orders
        c.relative = relative;
        c.rows = test_rows(k, rng);
        c.aligned_rows = k >= 512;
        // Window starts of every kind: 0, negative, past the row, at its end, odd, random inside.
        for (std::size_t i = 0; i < c.rows.size(); ++i) {
          const std::int64_t length = std::clamp<std::int64_t>(c.rows[i].length, 0, 1 << 20);
          std::uniform_int_distribution<std::int64_t> inside(0, length);
          const std::int64_t choice[] = {0, -5, length + 3, length, 1, 13, inside(rng), inside(rng) | 1};
          c.starts.push_back(static_cast<std::int32_t>(choice[i % 8]));
        }
        c.runs = 8;
        c.splits = {1, 2, 4, 8};  // the streaming selector, the resident one and its wide form
        c.seed = rng();
        INFO(ck::describe(c));
        require_pass(ck::run_topk_case(test::gpu_session(), c));
      }
    }
  }
}

TEST_CASE("gpu: top-k over many short rows (grid of 5000 rows)", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  ck::TopkCase c;
  c.dtype = LogitsDType::bf16;
  c.k = 64;
  for (int i = 0; i < 5000; ++i) c.rows.push_back({ck::RowKind::relu, static_cast<std::int64_t>(rng() % 700)});
  c.histogram = ck::HistogramMode::exact;
  c.seed = rng();
  require_pass(ck::run_topk_case(test::gpu_session(), c));
}

// Logits kernel with the fused histogram, then the selector with that histogram: the indices equal the
// reference top-k of the reference logits rounded to the logits dtype (exact-arithmetic inputs make the
// GPU logits equal to the reference bit for bit), and every row uses the histogram as given.
TEST_CASE("gpu: logits + histogram -> top-k end to end equals the reference", "[gpu][topk]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
    for (int next_n : {1, 3}) {
      for (int k : {7, 512, 2048}) {
        ck::LogitsCase lc;
        lc.config = {next_n, 64, 128, 64, true, dtype, {}};
        lc.lens_2d = false;
        lc.lengths = {static_cast<int>(rng() % 9000) + 3000, 2100, 10, 0, static_cast<int>(rng() % 20000)};
        lc.exact_values = true;
        lc.nan_weight_row = 1;
        lc.seed = rng();
        INFO("logits " << ck::describe(lc) << " k " << k);
        const ck::HostInputs in = ck::make_inputs(lc);
        ck::DeviceInputs d = ck::upload(in, lc);
        const ck::LogitsViews v = ck::views(d, in, lc);
        const std::int64_t rows = static_cast<std::int64_t>(in.batch) * next_n;
        ck::DeviceBuffer hist(static_cast<std::size_t>(rows) * kCoarseBins * 4);
        hist.fill(0);
        d.logits.fill(ck::kPoison);
        PagedMqaLogitsOptions lo;
        lo.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows, kCoarseBins});
        paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, test::gpu_session().stream(), lo);

        ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * k * 4), workspace(topk_workspace_bytes(rows));
        indices.fill(ck::kPoison);
        TopkOptions to;
        to.histogram = lo.histogram;
        to.next_n = next_n;
        to.sorted = true;
        topk(v.logits, v.context_lens, TensorView::contiguous(indices.data(), DType::i32, {rows, k}),
             TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())}),
             test::gpu_session().stream(), to);
        test::gpu_session().synchronize();

        const auto ref_view = in.reference_view(lc);
        const std::vector<double> ref = ck::paged_mqa_logits_reference(ref_view);
        std::vector<float> rounded(ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) rounded[i] = reference::round_to(dtype, static_cast<float>(ref[i]));
        std::vector<std::int64_t> lengths;
        for (std::int64_t r = 0; r < rows; ++r)
          lengths.push_back(reference::row_length(ref_view, static_cast<int>(r / next_n), static_cast<int>(r % next_n)));
        const auto want = reference::topk(rounded, in.width, in.width, lengths, k, true);
        const auto got = indices.to_host<std::int32_t>(want.indices.size());
        CHECK(got == want.indices);
        const auto reports = workspace.to_host<TopkRowReport>(static_cast<std::size_t>(rows));
        // Used (1), not read by the resident selector (0), or too coarse to select from (3); never found
        // not to add up (2).
        for (const auto& rep : reports) CHECK((rep.histogram_use == 1 || rep.histogram_use == 0 || rep.histogram_use == 3));
      }
    }
  }
}

TEST_CASE("gpu: a captured top-k replays correctly with new logits and lengths", "[gpu][topk]") {
  test::require_gpu();
  const auto& cu = driver::api();
  std::mt19937_64 rng(test::fresh_seed());
  const std::int64_t rows = 6, width = 70000, k = 2048;
  ck::DeviceBuffer logits(rows * width * 4), lengths(rows * 4), indices(rows * k * 4), workspace(topk_workspace_bytes(rows));
  const TensorView lv = TensorView::contiguous(logits.data(), DType::f32, {rows, width});
  const TensorView nv = TensorView::contiguous(lengths.data(), DType::i32, {rows});
  const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, k});
  const TensorView wv = TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});
  TopkOptions options;
  options.sorted = true;
  CUstream stream = test::gpu_session().stream();
  logits.fill(0);
  lengths.fill(0);
  topk(lv, nv, iv, wv, stream, options);  // loads the kernel outside the capture
  test::gpu_session().synchronize();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  topk(lv, nv, iv, wv, stream, options);
  FI_CU(cuStreamEndCapture, "test", stream, &graph);
  FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);
  std::normal_distribution<float> normal;
  for (int replay = 0; replay < 3; ++replay) {
    std::vector<float> host(rows * width);
    for (auto& x : host) x = normal(rng);
    std::vector<std::int32_t> lens(rows);
    std::vector<std::int64_t> lens64;
    for (auto& l : lens) {
      l = static_cast<std::int32_t>(rng() % (width + 1));
      lens64.push_back(l);
    }
    logits.upload(host.data(), host.size() * 4);
    lengths.upload(lens.data(), lens.size() * 4);
    indices.fill(0x7d);
    FI_CU(cuGraphLaunch, "test", exec, stream);
    test::gpu_session().synchronize();
    const auto want = reference::topk(host, width, width, lens64, static_cast<int>(k), true);
    CHECK(indices.to_host<std::int32_t>(want.indices.size()) == want.indices);
  }
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
}
