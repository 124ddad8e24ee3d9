#!/usr/bin/env bash
# Run 201 (issue 12; prepared in the twenty-fifth session, not run): R10 = main + paged-ranges-r10.patch,
# the ranges kernels' producer thread issuing each consumer's next block as soon as that consumer's stage
# is free (DeepGEMM's per-warpgroup rings, from one thread; it sleeps on the oldest blocked stage when
# none is free). Run 199 (ncu, B 64 x 128K n2 H 64): with main's in-order issue the producer waits for a
# free stage about 45 % of its time while the consumers wait for data in 13 % of all samples; more stages
# were slower (run 200). Builds: .device-M (main as committed), .device-R10 (the patch applied to a copy
# of main, built, `cmake --install build --prefix <repo>/.device-R10`).
RUN=r201; . docs/next-run/run_lib.sh
warm_builds M R10
W="--heads 32,64 --next-n 2,3 --batch 32,64,128 --lengths 65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
w() { timeout 40 .device-$1/bin/flash-indexer bench logits $W --json $L/w-$1-$2.json > $L/w-$1-$2.txt 2>&1; stamp "cells $1 $2"; }
w M 1; w R10 1; w R10 2; w M 2
python3 tools/bench_ab.py --a $L/w-M-1.json --a $L/w-M-2.json --b $L/w-R10-1.json --b $L/w-R10-2.json --group next_n,heads,histogram --show 0.03 2>&1 | tail -30
mkdir -p $L/v; OUT=$L/v timeout 200 tools/device_verify.sh .device-R10 logits-sm90 logits-other > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
