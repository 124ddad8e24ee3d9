#pragma once
#include <string>

namespace flash_indexer {

// Sends a warning to the handler installed with set_warning_handler (stderr by default).
void warn(const std::string& message);

}  // namespace flash_indexer
