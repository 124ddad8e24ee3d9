#!/usr/bin/env bash
# Run 178: where a long CTA of the sm90 paged kernel loses its time (issue 12). Builds (each with
# docs/next-run/paged-cta-trace.patch): T main; T2 + paged-long-ctas.patch (one wave of CTAs up to 4096
# blocks at one CTA per SM); T3 main with sm90_max_blocks_per_split(1) = 128. M2 is main untraced.
# Per build: bench of the one-CTA-per-SM cells with the CTA trace on stderr and the raw stamps as
# files; then ncu at the real clock of T's and T2's B 64 x 128K n2 h64 grids.
RUN=r178; . docs/next-run/run_lib.sh
C2="--heads 64 --next-n 2 --batch 32,64,128 --lengths 131072"
C4="--heads 32 --next-n 4 --batch 128 --lengths 131072"
Q="--dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
b() {  # build round
  ok 300 || return; mkdir -p $L/$1-$2
  FLASH_INDEXER_PAGED_TRACE=1 FLASH_INDEXER_PAGED_TRACE_DIR=$L/$1-$2 timeout 60 .device-$1/bin/flash-indexer bench logits $C2 $Q \
    --json $L/$1-$2/n2.json > $L/$1-$2/n2.txt 2> $L/$1-$2/trace.txt
  FLASH_INDEXER_PAGED_TRACE=1 FLASH_INDEXER_PAGED_TRACE_DIR=$L/$1-$2 timeout 40 .device-$1/bin/flash-indexer bench logits $C4 $Q \
    --json $L/$1-$2/n4.json > $L/$1-$2/n4.txt 2>> $L/$1-$2/trace.txt
  stamp "bench $1 $2"
}
b T 1; b T2 1; b T3 1; b M2 1; b M2 2; b T3 2; b T2 2; b T 2
(cd $OUT && tar czf r178a.tgz r178)
N="--clock-control none --kernel-name regex:paged --launch-skip 4 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section LaunchStats"
for d in T T2; do
  ok 480 || break
  timeout 80 ncu $N .device-$d/bin/flash-indexer bench logits --heads 64 --next-n 2 --batch 64 --lengths 131072 $Q --replays 3 > $L/ncu-$d.txt 2>&1
  stamp "ncu $d"
done
cat $L/times.txt
for f in $L/*-1/trace.txt; do echo "== $f"; cut -c1-400 $f; done
cd $OUT && tar czf r178.tgz r178 && rm -rf r178 r178a.tgz
