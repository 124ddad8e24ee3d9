// Kernel keys, arch names and codegen are canonical and deterministic.
#include "catch_compat.hpp"

#include "../kernels/paged_mqa_logits_params.cuh"
#include "disk_cache.hpp"
#include "embedded_sources.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "decode_step.hpp"
#include "kernel_catalog.hpp"
#include "paged_mqa_logits_kernel.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;

TEST_CASE("arch names parse and print", "[keys]") {
  CHECK(Arch::parse("sm_90a") == Arch{9, 0, true});
  CHECK(Arch::parse("sm_86") == Arch{8, 6, false});
  CHECK(Arch::parse("sm_90a").name() == "sm_90a");
  CHECK(Arch::for_compute_capability(9, 0).name() == "sm_90a");
  CHECK(Arch::for_compute_capability(8, 9).name() == "sm_89");
  CHECK_THROWS_WITH(Arch::parse("sm_75"), Contains("sm_80 or newer") && Contains("sm_75"));
  CHECK_THROWS_WITH(Arch::parse("compute_90"), Contains("\"compute_90\""));
  CHECK_THROWS_AS(Arch::parse("sm_9x"), Error);
  CHECK_THROWS_AS(Arch::parse("sm_"), Error);
}

TEST_CASE("paged_mqa_logits keys are canonical and round-trip", "[keys]") {
  const PagedMqaLogitsConfig c{2, 64, 128, 64, false, LogitsDType::f16, Arch{9, 0, true}, PagedMqaLogitsVariant::portable};
  CHECK(c.key() == "paged_mqa_logits.portable.n2.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a");
  // automatic takes the sm90 kernel on sm_90a for next_n <= 6, the portable one elsewhere.
  PagedMqaLogitsConfig a = c;
  a.variant = PagedMqaLogitsVariant::automatic;
  CHECK(a.resolved().key() == "paged_mqa_logits.sm90.n2.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a");
  a.next_n = 7;
  CHECK(a.resolved().variant == PagedMqaLogitsVariant::portable);
  // next_n 5-6: a kernel of their own up to N = next_n * heads = 256, else groups of rows of a smaller
  // kernel (next_n 5: the next_n = 1 kernel, next_n 6: the next_n = 2 one).
  a.next_n = 5;
  CHECK(a.resolved().key() == "paged_mqa_logits.sm90.n5.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a");
  CHECK(kernel_spec_for_key(a.resolved().key()).key == "paged_mqa_logits.sm90.n1.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a");
  CHECK(kernel_spec_for_key("paged_mqa_logits.sm90.n6.h32.d64.bs64.hist1.out-f32.kv-fp8.sm_90a").key ==
        "paged_mqa_logits.sm90.n6.h32.d64.bs64.hist1.out-f32.kv-fp8.sm_90a");
  CHECK(kernel_spec_for_key("paged_mqa_logits.sm90.n6.h64.d128.bs64.hist1.out-bf16.kv-mxfp4.sm_90a").key ==
        "paged_mqa_logits.sm90.n2.h64.d128.bs64.hist1.out-bf16.kv-mxfp4.sm_90a");
  a.next_n = 2;
  a.arch = Arch{8, 9, false};
  CHECK(a.resolved().variant == PagedMqaLogitsVariant::portable);
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.sm90.n2.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_89"),
                    Contains("needs sm_90a"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.sm90.n7.h32.d128.bs64.hist0.out-f16.kv-fp8.sm_90a"),
                    Contains("next_n in 1..6 for the sm90 kernel"));
  // MXFP4 next_n 5-6 only on the sm90 kernel.
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n5.h32.d128.bs64.hist0.out-f16.kv-mxfp4.sm_90a"),
                    Contains("MXFP4 cache is built for next_n 1..4 (1..6 on the sm90 kernel"));
  CHECK(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.sm90.n6.h32.d128.bs64.hist0.out-f16.kv-mxfp4.sm_90a").next_n == 6);
  CHECK(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n3.h32.d128.bs64.hist1.out-bf16.kv-mxfp4.sm_90a").kv ==
        KvFormat::mxfp4);
  // The sm90 kernel's MXFP4 form (next_n <= 6, D 128) is automatic's choice on sm_90a; elsewhere the portable one.
  CHECK(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.sm90.n1.h64.d128.bs64.hist0.out-f16.kv-mxfp4.sm_90a").kv ==
        KvFormat::mxfp4);
  PagedMqaLogitsConfig m = a;
  m.kv = KvFormat::mxfp4;
  m.arch = Arch{9, 0, true};
  m.next_n = 3;
  CHECK(m.resolved().key() == "paged_mqa_logits.sm90.n3.h64.d128.bs64.hist0.out-f16.kv-mxfp4.sm_90a");
  m.arch = Arch{8, 9, false};
  CHECK(m.resolved().variant == PagedMqaLogitsVariant::portable);
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.sm90.n1.h64.d64.bs64.hist0.out-f16.kv-mxfp4.sm_90a"),
                    Contains("MXFP4 cache is built for"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h16.d128.bs64.hist0.out-f16.kv-mxfp4.sm_90a"),
                    Contains("MXFP4 cache is built for"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h64.d128.bs64.hist0.out-f16.kv-fp4.sm_90a"),
                    Contains("kv-<fp8|mxfp4>"));
  for (const Arch& arch : {Arch{8, 0, false}, Arch{9, 0, true}}) {
    const auto configs = supported_paged_mqa_logits_configs(arch);
    // FP8 portable; FP8 sm90 (sm_90a): next_n 1..4, and 5..6 at H 16 and 32 (H 64 runs the next_n = 1
    // kernel); MXFP4 portable (next_n 1..4, H 32/64, D 128) and sm90 (also next_n 5..6 at H 32)
    const std::size_t sm90 = arch.arch_specific ? (4 * 3 + 2 * 2) * 2 * 2 * 3 : 0,
                      mxfp4 = 4 * 2 * 2 * 3 + (arch.arch_specific ? (4 * 2 + 2) * 2 * 3 : 0);
    CHECK(configs.size() == 8 * 3 * 2 * 2 * 3 + sm90 + mxfp4);
    for (const auto& config : configs) CHECK(PagedMqaLogitsConfig::parse_key(config.key()) == config);
  }
}

TEST_CASE("topk keys round-trip and the catalog maps every key back to its spec", "[keys]") {
  CHECK(TopkConfig{LogitsDType::bf16, Arch{9, 0, true}}.key() == "topk.split1.in-bf16.sm_90a");
  CHECK(TopkConfig{LogitsDType::f16, Arch{9, 0, true}, 8}.key() == "topk.split8.in-f16.sm_90a");
  CHECK(TopkConfig{LogitsDType::f32, Arch{9, 0, true}, 4, true}.key() == "topk.resident4.in-f32.sm_90a");
  CHECK(TopkConfig{LogitsDType::f16, Arch{9, 0, true}, 8, true, true}.key() == "topk.residentwide8.in-f16.sm_90a");
  CHECK(TopkConfig{LogitsDType::f32, Arch{9, 0, true}, 1, false, false, true}.key() == "topk.register1.in-f32.sm_90a");
  CHECK(TopkConfig{LogitsDType::f32, Arch{8, 0, false}, 1, false, true, true}.key() == "topk.registerwide1.in-f32.sm_80");
  CHECK(TopkConfig{LogitsDType::f32, Arch{9, 0, true}, 2, false, false, false, true}.key() == "topk.filter2.in-f32.sm_90a");
  // streaming, resident, wide resident; the resident form in clusters of 16; the register selector's two
  // forms; the filter selector
  CHECK(supported_topk_configs(Arch{9, 0, true}).size() == 3 * 4 * 3 + 3 + 2 + 4 * 3);
  CHECK(TopkConfig{LogitsDType::f32, Arch{9, 0, true}, 16, true}.key() == "topk.resident16.in-f32.sm_90a");
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.split16.in-f32.sm_90a"),
                    Contains("only the resident selector's 512-thread form"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.residentwide16.in-f32.sm_90a"),
                    Contains("only the resident selector's 512-thread form"));
  CHECK(supported_topk_configs(Arch{8, 0, false}).size() == 2 * 3 + 2 + 3);  // no clusters nor wide resident form before sm_90
  CHECK(supported_topk_configs(Arch{8, 6, false}).size() == 2 * 3 + 2);      // nor the filter selector's 163 KiB
  for (const Arch& arch : {Arch{9, 0, true}, Arch{8, 6, false}})
    for (const auto& config : supported_topk_configs(arch)) CHECK(TopkConfig::parse_key(config.key()) == config);
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.split1.in-f8.sm_90a"), Contains("topk.split<1|2|4|8>.in-<f32|f16|bf16>"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.radix.in-f32.sm_90a"), Contains("topk.split<1|2|4|8>"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.split1.in-f32.sm_70"), Contains("sm_70"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.split3.in-f32.sm_90a"), Contains("split 1, 2, 4, 8 or 16"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.split4.in-f32.sm_80"), Contains("clusters"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.resident4.in-f32.sm_80"), Contains("clusters"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.resident.in-f32.sm_90a"), Contains("topk.resident"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.residentwide1.in-f32.sm_80"), Contains("needs sm_90"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.register2.in-f32.sm_90a"), Contains("one CTA per row"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.register1.in-f16.sm_90a"), Contains("takes f32 logits"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.filter1.in-f32.sm_86"), Contains("163 KiB"));
  CHECK_THROWS_WITH(TopkConfig::parse_key("topk.filter2.in-f32.sm_80"), Contains("clusters"));
  CHECK(TopkConfig::parse_key("topk.registerwide1.in-f32.sm_80") ==
        TopkConfig{LogitsDType::f32, Arch{8, 0, false}, 1, false, true, true});
  const auto specs = supported_kernel_specs(Arch{9, 0, true});
  // paged portable, paged sm90, paged MXFP4 (portable and sm90), top-k, prefill (mqa_logits
  // portable at D 32, 64, 128 and sm90 at D 64, 128), the top-k merge and the first level's top blocks
  // (one per dtype each), the four
  // bench probes; not the opt-in one-pass decode step's (next_n 1..4 x H 32, 64 x FP8, MXFP4 x 3 dtypes x
  // the last-CTA and the spread form); the sparse logits (portable and sm90 x FP8, MXFP4 x H 32, 64 x blocks
  // of 8, 16 x histogram x 3 dtypes); the FP8 sparse decode step's (H 32, 64 x blocks of 8, 16 x 3 dtypes x
  // clusters of 1, 2, 4, 8), which an automatic plan takes
  CHECK(specs.size() == 288 + 192 + 48 + 60 + 53 + 54 + 36 + 3 + 3 + 4 + 96 + 48);
  CHECK(supported_sparse_paged_mqa_logits_configs(Arch{8, 6, false}).size() == 48);  // portable only
  CHECK(SparsePagedMqaLogitsConfig::parse_key("sparse_paged_mqa_logits.sm90.h32.d128.cb16.hist1.out-bf16.kv-mxfp4.sm_90a") ==
        SparsePagedMqaLogitsConfig{32, 128, 16, true, LogitsDType::bf16, KvFormat::mxfp4, Arch{9, 0, true},
                                   PagedMqaLogitsVariant::sm90});
  CHECK_THROWS_WITH(SparsePagedMqaLogitsConfig::parse_key("sparse_paged_mqa_logits.sm90.h64.d128.cb8.hist0.out-f32.kv-fp8.sm_80"),
                    Contains("needs sm_90a"));
  CHECK_THROWS_WITH(
      SparsePagedMqaLogitsConfig::parse_key("sparse_paged_mqa_logits.auto.h64.d128.cb8.hist0.out-f32.kv-fp8.sm_90a"),
      Contains("<portable|sm90>"));
  CHECK(SparsePagedMqaLogitsConfig{64, 128, 8, false, LogitsDType::f32, KvFormat::fp8, Arch{9, 0, true}}.resolved().variant ==
        (portable_forced_by_environment() ? PagedMqaLogitsVariant::portable : PagedMqaLogitsVariant::sm90));
  CHECK(SparsePagedMqaLogitsConfig{64, 128, 8, false, LogitsDType::f32, KvFormat::fp8, Arch{8, 0, false}}.resolved().variant ==
        PagedMqaLogitsVariant::portable);
  CHECK(supported_decode_step_configs(Arch{9, 0, true}).size() == 96);
  CHECK(supported_decode_step_configs(Arch{8, 0, false}).empty());
  for (const DecodeStepConfig& c : supported_decode_step_configs(Arch{9, 0, true})) {
    const KernelSpec spec = decode_step_kernel_spec(c);
    CHECK(kernel_spec_for_key(spec.key).source == spec.source);
    CHECK(DecodeStepConfig::parse_key(spec.key) == c);
  }
  for (const KernelSpec& spec : specs) {
    const KernelSpec again = kernel_spec_for_key(spec.key);
    CHECK(again.key == spec.key);
    CHECK(again.source == spec.source);
  }
  CHECK_THROWS_WITH(kernel_spec_for_key("sort.radix.in-f32.sm_90a"), Contains("sort.radix"));
  CHECK(kernel_spec_for_key("probe.stream_read.sm_90a").entry == "fi_probe_stream_read");
  CHECK(kernel_spec_for_key("probe.spin_wait.sm_90a").entry == "fi_probe_spin_wait");
  CHECK(kernel_spec_for_key("probe.paged_read.sm_90a").entry == "fi_probe_paged_read");
  CHECK(kernel_spec_for_key("probe.sparse_read.sm_90a").entry == "fi_probe_sparse_read");
  CHECK_THROWS_WITH(kernel_spec_for_key("decode_step.sm90.n5.h64.d128.out-f32.kv-fp8.last.sm_90a"), Contains("next_n 1..4"));
  CHECK_THROWS_WITH(kernel_spec_for_key("decode_step.sm90.n1.h64.d128.out-f8.kv-fp8.last.sm_90a"),
                    Contains("decode_step.sm90.n"));
  CHECK_THROWS_WITH(kernel_spec_for_key("decode_step.sm90.n1.h64.d128.out-f32.kv-fp8.sm_90a"), Contains("<last|spread>"));
  CHECK_THROWS_WITH(kernel_spec_for_key("decode_step.sm90.n1.h64.d128.out-f32.kv-fp8.both.sm_90a"), Contains("<last|spread>"));
  CHECK(kernel_spec_for_key("decode_step.sm90.n2.h32.d128.out-bf16.kv-mxfp4.spread.sm_90a").source.find("StepForm::spread>") !=
        std::string::npos);
}

TEST_CASE("malformed or unsupported keys are rejected with the part named", "[keys]") {
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.nX.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a"),
                    Contains("\"nX\""));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n2.h64.d128.bs64.hist0.out-f8.kv-fp8.sm_90a"),
                    Contains("out-f8"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n9.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_90a"),
                    Contains("next_n in 1..8"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h48.d128.bs64.hist0.out-f16.kv-fp8.sm_90a"),
                    Contains("heads"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h64.d128.bs32.hist0.out-f16.kv-fp8.sm_90a"),
                    Contains("block_size"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h64.d128.bs64.hist0.out-f16.kv-fp8"),
                    Contains("expected paged_mqa_logits.<portable|sm90>"));
  CHECK_THROWS_WITH(PagedMqaLogitsConfig::parse_key("paged_mqa_logits.portable.n1.h64.d128.bs64.hist0.out-f16.kv-fp8.sm_70"),
                    Contains("sm_70"));
}

TEST_CASE("codegen is deterministic: one extern \"C\" kernel named after the key", "[keys]") {
  const PagedMqaLogitsConfig c{3, 32, 128, 64, false, LogitsDType::bf16, Arch{9, 0, true}, PagedMqaLogitsVariant::portable};
  const KernelSpec a = paged_mqa_logits_kernel_spec(c);
  const KernelSpec b = paged_mqa_logits_kernel_spec(c);
  CHECK(a.source == b.source);
  CHECK(a.entry == "fi_paged_mqa_logits_portable_n3_h32_d128_bs64_hist0_out_bf16_kv_fp8_sm_90a");
  CHECK(a.source.find("extern \"C\" __global__") != std::string::npos);
  CHECK(a.source.find(a.entry) != std::string::npos);
  CHECK(a.source.find("paged_mqa_logits_portable<3, 32, 128, 64, false, flash_indexer::kernels::LogitsOut::bf16>") !=
        std::string::npos);
  // Only the kernel header and what it includes go to NVRTC.
  std::vector<std::string> names;
  for (const auto& h : included_headers(a.source)) names.emplace_back(h.name);
  CHECK(names == std::vector<std::string>{"paged_mqa_logits_portable.cuh", "coarse_histogram.cuh", "coarse_bins.hpp",
                                          "grid_dependency.cuh", "numeric.cuh", "paged_mqa_logits_params.cuh",
                                          "paged_mqa_logits_sm90_form.cuh", "tensor_map.cuh", "paged_mqa_logits_rows.cuh",
                                          "dcp.hpp"});

  // The cache entry name is stable for a spec and changes with anything compiled.
  const DiskCache cache("/nonexistent");
  CHECK(cache.entry_name(a) == cache.entry_name(b));
  PagedMqaLogitsConfig other_arch = c;
  other_arch.arch = Arch{8, 0, false};
  CHECK(cache.entry_name(paged_mqa_logits_kernel_spec(other_arch)) != cache.entry_name(a));
  PagedMqaLogitsConfig hopper = c;
  hopper.variant = PagedMqaLogitsVariant::sm90;
  const KernelSpec h = paged_mqa_logits_kernel_spec(hopper);
  // n3 h32 has a ranges form besides the common kernel (paged_mqa_logits_sm90_ranges.cuh).
  CHECK(h.source.find("paged_mqa_logits_sm90_direct<3, 32, 128, false, flash_indexer::kernels::LogitsOut::bf16>") !=
        std::string::npos);
  CHECK(h.source.find("__grid_constant__") != std::string::npos);
  KernelSpec edited = a;
  edited.source += "// changed\n";
  CHECK(cache.entry_name(edited) != cache.entry_name(a));
  CHECK(cache.entry_name(a).starts_with(a.key + "."));
}

TEST_CASE("an include of a header that is not embedded is an error", "[keys]") {
  CHECK_THROWS_WITH(included_headers("#include \"missing.cuh\"\n"), Contains("missing.cuh"));
  CHECK(included_headers("#include <cuda_fp16.h>\n").empty());  // NVRTC built-ins are not ours to embed
}

TEST_CASE("the sm90 kernel's shared memory fits an H200 SM and keeps TMA destinations 1024-byte aligned", "[keys]") {
  for (const auto& c : supported_paged_mqa_logits_configs(Arch{9, 0, true})) {
    if (c.variant != PagedMqaLogitsVariant::sm90) continue;
    INFO(c.key());
    const bool mxfp4 = c.kv == KvFormat::mxfp4;
    const kernels::Sm90Layout l = kernels::sm90_layout(c.next_n, c.heads, c.head_dim, c.histogram, 0, mxfp4);
    CHECK(l.bytes <= 227 * 1024);
    CHECK(l.q % 1024 == 0);
    CHECK(l.k % 1024 == 0);
    CHECK((64 * c.head_dim) % 1024 == 0);  // every key stage starts 1024-aligned
    CHECK(l.barriers % 8 == 0);
    const kernels::Sm90PagedForm form = kernels::sm90_paged_form(c.next_n, c.heads, mxfp4);
    const KernelSpec spec = paged_mqa_logits_kernel_spec(c);
    CHECK(static_cast<int>(spec.threads) == form.threads);
    CHECK(static_cast<int>(spec.smem_bytes) == l.bytes);
    CHECK(form.threads == 128 * (form.consumers + 1));
    CHECK(form.stages % form.consumers == 0);
    CHECK(form.stages % kernels::kSm90StoreWarps == 0);
    CHECK(form.consumer_n == form.consumer_rows * c.heads);
    CHECK(form.consumers_per_block * form.consumer_rows == c.next_n);
    CHECK(form.takers * form.consumers_per_block == form.consumers);
    CHECK((form.consumers_per_block == 1 || form.direct_stores));  // each row group stores its own rows
    CHECK((!form.moves_registers ||
           kernels::sm90_handover_fits(form.threads, form.producer_registers, form.consumers, form.consumer_registers)));
  }
}

// The table of docs/design/logits-sm90.md, row for row: a change of form shows here and in the doc.
TEST_CASE("the sm90 paged kernel takes the documented form for each configuration", "[keys]") {
  struct Row {
    int next_n, heads;
    bool mxfp4;
    int consumer_rows, consumers, stages;
    bool register_weights, moves_registers, one_tma, consumers_count, direct_stores, late_release, parts, ranges;
    int mxfp4_round, flatten_max_row_blocks;
  };
  const Row rows[] = {
      // n  H   mxfp4  rows cons stages regw   moves  1tma   count  direct late   parts  ranges round flat
      {1, 16, false, 1, 2, 6, true, false, false, false, false, false, false, false, 16, 0},
      {1, 32, false, 1, 2, 6, true, false, false, false, false, false, false, false, 32, 0},
      {1, 64, false, 1, 2, 6, true, false, false, false, false, false, false, false, 64, 0},
      {2, 16, false, 2, 2, 6, true, false, false, false, false, false, false, false, 32, 0},
      {2, 32, false, 2, 2, 6, true, false, false, false, false, false, false, false, 64, 0},
      {2, 64, false, 2, 4, 12, true, true, true, true, true, true, false, true, 128, 6144},
      {3, 16, false, 3, 2, 6, true, false, false, false, false, false, false, false, 48, 0},
      {3, 32, false, 3, 4, 12, true, true, true, true, true, true, false, true, 96, 1536},
      {3, 64, false, 3, 2, 6, false, false, false, false, false, false, true, false, 192, 6144},
      {4, 16, false, 4, 2, 6, false, false, false, false, false, false, false, false, 64, 0},
      {4, 32, false, 4, 4, 12, false, false, true, true, true, false, false, false, 128, 0},
      {4, 64, false, 2, 4, 12, true, true, true, true, true, true, false, false, 128, 6144},
      {1, 32, true, 1, 2, 6, false, false, false, false, false, false, false, false, 32, 0},
      {1, 64, true, 1, 2, 6, false, false, false, false, false, false, false, false, 64, 0},
      {2, 32, true, 2, 2, 6, false, false, false, false, false, false, false, false, 64, 0},
      {2, 64, true, 2, 4, 12, false, true, false, true, false, false, false, false, 128, 0},
      {3, 32, true, 3, 4, 12, false, true, false, true, false, false, false, false, 96, 0},
      {3, 64, true, 3, 2, 6, false, false, false, false, false, false, false, false, 192, 0},
      {4, 32, true, 4, 4, 12, false, true, false, true, false, false, false, false, 64, 0},
      {4, 64, true, 4, 2, 6, false, false, false, false, false, false, false, false, 128, 0},
  };
  for (const Row& r : rows) {
    INFO("next_n " << r.next_n << " H " << r.heads << (r.mxfp4 ? " MXFP4" : " FP8"));
    const kernels::Sm90PagedForm f = kernels::sm90_paged_form(r.next_n, r.heads, r.mxfp4);
    CHECK(f.consumer_rows == r.consumer_rows);
    CHECK(f.consumers == r.consumers);
    CHECK(f.stages == r.stages);
    CHECK(f.register_weights == r.register_weights);
    CHECK(f.moves_registers == r.moves_registers);
    CHECK(f.early_loads == !r.moves_registers);
    CHECK(f.producer_registers == (r.mxfp4 && r.next_n > 2 ? 40 : 32));
    CHECK(f.one_tma_per_block == r.one_tma);
    CHECK(f.consumers_count == r.consumers_count);
    CHECK(f.direct_stores == r.direct_stores);
    CHECK(f.late_release == r.late_release);
    CHECK(f.overlapped_parts == r.parts);
    CHECK(f.has_ranges == r.ranges);
    CHECK(f.mxfp4_round == r.mxfp4_round);
    CHECK(f.flatten_max_row_blocks == r.flatten_max_row_blocks);
  }
}

TEST_CASE("a setmaxnreg handover is checked against the registers its launch holds", "[keys]") {
  // What ptxas reported for the kernels that move registers (640 threads: 96) and for launches of 384 and
  // 288 threads (168) and 768 (80).
  CHECK(kernels::sm90_launch_registers(640) == 96);
  CHECK(kernels::sm90_launch_registers(384) == 168);
  CHECK(kernels::sm90_launch_registers(288) == 168);
  CHECK(kernels::sm90_launch_registers(768) == 80);
  CHECK(kernels::sm90_launch_registers(256) == 255);
  CHECK(kernels::sm90_handover_fits(640, 32, 4, 112));  // FP8 four consumers, prefill: exactly the launch
  CHECK(kernels::sm90_handover_fits(640, 40, 4, 104));  // MXFP4 from next_n 3
  CHECK_FALSE(kernels::sm90_handover_fits(768, 24, 5, 96));  // five consumers of 96: this launch hangs
  CHECK(kernels::sm90_handover_fits(896, 24, 6, 80));         // six of 80 fit
}
