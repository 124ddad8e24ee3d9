#!/usr/bin/env bash
# Run 218 (issue 12, twenty-eighth session): P2 = the four-consumer next_n 4 H 64 form as committed (run
# 217's P with the warpgroup index read where main reads it, so that every other kernel's SASS is main's
# but for a reordered setup in the MXFP4 n3-n4 kernels), against M7 (main 9f641ab): its logits-sm90 and
# logits-other tests, n4 H 64 M7 P2 P2 M7, then its whole grid beside DeepGEMM and with the histogram.
# About 400 s after the start. Carry .device-P2, .device-M7 and .anchors/deepgemm.
RUN=r218; . docs/next-run/run_lib.sh
timeout 90 .device-P2/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm-P2.txt 2>&1; stamp "warm P2"
timeout 60 .device-M7/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-M7.txt 2>&1; stamp "warm M7"
mkdir -p $L/v; OUT=$L/v timeout 330 tools/device_verify.sh .device-P2 logits-sm90 logits-other > $L/summary.txt 2>&1; stamp verify
A="--heads 64 --next-n 4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
ab_logits M7 P2 n4 40 $A > $L/ab-n4.txt 2>&1; stamp ab
G="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
timeout 40 .device-P2/bin/flash-indexer bench logits $G --hist 0 --json $L/g-1.json > $L/g-1.txt 2>&1; stamp "grid 1"
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=90 timeout 120 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
timeout 40 .device-P2/bin/flash-indexer bench logits $G --hist 0 --json $L/g-2.json > $L/g-2.txt 2>&1; stamp "grid 2"
timeout 40 .device-P2/bin/flash-indexer bench logits $G --hist 1 --json $L/g-h.json > $L/g-h.txt 2>&1; stamp "grid h"
python3 tools/logits_vs_deepgemm.py --ours $L/g-1.json --ours $L/g-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9 >> $L/summary.txt
cat $L/times.txt $L/summary.txt; head -4 $L/ab-n4.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
