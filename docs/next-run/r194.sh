#!/usr/bin/env bash
# Run 194 (issue 12): R6 = R5 with the ranges grid as many waves of one CTA per SM as the split grid
# needs (ceil(split CTAs / SMs) x SMs CTAs over even ranges), instead of one CTA per SM for the whole
# call: CTAs as long as main's, the last wave full. If R6 runs at main's rate per block, R4/R5's loss
# (runs 192-193: 7-8 % at n2 h64) belongs to long CTAs; if not, to the ranges kernel itself.
# Multi-wave cells M3 R6 R6 M3, R5 once, then R6's tests.
RUN=r194; . docs/next-run/run_lib.sh
warm_builds M3 R5 R6
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { ok 300 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R6 1; w R6 2; w M3 2; w R5 1
if ok 330; then mkdir -p $L/vR6; OUT=$L/vR6 timeout 180 tools/device_verify.sh .device-R6 logits-sm90 > $L/verify-R6.txt 2>&1; stamp "verify R6"; fi
cat $L/times.txt; cat $L/verify-R6.txt 2>/dev/null
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R6-1.json --b $L/w-R6-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -24
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R5-1.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|all"
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
