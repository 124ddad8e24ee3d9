#pragma once
// Command-line plumbing of flash-indexer: the usage error, one command's options, and list parsing.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flash_indexer/jit.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"

namespace flash_indexer::cli {

namespace fi = flash_indexer;

// Exit code of a usage error (wrong or missing arguments).
constexpr int kUsageError = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Options of one command: --flag and --name VALUE.
class Args {
 public:
  Args(std::string command, int argc, char** argv, std::vector<std::string> flags, std::vector<std::string> valued)
      : command_(std::move(command)) {
    for (int i = 0; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        help_ = true;
      } else if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
        values_[a] = "";
      } else if (std::find(valued.begin(), valued.end(), a) != valued.end()) {
        if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", a));
        values_[a] = argv[++i];
      } else {
        throw UsageError(fmt::format("unknown argument '{}'", a));
      }
    }
  }
  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  int int_value(const std::string& name, int fallback, int min) const {
    auto v = value(name);
    if (!v) return fallback;
    try {
      std::size_t used = 0;
      const int n = std::stoi(*v, &used);
      if (used == v->size() && n >= min) return n;
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("{} expects an integer >= {}, got '{}'", name, min, *v));
  }
  void apply_cache_dir() const {
    if (auto dir = value("--cache-dir")) fi::set_cache_directory(*dir);
  }

 private:
  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
};

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& text);
// A comma-separated list of integers >= minimum; a UsageError naming `name` otherwise.
std::vector<int> parse_int_list(const std::string& name, const std::string& text, int minimum = 1);
// f32, f16 and/or bf16.
std::vector<fi::LogitsDType> parse_dtypes(const std::string& text);
// 0 and/or 1.
std::vector<int> parse_flags(const std::string& name, const std::string& text);
// --k, one top-k size in 1..kMaxTopk (`fallback` without it).
int parse_k(const Args& args, int fallback);

}  // namespace flash_indexer::cli
