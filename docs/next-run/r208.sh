#!/usr/bin/env bash
# Run 208 (issue 12; twenty-seventh session): main fdecdac (store_value landed, .device-M5): the GPU test
# families run 206 did not cover for it (logits-other, plan), then ncu of the two-consumer N = 192 / 256
# kernels where they lead DeepGEMM least (n4 H 64 and n3 H 64 at B 32 x 32K, about 2.3x their MMA floor)
# and the four-consumer n4 H 32 in the same cell for contrast: tensor pipe, issue and stall reasons.
RUN=r208; . docs/next-run/run_lib.sh
timeout 60 .device-M5/bin/flash-indexer warm --arch sm_90a --jobs 16 > $L/warm.txt 2>&1; stamp warm
mkdir -p $L/v; OUT=$L/v timeout 200 tools/device_verify.sh .device-M5 logits-other plan > $L/verify.txt 2>&1; stamp verify
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --batch 32 --lengths 32768 --hist 0"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section InstructionStats --section LaunchStats --section Occupancy"
prof() {  # name next_n heads
  ok 480 || return
  timeout 90 ncu $N -o $L/ncu-$1 .device-M5/bin/flash-indexer bench logits --next-n $2 --heads $3 $Q > $L/ncu-$1.txt 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page details --csv > $L/details-$1.csv 2>&1
  ncu -i $L/ncu-$1.ncu-rep --page source --csv --print-source sass > $L/src-$1.csv 2>&1
  rm -f $L/ncu-$1.ncu-rep; stamp "ncu $1"
}
prof n4h64 4 64; prof n3h64 3 64; prof n4h32 4 32
cat $L/times.txt $L/verify.txt
for d in n4h64 n3h64 n4h32; do echo "== $d"; grep -E '"(Duration|SM Frequency|Issue Slots Busy|Executed Ipc Active|Registers Per Thread|Grid Size)"' $L/details-$d.csv | cut -d, -f12-16 | head -8; done
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
