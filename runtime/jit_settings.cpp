#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "flash_indexer/jit.hpp"
#include "warnings.hpp"

namespace flash_indexer {
namespace {

std::mutex settings_mutex;
std::filesystem::path cache_dir_override;

WarningHandler& handler() {
  static WarningHandler h = [](const std::string& message) {
    std::fprintf(stderr, "flash_indexer: warning: %s\n", message.c_str());
  };
  return h;
}

const char* non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

}  // namespace

std::filesystem::path cache_directory() {
  {
    std::lock_guard lock(settings_mutex);
    if (!cache_dir_override.empty()) return cache_dir_override;
  }
  if (const char* dir = non_empty_env("FLASH_INDEXER_CACHE_DIR")) return dir;
  if (const char* xdg = non_empty_env("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "flash_indexer";
  if (const char* home = non_empty_env("HOME")) return std::filesystem::path(home) / ".cache" / "flash_indexer";
  return std::filesystem::temp_directory_path() / "flash_indexer";
}

void set_cache_directory(const std::filesystem::path& dir) {
  std::lock_guard lock(settings_mutex);
  cache_dir_override = dir;
}

bool jit_enabled() {
  const char* value = non_empty_env("FLASH_INDEXER_JIT");
  if (value == nullptr) return true;
  const std::string_view v(value);
  return !(v == "off" || v == "0" || v == "false" || v == "OFF");
}

WarningHandler set_warning_handler(WarningHandler h) {
  std::lock_guard lock(settings_mutex);
  WarningHandler previous = std::move(handler());
  handler() = std::move(h);
  return previous;
}

void warn(const std::string& message) {
  WarningHandler h;
  {
    std::lock_guard lock(settings_mutex);
    h = handler();
  }
  if (h) h(message);
}

}  // namespace flash_indexer
