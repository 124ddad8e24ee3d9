// flash-indexer check and recall: the kernels on GPU 0 against the CPU reference.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "driver.hpp"
#include "kernel_registry.hpp"  // current_device_arch
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"
#include "prefill_check.hpp"
#include "recall.hpp"
#include "topk_check.hpp"

namespace flash_indexer::cli {
namespace {

// What one case's line shows: the values checked, two optional measures, the verdict.
struct CaseLine {
  long long checked = 0;
  std::string first, second;
  bool passed = false;
  std::string failure;
};

std::string three_digits(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

// A header, then one line per case (its failure under it); returns the cases that failed.
template <class Case, class Run>
int report_cases(const char* title, const char* checked, const char* first, const char* second, const std::vector<Case>& cases,
                 Run run) {
  std::printf("%-70s %8s %12s %12s %s\n", title, checked, first, second, "result");
  int failed = 0;
  for (const Case& c : cases) {
    const CaseLine r = run(c);
    std::printf("%-70s %8lld %12s %12s %s\n", fi::check::describe(c).c_str(), r.checked, r.first.c_str(), r.second.c_str(),
                r.passed ? "ok" : "FAIL");
    if (!r.passed) {
      std::printf("  %s\n", r.failure.c_str());
      ++failed;
    }
  }
  return failed;
}

}  // namespace

int cmd_check(const Args& args) {
  namespace ck = fi::check;
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "check needs a GPU: %s\n", why.c_str());
    return 1;
  }
  ck::GpuSession gpu;
  std::vector<ck::LogitsCase> cases;
  std::uint64_t seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  auto add = [&](int next_n, int heads, int dim, fi::LogitsDType out, std::vector<int> lens, bool lens_2d) {
    ck::LogitsCase c;
    c.config = {next_n, heads, dim, 64, false, out, {}};
    c.lengths = std::move(lens);
    c.lens_2d = lens_2d;
    c.seed = seed++;
    cases.push_back(std::move(c));
  };
  using L = fi::LogitsDType;
  add(1, 64, 128, L::f32, {0, 1, 63, 64, 65, 1000}, false);
  add(2, 64, 128, L::f16, {4096, 100, 0, 1, 777, 64, 65, 5}, true);
  add(4, 32, 128, L::bf16, {2000, 70}, false);
  add(2, 64, 128, L::f16, {3000, 2999, 10, 0}, true);
  cases.back().config.histogram = true;  // also checks the counts, doubling and bitwise-equal logits
  if (!args.has("--quick")) {
    add(3, 16, 64, L::f32, {130, 2, 900}, false);
    add(1, 64, 128, L::f16, std::vector<int>(8, 8192), false);
    add(2, 32, 128, L::bf16, {8000, 1, 64, 65}, true);
    add(1, 32, 64, L::bf16, {5000, 64, 1}, false);
    cases.back().config.histogram = true;
    add(3, 64, 128, L::f32, {9000, 100}, false);
    cases.back().config.histogram = true;
  }
  std::printf("flash-indexer check on %s (GPU 0)\n", gpu.device_name().c_str());
  int failed = report_cases("case", "logits", "diff", "worst/mag", cases, [&](const ck::LogitsCase& c) {
    const ck::Comparison r = ck::run_logits_case(gpu, c);
    return CaseLine{r.checked, three_digits(r.diff), three_digits(r.worst_error), r.passed, r.failure};
  });
  std::vector<ck::TopkCase> topk_cases;
  for (L dtype : {L::f32, L::f16, L::bf16}) {
    for (int k : {512, 2048}) {
      ck::TopkCase c;
      c.dtype = dtype;
      c.k = k;
      c.rows = ck::adversarial_rows(k);
      c.histogram = k == 2048 ? ck::HistogramMode::exact : ck::HistogramMode::none;
      c.sorted = k == 512;
      c.runs = 3;
      c.seed = seed++;
      if (!args.has("--quick") || (dtype == L::f16 && k == 2048)) topk_cases.push_back(std::move(c));
    }
  }
  // A batch of long rows, as a decode step at 128K makes them: streamed by the filter selector (two
  // CTAs per row), with the histogram and without (a sampled cutoff).
  for (L dtype : {L::f32, L::f16}) {
    for (bool histogram : {true, false}) {
      ck::TopkCase c;
      c.dtype = dtype;
      c.k = 2048;
      for (int i = 0; i < 64; ++i) c.rows.push_back({i % 2 != 0 ? ck::RowKind::relu : ck::RowKind::normal, 131072});
      c.histogram = histogram ? ck::HistogramMode::exact : ck::HistogramMode::none;
      c.runs = 2;
      c.seed = seed++;
      if (!args.has("--quick") || (dtype == L::f16 && histogram)) topk_cases.push_back(std::move(c));
    }
  }
  failed += report_cases("top-k case", "selected", "", "", topk_cases, [&](const ck::TopkCase& c) {
    const ck::TopkComparison r = ck::run_topk_case(gpu, c);
    return CaseLine{r.selected, "", "", r.passed, r.failure};
  });
  // Prefill logits: both kernels where the sm90 one applies, windows of every kind, exact inputs.
  std::vector<ck::PrefillCase> prefill_cases;
  fi::MqaLogitsConfig device_default;
  device_default.arch = fi::current_device_arch();
  const bool sm90 = device_default.resolved().variant == fi::MqaLogitsVariant::sm90;
  auto add_prefill = [&](int heads, int dim, L out, bool histogram, bool fill_masked, int tokens, int keys) {
    for (fi::MqaLogitsVariant v : {fi::MqaLogitsVariant::sm90, fi::MqaLogitsVariant::portable}) {
      if (v == fi::MqaLogitsVariant::sm90 && !sm90) continue;
      ck::PrefillCase c;
      c.config.heads = heads;
      c.config.head_dim = dim;
      c.config.histogram = histogram;
      c.config.logits = out;
      c.config.variant = v;
      c.tokens = tokens;
      c.keys = keys;
      c.fill_masked = fill_masked;
      c.seed = seed++;
      prefill_cases.push_back(c);
    }
  };
  add_prefill(64, 128, L::f16, true, false, 37, 700);
  if (!args.has("--quick")) {
    add_prefill(32, 64, L::bf16, false, true, 21, 3000);
    add_prefill(16, 128, L::f32, true, true, 9, 9000);
  }
  failed += report_cases("prefill case", "logits", "", "", prefill_cases, [&](const ck::PrefillCase& c) {
    const ck::PrefillComparison r = ck::run_prefill_case(gpu, c);
    return CaseLine{r.checked, "", "", r.passed, r.failure};
  });
  std::printf("%zu cases, %d failed\n", cases.size() + topk_cases.size() + prefill_cases.size(), failed);
  return failed == 0 ? 0 : 1;
}

