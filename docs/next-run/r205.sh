#!/usr/bin/env bash
# Run 205 (issue 12; twenty-sixth session, its last device time): W = main (07cadc9) + the store warps
# counting what the four-consumer FP8 kernels' consumers store (sm90_store_warps_count_direct; common
# kernel only, the ranges kernel's consumers still count), against main (.device-M): the FP8 grid with
# and without the histogram M W W M, then W's tests (its sm90 paged kernels pre-warmed in .device-W/cache).
RUN=r205; . docs/next-run/run_lib.sh
for d in M W; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
P="--heads 32,64 --next-n 1,2,3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
ab_logits M W g 20 $P
mkdir -p $L/v; (unset FLASH_INDEXER_CACHE_DIR; OUT=$L/v timeout 150 tools/device_verify.sh .device-W logits-sm90 logits-other > $L/verify.txt 2>&1); stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
