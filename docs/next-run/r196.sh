#!/usr/bin/env bash
# Run 196 (issue 12, the session's last 250 s): R8 = R7 with the producer thread alone in its warp: the
# block ids are staged by warp 2 into two buffers of 64 (mbarriers ids_full / ids_empty), so that the
# issuing thread never shares a warp with lanes waiting at __syncwarp (ncu, run 195: R's consumers wait
# 3.5x as often for their blocks, the same blocks as main's). Grid as R6 (full waves), and with
# FI_RANGES_ONE_WAVE=1 as R4 (one CTA per SM). Multi-wave n2 h64 cells M3 R8 R8 M3, R8 one-wave, then
# R8's n2 h64 FP32 tests.
RUN=r196; . docs/next-run/run_lib.sh
warm_builds M3 R8
W="--heads 64 --next-n 2 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { timeout 30 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R8 1; w R8 2; w M3 2; FI_RANGES_ONE_WAVE=1 w R8 o
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R8-1.json --b $L/w-R8-2.json --group next_n,heads,histogram --show 0.0 2>&1 | tail -16
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R8-o.json --group next_n,heads,histogram --show 0.0 2>&1 | tail -16
timeout 40 .device-R8/bin/flash_indexer_tests "gpu paged_mqa_logits.sm90.n2.h64.d128.bs64.hist0.out-f32.kv-fp8,gpu paged_mqa_logits.sm90.n2.h64.d128.bs64.hist1.out-f32.kv-fp8" > $L/test-R8.txt 2>&1; stamp "tests R8 rc $?"
cat $L/times.txt; tail -2 $L/test-R8.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
