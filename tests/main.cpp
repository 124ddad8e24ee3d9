// Catch2 v2's main (with v3 the tests link Catch2::Catch2WithMain instead of this file). It records
// whether the run selected one test case, which is what test::skip needs to know under v2.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.hpp"
#include "test_support.hpp"

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  const Catch::Config& config = session.config();
  flash_indexer::test::set_test_cases_selected(
      Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config).size());
  return session.run();
}
