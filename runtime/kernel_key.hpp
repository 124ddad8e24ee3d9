#pragma once
// Pieces shared by the ops' kernel keys ("<op>.<variant>.<field>...<arch>").
#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <string_view>
#include <vector>

#include "flash_indexer/error.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"

namespace flash_indexer {

inline std::vector<std::string_view> split_key(std::string_view key) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

// "<prefix><number>" -> number; throws Error naming the key otherwise.
inline int parse_int_after(std::string_view part, std::string_view prefix, std::string_view key) {
  int value = 0;
  if (part.starts_with(prefix)) {
    const std::string_view digits = part.substr(prefix.size());
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) return value;
  }
  throw Error(fmt::format("kernel key \"{}\": expected \"{}<number>\", got \"{}\"", key, prefix, part));
}

inline const char* logits_name(LogitsDType t) {
  switch (t) {
    case LogitsDType::f32: return "f32";
    case LogitsDType::f16: return "f16";
    case LogitsDType::bf16: return "bf16";
  }
  return "?";
}

inline const char* kv_name(KvFormat kv) { return kv == KvFormat::mxfp4 ? "mxfp4" : "fp8"; }

inline std::optional<KvFormat> kv_from_name(std::string_view name) {
  if (name == "fp8") return KvFormat::fp8;
  if (name == "mxfp4") return KvFormat::mxfp4;
  return std::nullopt;
}

inline std::optional<LogitsDType> logits_from_name(std::string_view name) {
  if (name == "f32") return LogitsDType::f32;
  if (name == "f16") return LogitsDType::f16;
  if (name == "bf16") return LogitsDType::bf16;
  return std::nullopt;
}

inline LogitsDType logits_dtype_of(DType t) {
  return t == DType::f16 ? LogitsDType::f16 : t == DType::bf16 ? LogitsDType::bf16 : LogitsDType::f32;
}

}  // namespace flash_indexer
