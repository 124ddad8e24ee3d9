#!/usr/bin/env bash
# Run 180 (issue 15): Y (main with the MXFP4 consumers converting their next block while the wgmma of
# this one runs: two fragment sets, the kernels of two consumers in one round; N = 64 takes registers
# 40 / 96 from the producer warpgroup) against M2 (main before it), the MXFP4 grid interleaved
# M2 Y Y M2, ncu of both at B 64 x 64K n1 h64, then Y's tests.
RUN=r180; . docs/next-run/run_lib.sh
warm_builds M2 Y
M="--kv mxfp4 --heads 32,64 --next-n 1,2,3 --batch 1,8,64 --lengths 65536 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
m() { ok 200 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $M --json $L/m-$1-$2.json > $L/m-$1-$2.txt 2>&1; stamp "mxfp4 $1 $2"; }
m M2 1; m Y 1; m Y 2; m M2 2
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --hist 0"
N="--clock-control none --kernel-name regex:paged --launch-skip 4 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
for d in M2 Y; do
  ok 230 || break
  timeout 40 ncu $N .device-$d/bin/flash-indexer bench logits --kv mxfp4 --heads 64 --next-n 1 --batch 64 --lengths 65536 $Q > $L/ncu-$d.txt 2>&1
  stamp "ncu $d"
done
(cd $OUT && tar czf r180a.tgz r180)
if ok 280; then mkdir -p $L/vY; OUT=$L/vY timeout 300 tools/device_verify.sh .device-Y logits-sm90 plan logits-other > $L/verify-Y.txt 2>&1; stamp "verify Y"; fi
cat $L/times.txt; cat $L/verify-Y.txt 2>/dev/null
python3 tools/bench_ab.py --a $L/m-M2-1.json --a $L/m-M2-2.json --b $L/m-Y-1.json --b $L/m-Y-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -30
grep -E "Duration|Issue Slots Busy|highest-utilized" $L/ncu-*.txt
cd $OUT && tar czf r180.tgz r180 && rm -rf r180 r180a.tgz
