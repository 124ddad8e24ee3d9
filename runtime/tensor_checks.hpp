#pragma once
// Argument checks shared by the ops' validation functions. Each throws ArgumentError
// "<op>: <argument>: expected <what>, got <value>".
//
// rank() is the first structural check of every tensor: besides the number of dimensions it rejects
// negative sizes and strides and a view whose byte extent does not fit the address space, so every
// product of one tensor's dims and strides that a later check or the kernel computes fits in int64.
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/tensor.hpp"

namespace flash_indexer {

class TensorChecks {
 public:
  TensorChecks(std::string_view op, std::string_view name, const TensorView& view) : op_(op), name_(name), v_(view) {}

  [[noreturn]] void fail(std::string_view expected, const std::string& got) const {
    throw ArgumentError(fmt::format("{}: {}: expected {}, got {}", op_, name_, expected, got));
  }

  const TensorChecks& dtype(std::initializer_list<DType> allowed) const {
    std::string names;
    for (DType t : allowed) {
      if (t == v_.dtype) return *this;
      names += names.empty() ? dtype_name(t) : fmt::format(" or {}", dtype_name(t));
    }
    fail(fmt::format("dtype {}", names), dtype_name(v_.dtype));
  }
  const TensorChecks& rank(std::initializer_list<int> allowed) const {
    std::string ranks;
    bool found = false;
    for (int r : allowed) {
      found = found || r == v_.rank;
      ranks += ranks.empty() ? std::to_string(r) : fmt::format(" or {}", r);
    }
    if (!found) fail(fmt::format("{} dimensions", ranks), std::to_string(v_.rank));
    for (int d = 0; d < v_.rank; ++d)
      if (v_.shape[d] < 0) fail(fmt::format("shape[{}] >= 0", d), shape());
    for (int d = 0; d < v_.rank; ++d)
      if (v_.strides[d] < 0) fail(fmt::format("strides[{}] >= 0", d), strides());
    extent_bytes();
    return *this;
  }
  // Bytes from the first to one past the last element (0 for an empty view); fails beyond 2^48 (no GPU
  // maps more), which also keeps every element offset the kernels compute far from int64 overflow.
  std::int64_t extent_bytes() const {
    constexpr std::int64_t kLimit = std::int64_t{1} << 48;
    std::int64_t last = 0;  // offset of the last element, in elements
    for (int d = 0; d < v_.rank; ++d) {
      if (v_.shape[d] == 0) return 0;
      std::int64_t step = 0;
      if (__builtin_mul_overflow(v_.shape[d] - 1, v_.strides[d], &step) || __builtin_add_overflow(last, step, &last) ||
          last >= kLimit)
        fail("a tensor of at most 2^48 bytes", fmt::format("shape {} strides {}", shape(), strides()));
    }
    const std::int64_t bytes = (last + 1) * static_cast<std::int64_t>(dtype_size(v_.dtype));
    if (bytes > kLimit) fail("a tensor of at most 2^48 bytes", fmt::format("shape {} strides {}", shape(), strides()));
    return bytes;
  }
  const TensorChecks& dim(int d, std::int64_t expected, std::string_view meaning) const {
    if (v_.shape[d] != expected) fail(fmt::format("shape[{}] = {} ({})", d, expected, meaning), std::to_string(v_.shape[d]));
    return *this;
  }
  const TensorChecks& contiguous() const {
    if (!v_.is_contiguous()) fail("a contiguous tensor", fmt::format("shape {} strides {}", shape(), strides()));
    return *this;
  }
  const TensorChecks& stride(int d, std::int64_t expected) const {
    if (v_.shape[d] > 1 && v_.strides[d] != expected)
      fail(fmt::format("strides[{}] = {}", d, expected), std::to_string(v_.strides[d]));
    return *this;
  }
  const TensorChecks& aligned(std::size_t bytes) const {
    if (reinterpret_cast<std::uintptr_t>(v_.data) % bytes != 0)
      fail(fmt::format("a {}-byte aligned data pointer", bytes), fmt::format("{}", v_.data));
    return *this;
  }
  const TensorChecks& not_null() const {
    if (v_.data == nullptr && v_.numel() > 0) fail("a device pointer", "nullptr");
    return *this;
  }

  std::string shape() const { return fmt::format("[{}]", fmt::join(v_.shape.begin(), v_.shape.begin() + v_.rank, ", ")); }
  std::string strides() const { return fmt::format("[{}]", fmt::join(v_.strides.begin(), v_.strides.begin() + v_.rank, ", ")); }

 private:
  std::string_view op_;
  std::string_view name_;
  const TensorView& v_;
};

// A coarse histogram argument (contract §3): int32 [rows, 1024], contiguous, 8-byte aligned; `rows_name`
// says where its rows come from.
inline void check_coarse_histogram(std::string_view op, const TensorView& histogram, std::int64_t rows,
                                   std::string_view rows_name) {
  TensorChecks(op, "histogram", histogram)
      .dtype({DType::i32})
      .rank({2})
      .dim(0, rows, rows_name)
      .dim(1, kCoarseBins, "coarse bins")
      .contiguous()
      .not_null()
      .aligned(8);
}

}  // namespace flash_indexer
