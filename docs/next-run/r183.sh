#!/usr/bin/env bash
# Run 183 (issue 15): Z (main with the MXFP4 kernels of N <= 64 as two consumers that store their values
# themselves and one producer warp, 288 threads, three CTAs per SM; at N = 64 ptxas spills 16 bytes
# around the wgmma at the 72 registers that leaves, so the test of the idea is n1 h32) against M2, the
# MXFP4 grid M2 Z Z M2, then Z's tests.
RUN=r183; . docs/next-run/run_lib.sh
warm_builds M2 Z
M="--kv mxfp4 --heads 32,64 --next-n 1,2,3 --batch 1,8,64 --lengths 65536 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
m() { ok 200 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $M --json $L/m-$1-$2.json > $L/m-$1-$2.txt 2>&1; stamp "mxfp4 $1 $2"; }
m M2 1; m Z 1; m Z 2; m M2 2
(cd $OUT && tar czf $RUN-a.tgz $RUN)
if ok 250; then mkdir -p $L/vZ; OUT=$L/vZ timeout 300 tools/device_verify.sh .device-Z logits-sm90 plan logits-other > $L/verify-Z.txt 2>&1; stamp "verify Z"; fi
cat $L/times.txt; cat $L/verify-Z.txt 2>/dev/null
python3 tools/bench_ab.py --a $L/m-M2-1.json --a $L/m-M2-2.json --b $L/m-Z-1.json --b $L/m-Z-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -40
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN $RUN-a.tgz
