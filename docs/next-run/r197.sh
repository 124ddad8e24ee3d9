#!/usr/bin/env bash
# Run 197 (issue 12; twenty-fifth session): main with R9 landed (.device-L: the ranges form for n2 H 64 and
# n3 H 32 in one wave of one CTA per SM, where the splits need more than a wave; one TMA per block for
# the keys and scales in every FP8 kernel) against main before it (.device-M3, 3b42a3f): the whole FP8
# grid L M3 DeepGEMM M3 L, the grid with the histogram once, then L's GPU tests.
RUN=${RUN:-r197}; . docs/next-run/run_lib.sh
warm_builds L M3
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
g() { timeout 60 .device-$1/bin/flash-indexer bench logits $P --hist $3 --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
g L 1 0; g M3 1 0
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
g M3 2 0; g L 2 0; g L h 1
mkdir -p $L/v; OUT=$L/v timeout 330 tools/device_verify.sh .device-L logits-sm90 logits-other plan pdl validation > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt; head -1 $L/g-L-1.txt
python3 tools/logits_vs_deepgemm.py --ours $L/g-L-1.json --ours $L/g-L-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9
python3 tools/bench_ab.py --a $L/g-M3-1.json --a $L/g-M3-2.json --b $L/g-L-1.json --b $L/g-L-2.json --group next_n,heads 2>&1 | grep -E "^\s+\(|^all"
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
