#!/usr/bin/env bash
# Run 209 (issue 12; twenty-seventh session): O = main + the two-consumer N 192/256 kernels (n3 h64, n4
# h64) with each consumer's wgmma in parts of whole query rows, a part's head sums while the later parts
# run (Tile::scores_and_head_sums, from run 174's paged-overlap-parts.patch), against main (.device-M5):
# next_n 3,4 H 64 over the grid with and without the histogram M5 O O M5, then O's tests of those
# configurations and logits-other.
RUN=r209; . docs/next-run/run_lib.sh
for d in M5 O; do timeout 60 .device-$d/bin/flash-indexer warm --arch sm_90a --jobs 16 --manifest docs/next-run/bench-logits-manifest.json > $L/warm-$d.txt 2>&1; stamp "warm $d"; done
G="--heads 64 --next-n 3,4 --batch 1,8,32,64,128 --lengths 8192,32768,65536,131072 --dtype f32 --cold-l2 --fixed-length --replays 20 --hist 0,1"
echo "== O / M5"; ab_logits M5 O g 60 $G
export FLASH_INDEXER_CACHE_DIR=$PWD/.cache-dev
for spec in "gpu paged_mqa_logits.sm90.n3.h64*" "gpu paged_mqa_logits.sm90.n4.h64*"; do
  timeout 150 .device-O/bin/flash_indexer_tests "$spec" > $L/t-$(echo $spec | cut -d. -f3-4).txt 2>&1; echo "$spec rc=$? $(tail -2 $L/t-$(echo $spec | cut -d. -f3-4).txt | head -1)"; stamp "tests $spec"
done
mkdir -p $L/v; OUT=$L/v timeout 120 tools/device_verify.sh .device-O logits-other > $L/verify.txt 2>&1; stamp verify
cat $L/times.txt $L/verify.txt
cd $OUT && tar czf $RUN.tgz $RUN && rm -rf $RUN
