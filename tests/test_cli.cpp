// The flash-indexer CLI: help, usage errors (exit 2), warm / list / clear / info without a GPU.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

using namespace flash_indexer;
using flash_indexer::test::Contains;

namespace {

int cli(const std::string& args, std::string* output = nullptr) {
  return test::run_command(test::cli_path().string() + " " + args, output);
}

}  // namespace

TEST_CASE("every command has --help and wrong arguments exit 2 with a usage message", "[cli]") {
  std::string out;
  CHECK(cli("--help", &out) == 0);
  CHECK_THAT(out, Contains("usage: flash-indexer <command>"));
  for (const char* command : {"warm", "list", "clear", "info", "check", "recall", "bench"}) {
    INFO(command);
    CHECK(cli(fmt::format("{} --help", command), &out) == 0);
    CHECK_THAT(out, Contains(fmt::format("usage: flash-indexer {}", command)));
    CHECK(cli(fmt::format("{} --no-such-option", command), &out) == 2);
    CHECK_THAT(out, Contains("unknown argument '--no-such-option'") && Contains("usage:"));
  }
  CHECK(cli("bench sort", &out) == 2);
  CHECK_THAT(out, Contains("expected 'bench logits', 'bench topk', 'bench decode' or 'bench prefill', got 'sort'"));
  CHECK(cli("bench prefill --k 0", &out) == 2);
  CHECK(cli("bench decode --k 4097", &out) == 2);
  CHECK_THAT(out, Contains("--k expects 1..4096, got 4097"));
  CHECK(cli("bench logits --hist 2", &out) == 2);
  CHECK(cli("bench logits --fixed-length --hist 2", &out) == 2);  // the flag parses; --hist 2 is the error
  CHECK_THAT(out, Contains("--hist") && !Contains("unknown argument"));
  CHECK(cli("bench logits --resident-blocks 0", &out) == 2);
  CHECK_THAT(out, Contains("--resident-blocks expects an integer >= 1, got '0'"));
  CHECK(cli("bench logits --resident-blocks 2048 --cold-l2", &out) == 2);
  CHECK_THAT(out, Contains("--resident-blocks keeps the KV in L2, --cold-l2 evicts it"));
  CHECK(cli("bench topk --ragged 0,x", &out) == 2);
  CHECK(cli("bench logits --dtype f8", &out) == 2);
  CHECK(cli("bench logits --kv fp8,fp4", &out) == 2);
  CHECK_THAT(out, Contains("--kv expects fp8 and/or mxfp4, got 'fp4'"));
  CHECK(cli("bench logits --input bytes,uniform", &out) == 2);
  CHECK_THAT(out, Contains("--input expects bytes and/or normal, got 'uniform'"));
  CHECK(cli("bench decode --dcp 0", &out) == 2);
  CHECK_THAT(out, Contains("--dcp expects an integer >= 1, got '0'"));
  CHECK(cli("bench decode --dcp-interleave 64", &out) == 2);
  CHECK_THAT(out, Contains("--dcp-interleave: only with --dcp D"));
  CHECK(cli("bench decode --two-level 2048 --candidate-block 4", &out) == 2);
  CHECK_THAT(out, Contains("--candidate-block expects 8 or 16, got 4"));
  CHECK(cli("bench decode --candidate-block 16", &out) == 2);
  CHECK_THAT(out, Contains("--candidate-block: only with --two-level C"));
  CHECK(cli("bench decode --two-level 2048 --dcp 2", &out) == 2);
  CHECK_THAT(out, Contains("--two-level: not with --dcp"));
  CHECK(cli("bench decode --dcp 2 --pdl 1", &out) == 2);
  CHECK_THAT(out, Contains("--pdl: not with --dcp"));
  CHECK(cli("recall --heads 48", &out) == 2);
  CHECK(cli("recall --kv fp4", &out) == 2);
  CHECK_THAT(out, Contains("--kv expects mxfp4, got 'fp4'"));
  CHECK(cli("recall --kv mxfp4 --heads 16", &out) == 2);
  CHECK(cli("", &out) == 2);
  CHECK(cli("frobnicate", &out) == 2);
  CHECK_THAT(out, Contains("unknown command 'frobnicate'"));
  CHECK(cli("warm --arch sm_75 --cache-dir /tmp/unused", &out) == 2);
  CHECK_THAT(out, Contains("--arch") && Contains("sm_75"));
  CHECK(cli("warm --arch sm_90a --jobs 0", &out) == 2);
  CHECK(cli("warm --arch", &out) == 2);
  CHECK_THAT(out, Contains("--arch needs a value"));
  CHECK(cli("warm --arch sm_90a --manifest /nonexistent.json", &out) == 2);
}

