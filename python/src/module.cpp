// flash_indexer._flash_indexer: the C++ API for Python (nanobind). Device tensors cross as DLPack
// arrays (torch, CuPy, JAX: anything nanobind's ndarray accepts), the stream as an integer handle; the
// CPU reference takes and returns numpy arrays. Bad arguments raise ValueError (ArgumentError in C++),
// CUDA, NVRTC and cache failures RuntimeError. The Python package (flash_indexer/__init__.py) adds the
// torch conveniences: the current stream, output allocation, dtype names.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/dcp_decode_plan.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/jit.hpp"
#include "flash_indexer/model_presets.hpp"
#include "flash_indexer/mqa_logits.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "flash_indexer/version.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "flash_indexer/topk_merge.hpp"

namespace nb = nanobind;
namespace fi = flash_indexer;

namespace {

using AnyArray = nb::ndarray<>;  // any dtype, device and layout: checked here and by the op

const char* device_name(int type) {
  switch (type) {
    case nb::device::cpu::value: return "CPU";
    case nb::device::cuda::value: return "CUDA";
    case nb::device::cuda_host::value: return "CUDA host (pinned)";
    case nb::device::cuda_managed::value: return "CUDA managed";
    default: return "non-CUDA";
  }
}

fi::DType dtype_of(const std::string& name, const nb::dlpack::dtype& t) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return fi::DType::f32;
    if (code == Code::Float && t.bits == 16) return fi::DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return fi::DType::bf16;
    if (code == Code::Int && t.bits == 32) return fi::DType::i32;
    if (code == Code::UInt && t.bits == 8) return fi::DType::u8;
    if (code == Code::Float8_E4M3FN && t.bits == 8) return fi::DType::fp8_e4m3;
  }
  throw fi::ArgumentError(
      fmt::format("{}: expected float32, float16, bfloat16, int32, uint8 or float8_e4m3fn elements, "
                  "got DLPack type code {} with {} bits x {} lanes",
                  name, static_cast<int>(t.code), static_cast<int>(t.bits), static_cast<int>(t.lanes)));
}

// A CUDA array as the op's TensorView (strides in elements, as DLPack gives them).
fi::TensorView device_view(const std::string& op, const std::string& name, const AnyArray& a) {
  if (a.device_type() != nb::device::cuda::value)
    throw fi::ArgumentError(
        fmt::format("{}: {}: expected a CUDA tensor, got a {} tensor", op, name, device_name(a.device_type())));
  if (a.ndim() > static_cast<std::size_t>(fi::TensorView::kMaxRank))
    throw fi::ArgumentError(fmt::format("{}: {}: expected at most 4 dimensions, got {}", op, name, a.ndim()));
  fi::TensorView v;
  v.data = a.data();
  v.dtype = dtype_of(fmt::format("{}: {}", op, name), a.dtype());
  v.rank = static_cast<int>(a.ndim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = static_cast<std::int64_t>(a.shape(d));
    v.strides[d] = a.stride(d);
  }
  return v;
}

// q as uint8 bytes is FP8 E4M3 (the Python layer passes torch's float8_e4m3fn tensors as a uint8 view,
// not relying on torch exporting float8 through DLPack), unless it is the packed E2M1 query of the
// MXFP4 cache (`packed`: its exponents were given).
fi::TensorView query_view(const std::string& op, const AnyArray& a, bool packed = false) {
  fi::TensorView v = device_view(op, "q", a);
  if (v.dtype == fi::DType::u8 && !packed) v.dtype = fi::DType::fp8_e4m3;
  return v;
}

fi::KvFormat kv_format_of(const std::string& op, const std::string& name) {
  if (name == "fp8") return fi::KvFormat::fp8;
  if (name == "mxfp4") return fi::KvFormat::mxfp4;
  throw fi::ArgumentError(fmt::format("{}: kv: expected fp8 or mxfp4, got '{}'", op, name));
}

nb::dict preset_dict(const fi::IndexerPreset& p) {
  nb::dict d;
  d["name"] = std::string(p.name);
  d["heads"] = p.heads;
  d["head_dim"] = p.head_dim;
  d["k"] = p.k;
  d["kv"] = p.kv == fi::KvFormat::mxfp4 ? "mxfp4" : "fp8";
  d["next_n"] = p.next_n;
  d["max_context"] = p.max_context;
  return d;
}

fi::DecodeStep decode_step_of(const std::string& op, const std::string& name) {
  if (name == "automatic") return fi::DecodeStep::automatic;
  if (name == "two_kernels") return fi::DecodeStep::two_kernels;
  if (name == "one_pass") return fi::DecodeStep::one_pass;
  throw fi::ArgumentError(fmt::format("{}: step: expected automatic, two_kernels or one_pass, got '{}'", op, name));
}

fi::TensorView optional_view(const std::string& op, const std::string& name, const std::optional<AnyArray>& a) {
  return a ? device_view(op, name, *a) : fi::TensorView{};
}

fi::LogitsDType logits_dtype(const std::string& op, const std::string& name) {
  if (name == "float32" || name == "f32") return fi::LogitsDType::f32;
  if (name == "float16" || name == "f16") return fi::LogitsDType::f16;
  if (name == "bfloat16" || name == "bf16") return fi::LogitsDType::bf16;
  throw fi::ArgumentError(fmt::format("{}: logits dtype: expected float32, float16 or bfloat16, got '{}'", op, name));
}

fi::PagedMqaLogitsVariant variant_of(const std::string& op, const std::string& name) {
  if (name == "automatic") return fi::PagedMqaLogitsVariant::automatic;
  if (name == "portable") return fi::PagedMqaLogitsVariant::portable;
  if (name == "sm90") return fi::PagedMqaLogitsVariant::sm90;
  throw fi::ArgumentError(fmt::format("{}: variant: expected automatic, portable or sm90, got '{}'", op, name));
}

fi::Stream stream_of(std::uintptr_t handle) { return reinterpret_cast<fi::Stream>(handle); }

// A numpy array that owns `values`.
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values, std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

// A DCP layout from Python's (ranks, rank, interleave); None: one rank. The ops check it.
fi::DcpLayout dcp_layout_of(const std::optional<std::tuple<int, int, int>>& dcp) {
  if (!dcp) return {};
  return {std::get<0>(*dcp), std::get<1>(*dcp), std::get<2>(*dcp)};
}

template <class T>
using HostArray = nb::ndarray<const T, nb::device::cpu, nb::c_contig>;

