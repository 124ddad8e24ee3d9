#pragma once
// Argument checks shared by the ops' validation functions. Each throws Error
// "<op>: <argument>: expected <what>, got <value>".
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "flash_indexer/error.hpp"
#include "flash_indexer/tensor.hpp"

namespace flash_indexer {

class TensorChecks {
 public:
  TensorChecks(std::string_view op, std::string_view name, const TensorView& view) : op_(op), name_(name), v_(view) {}

  [[noreturn]] void fail(std::string_view expected, const std::string& got) const {
    throw Error(fmt::format("{}: {}: expected {}, got {}", op_, name_, expected, got));
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
    for (int r : allowed) {
      if (r == v_.rank) return *this;
      ranks += ranks.empty() ? std::to_string(r) : fmt::format(" or {}", r);
    }
    fail(fmt::format("{} dimensions", ranks), std::to_string(v_.rank));
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
  std::string strides() const {
    return fmt::format("[{}]", fmt::join(v_.strides.begin(), v_.strides.begin() + v_.rank, ", "));
  }

 private:
  std::string_view op_;
  std::string_view name_;
  const TensorView& v_;
};

}  // namespace flash_indexer
