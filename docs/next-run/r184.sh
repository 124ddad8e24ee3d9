#!/usr/bin/env bash
# Run 184 (issue 12): the CTA trace (T = main + paged-cta-trace.patch) of the small cells, where launch
# and pipeline fill dominate (B 1 x 8K-32K: DeepGEMM / ours 0.89-1.09 in run 172), and of B 64 x 8K.
RUN=r184; . docs/next-run/run_lib.sh
Q="--dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0"
for c in "1 64" "2 64" "3 32" "4 64" "4 32"; do
  set -- $c
  ok 120 || break
  FLASH_INDEXER_PAGED_TRACE=1 FLASH_INDEXER_PAGED_TRACE_DIR=$L timeout 40 .device-T/bin/flash-indexer bench logits \
    --next-n $1 --heads $2 --batch 1,64 --lengths 8192,32768 $Q --json $L/n$1h$2.json > $L/n$1h$2.txt 2>> $L/trace.txt
  stamp "n$1 h$2"
done
cat $L/times.txt; grep -hE "^\s+(1|64)\s+(8192|32768)" $L/n*.txt | cut -c1-60
cut -c1-200 $L/trace.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
