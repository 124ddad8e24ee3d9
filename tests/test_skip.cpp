// test::skip ends only the test case that calls it: the probe pair below runs as one CTest test (see
// tests/CMakeLists.txt), which passes only if the second case ran after the first one skipped.
#include "catch_compat.hpp"
#include "test_support.hpp"

using namespace flash_indexer;

TEST_CASE("skip probe: this case skips", "[.][skip-probe]") { test::skip("the probe's skip"); }

TEST_CASE("skip probe: the case after it still runs", "[.][skip-probe]") { SUCCEED("ran after the skip"); }
