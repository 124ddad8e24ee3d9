// Uses the installed library without a GPU: the CPU reference, the kernel catalog of the public API and
// an argument error. Prints "consumer ok" and exits 0 when all of them behave.
#include <flash_indexer/error.hpp>
#include <flash_indexer/paged_mqa_logits.hpp>
#include <flash_indexer/reference.hpp>
#include <flash_indexer/topk.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace fi = flash_indexer;

int main() {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  const auto top = fi::reference::topk(row, 5, 5, {5}, 2, /*sorted=*/true);
  if (top.indices != std::vector<std::int32_t>{1, 3}) {
    std::puts("reference::topk gave the wrong columns");
    return 1;
  }
  if (fi::supported_topk_configs(fi::Arch{9, 0, true}).size() != 53) {
    std::puts("unexpected top-k configurations");
    return 1;
  }
  auto q = fi::TensorView::contiguous(nullptr, fi::DType::f32, {1, 1, 64, 128});  // wrong dtype on purpose
  try {
    fi::paged_mqa_logits(q, q, q, q, q, q, nullptr);
    std::puts("a bad call was accepted");
    return 1;
  } catch (const fi::Error& e) {
    if (std::string(e.what()).find("paged_mqa_logits: q: expected dtype float8_e4m3") == std::string::npos) {
      std::printf("unexpected error: %s\n", e.what());
      return 1;
    }
  }
  std::puts("consumer ok");
  return 0;
}
