#!/usr/bin/env bash
# Run 193 (issue 12): R5 = R4 with the producer warp loading the next chunk of 64 block ids before its
# lane 0 issues the current one (in R4 lane 0's own ids of the next chunk were loaded only after its
# issue loop: one exposed global latency per 64 blocks). R4 was 7.5 % slower than main at n2 h64
# multi-wave (run 192), 0.36 us per block and SM against main's 0.30 in its CTAs. Multi-wave cells
# M3 R5 R5 M3, then ncu of M3, R4 and R5 at B 64 x 64K n2 h64 (where the time goes), then R5's tests.
RUN=r193; . docs/next-run/run_lib.sh
warm_builds M3 R4 R5
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { ok 300 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R5 1; w R5 2; w M3 2; w R4 1
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --hist 0"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats"
for d in M3 R4 R5; do
  ok 330 || break
  timeout 45 ncu $N .device-$d/bin/flash-indexer bench logits --heads 64 --next-n 2 --batch 64 --lengths 65536 $Q > $L/ncu-$d.txt 2>&1
  stamp "ncu $d"
done
(cd $OUT && tar czf ${RUN}a.tgz $RUN)
if ok 400; then mkdir -p $L/vR5; OUT=$L/vR5 timeout 180 tools/device_verify.sh .device-R5 logits-sm90 > $L/verify-R5.txt 2>&1; stamp "verify R5"; fi
cat $L/times.txt; cat $L/verify-R5.txt 2>/dev/null
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R5-1.json --b $L/w-R5-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -24
grep -E "^  [a-z_]+.*\(|Duration|Issue Slots Busy|DRAM Throughput|Grid Size|Stall|Warp Cycles Per Issued|No Eligible" $L/ncu-*.txt | head -60
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN ${RUN}a.tgz
