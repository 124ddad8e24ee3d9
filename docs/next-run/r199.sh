#!/usr/bin/env bash
# Run 199 (issue 12; twenty-fifth session, the session's last device time): ncu at the real clock of L
# (the ranges form, one TMA per block) and M3 (3b42a3f) at next_n 2 H 64 B 64 x 128K, the cell of
# DeepGEMM's profile in runs 166-167 (293.1 us, DRAM 83.4 %, issue active 58.6 %, tensor 56.8 %), with
# the sections for the same figures and the source counters.
RUN=r199; . docs/next-run/run_lib.sh
Q="--dtype f32 --cold-l2 --fixed-length --replays 3 --hist 0"
N="--clock-control none --kernel-name regex:paged_mqa --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters --section LaunchStats"
for d in L M3; do
  ok 200 || break
  timeout 60 ncu $N -o $L/ncu-$d .device-$d/bin/flash-indexer bench logits --heads 64 --next-n 2 --batch 64 --lengths 131072 $Q > $L/ncu-$d.txt 2>&1
  ncu -i $L/ncu-$d.ncu-rep --page details --csv > $L/details-$d.csv 2>&1
  ncu -i $L/ncu-$d.ncu-rep --page source --csv --print-source sass > $L/src-$d.csv 2>&1
  ncu -i $L/ncu-$d.ncu-rep --page raw --csv > $L/raw-$d.csv 2>&1
  rm -f $L/ncu-$d.ncu-rep; stamp "ncu $d"
done
cat $L/times.txt
for d in L M3; do echo "== $d"; grep -E '"(Duration|DRAM Throughput|Memory Throughput|SM Frequency|Issue Slots Busy|Executed Ipc Active|L2 Cache Throughput|Grid Size|Registers Per Thread)"' $L/details-$d.csv | cut -d, -f12-16 | head -12; done
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
