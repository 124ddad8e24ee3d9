#!/usr/bin/env bash
# Run 203 (issue 12; twenty-sixth session): H = main + the store warps' loop unrolled with the stage
# released before the stores, and the histogram's count as one predicated atomic (count_stored), against
# main (.device-M): the whole FP8 grid with and without the histogram M H H M, MXFP4 and prefill once
# each, then H's tests.
RUN=r203; . docs/next-run/run_lib.sh
warm_builds M H
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
ab_logits M H g 60 $P
X="--heads 32,64 --next-n 1,2,4 --batch 8,64 --lengths 32768,131072 --dtype f32 --kv mxfp4 --cold-l2 --fixed-length --replays 20 --hist 0,1"
for d in M H; do timeout 40 .device-$d/bin/flash-indexer bench logits $X --json $L/x-$d.json > $L/x-$d.txt 2>&1; done; stamp mxfp4
python3 tools/bench_ab.py --a $L/x-M.json --b $L/x-H.json --group next_n,heads,histogram 2>&1 | grep -E "^\s+\(|^all"
for d in M H; do timeout 60 .device-$d/bin/flash-indexer bench prefill --tokens 4096 --lengths 65536 --heads 64 --dtype f16 --replays 10 --json $L/p-$d.json > $L/p-$d.txt 2>&1; done; stamp prefill
for d in M H; do echo "== prefill $d"; tail -4 $L/p-$d.txt; done
mkdir -p $L/v; OUT=$L/v timeout 330 tools/device_verify.sh .device-H logits-sm90 logits-other prefill plan > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