// The reference's view of FP8 paged inputs on numpy arrays, each checked and named after `op`.
fi::reference::PagedMqaLogitsInputs fp8_reference_inputs(const char* op, const HostArray<std::uint8_t>& q,
                                                         const HostArray<std::uint8_t>& kv_cache, const HostArray<float>& weights,
                                                         const HostArray<std::int32_t>& context_lens,
                                                         const HostArray<std::int32_t>& block_table) {
  if (q.ndim() != 4) throw fi::ArgumentError(fmt::format("{}: q: expected uint8 [B, next_n, H, D]", op));
  if (kv_cache.ndim() != 4 || kv_cache.shape(1) != 64 || kv_cache.shape(3) != q.shape(3) + 4)
    throw fi::ArgumentError(fmt::format("{}: kv_cache: expected uint8 [num_blocks, 64, 1, D + 4]", op));
  if (block_table.ndim() != 2 || block_table.shape(0) != q.shape(0))
    throw fi::ArgumentError(fmt::format("{}: block_table: expected int32 [B, max_blocks]", op));
  if (weights.ndim() != 2 || weights.shape(0) != q.shape(0) * q.shape(1) || weights.shape(1) != q.shape(2))
    throw fi::ArgumentError(fmt::format("{}: weights: expected float32 [B * next_n, H]", op));
  if (context_lens.ndim() < 1 || context_lens.ndim() > 2 || context_lens.shape(0) != q.shape(0) ||
      (context_lens.ndim() == 2 && context_lens.shape(1) != q.shape(1)))
    throw fi::ArgumentError(fmt::format("{}: context_lens: expected int32 [B] or [B, next_n]", op));
  fi::reference::PagedMqaLogitsInputs in;
  in.batch = static_cast<int>(q.shape(0));
  in.next_n = static_cast<int>(q.shape(1));
  in.heads = static_cast<int>(q.shape(2));
  in.head_dim = static_cast<int>(q.shape(3));
  in.block_size = 64;
  in.num_blocks = static_cast<int>(kv_cache.shape(0));
  in.kv_block_stride = static_cast<std::int64_t>(64 * kv_cache.shape(3));
  in.q = q.data();
  in.kv_cache = kv_cache.data();
  in.weights = weights.data();
  in.context_lens = context_lens.data();
  in.lens_2d = context_lens.ndim() == 2;
  in.block_table = block_table.data();
  in.block_table_stride = static_cast<std::int64_t>(block_table.shape(1));
  in.max_blocks = static_cast<int>(block_table.shape(1));
  return in;
}

