#!/usr/bin/env bash
# Run 188 (issues 12 and 15): the committed build B (main's kernels; bench logits with the paged-read
# probe, whose per-warp XOR replaced run 187's sink, and the empty-kernel time): the probe's GPU test,
# B's whole FP8 grid twice (FP32, no histogram) with DeepGEMM's between them, and the MXFP4 cells.
RUN=r188; . docs/next-run/run_lib.sh
warm_builds B
timeout 60 .device-B/bin/flash_indexer_tests "[probe]" > $L/test-probe.txt 2>&1; stamp "probe test rc $?"
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
timeout 60 .device-B/bin/flash-indexer bench logits $P --json $L/l-B-1.json > $L/l-B-1.txt 2>&1; stamp "grid B 1"
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
ok 330 && { timeout 60 .device-B/bin/flash-indexer bench logits $P --json $L/l-B-2.json > $L/l-B-2.txt 2>&1; stamp "grid B 2"; }
M="--kv fp8,mxfp4 --heads 32,64 --next-n 1,3 --batch 1,8,64 --lengths 65536 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
ok 400 && { timeout 30 .device-B/bin/flash-indexer bench logits $M --json $L/m-B-1.json > $L/m-B-1.txt 2>&1; stamp "mxfp4 B 1"; }
cat $L/times.txt; tail -3 $L/test-probe.txt; head -1 $L/l-B-1.txt; grep -E "^\s+64\s+65536" $L/m-B-1.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
