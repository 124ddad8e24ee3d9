// Catch2 v2's main (with v3 the tests link Catch2::Catch2WithMain instead of this file).
#define CATCH_CONFIG_MAIN
#include "catch_compat.hpp"
