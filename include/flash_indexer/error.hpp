#pragma once
// The one exception type of the library. Every failure (bad argument, NVRTC, driver, cache) is
// reported as a flash_indexer::Error whose message names what failed and why.
#include <stdexcept>
#include <string>

namespace flash_indexer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace flash_indexer
