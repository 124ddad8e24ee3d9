#!/usr/bin/env bash
# Run 189 (issue 12): F = main + the flattened form (an FP8 call of next_n >= 2 as B * next_n rows of the
# next_n = 1 kernel, as DeepGEMM runs next_n 3-4), here always taken, to see where it wins; B = main's
# kernels. F's sm90 logits and plan tests (every next_n >= 2 FP8 case runs flattened), then next_n 2-4
# at B 1/8/32, B F F B.
RUN=r189; . docs/next-run/run_lib.sh
warm_builds B F
mkdir -p $L/vF; OUT=$L/vF timeout 200 tools/device_verify.sh .device-F logits-sm90 plan > $L/verify-F.txt 2>&1; stamp "verify F"
S="--heads 32,64 --next-n 2,3,4 --batch 1,8,32 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
s() { ok 330 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $S --json $L/s-$1-$2.json > $L/s-$1-$2.txt 2>&1; stamp "small $1 $2"; }
s B 1; s F 1; s F 2; s B 2
cat $L/times.txt $L/verify-F.txt
python3 tools/bench_ab.py --a $L/s-B-1.json --a $L/s-B-2.json --b $L/s-F-1.json --b $L/s-F-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -30
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
