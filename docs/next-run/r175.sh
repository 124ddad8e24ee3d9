#!/usr/bin/env bash
# Run 175 (prepared in the twentieth session, not run). Main M2 against
#   C  docs/next-run/head-sums-eight-chains.patch: each value's head sum in two FMA chains (even and odd
#      columns) of H / 8 instead of one of H / 4, as DeepGEMM's epilogue;
#   C4 docs/next-run/head-sums-sixteen-chains.patch: four chains of H / 16 (group and column parity).
# Both shorten the consumers' epilogue, the latency link of the wgmma-then-epilogue chain that bounds
# the four-consumer kernels (run 173). Both change the bits of non-exact inputs (the reference's bound
# covers any order; the exact-value tests do not depend on it). Then both builds' tests, and DeepGEMM's
# grid if time is left. Builds: .device-M2 (main), .device-C, .device-C4 (git apply, cmake --build,
# cmake --install build --prefix .device-X, revert); copy this file and mma_probe.py into .device-run;
# carry .device-M2 .device-C .device-C4 .device-run .anchors/deepgemm.
RUN=r175; . docs/next-run/run_lib.sh
warm_builds M2 C C4
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
b() { ok 160 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $P --json $L/l-$1-$2.json > $L/l-$1-$2.txt 2>&1; stamp "logits $1 $2"; }
b M2 1; b C 1; b C4 1; b C4 2; b C 2; b M2 2
timeout 60 python3 .device-run/mma_probe.py > $L/probe-1.txt 2>&1
pf() { ok 220 || return; timeout 45 .device-$1/bin/flash-indexer bench prefill --tokens 4096,8192 --lengths 16384,65536,131072 --heads 64 \
    --dtype f16 --replays 20 --json $L/p-$1-$2.json > $L/p-$1-$2.txt 2>&1; stamp "prefill $1 $2"; }
pf M2 1; pf C 1; pf C4 1; pf C4 2; pf C 2; pf M2 2
timeout 60 python3 .device-run/mma_probe.py > $L/probe-2.txt 2>&1
(cd $OUT && tar czf r175a.tgz r175)
for d in C C4; do
  if ok 400; then mkdir -p $L/v$d; OUT=$L/v$d timeout 170 tools/device_verify.sh .device-$d logits-sm90 prefill > $L/verify-$d.txt 2>&1; stamp "verify $d"; cat $L/verify-$d.txt; fi
done
(cd $OUT && tar czf r175b.tgz r175)
if ok 430; then mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=120 timeout 140 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg; fi
cat $L/times.txt
cd $OUT && tar czf r175.tgz r175 && rm -rf r175 r175a.tgz r175b.tgz
