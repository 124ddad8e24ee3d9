#pragma once
// The exception types of the library. Every failure (bad argument, NVRTC, driver, cache) is reported as
// a flash_indexer::Error whose message names what failed and why; a bad argument or configuration (the
// caller's mistake, detected before anything is enqueued) is the subclass ArgumentError.
#include <stdexcept>
#include <string>

namespace flash_indexer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class ArgumentError : public Error {
 public:
  using Error::Error;
};

}  // namespace flash_indexer
