// flash-indexer bench logits | topk | decode | prefill.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "dcp_decode_bench.hpp"
#include "flash_indexer/model_presets.hpp"
#include "decode_bench.hpp"
#include "driver.hpp"
#include "flash_indexer/topk.hpp"
#include "gpu_timer.hpp"
#include "kernel_key.hpp"
#include "logits_bench.hpp"
#include "prefill_bench.hpp"
#include "topk_bench.hpp"
#include "topk_call.hpp"

namespace flash_indexer::cli {
namespace {

// GPU 0 and its measured read bandwidth, or nullopt (after saying why) without a GPU.
struct BenchGpu {
  fi::check::GpuSession gpu;
  double bandwidth = 0;
};
std::unique_ptr<BenchGpu> open_bench_gpu(const std::string& what) {
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "bench needs a GPU: %s\n", why.c_str());
    return nullptr;
  }
  auto b = std::make_unique<BenchGpu>();
  b->bandwidth = fi::bench::measure_read_bandwidth(b->gpu);
  std::printf("flash-indexer bench %s on %s: streaming read %.0f GB/s\n", what.c_str(), b->gpu.device_name().c_str(),
              b->bandwidth / 1e9);
  return b;
}

// The options bench logits and bench decode share: the decode shapes they sweep.
template <class Options>
void apply_shape_options(const Args& args, Options& o) {
  if (auto v = args.value("--batch")) o.batches = parse_int_list("--batch", *v);
  if (auto v = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *v);
  if (auto v = args.value("--next-n")) o.next_ns = parse_int_list("--next-n", *v);
  if (auto v = args.value("--heads")) o.heads = parse_int_list("--heads", *v);
  if (auto v = args.value("--hist")) o.histogram = parse_flags("--hist", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  if (auto v = args.value("--kv")) {
    o.kvs.clear();
    for (const std::string& name : split_list(*v)) {
      const auto kv = fi::kv_from_name(name);
      if (!kv) throw UsageError(fmt::format("--kv expects fp8 and/or mxfp4, got '{}'", name));
      o.kvs.push_back(*kv);
    }
  }
}

}  // namespace

