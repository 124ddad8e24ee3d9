// flash-indexer: warm, list, clear and inspect the kernel cache; check and benchmark the kernels on the
// GPU. This file parses the command and dispatches; the commands live in cli/.
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "commands.hpp"
#include "usage.hpp"

using namespace flash_indexer::cli;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kMainUsage, stderr);
    return kUsageError;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kMainUsage, stdout);
    return 0;
  }
  const auto usage = kUsages.find(command);
  if (usage == kUsages.end()) {
    std::fprintf(stderr, "flash-indexer: unknown command '%s'\n\n%s", command.c_str(), kMainUsage);
    return kUsageError;
  }
  try {
    // `bench` takes what to benchmark as its first argument.
    std::string what;
    int first = 2;
    if (command == "bench" && argc > 2 && std::string(argv[2]).rfind("--", 0) != 0) what = argv[first++];
    std::vector<std::string> flags, valued = {"--cache-dir"};
    if (command == "warm") valued = {"--arch", "--manifest", "--jobs", "--cache-dir"};
    if (command == "list" || command == "presets") flags = {"--json"};
    if (command == "check") flags = {"--quick"}, valued = {};
    if (command == "recall") valued = {"--k", "--heads", "--rows", "--lengths", "--seed", "--kv"};
    if (command == "bench") {
      flags = {"--cold-l2", "--fixed-length"};
      valued = {"--batch",
                "--lengths",
                "--next-n",
                "--heads",
                "--hist",
                "--dtype",
                "--replays",
                "--compare",
                "--json",
                "--rows",
                "--k",
                "--ragged",
                "--split",
                "--input",
                "--width",
                "--tokens",
                "--kv",
                "--pdl",
                "--variant",
                "--dcp",
                "--dcp-interleave",
                "--resident-blocks",
                "--preset",
                "--two-level",
                "--candidate-block"};
    }
    const Args args(command, argc - first, argv + first, flags, valued);
    if (args.help()) {
      std::fputs(usage->second.c_str(), stdout);
      return 0;
    }
    if (command == "warm") return cmd_warm(args);
    if (command == "list") return cmd_list(args);
    if (command == "clear") return cmd_clear(args);
    if (command == "info") return cmd_info(args);
    if (command == "recall") return cmd_recall(args);
    if (command == "bench") return cmd_bench(what, args);
    if (command == "presets") return cmd_presets(args);
    return cmd_check(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flash-indexer %s: %s\n\n%s", command.c_str(), e.what(), usage->second.c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash-indexer %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
