// GPU tests of the sparse decode step (kernels/sparse_decode_step_sm90.cuh, DecodePlan::run_second_level
// with config.step one_pass): every configuration at every cluster size, on fresh random inputs with
// ragged lengths (0 among them) and candidate lists with every kind of entry (sparse_candidates.hpp),
// poisoned outputs: the indices are the bytes of the two-kernel second level of the same inputs, and
// the reference top-k of the sparse logits mapped to positions. Also: a CUDA graph replayed with new
// candidates and lengths, and the rejections of plans it does not take.
#include "catch_compat.hpp"

#include <algorithm>
#include <bit>
#include <random>

#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "logits_check.hpp"
#include "sparse_candidates.hpp"
#include "sparse_decode_step.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;
namespace ref = flash_indexer::reference;

namespace {

ck::GpuSession& session() { return test::gpu_session(); }

struct Problem {
  ck::LogitsCase c;
  ck::HostInputs host;
  ck::DeviceInputs d;
  ck::LogitsViews v;
  std::vector<std::int64_t> lens;  // per query row
};

Problem make_problem(const DecodePlanConfig& pc, std::vector<int> lengths, std::uint64_t seed) {
  Problem p;
  p.c.config = {pc.next_n, pc.heads, pc.head_dim, 64, false, pc.logits, {}, PagedMqaLogitsVariant::automatic, pc.kv};
  p.c.lens_2d = false;
  p.c.lengths = std::move(lengths);
  p.c.seed = seed;
  p.host = ck::make_inputs(p.c);
  p.d = ck::upload(p.host, p.c);
  p.v = ck::views(p.d, p.host, p.c);
  const ref::PagedMqaLogitsInputs in = p.host.reference_view(p.c);
  const int rows = p.host.batch * pc.next_n;
  for (int r = 0; r < rows; ++r) p.lens.push_back(ref::row_length(in, r / pc.next_n, r % pc.next_n));
  return p;
}

void run(const DecodePlan& plan, const Problem& p, const TensorView& cv, const TensorView& iv, CUstream stream) {
  const ck::LogitsViews& v = p.v;
  if (plan.config().kv == KvFormat::mxfp4)
    plan.run_second_level(v.q, v.q_scales, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, stream);
  else plan.run_second_level(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, stream);
}

// The indices `plan` writes into a poisoned buffer, and those `two` (two kernels) writes for the same
// inputs.
struct Written {
  std::vector<std::int32_t> have, want;
};
Written run_both(const DecodePlan& plan, const DecodePlan& two, const Problem& p, const TensorView& cv, int rows, int k) {
  ck::DeviceBuffer got(static_cast<std::size_t>(rows) * k * 4), want(static_cast<std::size_t>(rows) * k * 4);
  got.fill(ck::kPoison);
  want.fill(0x5a);
  run(plan, p, cv, TensorView::contiguous(got.data(), DType::i32, {rows, k}), session().stream());
  run(two, p, cv, TensorView::contiguous(want.data(), DType::i32, {rows, k}), session().stream());
  session().synchronize();
  return {got.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k),
          want.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k)};
}

// The reference indices of a second level: the top-k of the sparse logits (masked columns NaN), their
// columns mapped through the candidates to positions.
std::vector<std::int32_t> reference_indices(const DecodePlanConfig& pc, const Problem& p, const TensorView& cv,
                                            const std::vector<std::int32_t>& candidates) {
  const int rows = p.host.batch * pc.next_n;
  const std::int64_t columns = static_cast<std::int64_t>(pc.candidates) * pc.candidate_block;
  const std::size_t elem = pc.logits == LogitsDType::f32 ? 4 : 2;
  ck::DeviceBuffer logits(static_cast<std::size_t>(rows * columns) * elem + 16);
  logits.fill(ck::kPoison);
  SparsePagedMqaLogitsOptions so;
  so.q_scales = p.v.q_scales;
  so.masked_nan = true;
  sparse_paged_mqa_logits(p.v.q, p.v.kv_cache, p.v.weights, p.v.context_lens, p.v.block_table, cv, pc.candidate_block,
                          TensorView::contiguous(logits.data(), tensor_dtype(pc.logits), {rows, columns}), session().stream(),
                          so);
  session().synchronize();
  const std::vector<std::uint8_t> raw = logits.to_host<std::uint8_t>(static_cast<std::size_t>(rows * columns) * elem);
  std::vector<float> stored(static_cast<std::size_t>(rows * columns));
  for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = test::stored_value(raw, pc.logits, static_cast<std::int64_t>(i));
  const ref::TopkResult cols = ref::topk(stored, columns, columns, std::vector<std::int64_t>(rows, columns), pc.k, true);
  return ref::sparse_positions(cols.indices, pc.k, candidates.data(), pc.candidates, pc.candidate_block);
}