void bind_reference(nb::module_& m) {
  nb::module_ r = m.def_submodule("reference",
                                  "The CPU reference of flash_indexer (docs/design/contract.md), on numpy arrays: the exact "
                                  "answers the GPU kernels are tested against.");
  r.def(
      "coarse_bin", [](float x) { return fi::coarse_bin(x); }, nb::arg("x"),
      "The coarse score bin (0..1023, bin 0 the largest scores) of a float32 score (contract §3).");
  r.def(
      "topk",
      [](HostArray<float> logits, std::vector<std::int64_t> lengths, int k, bool sorted) {
        if (logits.ndim() != 2) throw fi::ArgumentError("reference.topk: logits: expected 2 dimensions");
        if (lengths.size() != logits.shape(0))
          throw fi::ArgumentError(
              fmt::format("reference.topk: lengths: expected {} entries (rows), got {}", logits.shape(0), lengths.size()));
        if (k < 1 || k > fi::kMaxTopk)
          throw fi::ArgumentError(fmt::format("reference.topk: k: expected 1..{}, got {}", fi::kMaxTopk, k));
        const std::int64_t width = static_cast<std::int64_t>(logits.shape(1));
        std::vector<float> host(logits.data(), logits.data() + logits.size());
        fi::reference::TopkResult out = fi::reference::topk(host, width, width, lengths, k, sorted);
        const std::size_t rows = lengths.size();
        return std::make_tuple(to_numpy(std::move(out.indices), {rows, static_cast<std::size_t>(k)}),
                               to_numpy(std::move(out.values), {rows, static_cast<std::size_t>(k)}));
      },
      nb::arg("logits"), nb::arg("lengths"), nb::arg("k"), nb::kw_only(), nb::arg("sorted") = false,
      "The exact top-k of each row of a float32 [rows, width] array (contract §4): returns (indices int32 "
      "[rows, k], values float32 [rows, k]); -1 / -inf pad rows with fewer than k selectable columns.");
  r.def(
      "coarse_histogram",
      [](HostArray<double> logits, std::vector<std::int64_t> lengths, const std::string& stored) {
        if (logits.ndim() != 2) throw fi::ArgumentError("reference.coarse_histogram: logits: expected 2 dimensions");
        if (lengths.size() != logits.shape(0))
          throw fi::ArgumentError("reference.coarse_histogram: lengths: expected one entry per row");
        std::vector<double> host(logits.data(), logits.data() + logits.size());
        std::vector<std::int32_t> hist;
        fi::reference::add_coarse_histogram(host, static_cast<std::int64_t>(logits.shape(1)), lengths,
                                            logits_dtype("reference.coarse_histogram", stored), hist);
        return to_numpy(std::move(hist), {lengths.size(), static_cast<std::size_t>(fi::kCoarseBins)});
      },
      nb::arg("logits"), nb::arg("lengths"), nb::arg("stored") = "float32",
      "The 1024-bin coarse histogram (contract §3) of each row's live, non-NaN scores, rounded to `stored` "
      "first: int32 [rows, 1024].");
  r.def(
      "paged_mqa_logits",
      [](HostArray<std::uint8_t> q, HostArray<std::uint8_t> kv_cache, HostArray<float> weights,
         HostArray<std::int32_t> context_lens, HostArray<std::int32_t> block_table, std::int64_t width) {
        constexpr const char* op = "reference.paged_mqa_logits";
        fi::reference::PagedMqaLogitsInputs in = fp8_reference_inputs(op, q, kv_cache, weights, context_lens, block_table);
        if (width < 0) throw fi::ArgumentError(fmt::format("{}: width: expected >= 0, got {}", op, width));
        in.width = width;
        std::vector<double> out = fi::reference::paged_mqa_logits(in);
        return to_numpy(std::move(out), {static_cast<std::size_t>(in.batch) * in.next_n, static_cast<std::size_t>(width)});
      },
      nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"), nb::arg("width"),
      "The paged MQA logits (contract §1, §2) in double precision from the raw bytes: q uint8 (FP8 E4M3 bytes) "
      "[B, next_n, H, D], kv_cache uint8 [num_blocks, 64, 1, D + 4] (contiguous), weights float32 [B * next_n, H], "
      "context_lens int32 [B] or [B, next_n], block_table int32 [B, max_blocks]. Columns past a row's length "
      "are -inf; keys without a valid block NaN.");
  r.def(
      "top_blocks",
      [](HostArray<float> logits, std::vector<std::int64_t> lengths, int block, int k_blocks, bool keep_newest) {
        constexpr const char* op = "reference.top_blocks";
        if (logits.ndim() != 2) throw fi::ArgumentError(fmt::format("{}: logits: expected float32 [rows, width]", op));
        if (lengths.size() != logits.shape(0))
          throw fi::ArgumentError(
              fmt::format("{}: lengths: expected {} entries (rows), got {}", op, logits.shape(0), lengths.size()));
        if (block < 1) throw fi::ArgumentError(fmt::format("{}: block: expected >= 1, got {}", op, block));
        if (k_blocks < 1) throw fi::ArgumentError(fmt::format("{}: k_blocks: expected >= 1, got {}", op, k_blocks));
        const std::int64_t width = static_cast<std::int64_t>(logits.shape(1));
        std::vector<float> host(logits.data(), logits.data() + logits.size());
        std::vector<std::int32_t> out = fi::reference::top_blocks(host, width, width, lengths, block, k_blocks, keep_newest);
        return to_numpy(std::move(out), {lengths.size(), static_cast<std::size_t>(k_blocks)});
      },
      nb::arg("logits"), nb::arg("lengths"), nb::arg("block"), nb::arg("k_blocks"), nb::kw_only(), nb::arg("keep_newest") = false,
      "The first level of two-level indexing (docs/design/two-level.md): each row's `k_blocks` best blocks of "
      "`block` positions by their largest live score (NaN ignored; with keep_newest the row's last block always), "
      "as int32 [rows, k_blocks] block ids in ascending order, -1 padding.");
  r.def(
      "sparse_paged_mqa_logits",
      [](HostArray<std::uint8_t> q, HostArray<std::uint8_t> kv_cache, HostArray<float> weights,
         HostArray<std::int32_t> context_lens, HostArray<std::int32_t> block_table, HostArray<std::int32_t> candidates,
         int block) {
        constexpr const char* op = "reference.sparse_paged_mqa_logits";
        fi::reference::PagedMqaLogitsInputs in = fp8_reference_inputs(op, q, kv_cache, weights, context_lens, block_table);
        if (candidates.ndim() != 2 || candidates.shape(0) != q.shape(0) * q.shape(1))
          throw fi::ArgumentError(fmt::format("{}: candidates: expected int32 [B * next_n, C]", op));
        if (block < 1) throw fi::ArgumentError(fmt::format("{}: block: expected >= 1, got {}", op, block));
        in.width = std::numeric_limits<std::int32_t>::max();  // the sparse op clamps no length
        const int num_candidates = static_cast<int>(candidates.shape(1));
        std::vector<double> out = fi::reference::sparse_paged_mqa_logits(in, candidates.data(), num_candidates, block);
        return to_numpy(std::move(out), {static_cast<std::size_t>(in.batch) * in.next_n,
                                         static_cast<std::size_t>(num_candidates) * static_cast<std::size_t>(block)});
      },
      nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"),
      nb::arg("candidates"), nb::arg("block"),
      "The second level of two-level indexing in double precision (docs/design/two-level.md): the paged logits "
      "(arguments as reference.paged_mqa_logits, FP8) of each row over its candidate blocks (int32 [B * next_n, C]) "
      "of `block` positions, [B * next_n, C * block]; -inf where a candidate or position is not the row's.");
  r.def(
      "mqa_logits",
      [](HostArray<std::uint8_t> q, HostArray<std::uint8_t> kv, HostArray<float> kv_scales, HostArray<float> weights,
         HostArray<std::int32_t> ks, HostArray<std::int32_t> ke) {
        constexpr const char* op = "reference.mqa_logits";
        if (q.ndim() != 3) throw fi::ArgumentError(fmt::format("{}: q: expected uint8 [T, H, D]", op));
        if (kv.ndim() != 2 || kv.shape(1) != q.shape(2))
          throw fi::ArgumentError(fmt::format("{}: kv: expected uint8 [N, D] with the D of q", op));
        if (kv_scales.ndim() != 1 || kv_scales.shape(0) != kv.shape(0))
          throw fi::ArgumentError(fmt::format("{}: kv_scales: expected float32 [N]", op));
        if (weights.ndim() != 2 || weights.shape(0) != q.shape(0) || weights.shape(1) != q.shape(1))
          throw fi::ArgumentError(fmt::format("{}: weights: expected float32 [T, H]", op));
        if (ks.ndim() != 1 || ks.shape(0) != q.shape(0)) throw fi::ArgumentError(fmt::format("{}: ks: expected int32 [T]", op));
        if (ke.ndim() != 1 || ke.shape(0) != q.shape(0)) throw fi::ArgumentError(fmt::format("{}: ke: expected int32 [T]", op));
        fi::reference::MqaLogitsInputs in;
        in.tokens = static_cast<int>(q.shape(0));
        in.heads = static_cast<int>(q.shape(1));
        in.head_dim = static_cast<int>(q.shape(2));
        in.keys = static_cast<std::int64_t>(kv.shape(0));
        in.q = q.data();
        in.kv = kv.data();
        in.kv_scales = kv_scales.data();
        in.weights = weights.data();
        in.ks = ks.data();
        in.ke = ke.data();
        std::vector<double> out = fi::reference::mqa_logits(in);
        return to_numpy(std::move(out), {static_cast<std::size_t>(in.tokens), static_cast<std::size_t>(in.keys)});
      },
      nb::arg("q"), nb::arg("kv"), nb::arg("kv_scales"), nb::arg("weights"), nb::arg("ks"), nb::arg("ke"),
      "The prefill (ragged) MQA logits in double precision: token t scores keys [ks[t], ke[t]) of one contiguous "
      "buffer (clamped to [0, N]; empty when ke <= ks), with the score and NaN rules of the paged op. q uint8 "
      "(FP8 E4M3 bytes) [T, H, D], kv uint8 [N, D], kv_scales float32 [N], weights float32 [T, H], ks / ke int32 "
      "[T]. Returns float64 [T, N], -inf outside each window.");
  r.def(
      "topk_windows",
      [](HostArray<float> logits, std::vector<std::int64_t> starts, std::vector<std::int64_t> ends, int k, bool relative,
         bool sorted) {
        constexpr const char* op = "reference.topk_windows";
        if (logits.ndim() != 2) throw fi::ArgumentError(fmt::format("{}: logits: expected 2 dimensions", op));
        if (starts.size() != logits.shape(0) || ends.size() != logits.shape(0))
          throw fi::ArgumentError(fmt::format("{}: starts / ends: expected {} entries (rows), got {} / {}", op, logits.shape(0),
                                              starts.size(), ends.size()));
        if (k < 1 || k > fi::kMaxTopk) throw fi::ArgumentError(fmt::format("{}: k: expected 1..{}, got {}", op, fi::kMaxTopk, k));
        const std::int64_t width = static_cast<std::int64_t>(logits.shape(1));
        std::vector<float> host(logits.data(), logits.data() + logits.size());
        fi::reference::TopkResult out = fi::reference::topk_windows(host, width, width, starts, ends, k, relative, sorted);
        const std::size_t rows = starts.size();
        return std::make_tuple(to_numpy(std::move(out.indices), {rows, static_cast<std::size_t>(k)}),
                               to_numpy(std::move(out.values), {rows, static_cast<std::size_t>(k)}));
      },
      nb::arg("logits"), nb::arg("starts"), nb::arg("ends"), nb::arg("k"), nb::kw_only(), nb::arg("relative") = false,
      nb::arg("sorted") = false,
      "The exact top-k of each row's window [starts[r], ends[r]) of a float32 [rows, width] array (the rules of "
      "topk): returns (indices int32 [rows, k], absolute columns or, with relative=True, offsets from the "
      "window's start; values float32 [rows, k]); -1 / -inf pad.");
  r.def(
      "topk_merge",
      [](HostArray<float> values, HostArray<std::int32_t> positions, int k, bool sorted) {
        constexpr const char* op = "reference.topk_merge";
        if (values.ndim() != 3 || positions.ndim() != 3)
          throw fi::ArgumentError(fmt::format("{}: values / positions: expected 3 dimensions [D, rows, k_in]", op));
        for (std::size_t d = 0; d < 3; ++d)
          if (values.shape(d) != positions.shape(d))
            throw fi::ArgumentError(fmt::format("{}: positions: expected the shape of values", op));
        if (k < 1 || k > fi::kMaxTopk) throw fi::ArgumentError(fmt::format("{}: k: expected 1..{}, got {}", op, fi::kMaxTopk, k));
        const int ranks = static_cast<int>(values.shape(0));
        const std::int64_t rows = static_cast<std::int64_t>(values.shape(1));
        const int k_in = static_cast<int>(values.shape(2));
        fi::reference::TopkResult out = fi::reference::topk_merge(
            std::vector<float>(values.data(), values.data() + values.size()),
            std::vector<std::int32_t>(positions.data(), positions.data() + positions.size()), ranks, rows, k_in, k, sorted);
        const std::size_t n = static_cast<std::size_t>(rows);
        return std::make_tuple(to_numpy(std::move(out.indices), {n, static_cast<std::size_t>(k)}),
                               to_numpy(std::move(out.values), {n, static_cast<std::size_t>(k)}));
      },
      nb::arg("values"), nb::arg("positions"), nb::arg("k"), nb::kw_only(), nb::arg("sorted") = false,
      "The exact top-k of the union of candidate lists (float32 values and int32 global positions [D, rows, k_in]; "
      "a negative position is no candidate): returns (positions int32 [rows, k], values float32 [rows, k]).");
}

