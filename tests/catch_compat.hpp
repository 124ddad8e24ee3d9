#pragma once
// Catch2 v2 (Debian 12) or v3 (Ubuntu 24.04, newer distributions), whichever the build found
// (FLASH_INDEXER_CATCH2_MAJOR, set by tests/CMakeLists.txt). The tests include this header and use
// test::Contains for a substring matcher (v2 calls it Contains, v3 ContainsSubstring).
#include <string>

#if FLASH_INDEXER_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

namespace flash_indexer::test {

inline auto Contains(const std::string& text) {
#if FLASH_INDEXER_CATCH2_MAJOR >= 3
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}

}  // namespace flash_indexer::test