// One configuration at every cluster size: the plan's rows pick it (sparse_decode_step_cluster).
void run_configuration(int heads, int block, LogitsDType logits, KvFormat kv) {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  const int candidates = 16384 / block;  // the model's 16K columns
  const SparseStepCapacity capacity =
      sparse_decode_step_capacity("test", {heads, 128, block, logits, kv, 1, Arch{}}, session().stream());
  for (int cluster = kernels::kSparseStepMaxCluster; cluster >= 1; cluster /= 2) {
    // The fewest rows that take this cluster size (one row for the largest), as next_n 2 requests.
    const int rows_before = cluster == kernels::kSparseStepMaxCluster ? 0 : capacity[std::countr_zero(2u * cluster)];
    const int next_n = rows_before > 0 ? 2 : 1, batch = rows_before / next_n + 1, rows = batch * next_n;
    INFO("capacity " << capacity[0] << " " << capacity[1] << " " << capacity[2] << " " << capacity[3]);
    REQUIRE(sparse_decode_step_cluster(rows, 16384, capacity) == cluster);
    DecodePlanConfig pc{batch, next_n,           heads, 128, cluster == 2 ? 2048 : cluster == 4 ? 50 : 512, logits, 4096, true,
                        false, cluster % 2 == 0, kv};
    pc.candidates = candidates;
    pc.candidate_block = block;
    pc.step = DecodeStep::one_pass;
    const DecodePlan step(pc);
    DecodePlanConfig two_config = pc;
    two_config.step = DecodeStep::two_kernels;
    const DecodePlan two(two_config);
    // Ragged lengths with 0; most rows hold about three times their candidates' positions.
    std::vector<int> lengths(batch);
    for (int b = 0; b < batch; ++b) lengths[b] = b % 5 == 3 ? 0 : 20000 + static_cast<int>(rng() % 40000);
    const Problem p = make_problem(pc, lengths, rng());
    const std::vector<std::int32_t> list = test::make_candidates(p.lens, candidates, block, rng);
    ck::DeviceBuffer dc = ck::DeviceBuffer::from(list);
    const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {rows, candidates});
    const Written w = run_both(step, two, p, cv, rows, pc.k);
    const std::vector<std::int32_t>& have = w.have;
    INFO("cluster " << cluster << " rows " << rows << " k " << pc.k << " seed " << p.c.seed);
    REQUIRE(have == w.want);
    std::vector<std::int32_t> expected = reference_indices(pc, p, cv, list), sorted_have = have;
    if (!pc.sorted)  // the order of an unsorted plan is the selector's, compared as sets
      for (int r = 0; r < rows; ++r) {
        const auto row = [&](std::vector<std::int32_t>& x) { return x.begin() + static_cast<std::ptrdiff_t>(r) * pc.k; };
        std::sort(row(expected), row(expected) + pc.k);
        std::sort(row(sorted_have), row(sorted_have) + pc.k);
      }
    REQUIRE(sorted_have == expected);
  }
}

