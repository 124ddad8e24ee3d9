#pragma once
// A compile target: "sm_80", "sm_86", "sm_89", "sm_90a", ... The "a" (arch-specific) suffix is what
// Hopper-only instructions need; the JIT picks it for compute capability 9.0.
#include <string>
#include <string_view>

namespace flash_indexer {

struct Arch {
  int major = 0;
  int minor = 0;
  bool arch_specific = false;  // the "a" suffix

  std::string name() const;  // "sm_90a"
  // Hopper's arch-specific target, the only one the sm90 kernels (TMA, wgmma, setmaxnreg) build for.
  bool is_sm90a() const { return major == 9 && minor == 0 && arch_specific; }
  // Parses "sm_90a" / "sm_86"; throws ArgumentError naming `what` when the text is not such a target or
  // is older than sm_80 (the oldest GPU the kernels support).
  static Arch parse(std::string_view text, std::string_view what = "arch");
  // The target the JIT compiles for on a GPU of compute capability major.minor.
  static Arch for_compute_capability(int major, int minor);

  friend bool operator==(const Arch&, const Arch&) = default;
};

}  // namespace flash_indexer
