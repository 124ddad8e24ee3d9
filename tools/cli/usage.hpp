#pragma once
// The usage texts of flash-indexer and of each command.
#include <map>
#include <string>

namespace flash_indexer::cli {

extern const char* const kMainUsage;
extern const std::map<std::string, std::string> kUsages;  // command -> its usage

}  // namespace flash_indexer::cli