TEST_CASE("warm and list and info and clear work on a machine without a GPU", "[cli]") {
  test::TempDir dir;
  const std::string cache = "--cache-dir " + dir.path().string();
  const auto manifest = dir.path() / "m.json";
  std::ofstream(manifest) << R"({"kernels": ["paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f32.kv-fp8",
                                             "paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f32.kv-fp8.sm_80"]})";
  std::string out;
  CHECK(cli(fmt::format("warm --arch sm_90a --manifest {} {}", manifest.string(), cache), &out) == 0);
  CHECK_THAT(out, Contains("0 hits, 2 compiled, 0 failed"));
  CHECK(cli(fmt::format("warm --arch sm_90a --manifest {} {}", manifest.string(), cache), &out) == 0);
  CHECK_THAT(out, Contains("2 hits, 0 compiled, 0 failed"));

  CHECK(cli("list " + cache, &out) == 0);
  CHECK_THAT(out, Contains("paged_mqa_logits.portable.n1.h16.d64.bs64.hist0.out-f32.kv-fp8.sm_90a") && Contains(".sm_80 ") &&
                      Contains("2 entries"));
  CHECK(cli("list --json " + cache + " 2>/dev/null", &out) == 0);
  const auto entries = nlohmann::json::parse(out);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0]["ptxas"]["spill_store_bytes"] == 0);
  CHECK_FALSE(entries[0]["ptxas"].contains("log"));

  CHECK(cli("info " + cache, &out) == 0);
  CHECK_THAT(out, Contains("NVRTC") && Contains("cache entries    2"));

  CHECK(cli("clear " + cache, &out) == 0);
  CHECK_THAT(out, Contains("removed 2 entries"));

  std::ofstream(manifest) << R"({"kernels": ["paged_mqa_logits.portable.n1.h17.d64.bs64.hist0.out-f32.kv-fp8"]})";
  CHECK(cli(fmt::format("warm --arch sm_90a --manifest {} {}", manifest.string(), cache), &out) == 2);
  CHECK_THAT(out, Contains("heads"));
}

TEST_CASE("warm without --arch and without a GPU says to pass --arch", "[cli]") {
  std::string out;
  const int rc = cli("warm --cache-dir /tmp/flash_indexer_unused_cache", &out);
  if (out.find("no GPU to take the arch from") == std::string::npos) {
    SUCCEED("a GPU is present: warm took its arch");
    return;
  }
  CHECK(rc == 2);
  CHECK_THAT(out, Contains("pass --arch"));
}

TEST_CASE("warm --manifest without --arch takes the GPU's arch for keys without one, or says to pass --arch", "[cli]") {
  const std::filesystem::path manifest = std::filesystem::temp_directory_path() / "flash_indexer_manifest_no_arch.json";
  std::ofstream(manifest) << R"({"kernels": ["topk.split1.in-f32"]})";
  std::string out;
  const int rc = cli(fmt::format("warm --manifest {} --cache-dir /tmp/flash_indexer_unused_cache", manifest.string()), &out);
  std::filesystem::remove(manifest);
  if (out.find("no GPU to take the arch from") == std::string::npos) {
    SUCCEED("a GPU is present: the key took its arch");
    CHECK(rc == 0);
    return;
  }
  CHECK(rc == 2);
  CHECK_THAT(out, Contains("key topk.split1.in-f32 has no arch and no GPU to take the arch from") && Contains("pass --arch"));
}
