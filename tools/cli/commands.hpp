#pragma once
// The commands of flash-indexer, one function each; they return the process exit code and throw
// UsageError for wrong arguments.
#include <string>

#include "cli_args.hpp"

namespace flash_indexer::cli {

int cmd_warm(const Args& args);   // cache_commands.cpp
int cmd_list(const Args& args);
int cmd_clear(const Args& args);
int cmd_info(const Args& args);
int cmd_check(const Args& args);  // check_commands.cpp
int cmd_recall(const Args& args);
int cmd_bench(const std::string& what, const Args& args);  // bench_commands.cpp
int cmd_presets(const Args& args);                         // preset_commands.cpp

}  // namespace flash_indexer::cli
