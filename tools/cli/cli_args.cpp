#include "cli_args.hpp"

#include "flash_indexer/topk.hpp"

namespace flash_indexer::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& name, const std::string& text, int minimum) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    try {
      std::size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < minimum) throw std::invalid_argument(item);
      out.push_back(n);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} expects {} integers separated by commas, got '{}'", name,
                                   minimum == 1 ? "positive" : "non-negative", text));
    }
    start = comma + 1;
  }
  return out;
}

std::vector<fi::LogitsDType> parse_dtypes(const std::string& text) {
  std::vector<fi::LogitsDType> out;
  for (const std::string& item : split_list(text)) {
    if (item == "f32") out.push_back(fi::LogitsDType::f32);
    else if (item == "f16") out.push_back(fi::LogitsDType::f16);
    else if (item == "bf16") out.push_back(fi::LogitsDType::bf16);
    else throw UsageError(fmt::format("--dtype expects f32, f16 or bf16, got '{}'", item));
  }
  return out;
}

std::vector<int> parse_flags(const std::string& name, const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    if (item != "0" && item != "1") throw UsageError(fmt::format("{} expects 0 and/or 1, got '{}'", name, text));
    out.push_back(item == "1");
  }
  return out;
}

int parse_k(const Args& args, int fallback) {
  const int k = args.int_value("--k", fallback, 1);
  if (k > fi::kMaxTopk) throw UsageError(fmt::format("--k expects 1..{}, got {}", fi::kMaxTopk, k));
  return k;
}

}  // namespace flash_indexer::cli