int cmd_recall(const Args& args) {
  namespace ck = fi::check;
  ck::RecallOptions o;
  o.k = parse_k(args, o.k);
  o.heads = args.int_value("--heads", o.heads, 1);
  if (o.heads != 16 && o.heads != 32 && o.heads != 64)
    throw UsageError(fmt::format("--heads expects 16, 32 or 64, got {}", o.heads));
  o.rows = args.int_value("--rows", o.rows, 1);
  o.seed = static_cast<std::uint64_t>(args.int_value("--seed", 1, 0));
  if (auto l = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *l);
  bool mxfp4 = false;
  if (auto v = args.value("--kv")) {
    if (*v != "mxfp4") throw UsageError(fmt::format("--kv expects mxfp4, got '{}'", *v));
    if (o.heads == 16) throw UsageError("--kv mxfp4 expects --heads 32 or 64 (the MXFP4 cache's configurations)");
    mxfp4 = true;
  }
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "recall needs a GPU: %s\n", why.c_str());
    return 1;
  }
  ck::GpuSession gpu;
  std::printf("flash-indexer recall on %s: k = %d, H = %d, D = %d, %d rows per length, seed %llu\n", gpu.device_name().c_str(),
              o.k, o.heads, o.head_dim, o.rows, static_cast<unsigned long long>(o.seed));
  std::printf("%-8s %-6s %10s %10s %10s %14s %12s\n", "length", mxfp4 ? "cache" : "logits", "mean", "median", "worst",
              "changed/row", "max changed");
  for (const auto& s : mxfp4 ? ck::measure_mxfp4_recall(gpu, o) : ck::measure_recall(gpu, o))
    std::printf("%-8d %-6s %9.3f%% %9.3f%% %9.3f%% %14.2f %12d\n", s.length,
                s.kv == fi::KvFormat::mxfp4       ? "MXFP4"
                : s.dtype == fi::LogitsDType::f16 ? "FP16"
                                                  : "BF16",
                100 * s.mean, 100 * s.median, 100 * s.worst, s.mean_changed, s.max_changed);
  return 0;
}

}  // namespace flash_indexer::cli
