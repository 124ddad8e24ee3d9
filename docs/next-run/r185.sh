#!/usr/bin/env bash
# Run 185 (issues 12 and 15): what can be reached at all.
# B = main + the paged-read probe (each cell's own KV blocks read with nothing else, same harness) and
# the harness's empty-kernel time; kernels are main's. N = B + docs/next-run/mxfp4-no-conversion.patch
# (knockout, wrong results: the MXFP4 kernel with its keys' conversion removed).
# 1. B's whole FP8 grid twice (FP32, no histogram), DeepGEMM's grid between them.
# 2. MXFP4 and FP8 at B 1/8/64 x 64K, next_n 1/3: B, N, N, B.
RUN=r185; . docs/next-run/run_lib.sh
warm_builds B N
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
timeout 60 .device-B/bin/flash-indexer bench logits $P --json $L/l-B-1.json > $L/l-B-1.txt 2>&1; stamp "grid B 1"
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
ok 330 && { timeout 60 .device-B/bin/flash-indexer bench logits $P --json $L/l-B-2.json > $L/l-B-2.txt 2>&1; stamp "grid B 2"; }
(cd $OUT && tar czf $RUN-a.tgz $RUN)
M="--kv fp8,mxfp4 --heads 32,64 --next-n 1,3 --batch 1,8,64 --lengths 65536 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
m() { ok 440 || return; timeout 30 .device-$1/bin/flash-indexer bench logits $M --json $L/m-$1-$2.json > $L/m-$1-$2.txt 2>&1; stamp "mxfp4 $1 $2"; }
m B 1; m N 1; m N 2; m B 2
cat $L/times.txt; head -3 $L/l-B-1.txt; grep -E "^\s+64\s+65536" $L/m-B-1.txt $L/m-N-1.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN $RUN-a.tgz
