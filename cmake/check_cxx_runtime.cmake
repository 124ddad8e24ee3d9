# Fails when the shared object LIB carries its own copy of the C++ runtime: libstdc++ linked in
# statically (-static-libstdc++, or a compiler wrapper that adds it) instead of needed from
# libstdc++.so. Loaded into a process that already has the shared libstdc++ (torch, any C++ host), the
# two copies' global state (locales, iostreams, exception handling) disagree, and the process crashes,
# typically at the first std::locale use of a JIT compile. Run after linking (POST_BUILD) and by CTest.
#
#   cmake -DLIB=path/to/lib.so -DOBJDUMP=objdump -DNM=nm [-DKEEP=ON] -P cmake/check_cxx_runtime.cmake
#
# A failing LIB is removed (unless KEEP), so that the next build links it again.
foreach(var LIB OBJDUMP NM)
  if(NOT ${var})
    message(FATAL_ERROR "check_cxx_runtime: -D${var}=... is required")
  endif()
endforeach()
execute_process(COMMAND "${OBJDUMP}" -p "${LIB}" OUTPUT_VARIABLE headers RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_cxx_runtime: ${OBJDUMP} -p ${LIB} failed (${rc})")
endif()
execute_process(COMMAND "${NM}" -D --defined-only "${LIB}" OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_cxx_runtime: ${NM} -D ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "_ZNSt6locale[A-Za-z0-9_]*" locale_symbols "${symbols}")
list(LENGTH locale_symbols defined)
if(NOT headers MATCHES "NEEDED[ \t]+lib(stdc\\+\\+|c\\+\\+)\\.so" OR defined GREATER 0)
  if(NOT KEEP)
    file(REMOVE "${LIB}")  # so that the next build links it again instead of keeping it
  endif()
  message(FATAL_ERROR
    "REJECTED: ${LIB} carries its own copy of the C++ runtime (libstdc++ is not a NEEDED library, or it defines "
    "${defined} std::locale symbols): loaded next to another C++ runtime, such as the one torch loads, it "
    "crashes the process. Build with a compiler that links libstdc++ dynamically, e.g. "
    "CXX=/usr/bin/g++ (check `\${CXX} -v` for a wrapper that adds -static-libstdc++), and without "
    "-static-libstdc++ in CXXFLAGS or LDFLAGS, in a fresh build directory (CMake keeps the compiler it "
    "first found; pip's is build-python/).")
endif()
message(STATUS "check_cxx_runtime: ${LIB} uses the shared libstdc++")
