#!/usr/bin/env bash
# Run 210 (issue 12; twenty-seventh session): main with the n4 H 64 parts landed (.device-M6) against
# main before it (.device-M5, fdecdac) and DeepGEMM in the same call: the whole FP8 grid M6 M5 DeepGEMM
# M5 M6, M6 with the histogram once. (Not its tests: every kernel's SASS is that of a build whose tests
# passed, n4 H 64's O's in run 209 and the others S's in runs 206 and 208.)
RUN=r210; . docs/next-run/run_lib.sh
timeout 60 .device-M6/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-M6.txt 2>&1; stamp "warm M6"
timeout 60 .device-M5/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-M5.txt 2>&1; stamp "warm M5"
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
g() { timeout 60 .device-$1/bin/flash-indexer bench logits $P --hist $3 --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g M6 1 0; g M5 1 0
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
g M5 2 0; g M6 2 0; g M6 h 1
cat $L/times.txt; head -1 $L/g-M6-1.txt
python3 tools/logits_vs_deepgemm.py --ours $L/g-M6-1.json --ours $L/g-M6-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9
python3 tools/bench_ab.py --a $L/g-M5-1.json --a $L/g-M5-2.json --b $L/g-M6-1.json --b $L/g-M6-2.json --group next_n,heads 2>&1 | grep -E "^\s+\(|^all"
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
