#!/usr/bin/env bash
# Installs what FlashIndexer's build needs on Debian 12. The CUDA 13 toolkit (NVRTC, cuda.h) is expected
# at /usr/local/cuda; libcuda is not needed to build, test without a GPU, or warm the kernel cache.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  cmake g++ make pkg-config libfmt-dev nlohmann-json3-dev catch2 libxxhash-dev >/dev/null
if ! ls /usr/local/cuda/include/nvrtc.h >/dev/null 2>&1 && ! command -v nvcc >/dev/null; then
  echo "install_deps: the CUDA toolkit (NVRTC) was not found at /usr/local/cuda; install CUDA 13" >&2
  exit 1
fi
echo "install_deps: ok"
