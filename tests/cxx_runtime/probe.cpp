// A shared object that uses the C++ runtime's locales, built with -static-libstdc++: what the check of
// cmake/check_cxx_runtime.cmake must reject (tests/CMakeLists.txt).
#include <locale>
#include <sstream>

extern "C" int cxx_runtime_probe(int value) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << value;
  return static_cast<int>(out.str().size());
}
