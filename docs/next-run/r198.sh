#!/usr/bin/env bash
# Run 198 (issue 12; twenty-fifth session): as run 197, but one TMA per block for keys and scales only in
# the four-consumer FP8 kernels (n2 H 64, n3 H 32, n4 H 32; run 197: n4 H 64 2-6 % slower with it).
# .device-L: the ranges form for n2 H 64 and n3 H 32 in one wave of one CTA per SM where the splits need
# more than a wave; .device-M3: main before it (3b42a3f). The whole FP8 grid L M3 DeepGEMM M3 L, the grid
# with the histogram once, then L's GPU tests.
# The same script as r197.sh, with its own run name.
RUN=r198 exec bash docs/next-run/r197.sh
