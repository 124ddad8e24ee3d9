#!/usr/bin/env bash
# Run 190 (issue 12): G = main + the flattened form with its rule (sm90_flattened: H 64 up to
# B * next_n * width_blocks = 6144, H 32 next_n 3 up to 1536): its sm90 logits (the cases without a forced
# split run flattened where the rule takes it, the forced-split ones the next_n kernels), plan and other
# logits tests; then next_n 2-4 at B 1/8, B G G B.
RUN=r190; . docs/next-run/run_lib.sh
warm_builds B G
mkdir -p $L/vG; OUT=$L/vG timeout 330 tools/device_verify.sh .device-G logits-sm90 plan logits-other > $L/verify-G.txt 2>&1; stamp "verify G"
S="--heads 32,64 --next-n 2,3,4 --batch 1,8 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
s() { ok 420 || return; timeout 30 .device-$1/bin/flash-indexer bench logits $S --json $L/s-$1-$2.json > $L/s-$1-$2.txt 2>&1; stamp "small $1 $2"; }
s B 1; s G 1; s G 2; s B 2
cat $L/times.txt $L/verify-G.txt
python3 tools/bench_ab.py --a $L/s-B-1.json --a $L/s-B-2.json --b $L/s-G-1.json --b $L/s-G-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -30
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
