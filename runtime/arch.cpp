#include "flash_indexer/arch.hpp"

#include <fmt/format.h>

#include <charconv>

#include "flash_indexer/error.hpp"

namespace flash_indexer {

std::string Arch::name() const { return fmt::format("sm_{}{}{}", major, minor, arch_specific ? "a" : ""); }

Arch Arch::parse(std::string_view text, std::string_view what) {
  auto fail = [&] {
    return ArgumentError(
        fmt::format("{}: expected a CUDA target sm_80 or newer such as sm_80, sm_86, sm_89 or sm_90a, got \"{}\"", what, text));
  };
  if (!text.starts_with("sm_")) throw fail();
  std::string_view rest = text.substr(3);
  Arch arch;
  if (rest.ends_with("a")) {
    arch.arch_specific = true;
    rest.remove_suffix(1);
  }
  int number = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), number);
  if (ec != std::errc() || end != rest.data() + rest.size() || rest.size() < 2) throw fail();
  arch.major = number / 10;
  arch.minor = number % 10;
  if (arch.major < 8) throw fail();
  return arch;
}

Arch Arch::for_compute_capability(int major, int minor) {
  // Hopper gets the arch-specific target (wgmma, setmaxnreg); elsewhere the plain one is what NVRTC
  // and the kernels need.
  return Arch{major, minor, major == 9 && minor == 0};
}

}  // namespace flash_indexer