// A caller's buffer for a plan (uint8, contiguous, on the GPU), or none: the plan allocates.
fi::PlanMemory plan_memory(const char* op, const std::optional<AnyArray>& memory) {
  if (!memory) return {};
  const fi::TensorView v = device_view(op, "memory", *memory);
  if (v.dtype != fi::DType::u8 || v.rank != 1 || (v.shape[0] > 1 && v.strides[0] != 1) || v.data == nullptr)
    throw fi::ArgumentError(fmt::format("{}: memory: expected a contiguous, non-empty 1-D uint8 CUDA tensor", op));
  return {v.data, static_cast<std::size_t>(v.shape[0])};
}

// A DecodePlanConfig from the Python keywords (errors name `op`).
fi::DecodePlanConfig decode_plan_config(const char* op, int max_batch, int next_n, int heads, int head_dim, int k,
                                        const std::string& logits, std::int64_t max_context, bool histogram, bool physical_slots,
                                        bool sorted, const std::string& kv, bool pdl,
                                        std::optional<std::tuple<int, int, int>> dcp, const std::string& step = "automatic",
                                        int candidates = 0, int candidate_block = 8) {
  fi::DecodePlanConfig c;
  c.max_batch = max_batch;
  c.next_n = next_n;
  c.heads = heads;
  c.head_dim = head_dim;
  c.k = k;
  c.logits = logits_dtype(op, logits);
  c.max_context = max_context;
  c.histogram = histogram;
  c.physical_slots = physical_slots;
  c.sorted = sorted;
  c.kv = kv_format_of(op, kv);
  c.pdl = pdl;
  c.dcp = dcp_layout_of(dcp);
  c.step = decode_step_of(op, step);
  c.candidates = candidates;
  c.candidate_block = candidate_block;
  return c;
}

}  // namespace

