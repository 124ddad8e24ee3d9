// NVRTC compiles every kernel of every op for sm_90a, with no spills, no stack frame and no wgmma that
// ptxas serializes (one test each),
// except a measured budget for the streaming top-k selectors (split and filter): capped at 64 registers
// so two CTAs share an SM, ptxas spills a few words (the split selector's split-1 kernels: 12 bytes
// stored, 12 loaded, 8 of stack at FP16/BF16, 12, 36 and 16 at FP32, some in its pass loops' setup; the
// filter selector's FP16 kernels: up to 48, 80 and 24, none in its streaming loop), and for the resident selector in clusters
// of 16 (its sends of each candidate key to 15 CTAs, unrolled: up to 28 bytes stored, 40 loaded, 24 of
// stack, once per row; rolled, they cost no spills but 0.4-0.7 us per row). The H200 numbers of
// docs/benchmarks/ include those spills.
#include "catch_compat.hpp"

#include "decode_step.hpp"
#include "kernel_catalog.hpp"
#include "nvrtc_compiler.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "sparse_decode_step.hpp"
#include "test_support.hpp"

using namespace flash_indexer;

namespace {

const bool registered = [] {
  std::vector<KernelSpec> specs = supported_kernel_specs(Arch{9, 0, true});
  for (const DecodeStepConfig& c : supported_decode_step_configs(Arch{9, 0, true})) specs.push_back(decode_step_kernel_spec(c));
  for (const SparseDecodeStepConfig& c : supported_sparse_decode_step_configs(Arch{9, 0, true}))
    if (c.kv != KvFormat::fp8) specs.push_back(sparse_decode_step_kernel_spec(c));  // the FP8 ones are in the set above
  for (const KernelSpec& spec : specs) {
    test::register_test("compile " + spec.key, "[compile]", [spec] {
      const CompiledKernel k = compile_kernel(spec);
      INFO(k.log);
      CHECK(k.cubin.size() > 1000);
      CHECK(k.report.registers > 0);
      const bool streaming_topk = spec.key.rfind("topk.split", 0) == 0 || spec.key.rfind("topk.filter", 0) == 0;
      const bool resident16 = spec.key.rfind("topk.resident16.", 0) == 0;
      // The four consumers at N = 128 with their weights in registers (112 each): the loop bound (stored
      // once) and a scale address (once per block), reloaded from L1 once per block.
      const bool logits_n2_h64 = spec.key.rfind("paged_mqa_logits.sm90.n2.h64.", 0) == 0;
      // The one-pass decode step (opt-in, DecodeStep::one_pass): the logits kernel and a row's selection in
      // one kernel held to the logits kernel's registers. At 80 (two CTAs per SM) the last-CTA form spills
      // up to 488 bytes stored, 1,032 loaded, 248 of stack (n2 H 32 MXFP4; the n1 kernels nothing), the
      // spread form up to 568 / 1,272 (n2 H 32 MXFP4). The selection as a call spills less, but
      // measured slower in both forms (docs/design/decode-step.md).
      const bool step = spec.key.rfind("decode_step.", 0) == 0;
      CHECK(k.report.spill_store_bytes <= (streaming_topk ? 64 : resident16 ? 28 : logits_n2_h64 ? 8 : step ? 576 : 0));
      CHECK(k.report.spill_load_bytes <= (streaming_topk ? 96 : resident16 ? 40 : logits_n2_h64 ? 32 : step ? 1280 : 0));
      CHECK(k.report.stack_frame_bytes <= (streaming_topk ? 32 : resident16 ? 24 : logits_n2_h64 ? 8 : step ? 256 : 0));
      // ptxas serializing wgmma instructions (C7510-C7520: "Potential Performance Loss") costs the overlap
      // the sm90 kernels are built for, without a spill to show it.
      CHECK(k.log.find("Potential Performance Loss") == std::string::npos);
    });
  }
  return true;
}();

}  // namespace

TEST_CASE("an NVRTC failure carries the kernel key and NVRTC's log", "[compile]") {
  KernelSpec spec = paged_mqa_logits_kernel_spec({1, 16, 64, 64, false, LogitsDType::f32, Arch{9, 0, true}});
  spec.source += "this is not C++;\n";
  CHECK_THROWS_WITH(compile_kernel(spec), flash_indexer::test::Contains("nvrtcCompileProgram failed") &&
                                              flash_indexer::test::Contains(spec.key) &&
                                              flash_indexer::test::Contains("NVRTC log"));
}

TEST_CASE("the ptxas report parser reads registers and smem and spills", "[compile]") {
  const PtxasReport r = PtxasReport::parse(
      "ptxas info    : Function properties for k\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem\n");
  CHECK(r.registers == 40);
  CHECK(r.shared_bytes == 2048);
  CHECK(r.stack_frame_bytes == 24);
  CHECK(r.spill_store_bytes == 8);
  CHECK(r.spill_load_bytes == 12);
  CHECK(r.spills());
  // A kernel with a call: the spills of both, the larger stack frame.
  const PtxasReport call = PtxasReport::parse(
      "ptxas info    : Function properties for k\n"
      "ptxas         .     96 bytes stack frame, 32 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 80 registers, used 3 barriers, 96 bytes cumulative stack size\n"
      "ptxas info    : Function properties for _Z6calleev\n"
      "ptxas         .     120 bytes stack frame, 64 bytes spill stores, 124 bytes spill loads\n");
  CHECK(call.registers == 80);
  CHECK(call.stack_frame_bytes == 120);
  CHECK(call.spill_store_bytes == 96);
  CHECK(call.spill_load_bytes == 124);
}
