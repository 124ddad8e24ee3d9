#!/usr/bin/env bash
# Run 192 (issue 12; prepared in the twenty-third session, after r191's verification of main): R4 =
# main + docs/next-run/paged-ranges-r4.patch (n2 h64 and n3 h32 over even ranges of the B x width blocks,
# one CTA per SM, where the split grid needs more than one wave) against M3 (main). First R4's tests
# (the ranges cases of every n2 h64 / n3 h32 configuration, and the bytes test with ranges over 1-132
# CTAs), then the multi-wave cells, M3 R4 R4 M3, then the one-wave cells (the common kernel inside R4's
# dispatcher: must be unchanged).
# Builds: .device-M3 (cmake --install of main), .device-R4 (git apply the patch, build, install, revert).
RUN=r192; . docs/next-run/run_lib.sh
warm_builds M3 R4
mkdir -p $L/vR4; OUT=$L/vR4 timeout 250 tools/device_verify.sh .device-R4 logits-sm90 logits-other > $L/verify-R4.txt 2>&1; stamp "verify R4"
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { ok 420 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "waves $1 $2"; }
w M3 1; w R4 1; w R4 2; w M3 2
O="--heads 32,64 --next-n 2,3 --batch 8,32 --lengths 8192,32768 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
o() { ok 500 || return; timeout 20 .device-$1/bin/flash-indexer bench logits $O --json $L/o-$1.json > $L/o-$1.txt 2>&1; stamp "one wave $1"; }
o M3; o R4
cat $L/times.txt $L/verify-R4.txt
python3 tools/bench_ab.py --a $L/w-M3-1.json --a $L/w-M3-2.json --b $L/w-R4-1.json --b $L/w-R4-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -30
python3 tools/bench_ab.py --a $L/o-M3.json --b $L/o-R4.json --group next_n,heads --show 0.03 2>&1 | tail -12
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
