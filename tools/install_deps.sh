#!/usr/bin/env bash
# Installs what FlashIndexer's build needs on Debian 12 and Ubuntu 22.04 / 24.04 (the same package names
# on all three; Catch2 is v2 on Debian 12 and Ubuntu 22.04, v3 on Ubuntu 24.04, and the tests build with
# either). Ubuntu 22.04's CMake is older than the 3.25 the project needs: a newer one comes from PyPI.
# python3-venv and python3-dev serve the Python package's build and tests, run in a virtual environment
# (Debian's own Python refuses system-wide pip installs); python3-pip the CMake fallback. The CUDA 13
# toolkit (NVRTC, cuda.h) is expected at /usr/local/cuda; libcuda is not needed to build, test without a
# GPU, or warm the kernel cache.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
distro="unknown"
if [ -r /etc/os-release ]; then distro="$(. /etc/os-release && echo "${ID}-${VERSION_ID:-}")"; fi
case "$distro" in
  debian-12|ubuntu-22.04|ubuntu-24.04) ;;
  *) echo "install_deps: $distro is not one of Debian 12, Ubuntu 22.04, 24.04; trying their packages anyway" >&2 ;;
esac
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  cmake g++ make pkg-config libfmt-dev nlohmann-json3-dev catch2 libxxhash-dev python3-venv python3-dev python3-pip >/dev/null
# A CPU torch from the distribution for python/tests/test_torch_process.py (the first JIT compile inside
# a process that has torch loaded); optional, as not every distribution packages one.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-torch >/dev/null ||
  echo "install_deps: no python3-torch package here; the torch-process test will be skipped" >&2
cmake_ok() {
  local v
  v="$(cmake --version | head -n1 | awk '{print $3}')"
  [ "$(printf '%s\n3.25\n' "$v" | sort -V | head -n1)" = "3.25" ]
}
if ! cmake_ok; then
  echo "install_deps: CMake $(cmake --version | head -n1 | awk '{print $3}') is older than 3.25; installing CMake from PyPI" >&2
  $sudo python3 -m pip install -q "cmake>=3.25"
  hash -r
  cmake_ok || { echo "install_deps: still no CMake >= 3.25 on PATH" >&2; exit 1; }
fi
if ! ls /usr/local/cuda/include/nvrtc.h >/dev/null 2>&1 && ! command -v nvcc >/dev/null; then
  echo "install_deps: the CUDA toolkit (NVRTC) was not found at /usr/local/cuda; install CUDA 13" >&2
  exit 1
fi
echo "install_deps: ok ($distro)"
