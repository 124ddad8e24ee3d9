#!/usr/bin/env bash
# Run 213 (issue 12; prepared in the twenty-seventh session, not run): main as it stands (install it as
# .device-M7) beside DeepGEMM for the README's table (run 210 predates n3 H 64's two parts), the test
# families main's n3 H 64 kernels have not run yet (logits-sm90, logits-other, plan), then ncu of n3 H 64
# and n4 H 64 at B 32 x 32K (why two parts gain 10 % at one and 2 % at the other). About 330 s after the
# start. Carry .device-M7 and .anchors/deepgemm.
RUN=r213; . docs/next-run/run_lib.sh
timeout 90 .device-M7/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm.txt 2>&1; stamp warm
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20"
g() { timeout 60 .device-M7/bin/flash-indexer bench logits $P --hist $2 --json $L/g-$1.json > $L/g-$1.txt 2>&1; stamp "grid $1"; }
g 1 0
mkdir -p $L/dg; OUT=$L/dg DG_BENCH_BUDGET_S=100 timeout 130 bash .anchors/deepgemm/run.sh > $L/dg.txt 2>&1; stamp dg
g 2 0; g h 1
mkdir -p $L/v; OUT=$L/v timeout 300 tools/device_verify.sh .device-M7 logits-sm90 logits-other plan > $L/verify.txt 2>&1; stamp verify
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --batch 32 --lengths 32768 --hist 0"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats"
for c in "n3h64 3" "n4h64 4"; do set -- $c; ok 520 || break
  timeout 90 ncu $N -o $L/ncu-$1 .device-M7/bin/flash-indexer bench logits --next-n $2 --heads 64 $Q > $L/ncu-$1.txt 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page details --csv > $L/details-$1.csv 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page source --csv --print-source sass > $L/src-$1.csv 2>&1
  rm -f $L/ncu-$1.ncu-rep; stamp "ncu $1"
done
cat $L/times.txt $L/verify.txt
python3 tools/logits_vs_deepgemm.py --ours $L/g-1.json --ours $L/g-2.json --deepgemm $L/dg/deepgemm_bench.json 2>&1 | tail -9
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
