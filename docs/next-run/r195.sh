#!/usr/bin/env bash
# Run 195 (issue 12): R7 = R6 with the query warp (warp 1 of the producer warpgroup) asleep between polls
# of q_empty (test_wait + __nanosleep 1 us) instead of try_wait for a whole segment. R4-R6 were 7-9 %
# slower than main at n2 h64 whatever their CTAs' length (runs 192-194, R6: main's CTA lengths, full
# waves), with the same block-loop SASS; ncu (run 193) showed more L1TEX-scoreboard stalls (4.7 against
# 2.8 cycles per instruction). M3 R7 R7 M3 on the multi-wave cells, then the stall reasons of M3 and R7
# at B 64 x 64K n2 h64 by instruction (ncu SourceCounters), then R7's tests.
RUN=r195; . docs/next-run/run_lib.sh
warm_builds M3 R7
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { ok 200 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R7 1; w R7 2; w M3 2
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R7-1.json --b $L/w-R7-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -24
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --hist 0"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for d in M3 R7; do
  ok 230 || break
  timeout 40 ncu $N -o $L/ncu-$d .device-$d/bin/flash-indexer bench logits --heads 64 --next-n 2 --batch 64 --lengths 65536 $Q > $L/ncu-$d.txt 2>&1
  ncu -i $L/ncu-$d.ncu-rep --page source --csv --print-source sass > $L/src-$d.csv 2>&1
  ncu -i $L/ncu-$d.ncu-rep --page raw --csv > $L/raw-$d.csv 2>&1
  rm -f $L/ncu-$d.ncu-rep; stamp "ncu $d"
done
if ok 260; then mkdir -p $L/vR7; OUT=$L/vR7 timeout 150 tools/device_verify.sh .device-R7 logits-sm90 > $L/verify-R7.txt 2>&1; stamp "verify R7"; fi
cat $L/times.txt; cat $L/verify-R7.txt 2>/dev/null
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
