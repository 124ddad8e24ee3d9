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
ab_logits M R10 w 40 $W
mkdir -p $L/v; OUT=$L/v timeout 200 tools/device_verify.sh .device-R10 logits-sm90 logits-other > $L/verify.txt 2>&1; stamp verify
# The whole grid with R10 (the landed form if it wins) and DeepGEMM's in the same call, for the README.
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
g() { timeout 60 .device-$1/bin/flash-indexer bench logits $P --hist $3 --json $L/g-$1-$2.json > $L/g-$1-$2.txt 2>&1; stamp "grid $1 $2"; }
if ok 330; then
  g R10 1 0
  mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
  g M 1 0; g R10 2 0; g R10 h 1
  python3 tools/logits_vs_deepgemm.py --ours $L/g-R10-1.json --ours $L/g-R10-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9
  python3 tools/bench_ab.py --a $L/g-M-1.json --b $L/g-R10-1.json --b $L/g-R10-2.json --group next_n,heads 2>&1 | grep -E "^\s+\(|^all"
fi
if ok 480; then OUT=$L/v2 timeout 110 tools/device_verify.sh .device-R10 plan pdl validation > $L/verify2.txt 2>&1; stamp verify2; fi
cat $L/times.txt $L/verify.txt $L/verify2.txt 2>/dev/null
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
