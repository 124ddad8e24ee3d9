#pragma once
// A non-owning view of a tensor in device memory: pointer, element type, shape and strides.
// Strides count elements, not bytes (as in PyTorch), so a view maps 1:1 onto a torch.Tensor.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "flash_indexer/error.hpp"

namespace flash_indexer {

enum class DType : std::uint8_t { u8, i32, f32, f16, bf16, fp8_e4m3 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::u8: return 1;
    case DType::fp8_e4m3: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::f32: return 4;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::u8: return "uint8";
    case DType::fp8_e4m3: return "float8_e4m3";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::f32: return "float32";
  }
  return "?";
}

struct TensorView {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::u8;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements

  // A contiguous (row-major) view.
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape) {
    if (shape.size() > kMaxRank) throw ArgumentError("TensorView: at most 4 dimensions");
    TensorView v;
    v.data = const_cast<void*>(data);
    v.dtype = dtype;
    v.rank = static_cast<int>(shape.size());
    std::copy(shape.begin(), shape.end(), v.shape.begin());
    std::int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      v.strides[d] = stride;
      stride *= v.shape[d];
    }
    return v;
  }

  // The same view with explicit strides (in elements), one per dimension.
  TensorView with_strides(std::initializer_list<std::int64_t> new_strides) const {
    if (static_cast<int>(new_strides.size()) != rank) throw ArgumentError("TensorView::with_strides: one stride per dimension");
    TensorView v = *this;
    std::copy(new_strides.begin(), new_strides.end(), v.strides.begin());
    return v;
  }

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank && d < kMaxRank; ++d) n *= shape[d];
    return n;
  }
  bool is_contiguous() const {
    if (numel() == 0) return true;  // as in PyTorch: an empty view has no layout to get wrong
    std::int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != stride) return false;
      stride *= shape[d];
    }
    return true;
  }
};

}  // namespace flash_indexer
