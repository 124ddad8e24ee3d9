#!/usr/bin/env bash
# Run 202 (issue 12; twenty-sixth session): where the fused histogram's time goes. ncu at the real clock
# of main (.device-M) with and without the histogram in the cells where it costs most in run 201:
# n4 H 64 B 128 x 64K (store warps count, +25 %), n3 H 32 and n4 H 32 B 128 x 64K (consumers count,
# +11 %), n2 H 32 B 128 x 64K (two CTAs per SM, store warps count, +4 %).
RUN=r202; . docs/next-run/run_lib.sh
warm_builds M
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --batch 128 --lengths 65536"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats --section LaunchStats --section Occupancy"
prof() {  # name next_n heads hist
  ok 420 || return
  timeout 90 ncu $N -o $L/ncu-$1 .device-M/bin/flash-indexer bench logits --next-n $2 --heads $3 --hist $4 $Q > $L/ncu-$1.txt 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page details --csv > $L/details-$1.csv 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page source --csv --print-source sass > $L/src-$1.csv 2>&1
  rm -f $L/ncu-$1.ncu-rep; stamp "ncu $1"
}
prof n4h64-0 4 64 0; prof n4h64-1 4 64 1
prof n3h32-0 3 32 0; prof n3h32-1 3 32 1
prof n4h32-0 4 32 0; prof n4h32-1 4 32 1
prof n2h32-0 2 32 0; prof n2h32-1 2 32 1
cat $L/times.txt
for d in n4h64-0 n4h64-1 n3h32-0 n3h32-1 n4h32-0 n4h32-1 n2h32-0 n2h32-1; do echo "== $d"; grep -E '"(Duration|SM Frequency|Issue Slots Busy|Executed Ipc Active|Registers Per Thread)"' $L/details-$d.csv | cut -d, -f12-16 | head -6; done
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