int cmd_bench_topk(const Args& args) {
  namespace bn = fi::bench;
  bn::TopkBenchOptions o;
  if (auto v = args.value("--rows")) o.rows = parse_int_list("--rows", *v);
  if (auto v = args.value("--lengths")) o.lengths = parse_int_list("--lengths", *v);
  if (auto v = args.value("--k")) o.ks = parse_int_list("--k", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  if (auto v = args.value("--hist")) o.histogram = parse_flags("--hist", *v);
  if (auto v = args.value("--ragged")) o.ragged = parse_flags("--ragged", *v);
  if (auto v = args.value("--split")) o.splits = parse_int_list("--split", *v, 0);
  if (auto v = args.value("--input")) {
    o.inputs = split_list(*v);
    for (const std::string& name : o.inputs)
      if (name != "relu" && name != "randn") throw UsageError(fmt::format("--input expects relu and/or randn, got '{}'", name));
  }
  o.width = args.int_value("--width", 0, 0);
  for (int split : o.splits)
    if (split != 0 && split != 1 && split != 2 && split != 4 && split != 8 && split != 16)
      throw UsageError(fmt::format("--split expects 0, 1, 2, 4, 8 or 16, got {}", split));
  o.replays = args.int_value("--replays", o.replays, 1);
  for (int k : o.ks)
    if (k > fi::kMaxTopk) throw UsageError(fmt::format("--k expects values in 1..{}, got {}", fi::kMaxTopk, k));
  const auto bench_gpu = open_bench_gpu("topk");
  if (!bench_gpu) return 1;
  auto& gpu = bench_gpu->gpu;
  const double bandwidth = bench_gpu->bandwidth;
  {  // what the automatic split is chosen from: clusters that run at once, per kind of CTA
    const fi::TopkDevice d = fi::topk_device("bench topk", fi::LogitsDType::f32, nullptr);
    std::printf("clusters of 2/4/8/16 CTAs at once: %d/%d/%d/%d at two CTAs per SM, %d/%d/%d/%d at one (%d SMs)\n",
                d.clusters_two_per_sm[1], d.clusters_two_per_sm[2], d.clusters_two_per_sm[3], d.clusters_two_per_sm[4],
                d.clusters_one_per_sm[1], d.clusters_one_per_sm[2], d.clusters_one_per_sm[3], d.clusters_one_per_sm[4],
                d.multiprocessors);
  }
  std::printf("%5s %7s %7s %5s %5s %4s %4s %6s %5s %4s %9s %8s %6s %7s %6s\n", "rows", "L", "width", "input", "k", "in", "hist",
              "ragged", "split", "sel", "us", "GB/s", "BW%", "sampled", "passes");
  nlohmann::json json = nlohmann::json::array();
  bn::run_topk_bench(gpu, o, bandwidth, [&](const bn::TopkBenchRow& r) {
    std::printf("%5d %7d %7d %5s %5d %4s %4d %6d %5s %4s %9.2f %8.0f %5.1f%% %7d %6d\n", r.rows, r.length, r.width,
                r.input.c_str(), r.k, fi::logits_name(r.dtype), r.histogram ? 1 : 0, r.ragged ? 1 : 0, r.split_name.c_str(),
                r.selector.c_str(), r.us, r.gbps, 100 * r.bandwidth_fraction, r.sampled_rows, r.extra_pass_rows);
    std::fflush(stdout);
    json.push_back({{"rows", r.rows},
                    {"length", r.length},
                    {"width", r.width},
                    {"input", r.input},
                    {"k", r.k},
                    {"logits", fi::logits_name(r.dtype)},
                    {"histogram", r.histogram},
                    {"ragged", r.ragged},
                    {"split", r.split},
                    {"selector", r.selector},
                    {"us", r.us},
                    {"bytes", r.bytes},
                    {"gbps", r.gbps},
                    {"bandwidth_fraction", r.bandwidth_fraction},
                    {"read_bandwidth", bandwidth},
                    {"sampled_rows", r.sampled_rows},
                    {"extra_pass_rows", r.extra_pass_rows}});
  });
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

namespace {

// The JSON fields of a decode cell that both decode benchmarks write.
nlohmann::json shape_json(const fi::bench::DecodeShape& s, int k) {
  return {{"heads", s.heads},
          {"next_n", s.next_n},
          {"batch", s.batch},
          {"length", s.length},
          {"k", k},
          {"logits", fi::logits_name(s.dtype)},
          {"kv", fi::kv_name(s.kv)},
          {"histogram", s.histogram}};
}

int bench_dcp_decode(const fi::bench::DecodeBenchOptions& shapes, int ranks, int interleave, const Args& args) {
  namespace bn = fi::bench;
  bn::DcpDecodeBenchOptions o;
  o.shapes = shapes;
  o.ranks = ranks;
  o.interleave = interleave;
  const auto bench_gpu = open_bench_gpu("decode --dcp");
  if (!bench_gpu) return 1;
  const double bandwidth = bench_gpu->bandwidth;
  std::printf("%3s %3s %5s %7s %4s %4s %3s %4s %9s %9s %10s %9s %9s %6s\n", "H", "n", "B", "L", "out", "hist", "D", "I", "us",
              "local_us", "gather_us", "one_gpu", "kv_floor", "x_kv");
  nlohmann::json json = nlohmann::json::array();
  bn::run_dcp_decode_bench(o, bandwidth, [&](const bn::DcpDecodeBenchRow& r) {
    const bn::DecodeShape& s = r.shape;
    std::printf("%3d %3d %5d %7d %4s %4d %3d %4d %9.2f %9.2f %10.2f %9.2f %9.2f %6.2f\n", s.heads, s.next_n, s.batch, s.length,
                fi::logits_name(s.dtype), s.histogram ? 1 : 0, r.ranks, r.interleave, r.us, r.local_us, r.us - r.local_us,
                r.one_gpu_us, r.kv_floor_us, r.us / r.kv_floor_us);
    nlohmann::json row = shape_json(s, r.k);
    row.update({{"ranks", r.ranks},
                {"interleave", r.interleave},
                {"us", r.us},
                {"local_us", r.local_us},
                {"one_gpu_us", r.one_gpu_us},
                {"kv_bytes", r.kv_bytes},
                {"kv_floor_us", r.kv_floor_us},
                {"read_bandwidth", bandwidth}});
    json.push_back(row);
  });
  std::fflush(stdout);
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

}  // namespace

int cmd_bench_decode(const Args& args) {
  namespace bn = fi::bench;
  bn::DecodeBenchOptions o;
  // A preset first, so that the options given beside it replace its fields.
  if (auto v = args.value("--preset")) {
    const fi::IndexerPreset* p = fi::find_indexer_preset(*v);
    if (!p) throw UsageError(fmt::format("--preset: no preset '{}' (presets: {})", *v, fi::indexer_preset_names()));
    o.heads = {p->heads};
    o.next_ns = {p->next_n};
    o.k = p->k;
    o.kvs = {p->kv};
  }
  apply_shape_options(args, o);
  if (auto v = args.value("--pdl")) o.pdl = parse_flags("--pdl", *v);
  if (auto v = args.value("--input")) {
    if (*v == "bytes") o.values = bn::PagedValues::bytes;
    else if (*v == "normal") o.values = bn::PagedValues::normal;
    else throw UsageError(fmt::format("--input expects bytes or normal, got '{}'", *v));
  }
  o.ragged = args.int_value("--ragged", 0, 0) != 0;
  o.k = parse_k(args, o.k);
  o.replays = args.int_value("--replays", o.replays, 1);
  o.two_level = args.int_value("--two-level", 0, 0);
  o.candidate_block = args.int_value("--candidate-block", o.candidate_block, 1);
  if (o.candidate_block != 8 && o.candidate_block != 16)
    throw UsageError(fmt::format("--candidate-block expects 8 or 16, got {}", o.candidate_block));
  if (args.value("--candidate-block") && o.two_level == 0) throw UsageError("--candidate-block: only with --two-level C");
  const int ranks = args.int_value("--dcp", 1, 1);
  const int interleave = args.int_value("--dcp-interleave", 1, 1);
  if (ranks > 1 && o.two_level > 0) throw UsageError("--two-level: not with --dcp");
  if (ranks > 1) {
    if (args.value("--pdl")) throw UsageError("--pdl: not with --dcp (the DCP plan runs without programmatic launches here)");
    if (o.kvs != std::vector<fi::KvFormat>{fi::KvFormat::fp8})
      throw UsageError("--kv: the DCP benchmark runs FP8 caches only (give --kv fp8 with an MXFP4 preset)");
    return bench_dcp_decode(o, ranks, interleave, args);
  }
  if (args.value("--dcp-interleave")) throw UsageError("--dcp-interleave: only with --dcp D (D >= 2)");
  const auto bench_gpu = open_bench_gpu("decode");
  if (!bench_gpu) return 1;
  auto& gpu = bench_gpu->gpu;
  const double bandwidth = bench_gpu->bandwidth;
  if (o.two_level > 0)
    std::printf("%3s %3s %5s %7s %4s %5s %4s %3s %9s %9s %9s %6s %9s %9s %9s %10s %9s %6s %6s\n", "H", "n", "B", "L", "out", "kv",
                "hist", "pdl", "us", "logits_us", "first_us", "C", "two_us", "step_us", "sparse_us", "cand_floor", "cand_read",
                "x_two", "x_step");
  else
    std::printf("%3s %3s %5s %7s %4s %5s %4s %3s %9s %9s %9s %6s %9s %6s %9s %9s\n", "H", "n", "B", "L", "out", "kv", "hist",
                "pdl", "us", "one_us", "logits_us", "x_lgt", "kv_floor", "x_kv", "KiB/row", "one_KiB");
  nlohmann::json json = nlohmann::json::array();
  const auto on_row = [&](const bn::DecodeBenchRow& r) {
    const bn::DecodeShape& s = r.shape;
    if (o.two_level > 0)
      std::printf("%3d %3d %5d %7d %4s %5s %4d %3d %9.2f %9.2f %9.2f %6d %9.2f %9.2f %9.2f %10.2f %9.2f %6.2f %6.2f\n", s.heads,
                  s.next_n, s.batch, s.length, fi::logits_name(s.dtype), fi::kv_name(s.kv), s.histogram ? 1 : 0, s.pdl ? 1 : 0,
                  r.us, r.logits_us, r.first_level_us, o.two_level, r.two_level_us, r.sparse_step_us, r.sparse_logits_us,
                  r.candidate_floor_us, r.candidate_read_us, r.two_level_us / r.candidate_floor_us,
                  r.sparse_step_us / r.candidate_floor_us);
    else
      std::printf("%3d %3d %5d %7d %4s %5s %4d %3d %9.2f %9.2f %9.2f %6.3f %9.2f %6.2f %9.1f %9.1f\n", s.heads, s.next_n, s.batch,
                  s.length, fi::logits_name(s.dtype), fi::kv_name(s.kv), s.histogram ? 1 : 0, s.pdl ? 1 : 0, r.us, r.one_pass_us,
                  r.logits_us, r.us / r.logits_us, r.kv_floor_us, r.us / r.kv_floor_us, r.plan_bytes_per_row / 1024,
                  r.one_pass_bytes_per_row / 1024);
    std::fflush(stdout);
    nlohmann::json row = shape_json(s, r.k);
    row.update({{"pdl", s.pdl},
                {"us", r.us},
                {"one_pass_us", r.one_pass_us},
                {"plan_bytes_per_row", r.plan_bytes_per_row},
                {"one_pass_bytes_per_row", r.one_pass_bytes_per_row},
                {"logits_us", r.logits_us},
                {"kv_bytes", r.kv_bytes},
                {"kv_floor_us", r.kv_floor_us},
                {"read_bandwidth", bandwidth}});
    if (o.two_level > 0)
      row.update({{"candidates", o.two_level},
                  {"candidate_block", o.candidate_block},
                  {"two_level_us", r.two_level_us},
                  {"sparse_step_us", r.sparse_step_us},
                  {"sparse_logits_us", r.sparse_logits_us},
                  {"candidate_bytes", r.candidate_bytes},
                  {"candidate_floor_us", r.candidate_floor_us},
                  {"candidate_read_us", r.candidate_read_us},
                  {"first_level_us", r.first_level_us}});
    json.push_back(row);
  };
  const auto on_skip = [](const bn::DecodeShape& s, const std::string& why) {
    std::fprintf(stderr, "skipped H %d next_n %d B %d L %d %s %s: %s\n", s.heads, s.next_n, s.batch, s.length,
                 fi::logits_name(s.dtype), fi::kv_name(s.kv), why.c_str());
  };
  bn::run_decode_bench(gpu, o, bandwidth, on_row, on_skip);
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

int cmd_bench_prefill(const Args& args) {
  namespace bn = fi::bench;
  bn::PrefillBenchOptions o;
  if (auto v = args.value("--tokens")) o.tokens = parse_int_list("--tokens", *v);
  if (auto v = args.value("--lengths")) o.keys = parse_int_list("--lengths", *v);
  if (auto v = args.value("--heads")) o.heads = parse_int_list("--heads", *v);
  if (auto v = args.value("--dtype")) o.dtypes = parse_dtypes(*v);
  o.k = parse_k(args, o.k);
  o.replays = args.int_value("--replays", o.replays, 1);
  const auto bench_gpu = open_bench_gpu("prefill");
  if (!bench_gpu) return 1;
  std::printf("%6s %7s %3s %4s %10s %8s %10s %6s %10s %6s %8s %11s %8s\n", "T", "N", "H", "out", "logits_us", "TFLOP/s",
              "+hist_us", "hist%", "plan_us", "chunk", "plan_MiB", "separate_us", "sep_MiB");
  nlohmann::json json = nlohmann::json::array();
  bn::run_prefill_bench(bench_gpu->gpu, o, [&](const bn::PrefillBenchRow& r) {
    std::printf("%6d %7d %3d %4s %10.1f %8.1f %10.1f %6.1f %10.1f %6lld %8.0f %11.1f %8.0f\n", r.tokens, r.keys, r.heads,
                fi::logits_name(r.dtype), r.logits_us, r.tflops, r.hist_us, 100.0 * (r.hist_us / r.logits_us - 1.0), r.plan_us,
                r.chunk_tokens, r.plan_bytes / (1 << 20), r.separate_us, r.separate_bytes / (1 << 20));
    std::fflush(stdout);
    json.push_back({{"tokens", r.tokens},
                    {"keys", r.keys},
                    {"heads", r.heads},
                    {"head_dim", r.head_dim},
                    {"k", r.k},
                    {"logits", fi::logits_name(r.dtype)},
                    {"logits_us", r.logits_us},
                    {"tflops", r.tflops},
                    {"flops", r.flops},
                    {"hist_us", r.hist_us},
                    {"plan_us", r.plan_us},
                    {"chunk_tokens", r.chunk_tokens},
                    {"plan_bytes", r.plan_bytes},
                    {"separate_us", r.separate_us},
                    {"separate_bytes", r.separate_bytes}});
  });
  if (auto path = args.value("--json")) std::ofstream(*path) << json.dump(2) << "\n";
  return 0;
}

int cmd_bench(const std::string& what, const Args& args) {
  namespace bn = fi::bench;
  if (what != "logits" && what != "topk" && what != "decode" && what != "prefill")
    throw UsageError(fmt::format("expected 'bench logits', 'bench topk', 'bench decode' or 'bench prefill', got '{}'", what));
  if (what == "topk") return cmd_bench_topk(args);
  if (what == "prefill") return cmd_bench_prefill(args);
  if (what == "decode") return cmd_bench_decode(args);
  bn::LogitsBenchOptions o;
  apply_shape_options(args, o);
  o.replays = args.int_value("--replays", o.replays, 1);
  o.cold_l2 = args.has("--cold-l2");
  o.fixed_length = args.has("--fixed-length");
  o.resident_blocks = args.int_value("--resident-blocks", 0, 1);
  if (o.resident_blocks > 0 && o.cold_l2) throw UsageError("--resident-blocks keeps the KV in L2, --cold-l2 evicts it: give one");
  if (auto v = args.value("--input")) {
    o.inputs.clear();
    for (const std::string& name : split_list(*v)) {
      if (name == "bytes") o.inputs.push_back(bn::PagedValues::bytes);
      else if (name == "normal") o.inputs.push_back(bn::PagedValues::normal);
      else throw UsageError(fmt::format("--input expects bytes and/or normal, got '{}'", name));
    }
  }
  if (auto v = args.value("--compare")) {
    if (*v != "portable") throw UsageError(fmt::format("--compare expects 'portable', got '{}'", *v));
    o.compare_portable = true;
  }
  if (auto v = args.value("--variant")) {
    if (*v == "auto") o.variant = fi::PagedMqaLogitsVariant::automatic;
    else if (*v == "portable") o.variant = fi::PagedMqaLogitsVariant::portable;
    else if (*v == "sm90") o.variant = fi::PagedMqaLogitsVariant::sm90;
    else throw UsageError(fmt::format("--variant expects auto, portable or sm90, got '{}'", *v));
  }
  std::string why;
  if (!fi::driver::available(&why)) {
    std::fprintf(stderr, "bench needs a GPU: %s\n", why.c_str());
    return 1;
  }
  fi::check::GpuSession gpu;
  const double bandwidth = bn::measure_read_bandwidth(gpu);
  double launch_floor_us = 0;
  {
    std::unique_ptr<fi::check::DeviceBuffer> flush;
    if (o.cold_l2) flush = std::make_unique<fi::check::DeviceBuffer>(std::size_t{256} << 20);
    launch_floor_us = bn::measure_launch_floor(gpu, flush.get()).median_us;
  }
  const std::string resident =
      o.resident_blocks > 0 ? fmt::format(", the KV cycling through {} L2-resident blocks", o.resident_blocks) : std::string();
  std::printf(
      "flash-indexer bench logits on %s: streaming read %.0f GB/s; %d replays per cell%s%s%s; an empty kernel "
      "takes %.2f us in this harness\n",
      gpu.device_name().c_str(), bandwidth / 1e9, o.replays, o.cold_l2 ? ", cold L2" : "",
      o.fixed_length ? ", every length exactly L" : "", resident.c_str(), launch_floor_us);
  std::printf("%5s %7s %3s %3s %4s %4s %5s %6s %9s %9s %8s %6s %7s %8s %6s %9s %5s%s\n", "B", "L", "n", "H", "hist", "out", "kv",
              "input", "us", "floor_us", "GB/s", "BW%", "TFLOP/s", "MB", "x_flr", "read_us", "x_rd",
              o.compare_portable ? "  portable_us speedup" : "");
  nlohmann::json json = nlohmann::json::array();
  bn::run_logits_bench(gpu, o, bandwidth, [&](const bn::LogitsBenchRow& r) {
    const char* out = fi::logits_name(r.dtype);
    std::printf("%5d %7d %3d %3d %4d %4s %5s %6s %9.2f %9.2f %8.0f %5.1f%% %7.0f %8.1f %6.2f %9.2f %5.2f", r.batch, r.length,
                r.next_n, r.heads, r.histogram ? 1 : 0, out, fi::kv_name(r.kv), bn::paged_values_name(r.input), r.us, r.floor_us,
                r.gbps, 100 * r.bandwidth_fraction, r.tflops, r.bytes / 1e6, r.us / r.floor_us, r.read_us, r.us / r.read_us);
    if (o.compare_portable && r.portable_us > 0) std::printf(" %12.2f %7.1fx", r.portable_us, r.portable_us / r.us);
    std::printf("\n");
    std::fflush(stdout);
    json.push_back({{"batch", r.batch},
                    {"length", r.length},
                    {"next_n", r.next_n},
                    {"heads", r.heads},
                    {"head_dim", r.head_dim},
                    {"histogram", r.histogram},
                    {"logits", out},
                    {"kv", fi::kv_name(r.kv)},
                    {"input", bn::paged_values_name(r.input)},
                    {"kernel", r.kernel},
                    {"us", r.us},
                    {"bytes", r.bytes},
                    {"flops", r.flops},
                    {"gbps", r.gbps},
                    {"bandwidth_fraction", r.bandwidth_fraction},
                    {"tflops", r.tflops},
                    {"floor_us", r.floor_us},
                    {"paged_read_us", r.read_us},
                    {"portable_us", r.portable_us},
                    {"read_bandwidth", bandwidth},
                    {"launch_floor_us", launch_floor_us}});
  });
  if (auto path = args.value("--json")) {
    std::ofstream(*path) << json.dump(2) << "\n";
    std::printf("wrote %s\n", path->c_str());
  }
  return 0;
}

}  // namespace flash_indexer::cli