const bool registered = [] {
  for (KvFormat kv : {KvFormat::fp8, KvFormat::mxfp4})
    for (int heads : {32, 64})
      for (int block : {8, 16})
        for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
          const SparseDecodeStepConfig c{heads, 128, block, logits, kv, 1, Arch{9, 0, true}};
          test::register_test("gpu " + c.key().substr(0, c.key().find(".c1.")), "[gpu][sparse][step]",
                              [=] { run_configuration(heads, block, logits, kv); });
        }
  return true;
}();

}  // namespace

TEST_CASE("gpu: the sparse decode step replays in a CUDA graph with new candidates and lengths", "[gpu][sparse][step]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  DecodePlanConfig pc{6, 2, 64, 128, 512, LogitsDType::f32, 4096, true, false, true, KvFormat::fp8};
  pc.candidates = 2048;
  pc.step = DecodeStep::one_pass;
  const DecodePlan plan(pc);
  const int rows = pc.max_batch * pc.next_n;
  Problem p = make_problem(pc, {30000, 0, 17000, 64000, 9, 40000}, rng());
  std::vector<std::int32_t> list = test::make_candidates(p.lens, pc.candidates, pc.candidate_block, rng);
  ck::DeviceBuffer dc = ck::DeviceBuffer::from(list);
  const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {rows, pc.candidates});
  ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * pc.k * 4);
  const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});

  // A call with the wrong candidates is rejected and changes no byte.
  indices.fill(ck::kPoison);
  CHECK_THROWS_WITH(
      plan.run_second_level(p.v.q, p.v.kv_cache, p.v.weights, p.v.context_lens, p.v.block_table,
                            TensorView::contiguous(dc.data(), DType::i32, {rows, pc.candidates - 1}), iv, session().stream()),
      test::Contains("candidates"));
  session().synchronize();
  for (std::uint8_t b : indices.to_host<std::uint8_t>(static_cast<std::size_t>(rows) * pc.k * 4)) REQUIRE(b == ck::kPoison);

  CUstream stream = session().stream();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  run(plan, p, cv, iv, stream);
  FI_CU(cuStreamEndCapture, "test", stream, &graph);
  FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);
  for (int replay = 0; replay < 3; ++replay) {
    INFO("replay " << replay);
    for (auto& len : p.host.context_lens) len = static_cast<std::int32_t>(rng() % (len + 1));
    p.d.context_lens.upload(p.host.context_lens.data(), p.host.context_lens.size() * 4);
    const ref::PagedMqaLogitsInputs now = p.host.reference_view(p.c);
    for (int r = 0; r < rows; ++r) p.lens[r] = ref::row_length(now, r / pc.next_n, r % pc.next_n);
    list = test::make_candidates(p.lens, pc.candidates, pc.candidate_block, rng);
    dc.upload(list.data(), list.size() * 4);
    indices.fill(ck::kPoison);
    FI_CU(cuGraphLaunch, "test", exec, stream);
    session().synchronize();
    REQUIRE(indices.to_host<std::int32_t>(static_cast<std::size_t>(rows) * pc.k) == reference_indices(pc, p, cv, list));
  }
  driver::api().cuGraphExecDestroy(exec);
  driver::api().cuGraphDestroy(graph);
}

