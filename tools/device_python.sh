#!/usr/bin/env bash
# The Python package on the device machine, which has no network and no libxxhash-dev or numpy: its
# build and test dependencies travel as wheels for its Python (3.12), fetched here.
#
#   tools/device_python.sh fetch DIR          here: wheels (numpy, pytest, scikit-build-core, nanobind and
#                                             theirs) into DIR/wheels, xxhash.h into DIR/include
#   tools/device_python.sh test DIR [ARGS]    there (DIR carried): build the wheel offline, install it
#                                             and numpy/pytest into DIR/site, run pytest python/tests ARGS
#                                             with the machine's torch
#
# PYVER selects the wheels' Python (default 3.12, the device's); FLASH_INDEXER_CACHE_DIR is passed on.
set -euo pipefail
mode=${1:?usage: tools/device_python.sh fetch|test DIR [pytest args]}
deps=${2:?usage: tools/device_python.sh fetch|test DIR [pytest args]}
shift 2
cd "$(dirname "$0")/.."
case "$mode" in
  fetch)
    mkdir -p "$deps/wheels" "$deps/include"
    python3 -m pip download -q --only-binary=:all: --python-version "${PYVER:-3.12}" --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$deps/wheels" \
      numpy pytest "scikit-build-core>=0.10" "nanobind>=2.2"
    cp "$(echo '#include <xxhash.h>' | cc -E -M -x c - | tr ' ' '\n' | grep '/xxhash.h$' | head -1)" "$deps/include/"
    du -sh "$deps"
    ;;
  test)
    deps=$(cd "$deps" && pwd)
    rm -rf "$deps/site" "$deps/dist"
    python3 -m pip install -q --no-index --find-links "$deps/wheels" --target "$deps/site" numpy pytest \
      "scikit-build-core>=0.10" "nanobind>=2.2"
    # Without build isolation: in pip's isolated build environment scikit-build-core did not take the
    # device's cmake and asked for a cmake wheel, which is not here (run 146; this way, run 147).
    echo "cmake: $(command -v cmake) $(cmake --version | head -1)"
    PYTHONPATH="$deps/site${PYTHONPATH:+:$PYTHONPATH}" CMAKE_ARGS="-DXXHASH_INCLUDE_DIR=$deps/include" \
      CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip wheel -q --no-build-isolation --no-index --no-deps \
      -w "$deps/dist" .
    python3 -m pip install -q --no-index --no-deps --target "$deps/site" "$deps"/dist/flash_indexer-*.whl
    PYTHONPATH="$deps/site${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q python/tests "$@"
    ;;
  *)
    echo "usage: tools/device_python.sh fetch|test DIR [pytest args]" >&2
    exit 2
    ;;
esac
