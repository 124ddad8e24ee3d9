#!/usr/bin/env bash
# Run 217 (issue 12, twenty-eighth session): P = main + next_n 4 H 64 FP8 as four consumers of two rows
# each (two per block, sm90_consumer_rows), against M7 (main 9f641ab). Its n4 H 64 tests, logits-other
# and plan; n4 H 64 with and without the histogram, M7 P P M7; the same cells with the KV in L2 (L2 is
# M7's kernels with FI_BENCH_TABLE_BLOCKS, P has --resident-blocks); then P's whole grid beside DeepGEMM.
# About 450 s after the start. Carry .device-P, .device-M7, .device-L2 and .anchors/deepgemm.
RUN=r217; . docs/next-run/run_lib.sh
for d in P M7; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
timeout 120 .device-P/bin/flash_indexer_tests "gpu paged_mqa_logits.sm90.n4.h64*" > $L/t-n4h64.txt 2>&1; echo "n4.h64 rc=$? $(tail -2 $L/t-n4h64.txt | head -1)" >> $L/summary.txt; stamp tests-n4h64
A="--heads 64 --next-n 4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
ab_logits M7 P n4 40 $A > $L/ab-n4.txt 2>&1; stamp ab
R="--heads 64 --next-n 2,4 --batch 32,64,128 --lengths 32768,65536 --dtype f32 --fixed-length --replays 20 --hist 0"
FI_BENCH_TABLE_BLOCKS=2048 timeout 40 .device-L2/bin/flash-indexer bench logits $R --json $L/res-M7.json > $L/res-M7.txt 2>&1
timeout 40 .device-P/bin/flash-indexer bench logits $R --resident-blocks 2048 --json $L/res-P.json > $L/res-P.txt 2>&1; stamp resident
mkdir -p $L/v; OUT=$L/v timeout 150 tools/device_verify.sh .device-P logits-other plan >> $L/summary.txt 2>&1; stamp verify
if ok 420; then
  G="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
  timeout 40 .device-P/bin/flash-indexer bench logits $G --json $L/g-1.json > $L/g-1.txt 2>&1; stamp "grid 1"
  mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=90 timeout 120 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
  timeout 40 .device-P/bin/flash-indexer bench logits $G --json $L/g-2.json > $L/g-2.txt 2>&1; stamp "grid 2"
  python3 tools/logits_vs_deepgemm.py --ours $L/g-1.json --ours $L/g-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9 >> $L/summary.txt
fi
cat $L/times.txt $L/summary.txt; tail -12 $L/ab-n4.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
