#!/usr/bin/env bash
# Run 191 (issue 12; twenty-fourth session's first call): verify main as committed (3b42a3f: the
# flattened form with the n1 kernel's table row computed once, changed after run 190) on a fresh
# install .device-M3: logits-sm90, plan and logits-other; then the whole FP8 grid twice with DeepGEMM's
# between them (as run 188), and the grid with the histogram once (its overhead since the flattening).
RUN=r191; . docs/next-run/run_lib.sh
warm_builds M3
mkdir -p $L/v; OUT=$L/v timeout 330 tools/device_verify.sh .device-M3 logits-sm90 plan logits-other > $L/verify.txt 2>&1; stamp verify
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
timeout 60 .device-M3/bin/flash-indexer bench logits $P --hist 0 --json $L/l-1.json > $L/l-1.txt 2>&1; stamp "grid 1"
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
ok 500 && { timeout 60 .device-M3/bin/flash-indexer bench logits $P --hist 0 --json $L/l-2.json > $L/l-2.txt 2>&1; stamp "grid 2"; }
ok 530 && { timeout 60 .device-M3/bin/flash-indexer bench logits $P --hist 1 --json $L/h-1.json > $L/h-1.txt 2>&1; stamp "grid hist"; }
cat $L/times.txt $L/verify.txt; head -1 $L/l-1.txt
python3 tools/logits_vs_deepgemm.py --ours $L/l-1.json --ours $L/l-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -8
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
