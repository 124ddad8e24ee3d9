#!/usr/bin/env bash
# The main job: warm the default kernel set into the cache (for the GPU present, else for sm_90a, as a
# deployment image would), then, with a GPU present, run the kernels against the CPU reference.
set -euo pipefail
cli="${1:-build/bin/flash-indexer}"
if "$cli" info | grep -q '^GPU 0'; then
  "$cli" warm
  "$cli" check
else
  echo "no GPU here: warming the kernel cache for sm_90a (H100/H200) only"
  "$cli" warm --arch sm_90a
fi
"$cli" info
