#!/usr/bin/env bash
# Run 179. Issue 15: X (main with the leaner MXFP4 conversion: shifts as mul.hi on the FMA pipe, the
# sign through prmt's sign mode, the exponents' max by max.u16x2) against M2 (main before it), the MXFP4
# grid interleaved M2 X X M2, then ncu of both at B 64 x 64K n1 h64, then X's tests. Issue 12: the CTA
# trace (docs/next-run/paged-cta-trace.patch with thread 0's start and the last consumer's end) of T
# (main) and T4 (main with the early fill in every grid) at the one-CTA-per-SM cells.
RUN=r179; . docs/next-run/run_lib.sh
warm_builds M2 X
M="--kv mxfp4 --heads 32,64 --next-n 1,3 --batch 1,8,64 --lengths 65536 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
m() { ok 200 || return; timeout 40 .device-$1/bin/flash-indexer bench logits $M --json $L/m-$1-$2.json > $L/m-$1-$2.txt 2>&1; stamp "mxfp4 $1 $2"; }
m M2 1; m X 1; m X 2; m M2 2
Q="--dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
t() {
  ok 240 || return; mkdir -p $L/$1
  FLASH_INDEXER_PAGED_TRACE=1 FLASH_INDEXER_PAGED_TRACE_DIR=$L/$1 timeout 40 .device-$1/bin/flash-indexer bench logits \
    --heads 64 --next-n 2 --batch 32,64,128 --lengths 131072 $Q --json $L/$1/n2.json > $L/$1/n2.txt 2> $L/$1/trace.txt
  FLASH_INDEXER_PAGED_TRACE=1 FLASH_INDEXER_PAGED_TRACE_DIR=$L/$1 timeout 30 .device-$1/bin/flash-indexer bench logits \
    --heads 32 --next-n 4 --batch 128 --lengths 131072 $Q --json $L/$1/n4.json > $L/$1/n4.txt 2>> $L/$1/trace.txt
  stamp "trace $1"
}
t T; t T4
(cd $OUT && tar czf r179a.tgz r179)
N="--clock-control none --kernel-name regex:paged --launch-skip 4 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats"
for d in M2 X; do
  ok 280 || break
  timeout 60 ncu $N .device-$d/bin/flash-indexer bench logits --kv mxfp4 --heads 64 --next-n 1 --batch 64 --lengths 65536 $Q --replays 3 > $L/ncu-$d.txt 2>&1
  stamp "ncu $d"
done
(cd $OUT && tar czf r179a.tgz r179)
if ok 330; then mkdir -p $L/vX; OUT=$L/vX timeout 250 tools/device_verify.sh .device-X logits-sm90 plan > $L/verify-X.txt 2>&1; stamp "verify X"; fi
cat $L/times.txt; cat $L/verify-X.txt 2>/dev/null
for d in M2 X; do grep -E "^\s+(1|8|64)\s+65536" $L/m-$d-*.txt | head -30 | cut -c1-100; done
cd $OUT && tar czf r179.tgz r179 && rm -rf r179 r179a.tgz