TEST_CASE("gpu: an automatic second level takes the sparse decode step where it fills the GPU", "[gpu][sparse][step]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  const SparseStepCapacity capacity =
      sparse_decode_step_capacity("test", {64, 128, 8, LogitsDType::f32, KvFormat::fp8, 1, Arch{}}, session().stream());
  DecodePlanConfig pc{capacity[0], 1, 64, 128, 512, LogitsDType::f32, 4096, true, false, false, KvFormat::fp8};
  pc.candidates = 2048;
  const DecodePlan automatic(pc);
  pc.step = DecodeStep::two_kernels;
  const DecodePlan two(pc);
  // The nodes of a captured call: one kernel for the step, two (the sparse logits, the top-k) otherwise.
  const auto nodes = [&](const DecodePlan& plan, const Problem& p, const TensorView& cv, const TensorView& iv) {
    CUstream stream = session().stream();
    CUgraph graph = nullptr;
    FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    run(plan, p, cv, iv, stream);
    FI_CU(cuStreamEndCapture, "test", stream, &graph);
    std::size_t count = 0;
    FI_CU(cuGraphGetNodes, "test", graph, nullptr, &count);
    driver::api().cuGraphDestroy(graph);
    return count;
  };
  // All of the SMs at one CTA per row (taken), and 5/8 of them (not).
  for (const int rows : {capacity[0], capacity[0] * 5 / 8}) {
    const bool step = sparse_decode_step_preferred(KvFormat::fp8, rows, 16384, capacity);
    INFO("rows " << rows << " capacity " << capacity[0] << " step " << step);
    CHECK(step == (rows == capacity[0]));
    std::vector<int> lengths(rows);
    for (int b = 0; b < rows; ++b) lengths[b] = b % 7 == 3 ? 0 : 20000 + static_cast<int>(rng() % 40000);
    const Problem p = make_problem(pc, lengths, rng());
    const std::vector<std::int32_t> list = test::make_candidates(p.lens, pc.candidates, pc.candidate_block, rng);
    ck::DeviceBuffer dc = ck::DeviceBuffer::from(list);
    const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {rows, pc.candidates});
    const Written w = run_both(automatic, two, p, cv, rows, pc.k);
    REQUIRE(w.have == w.want);
    ck::DeviceBuffer captured(static_cast<std::size_t>(rows) * pc.k * 4);  // written by no launch: the graphs only count nodes
    const TensorView iv = TensorView::contiguous(captured.data(), DType::i32, {rows, pc.k});
    CHECK((nodes(automatic, p, cv, iv) < nodes(two, p, cv, iv)) == step);
  }
}

TEST_CASE("the sparse decode step: cluster sizes by rows and width", "[sparse][step]") {
  // The largest size whose clusters all run at once, at least the fewest that hold a row (an H100's
  // capacity at one CTA per SM: 132 CTAs, 66 pairs, 30 clusters of 4, 14 of 8).
  const SparseStepCapacity h100{132, 66, 30, 14};
  CHECK(sparse_decode_step_cluster(1, 16384, h100) == 8);
  CHECK(sparse_decode_step_cluster(14, 16384, h100) == 8);
  CHECK(sparse_decode_step_cluster(15, 16384, h100) == 4);
  CHECK(sparse_decode_step_cluster(30, 16384, h100) == 4);
  CHECK(sparse_decode_step_cluster(31, 16384, h100) == 2);
  CHECK(sparse_decode_step_cluster(67, 16384, h100) == 1);
  CHECK(sparse_decode_step_cluster(1000, 16384, h100) == 1);
  CHECK(sparse_decode_step_cluster(1000, 16385, h100) == 2);
  CHECK(sparse_decode_step_cluster(20, 65536, h100) == 4);
  CHECK(sparse_decode_step_cluster(1000, 131072, h100) == 8);
  CHECK(sparse_decode_step_cluster(1, 131073, h100) == 0);
  // DecodeStep::automatic: FP8, every row at once, its CTAs at least 15/16 of the SMs.
  CHECK(sparse_decode_step_preferred(KvFormat::fp8, 132, 16384, h100));      // 132 CTAs
  CHECK(sparse_decode_step_preferred(KvFormat::fp8, 124, 16384, h100));      // 124
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 123, 16384, h100));
  CHECK(sparse_decode_step_preferred(KvFormat::fp8, 64, 16384, h100));       // 64 pairs
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 96, 16384, h100));  // 96 CTAs
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 32, 16384, h100));  // 32 pairs: 64 CTAs
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 133, 16384, h100));  // a second wave
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::mxfp4, 128, 16384, h100));
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 16, 131072, h100));  // 14 clusters of 8 at once
  CHECK_FALSE(sparse_decode_step_preferred(KvFormat::fp8, 1, 131073, h100));
  DecodePlanConfig pc;
  pc.candidates = 16384;  // 131072 columns: 8 segments
  pc.step = DecodeStep::one_pass;
  CHECK_NOTHROW(DecodePlan::required_bytes(pc));
}