NB_MODULE(_flash_indexer, m) {
  m.doc() = "FlashIndexer: JIT CUDA kernels for the DeepSeek Sparse Attention lightning indexer.";
  m.attr("__version__") = FLASH_INDEXER_VERSION;  // project() in CMakeLists.txt
  m.attr("MAX_TOPK") = fi::kMaxTopk;               // the largest k of every top-k call
  // ArgumentError before Error: nanobind tries translators newest first.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fi::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fi::ArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "paged_mqa_logits",
      [](AnyArray q, AnyArray kv_cache, AnyArray weights, AnyArray context_lens, AnyArray block_table, AnyArray logits,
         std::uintptr_t stream, bool fill_masked, std::optional<AnyArray> histogram, const std::string& variant,
         std::optional<AnyArray> q_scales, bool pdl, std::optional<std::tuple<int, int, int>> dcp) {
        constexpr const char* op = "paged_mqa_logits";
        fi::PagedMqaLogitsOptions o;
        o.fill_masked = fill_masked;
        o.histogram = optional_view(op, "histogram", histogram);
        o.variant = variant_of(op, variant);
        o.q_scales = optional_view(op, "q_scales", q_scales);
        o.pdl = pdl;
        o.dcp = dcp_layout_of(dcp);
        const fi::TensorView qv = query_view(op, q, q_scales.has_value()), kv = device_view(op, "kv_cache", kv_cache),
                             wv = device_view(op, "weights", weights), lv = device_view(op, "context_lens", context_lens),
                             tv = device_view(op, "block_table", block_table), ov = device_view(op, "logits", logits);
        nb::gil_scoped_release release;  // the first call of a configuration may compile for seconds
        fi::paged_mqa_logits(qv, kv, wv, lv, tv, ov, stream_of(stream), o);
      },
      nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"), nb::arg("logits"),
      nb::kw_only(), nb::arg("stream"), nb::arg("fill_masked") = false, nb::arg("histogram").none() = nb::none(),
      nb::arg("variant") = "automatic", nb::arg("q_scales").none() = nb::none(), nb::arg("pdl") = false,
      nb::arg("dcp").none() = nb::none(),
      "Writes the paged MQA logits into `logits` on `stream` (the C++ paged_mqa_logits; shapes and dtypes as "
      "there; q may also be given as its FP8 bytes, uint8). Optionally adds the coarse histogram of each row "
      "into `histogram` (int32 [rows, 1024]). With `q_scales` (int32 [B, next_n, H]) q is the packed E2M1 "
      "query (uint8 [B, next_n, H, D / 2]) of the MXFP4 cache. `pdl`: a programmatic dependent launch (sm_90+), "
      "scheduled while the stream's previous kernel ends. `dcp=(ranks, rank, interleave)`: the cache is that rank's "
      "shard and context_lens the global lengths (PagedMqaLogitsOptions::dcp).");

  m.def(
      "sparse_paged_mqa_logits",
      [](AnyArray q, AnyArray kv_cache, AnyArray weights, AnyArray context_lens, AnyArray block_table, AnyArray candidates,
         int candidate_block, AnyArray logits, std::uintptr_t stream, std::optional<AnyArray> histogram,
         std::optional<AnyArray> q_scales, bool pdl, bool masked_nan, const std::string& variant) {
        constexpr const char* op = "sparse_paged_mqa_logits";
        fi::SparsePagedMqaLogitsOptions o;
        o.variant = variant_of(op, variant);
        o.histogram = optional_view(op, "histogram", histogram);
        o.q_scales = optional_view(op, "q_scales", q_scales);
        o.pdl = pdl;
        o.masked_nan = masked_nan;
        const fi::TensorView qv = query_view(op, q, q_scales.has_value()), kv = device_view(op, "kv_cache", kv_cache),
                             wv = device_view(op, "weights", weights), lv = device_view(op, "context_lens", context_lens),
                             tv = device_view(op, "block_table", block_table), cv = device_view(op, "candidates", candidates),
                             ov = device_view(op, "logits", logits);
        nb::gil_scoped_release release;  // the first call of a configuration may compile
        fi::sparse_paged_mqa_logits(qv, kv, wv, lv, tv, cv, candidate_block, ov, stream_of(stream), o);
      },
      nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"),
      nb::arg("candidates"), nb::arg("candidate_block"), nb::arg("logits"), nb::kw_only(), nb::arg("stream"),
      nb::arg("histogram").none() = nb::none(), nb::arg("q_scales").none() = nb::none(), nb::arg("pdl") = false,
      nb::arg("masked_nan") = false, nb::arg("variant") = "automatic",
      "Writes the logits of each row over its candidate blocks into `logits` ([B * next_n, C * candidate_block]) on "
      "`stream`: the C++ sparse_paged_mqa_logits (docs/design/two-level.md); -inf (NaN with masked_nan) where a "
      "candidate or position is not one of the row's.");

  m.def(
      "mqa_logits",
      [](AnyArray q, AnyArray kv, AnyArray kv_scales, AnyArray weights, AnyArray ks, AnyArray ke, AnyArray logits,
         std::uintptr_t stream, bool fill_masked, std::optional<AnyArray> histogram, bool pdl, bool compressed) {
        constexpr const char* op = "mqa_logits";
        fi::MqaLogitsOptions o;
        o.fill_masked = fill_masked;
        o.compressed = compressed;
        o.histogram = optional_view(op, "histogram", histogram);
        o.pdl = pdl;
        fi::TensorView kvv = device_view(op, "kv", kv);
        if (kvv.dtype == fi::DType::u8) kvv.dtype = fi::DType::fp8_e4m3;
        const fi::TensorView qv = query_view(op, q), sv = device_view(op, "kv_scales", kv_scales),
                             wv = device_view(op, "weights", weights), sk = device_view(op, "ks", ks),
                             ek = device_view(op, "ke", ke), ov = device_view(op, "logits", logits);
        nb::gil_scoped_release release;  // the first call of a configuration may compile
        fi::mqa_logits(qv, kvv, sv, wv, sk, ek, ov, stream_of(stream), o);
      },
      nb::arg("q"), nb::arg("kv"), nb::arg("kv_scales"), nb::arg("weights"), nb::arg("ks"), nb::arg("ke"), nb::arg("logits"),
      nb::kw_only(), nb::arg("stream"), nb::arg("fill_masked") = false, nb::arg("histogram").none() = nb::none(),
      nb::arg("pdl") = false, nb::arg("compressed") = false,
      "Writes the ragged (prefill) MQA logits into `logits` (float32/16, bfloat16 [T, N]) on `stream`: token t "
      "scores keys [ks[t], ke[t]) of kv (FP8 [N, D]) with kv_scales (float32 [N]); the C++ mqa_logits. "
      "Optionally adds the coarse histogram of each row's window into `histogram` (int32 [T, 1024]). `pdl` as for "
      "paged_mqa_logits.");

  m.def(
      "topk",
      [](AnyArray logits, AnyArray lengths, AnyArray indices, AnyArray workspace, std::uintptr_t stream, bool sorted, int next_n,
         std::optional<AnyArray> histogram, std::optional<AnyArray> values, std::optional<AnyArray> block_table, int split,
         std::optional<AnyArray> row_starts, bool relative, bool pdl, std::optional<std::tuple<int, int, int>> dcp,
         int block_size) {
        constexpr const char* op = "topk";
        fi::TopkOptions o;
        o.sorted = sorted;
        o.next_n = next_n;
        o.histogram = optional_view(op, "histogram", histogram);
        o.values = optional_view(op, "values", values);
        o.block_table = optional_view(op, "block_table", block_table);
        o.block_size = block_size;
        o.split = split;
        o.row_starts = optional_view(op, "row_starts", row_starts);
        o.relative = relative;
        o.pdl = pdl;
        o.dcp = dcp_layout_of(dcp);
        const fi::TensorView lv = device_view(op, "logits", logits), nv = device_view(op, "lengths", lengths),
                             iv = device_view(op, "indices", indices), wv = device_view(op, "workspace", workspace);
        nb::gil_scoped_release release;
        fi::topk(lv, nv, iv, wv, stream_of(stream), o);
      },
      nb::arg("logits"), nb::arg("lengths"), nb::arg("indices"), nb::arg("workspace"), nb::kw_only(), nb::arg("stream"),
      nb::arg("sorted") = false, nb::arg("next_n") = 0, nb::arg("histogram").none() = nb::none(),
      nb::arg("values").none() = nb::none(), nb::arg("block_table").none() = nb::none(), nb::arg("split") = 0,
      nb::arg("row_starts").none() = nb::none(), nb::arg("relative") = false, nb::arg("pdl") = false,
      nb::arg("dcp").none() = nb::none(), nb::arg("block_size") = 64,
      "Writes the exact top-k column indices of each row into `indices` (int32 [rows, k]) on `stream` (the C++ "
      "topk). `workspace` is uint8 of at least topk_workspace_bytes(rows) bytes. With `row_starts` (int32 "
      "[rows]) row r selects from [row_starts[r], lengths[r]) (prefill windows), `relative` gives offsets "
      "from the window start; `pdl` and `dcp` as for paged_mqa_logits (with dcp the indices are global positions).");
  m.def(
      "topk_merge",
      [](AnyArray values, AnyArray positions, AnyArray indices, std::uintptr_t stream, std::optional<AnyArray> out_values,
         std::optional<AnyArray> owned, int ranks, int rank, int interleave, bool pdl) {
        constexpr const char* op = "topk_merge";
        fi::TopkMergeOptions o;
        o.values = optional_view(op, "out_values", out_values);
        o.owned = optional_view(op, "owned", owned);
        o.layout = {ranks, rank, interleave};
        o.pdl = pdl;
        const fi::TensorView vv = device_view(op, "values", values), pv = device_view(op, "positions", positions),
                             iv = device_view(op, "indices", indices);
        nb::gil_scoped_release release;
        fi::topk_merge(vv, pv, iv, stream_of(stream), o);
      },
      nb::arg("values"), nb::arg("positions"), nb::arg("indices"), nb::kw_only(), nb::arg("stream"),
      nb::arg("out_values").none() = nb::none(), nb::arg("owned").none() = nb::none(), nb::arg("ranks") = 1, nb::arg("rank") = 0,
      nb::arg("interleave") = 1, nb::arg("pdl") = false,
      "Writes the exact top-k (int32 [rows, k], ascending positions) of the union of candidate lists (values "
      "float32/16, bfloat16 and int32 global positions [D, rows, k_in]) on `stream` (the C++ topk_merge); "
      "`owned` gets rank `rank`'s share as local columns of the DCP layout (ranks, rank, interleave).");
  m.def("topk_workspace_bytes", &fi::topk_workspace_bytes, nb::arg("rows"), "Bytes of top-k workspace for `rows` rows.");
  m.def(
      "top_blocks",
      [](AnyArray logits, AnyArray lengths, int block, AnyArray blocks, AnyArray workspace, std::uintptr_t stream,
         bool keep_newest, int next_n) {
        constexpr const char* op = "top_blocks";
        fi::TopBlocksOptions o;
        o.keep_newest = keep_newest;
        o.next_n = next_n;
        const fi::TensorView lv = device_view(op, "logits", logits), nv = device_view(op, "lengths", lengths),
                             bv = device_view(op, "blocks", blocks), wv = device_view(op, "workspace", workspace);
        nb::gil_scoped_release release;
        fi::top_blocks(lv, nv, block, bv, wv, stream_of(stream), o);
      },
      nb::arg("logits"), nb::arg("lengths"), nb::arg("block"), nb::arg("blocks"), nb::arg("workspace"), nb::kw_only(),
      nb::arg("stream"), nb::arg("keep_newest") = false, nb::arg("next_n") = 0,
      "Writes each row's best blocks of `block` columns by their largest score (int32 [rows, k_blocks], ascending "
      "block ids, -1 padding) into `blocks` on `stream` (the C++ top_blocks: two-level indexing's first level). "
      "`workspace` is uint8 of at least top_blocks_workspace_bytes(rows, width, block, dtype) bytes; with next_n the "
      "lengths are per request (int32 [B], the MTP rule).");
  m.def(
      "top_blocks_workspace_bytes",
      [](std::int64_t rows, std::int64_t width, int block, const std::string& logits) {
        return fi::top_blocks_workspace_bytes(rows, width, block, logits_dtype("top_blocks_workspace_bytes", logits));
      },
      nb::arg("rows"), nb::arg("width"), nb::arg("block"), nb::arg("logits") = "float32",
      "Bytes of top_blocks workspace for `rows` rows of `width` logits of dtype `logits`.");

  m.def(
      "warm_paged_mqa_logits",
      [](int next_n, int heads, int head_dim, bool histogram, const std::string& logits, const std::string& variant,
         const std::optional<std::string>& arch) {
        fi::PagedMqaLogitsConfig c;
        if (arch) c.arch = fi::Arch::parse(*arch, "warm_paged_mqa_logits: arch");
        c.next_n = next_n;
        c.heads = heads;
        c.head_dim = head_dim;
        c.histogram = histogram;
        c.logits = logits_dtype("warm_paged_mqa_logits", logits);
        c.variant = variant_of("warm_paged_mqa_logits", variant);
        nb::gil_scoped_release release;
        fi::warm_paged_mqa_logits(c);
      },
      nb::arg("next_n"), nb::arg("heads"), nb::arg("head_dim"), nb::kw_only(), nb::arg("histogram") = false,
      nb::arg("logits") = "float32", nb::arg("variant") = "automatic", nb::arg("arch") = nb::none(),
      "Loads (compiling on a cache miss) a logits kernel in the current CUDA context (device 0's primary context "
      "where there is none), before graph capture; with arch ('sm_90a'), compiles it into the kernel cache only, "
      "without a GPU.");
  m.def(
      "warm_mqa_logits",
      [](int heads, int head_dim, bool histogram, const std::string& logits, const std::string& variant,
         const std::optional<std::string>& arch) {
        fi::MqaLogitsConfig c;
        if (arch) c.arch = fi::Arch::parse(*arch, "warm_mqa_logits: arch");
        c.heads = heads;
        c.head_dim = head_dim;
        c.histogram = histogram;
        c.logits = logits_dtype("warm_mqa_logits", logits);
        c.variant = variant_of("warm_mqa_logits", variant);
        nb::gil_scoped_release release;
        fi::warm_mqa_logits(c);
      },
      nb::arg("heads"), nb::arg("head_dim"), nb::kw_only(), nb::arg("histogram") = false, nb::arg("logits") = "float32",
      nb::arg("variant") = "automatic", nb::arg("arch") = nb::none(),
      "Loads (compiling on a cache miss) a prefill logits kernel in the current CUDA context (device 0's primary "
      "context where there is none), before graph capture; with arch ('sm_90a'), compiles it into the kernel "
      "cache only, without a GPU.");
  m.def(
      "warm_topk",
      [](const std::string& logits, const std::optional<std::string>& arch) {
        const fi::LogitsDType t = logits_dtype("warm_topk", logits);
        const std::optional<fi::Arch> target =
            arch ? std::optional<fi::Arch>(fi::Arch::parse(*arch, "warm_topk: arch")) : std::nullopt;
        nb::gil_scoped_release release;
        if (target) fi::warm_topk(t, *target);
        else fi::warm_topk(t);
      },
      nb::arg("logits") = "float32", nb::kw_only(), nb::arg("arch") = nb::none(),
      "Loads every top-k selector topk() may pick for this logits dtype in the current CUDA context (device 0's "
      "primary context where there is none); with arch ('sm_90a'), compiles them into the kernel cache only, "
      "without a GPU.");

  m.def("cache_directory", [] { return fi::cache_directory().string(); }, "The kernel cache directory in use.");
  m.def(
      "indexer_presets",
      [] {
        nb::list out;
        for (const fi::IndexerPreset& p : fi::indexer_presets()) out.append(preset_dict(p));
        return out;
      },
      "The model presets (model_presets.hpp), each a dict: name, heads, head_dim, k, kv, next_n, max_context.");
  m.def(
      "indexer_preset",
      [](const std::string& name) {
        const fi::IndexerPreset* p = fi::find_indexer_preset(name);
        if (!p)
          throw fi::ArgumentError(
              fmt::format("indexer_preset: name: no preset '{}' (presets: {})", name, fi::indexer_preset_names()));
        return preset_dict(*p);
      },
      nb::arg("name"), "The preset of that name (case-insensitive; 'deepseek-' may be left out) as a dict; ValueError if none.");
  m.def(
      "set_cache_directory", [](const std::string& dir) { fi::set_cache_directory(dir); }, nb::arg("directory"),
      "Overrides FLASH_INDEXER_CACHE_DIR for this process ('' goes back to the environment).");
  m.def("jit_enabled", &fi::jit_enabled, "False when FLASH_INDEXER_JIT=off (cache misses are errors).");

  nb::class_<fi::DecodePlan>(m, "DecodePlan",
                             "The decode indexer in one capturable call: histogram zeroed, logits + histogram, "
                             "top-k. Create it in the CUDA context (device) it will run in.")
      .def(
          "__init__",
          [](fi::DecodePlan* self, int max_batch, int next_n, int heads, int head_dim, int k, const std::string& logits,
             std::int64_t max_context, bool histogram, bool physical_slots, bool sorted, const std::string& kv, bool pdl,
             std::optional<std::tuple<int, int, int>> dcp, std::optional<AnyArray> memory, const std::string& step,
             int candidates, int candidate_block) {
            const fi::DecodePlanConfig c =
                decode_plan_config("DecodePlan", max_batch, next_n, heads, head_dim, k, logits, max_context, histogram,
                                   physical_slots, sorted, kv, pdl, dcp, step, candidates, candidate_block);
            const fi::PlanMemory buffer = plan_memory("DecodePlan", memory);
            nb::gil_scoped_release release;
            new (self) fi::DecodePlan(c, buffer);
          },
          nb::kw_only(), nb::arg("max_batch"), nb::arg("next_n"), nb::arg("heads"), nb::arg("head_dim"), nb::arg("k"),
          nb::arg("logits") = "float16", nb::arg("max_context") = 131072, nb::arg("histogram") = true,
          nb::arg("physical_slots") = false, nb::arg("sorted") = false, nb::arg("kv") = "fp8", nb::arg("pdl") = false,
          nb::arg("dcp").none() = nb::none(), nb::arg("memory").none() = nb::none(), nb::arg("step") = "automatic",
          nb::arg("candidates") = 0, nb::arg("candidate_block") = 8)
      .def_static(
          "required_bytes",
          [](int max_batch, int next_n, int heads, int head_dim, int k, const std::string& logits, std::int64_t max_context,
             bool histogram, bool physical_slots, bool sorted, const std::string& kv, bool pdl,
             std::optional<std::tuple<int, int, int>> dcp, const std::string& step, int candidates, int candidate_block) {
            return fi::DecodePlan::required_bytes(decode_plan_config("DecodePlan", max_batch, next_n, heads, head_dim, k, logits,
                                                                     max_context, histogram, physical_slots, sorted, kv, pdl, dcp,
                                                                     step, candidates, candidate_block));
          },
          nb::kw_only(), nb::arg("max_batch"), nb::arg("next_n"), nb::arg("heads"), nb::arg("head_dim"), nb::arg("k"),
          nb::arg("logits") = "float16", nb::arg("max_context") = 131072, nb::arg("histogram") = true,
          nb::arg("physical_slots") = false, nb::arg("sorted") = false, nb::arg("kv") = "fp8", nb::arg("pdl") = false,
          nb::arg("dcp").none() = nb::none(), nb::arg("step") = "automatic", nb::arg("candidates") = 0,
          nb::arg("candidate_block") = 8,
          "The device memory (bytes) a plan of this configuration works in: the size of `memory`.")
      .def(
          "run",
          [](const fi::DecodePlan& plan, AnyArray q, AnyArray kv_cache, AnyArray weights, AnyArray context_lens,
             AnyArray block_table, AnyArray indices, std::uintptr_t stream, std::optional<AnyArray> q_scales,
             std::optional<AnyArray> candidates) {
            constexpr const char* op = "DecodePlan.run";
            const fi::TensorView sv = optional_view(op, "q_scales", q_scales), cv = optional_view(op, "candidates", candidates);
            const fi::TensorView qv = query_view(op, q, q_scales.has_value()), kv = device_view(op, "kv_cache", kv_cache),
                                 wv = device_view(op, "weights", weights), lv = device_view(op, "context_lens", context_lens),
                                 tv = device_view(op, "block_table", block_table), iv = device_view(op, "indices", indices);
            nb::gil_scoped_release release;
            if (candidates) plan.run_second_level(qv, sv, kv, wv, lv, tv, cv, iv, stream_of(stream));
            else plan.run(qv, sv, kv, wv, lv, tv, iv, stream_of(stream));
          },
          nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"),
          nb::arg("indices"), nb::kw_only(), nb::arg("stream"), nb::arg("q_scales").none() = nb::none(),
          nb::arg("candidates").none() = nb::none(),
          "Writes the top-k indices (int32 [B * next_n, k]) of one decode step on `stream`; an MXFP4 plan "
          "(kv='mxfp4') takes the packed query and its exponents (`q_scales`); a second-level plan "
          "(candidates > 0) takes each row's candidate blocks (`candidates`) and writes context positions.")
      .def(
          "top_blocks",
          [](const fi::DecodePlan& plan, AnyArray context_lens, int block, AnyArray blocks, AnyArray workspace,
             std::uintptr_t stream, bool keep_newest) {
            constexpr const char* op = "DecodePlan.top_blocks";
            const fi::TensorView lv = device_view(op, "context_lens", context_lens), bv = device_view(op, "blocks", blocks),
                                 wv = device_view(op, "workspace", workspace);
            nb::gil_scoped_release release;
            plan.top_blocks(lv, block, bv, wv, stream_of(stream), keep_newest);
          },
          nb::arg("context_lens"), nb::arg("block"), nb::arg("blocks"), nb::arg("workspace"), nb::kw_only(), nb::arg("stream"),
          nb::arg("keep_newest") = true,
          "The first level of two-level indexing over the logits of the last run (the C++ DecodePlan::top_blocks): "
          "each row's best blocks of `block` keys into `blocks` (int32 [B * next_n, k_blocks]).")
      .def_prop_ro("width", &fi::DecodePlan::width, "Columns of the plan's logits buffer.")
      .def_prop_ro("workspace_bytes", &fi::DecodePlan::workspace_bytes, "Device memory the plan holds.")
      .def_prop_ro("max_batch", [](const fi::DecodePlan& p) { return p.config().max_batch; })
      .def_prop_ro("next_n", [](const fi::DecodePlan& p) { return p.config().next_n; })
      .def_prop_ro("k", [](const fi::DecodePlan& p) { return p.config().k; })
      .def_prop_ro("one_pass", &fi::DecodePlan::one_pass, "Whether run() launches the one-pass kernel (step).");

  nb::class_<fi::DcpDecodePlan>(m, "DcpDecodePlan",
                                "The decode indexer of one rank of a DCP group: its shard's logits and local top-k, "
                                "an NCCL all-gather of the candidates and the exact global top-k, in one capturable "
                                "call. Create it with the rank's CUDA device current.")
      .def(
          "__init__",
          [](fi::DcpDecodePlan* self, std::uintptr_t comm, std::tuple<int, int, int> dcp, int max_batch, int next_n, int heads,
             int head_dim, int k, const std::string& logits, std::int64_t max_context, bool histogram, bool sorted,
             const std::string& kv, bool pdl) {
            const fi::DecodePlanConfig c = decode_plan_config("DcpDecodePlan", max_batch, next_n, heads, head_dim, k, logits,
                                                              max_context, histogram, false, sorted, kv, pdl, dcp);
            nb::gil_scoped_release release;
            new (self) fi::DcpDecodePlan(c, reinterpret_cast<ncclComm_t>(comm));
          },
          nb::kw_only(), nb::arg("comm"), nb::arg("dcp"), nb::arg("max_batch"), nb::arg("next_n"), nb::arg("heads"),
          nb::arg("head_dim"), nb::arg("k"), nb::arg("logits") = "float16", nb::arg("max_context") = 131072,
          nb::arg("histogram") = true, nb::arg("sorted") = false, nb::arg("kv") = "fp8", nb::arg("pdl") = false)
      .def(
          "run",
          [](const fi::DcpDecodePlan& plan, AnyArray q, AnyArray kv_cache, AnyArray weights, AnyArray context_lens,
             AnyArray block_table, AnyArray indices, std::uintptr_t stream, std::optional<AnyArray> owned,
             std::optional<AnyArray> q_scales) {
            constexpr const char* op = "DcpDecodePlan.run";
            const fi::TensorView sv = optional_view(op, "q_scales", q_scales), ov = optional_view(op, "owned", owned);
            const fi::TensorView qv = query_view(op, q, q_scales.has_value()), kv = device_view(op, "kv_cache", kv_cache),
                                 wv = device_view(op, "weights", weights), lv = device_view(op, "context_lens", context_lens),
                                 tv = device_view(op, "block_table", block_table), iv = device_view(op, "indices", indices);
            nb::gil_scoped_release release;
            plan.run(qv, sv, kv, wv, lv, tv, iv, ov, stream_of(stream));
          },
          nb::arg("q"), nb::arg("kv_cache"), nb::arg("weights"), nb::arg("context_lens"), nb::arg("block_table"),
          nb::arg("indices"), nb::kw_only(), nb::arg("stream"), nb::arg("owned").none() = nb::none(),
          nb::arg("q_scales").none() = nb::none(),
          "Writes the global top-k (int32 [B * next_n, k], the same on every rank) and, with `owned`, this "
          "rank's share as local columns, on `stream`.")
      .def_prop_ro("workspace_bytes", &fi::DcpDecodePlan::workspace_bytes, "Device memory the plan holds.");

  bind_reference(m);
}
