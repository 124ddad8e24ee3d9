#!/usr/bin/env bash
# Run 177: main (M2) against V2 (the producer thread copies the later chunks itself), the paged kernel taking its block ids in chunks (a ring of two, later
# chunks by cp.async) so that one CTA per SM kernels run one wave of long CTAs (up to 4096 blocks),
# interleaved over the whole paged grid; then V2's tests; then DeepGEMM's grid if time is left.
RUN=r177; . docs/next-run/run_lib.sh
warm_builds M2 V2
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
b() { ok 140 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $P --json $L/l-$1-$2.json > $L/l-$1-$2.txt 2>&1; stamp "logits $1 $2"; }
b M2 1; b V2 1; b V2 2; b M2 2
M="--heads 64 --next-n 1,3 --batch 64 --lengths 65536 --dtype f32 --kv mxfp4 --cold-l2 --fixed-length --replays 20 --hist 0"
for x in M2 V2; do ok 80 && timeout 30 .device-$x/bin/flash-indexer bench logits $M --json $L/m-$x-$RANDOM.json > /dev/null 2>&1; done
(cd $OUT && tar czf r177a.tgz r177)
if ok 120; then mkdir -p $L/vV; OUT=$L/vV timeout 250 tools/device_verify.sh .device-V2 logits-sm90 logits-other plan prefill > $L/verify-V2.txt 2>&1; stamp "verify V2"; cat $L/verify-V2.txt; fi
(cd $OUT && tar czf r177b.tgz r177)
if ok 290; then mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=90 timeout 100 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg; fi
cat $L/times.txt
cd $OUT && tar czf r177.tgz r177 && rm -rf r177 r177a.tgz r177b.tgz
